"""How the ``jevmem`` command ends when something is wrong: one line that says what to check.

:func:`run` runs the Typer app and turns every failure into **one line on stderr** (``jevmem:
...``) and an exit status, never a traceback: a usage error (status 2, with the ``--help`` to
read), a configuration error (:class:`~topology.errors.Misconfigured`, a missing model, an invalid
setting, credentials a server refused: status 2), anything else (status 1; an error that is not
ours says it is unexpected). The traceback is printed only with ``--debug`` (or
``JEVMEM_DEBUG=1``), and goes to the process's log when one is configured (the JSON log of
``serve``, ``worker`` and ``mcp``).

Vendor errors that reach the command are explained here, in one map (:func:`explain`):
Elasticsearch's refusals (HTTP 401/403), TLS and connection failures name the ``JEVMEM_*``
settings to check, never a secret. ``jevmem serve`` reports a failed start-up the same way
(:func:`watch_startup`): uvicorn's "Application startup failed" traceback stays in the log.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import traceback
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

import typer

if TYPE_CHECKING:
    from query_api.service import MemoryService

#: Set by ``jevmem --debug`` (see :func:`set_debug`); ``JEVMEM_DEBUG=1`` does the same.
_debug = False
#: Exit status of a configuration error (and of a usage error, as click has it).
CONFIGURATION = 2
#: The host of a connection error's text ("Cannot connect to host 127.0.0.1:9200 ...").
_HOST = re.compile(r"host (\S+:\d+)")
#: The reason in an SSL error's text ("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: ... (_ssl.c:1006)").
_SSL_REASON = re.compile(r"\] ([^\]\[]+?) \(_ssl")


def set_debug(on: bool) -> None:
    """``--debug``: failures print their traceback too."""
    global _debug
    _debug = on


def debugging() -> bool:
    return _debug or os.environ.get("JEVMEM_DEBUG", "").lower() in ("1", "true", "yes")


class StartFailed(Exception):
    """``jevmem serve`` did not start; the cause is the exception its start-up raised (already in
    the log with its traceback)."""


async def preflight(service: MemoryService) -> None:
    """Start and stop ``service`` once, before
    ``serve`` sets up its log and the server: what its start-up checks (the broker, the stores,
    the keys) find wrong raises :class:`StartFailed` and ends as one line (no log is set up yet,
    so librdkafka's own retry lines go nowhere: ``streams.kafka_client.LIBRDKAFKA_LOG``)."""
    try:
        try:
            await service.start()
        finally:
            await service.stop()
    except Exception as exc:
        raise StartFailed() from exc


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in text.strip().splitlines() if part.strip())


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    at: BaseException | None = exc
    while at is not None and id(at) not in seen:
        seen.add(id(at))
        yield at
        at = at.__cause__ or at.__context__


def _node(exc: BaseException) -> str:
    """The Elasticsearch node a client error is about, when it says (no credentials in it)."""
    node = getattr(getattr(exc, "meta", None), "node", None)
    if node is not None and getattr(node, "host", None):
        return f" at {node.scheme}://{node.host}:{node.port}"
    return ""


def _elasticsearch(exc: BaseException) -> str | None:
    """An Elasticsearch client error as what to check, or None when ``exc`` is not one."""
    try:
        import elastic_transport
        from elasticsearch import ApiError
    except ImportError:  # pragma: no cover - the distributed extras are part of the package
        return None
    if isinstance(exc, ApiError) and exc.meta.status == 401:
        return (f"Elasticsearch{_node(exc)} refused the credentials (HTTP 401): check JEVMEM_ELASTICSEARCH_USERNAME "
                "and JEVMEM_ELASTICSEARCH_PASSWORD, or JEVMEM_ELASTICSEARCH_API_KEY")
    if isinstance(exc, ApiError) and exc.meta.status == 403:
        return (f"Elasticsearch{_node(exc)} accepted the credentials but refused the request (HTTP 403): give the "
                "user or API key the privileges on jevmem's indices")
    text = _one_line(str(getattr(exc, "message", exc)))
    host = _HOST.search(text)
    at = _node(exc) or (f" at {host.group(1)}" if host else "")
    if isinstance(exc, elastic_transport.TlsError):
        reason = _SSL_REASON.search(text)
        return (f"TLS to Elasticsearch{at} failed ({reason.group(1) if reason else text[:160]}): check "
                "JEVMEM_ELASTICSEARCH_CA_FILE (the CA that signed the nodes' certificates) and JEVMEM_ELASTICSEARCH_URL")
    if isinstance(exc, elastic_transport.ConnectionError):
        return (f"cannot reach Elasticsearch{at}: check JEVMEM_ELASTICSEARCH_URL (http or https, host, port) "
                "and that the node runs")
    return None


def _validation(exc: BaseException) -> str | None:
    """A pydantic validation error as one line naming each field (never the value: it may be a
    secret); the settings' fields by their environment variables."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return None
    settings = exc.title == "Settings"
    fields = []
    for err in exc.errors(include_input=False, include_url=False):
        where = ".".join(str(p) for p in err["loc"])
        fields.append(f"{'JEVMEM_' + where.upper() if settings else where}: {err['msg']}")
    return f"invalid {'setting' if settings else exc.title}: {'; '.join(fields)}"


def explain(exc: BaseException) -> tuple[str, int]:
    """``exc`` as one line saying what went wrong and what to check, and the exit status."""
    from topology.embedding import ModelMissing
    from topology.errors import JevMemError, Misconfigured

    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:  # a task group's one failure
        return explain(exc.exceptions[0])
    if isinstance(exc, StartFailed) and exc.__cause__ is not None:
        line, status = explain(exc.__cause__)
        return f"serve did not start: {line}", status
    for at in _chain(exc):
        if (vendor := _elasticsearch(at)) is not None:
            return vendor, 1 if vendor.startswith("cannot reach") else CONFIGURATION
    if (invalid := _validation(exc)) is not None:
        return invalid, CONFIGURATION
    if isinstance(exc, (Misconfigured, ModelMissing)):
        return _one_line(str(exc)), CONFIGURATION
    if isinstance(exc, JevMemError):
        return _one_line(str(exc)) or type(exc).__name__, 1
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.strerror or _one_line(str(exc))}: {exc.filename}", 1
    if isinstance(exc, ValueError):  # settings that contradict each other, a bad argument
        return _one_line(str(exc)), CONFIGURATION
    text = _one_line(str(exc))[:300]
    return (f"unexpected error {type(exc).__name__}{': ' + text if text else ''} "
            "(run again with --debug for the traceback)"), 1


def _say(line: str) -> None:
    sys.stderr.write(f"jevmem: {line}\n")
    sys.stderr.flush()


def _fail(exc: BaseException) -> int:
    line, status = explain(exc)
    if debugging():
        traceback.print_exception(exc, file=sys.stderr)
    if logging.getLogger().handlers and not isinstance(exc, StartFailed):  # a log is configured: it keeps it
        logging.getLogger("jevmem").error(line, exc_info=exc)
    _say(line)
    return status


def run(app: Callable[..., Any], args: list[str] | None = None) -> int:
    """Run the Typer ``app`` on ``args`` (default: the process's) and return its exit status;
    every failure ends as one line on stderr (:func:`explain`)."""
    try:
        result = app(args=args, standalone_mode=False, prog_name="jevmem")
    except typer.TyperException as exc:  # click's usage errors, as Typer carries them
        if type(exc).__name__ == "NoArgsIsHelpError":  # `jevmem` alone, `jevmem bench`: the help
            show = getattr(exc, "show", None)
            if callable(show):
                show()
            return exc.exit_code
        ctx = getattr(exc, "ctx", None)
        _say(f"{_one_line(exc.format_message())} (see: {ctx.command_path if ctx else 'jevmem'} --help)")
        return exc.exit_code
    except typer.Abort:
        _say("aborted")
        return 1
    except Exception as exc:
        return _fail(exc)
    return result if isinstance(result, int) else 0


def watch_startup(api: Any, text_log: bool) -> Callable[[], BaseException | None]:
    """Wrap the lifespan of the ASGI app ``api`` so a start-up failure is kept (returned by the
    function this returns, after the server stopped). With a text log and no ``--debug``,
    uvicorn's start-up traceback is left out of the terminal (the one line says what to check);
    the JSON log keeps it."""
    failure: list[BaseException] = []
    started: list[bool] = []
    inner: Callable[[Any], AbstractAsyncContextManager[Any]] = api.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[Any]:
        try:
            async with inner(app) as state:
                started.append(True)
                yield state
        except Exception as exc:
            if not started:
                failure.append(exc)
            raise

    api.router.lifespan_context = lifespan
    if text_log and not debugging():
        logging.getLogger("uvicorn.error").addFilter(
            lambda record: not record.getMessage().startswith("Traceback (most recent call last)"))
    return lambda: failure[0] if failure else None


@contextmanager
def serving(api: Any, text_log: bool) -> Iterator[None]:
    """Around ``uvicorn.run(api, ...)``: a start-up that failed (uvicorn exits with status 3)
    raises :class:`StartFailed` from its cause instead."""
    failed = watch_startup(api, text_log)
    try:
        yield
    except SystemExit:
        if (cause := failed()) is not None:
            raise StartFailed("start-up failed") from cause
        raise


def stop(line: str, status: int = 1) -> NoReturn:
    """End the running command with ``line`` (one line on stderr) and exit ``status``."""
    _say(line)
    raise typer.Exit(status)
