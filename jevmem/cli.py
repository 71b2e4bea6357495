"""``jevmem``: ingest, query, conversations, serve, mcp, bench (and, in distributed mode,
worker/produce/replay).

Help is rendered as plain text (no Rich markup), so option help may name settings as
``[env JEVMEM_...]`` and every non-flag option names its value (``DIR``, ``TENANT``, ``ID``)
instead of its Python type. Messages name what was written or read and where."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from jevmem import assembly, cli_errors, heap
from jevmem.cli_bench import bench_app
from jevmem.cli_common import Json, console
from jevmem.cli_common import progress_bar as _progress
from jevmem.cli_common import run as _run
from jevmem.cli_common import settings_for as _settings
from jevmem.cli_encryption import encryption_app
from jevmem.cli_keys import keys_app
from jevmem.cli_models import models_app, require_model
from jevmem.observation_files import partition_key, read_observation_payloads
from jevmem.settings import Settings

if TYPE_CHECKING:
    from pydantic import BaseModel

    from query_api.service import MemoryService

# rich_markup_mode=None: plain help text, so "[env JEVMEM_DATA_DIR]" is printed as written (Rich
# markup would swallow it) and flags show no "<bool>" type column.
app = typer.Typer(help="Streaming System-One memory for AI agents.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(bench_app, name="bench")


@app.callback()
def _process(debug: Annotated[bool, typer.Option(
        "--debug", help="On an error, print its traceback too (otherwise one line says what to check) "
                        "[env JEVMEM_DEBUG].")] = False) -> None:
    """Process-wide setup before any command: ``--debug``, the garbage collector's thresholds
    (``JEVMEM_GC_THRESHOLDS``), numpy's BLAS threads (``JEVMEM_BLAS_THREADS``)."""
    from jevmem import blas, collector

    cli_errors.set_debug(debug)
    settings = Settings()
    collector.tune(settings.gc_thresholds)
    blas.limit(settings.blas_threads)


app.add_typer(models_app, name="models")
app.add_typer(keys_app, name="keys")
app.add_typer(encryption_app, name="encryption")

DataDir = Annotated[Path | None, typer.Option(
    "--data-dir", metavar="DIR", help="Embedded store directory [env JEVMEM_DATA_DIR, default .jevmem].")]
Tenant = Annotated[str | None, typer.Option("--tenant", metavar="TENANT", help="Tenant id [env JEVMEM_TENANT, default 'default'].")]
#: How many conversations a message lists before pointing at ``jevmem conversations``.
SHOWN_CONVERSATIONS = 10
#: Write batches per ingest call of `jevmem ingest` (chunks of one call are pipelined).
INGEST_CALL_BATCHES = 16


class ReplaySource(StrEnum):
    """``jevmem replay --from``: the topics a rebuild reads."""

    edges = "edges"
    observations = "observations"


def _service(settings: Settings, distributed: bool) -> tuple[Settings, MemoryService]:
    """The deployment a command serves: the distributed stack (``--distributed`` or
    ``JEVMEM_MODE=distributed``; the settings then say so, for the key store) or the embedded one."""
    if distributed or settings.mode == "distributed":
        from jevmem.distributed import DistributedService

        settings = settings.model_copy(update={"mode": "distributed"})
        return settings, DistributedService(settings)
    from jevmem.wiring import EmbeddedService

    return settings, EmbeddedService(settings)



def written_summary(written: Counter[tuple[str, str]]) -> str:
    """Where an ingest wrote: each tenant with its conversations and their observation counts,
    e.g. ``tenant 'acme': conversation 'locomo-26' (419 observations)``; at most
    :data:`SHOWN_CONVERSATIONS` conversations per tenant are named."""
    if not written:
        return "nothing written"
    parts = []
    for tenant in sorted({t for t, _ in written}):
        convs = sorted((c, n) for (t, c), n in written.items() if t == tenant)
        shown = ", ".join(f"{c!r} ({n} observation{'' if n == 1 else 's'})" for c, n in convs[:SHOWN_CONVERSATIONS])
        more = f" and {len(convs) - SHOWN_CONVERSATIONS} more" if len(convs) > SHOWN_CONVERSATIONS else ""
        parts.append(f"tenant {tenant!r}: conversation{'' if len(convs) == 1 else 's'} {shown}{more}")
    return "; ".join(parts)


@app.command()
def ingest(path: Annotated[Path, typer.Argument(metavar="FILE", help="JSONL observations, or a LoCoMo .json file.")],
           data_dir: DataDir = None, tenant: Tenant = None,
           conversation: Annotated[str | None, typer.Option(
               metavar="ID", help="Conversation id for lines without one (a LoCoMo file: default locomo-<file name>).")
           ] = None) -> None:
    """Ingest JSONL observations or a LoCoMo conversation file into the embedded memory, and say
    which tenant and conversations were written."""
    from jevmem.wiring import EmbeddedService

    settings = _settings(data_dir, tenant)
    payloads = read_observation_payloads(path, settings.tenant, conversation)
    require_model(settings)

    async def go() -> Counter[tuple[str, str]]:
        service = EmbeddedService(settings)
        await service.start()
        accepted = new = edges = dead = 0
        written: Counter[tuple[str, str]] = Counter()
        try:
            with _progress() as bar:
                task = bar.add_task(f"ingest {path.name}", total=len(payloads))
                # calls of several write batches, so embedding one chunk overlaps linking the last
                step = INGEST_CALL_BATCHES * settings.write_batch
                for i in range(0, len(payloads), step):
                    rep = await service.load(payloads[i: i + step], source=str(path.name), offset=i)
                    accepted, new, edges = accepted + rep.accepted, new + rep.new_nodes, edges + rep.edges
                    written.update(rep.conversations)
                    dead += len(rep.dead_letters)
                    for d in rep.dead_letters:
                        console.print(f"[yellow]dead letter[/] {escape(d.source)}: {escape(d.reason)}")
                    bar.update(task, advance=len(payloads[i: i + step]))
        finally:
            await service.stop()
        console.print(escape(f"accepted {accepted} ({new} new nodes), {edges} edges, {dead} dead letters "
                             f"-> {written_summary(written)} in {settings.data_dir}"))
        return written

    written = _run(go())
    if len(written) == 1:
        (t, c), = written
        console.print(escape(f'ask it: jevmem query "..." -c {c} --tenant {t}'))


def unknown_conversations(tenant: str, asked: Sequence[str], known: Sequence[tuple[str, int]],
                          where: str) -> str | None:
    """The message for conversations in ``asked`` that ``tenant`` does not have (``known``: its
    conversations with node counts, in the store at ``where``), naming the known ones (at most
    :data:`SHOWN_CONVERSATIONS`) or how to list or create them; None when all are known."""
    have = {c for c, _ in known}
    missing = [c for c in dict.fromkeys(asked) if c not in have]
    if not missing:
        return None
    names = ", ".join(repr(c) for c in missing)
    head = f"tenant {tenant!r} has no conversation{'' if len(missing) == 1 else 's'} {names} in {where}"
    if not known:
        return f"{head}; it has no conversations yet (add some: jevmem ingest FILE --tenant {tenant})"
    listed = ", ".join(f"{c!r} ({n} nodes)" for c, n in sorted(known)[:SHOWN_CONVERSATIONS])
    more = (f" and {len(known) - SHOWN_CONVERSATIONS} more (all of them: jevmem conversations --tenant {tenant})"
            if len(known) > SHOWN_CONVERSATIONS else "")
    return f"{head}; its conversations: {listed}{more}"


@app.command()
def query(question: Annotated[str, typer.Argument(metavar="QUESTION", help="The question, in plain words.")],
          conversation: Annotated[list[str] | None, typer.Option(
              "--conversation", "-c", metavar="ID", help="Conversation id (repeat it to search several).")] = None,
          all_conversations: Annotated[bool, typer.Option(
              "--all-conversations", help="Search all the tenant's conversations in one ranking.")] = False,
          data_dir: DataDir = None, tenant: Tenant = None,
          top_k: Annotated[int, typer.Option(metavar="N", help="Evidence items to return.")] = 10,
          as_json: Json = False) -> None:
    """Retrieve evidence for QUESTION from a conversation (and an answer if System Two is set);
    from several (-c repeated) or all (--all-conversations) of the tenant's, merged by score.
    A conversation the tenant does not have is an error that lists the ones it has."""
    settings = _settings(data_dir, tenant)
    if not conversation and not all_conversations:
        raise typer.BadParameter("give --conversation/-c (repeatable) or --all-conversations")
    require_model(settings)
    if all_conversations or len(conversation or []) > 1:
        _recall(settings, question, None if all_conversations else conversation, top_k, as_json)
        return
    assert conversation is not None
    from query_api import service as svc

    async def ask(service: MemoryService) -> dict[str, Any]:
        asked = await svc.ask(service, svc.operator(settings.tenant), conversation[0], question, top_k)
        return _dumped(asked.found, asked.answer)

    out = _run(_asking(settings, conversation, ask))
    if _print_evidence(out, question, "via", as_json):
        tr = out["trace"]
        console.print(f"route {tr['route']}  depth {tr['depth']}  stop {tr['stop_reason']}  "
                      f"calls {tr['controller_calls']}  {tr['timings_ms']['total']:.0f} ms")
        _print_answer(out)


def _dumped(found: BaseModel, answer: str | None) -> dict[str, Any]:
    """``found`` as JSON, with ``answer`` when there is one."""
    out: dict[str, Any] = found.model_dump(mode="json")
    if answer is not None:
        out["answer"] = answer
    return out


async def _asking(settings: Settings, asked: Sequence[str] | None,
                  ask: Callable[[MemoryService], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """``ask`` over the embedded store (:class:`jevmem.wiring.EmbeddedService`); a conversation of
    ``asked`` the tenant does not have stops the command (exit 1) with
    :func:`unknown_conversations`' message, a request the service refuses (exit 2) with its reason."""
    from jevmem.wiring import EmbeddedService
    from query_api import service as svc
    from topology.errors import InvalidRequest, UnknownConversation

    service = EmbeddedService(settings)
    await service.start()
    try:
        return await ask(service)
    except InvalidRequest as exc:  # a bad argument (too many conversations): a usage error
        cli_errors.stop(str(exc), 2)
    except UnknownConversation as exc:
        known = await svc.listed(service, svc.operator(settings.tenant))
        cli_errors.stop(unknown_conversations(settings.tenant, asked or [exc.conversation_id], known,
                                              str(settings.data_dir)) or str(exc), 1)
    finally:
        await service.stop()


def _print_evidence(out: dict[str, Any], question: str, third: str, as_json: bool) -> bool:
    """Print ``out`` as one JSON line (``as_json``; returns False) or an evidence table whose third
    column is the evidence field ``third`` (returns True: the caller prints the trace)."""
    if as_json:
        sys.stdout.write(orjson.dumps(out).decode() + "\n")
        return False
    table = Table(title=question)
    for col in ("#", "score", third.replace("_id", ""), "speaker", "when", "memory"):
        table.add_column(col)
    for i, e in enumerate(out["evidence"], start=1):
        table.add_row(str(i), f"{e['score']:.3f}", e[third], e["speaker"] or "", (e["observed_at"] or "")[:10],
                      e["content"])
    Console().print(table)
    return True


def _print_answer(out: dict[str, Any]) -> None:
    if "answer" in out:
        Console().print(f"[bold]answer:[/] {out['answer']}")


@app.command()
def serve(host: Annotated[str, typer.Option(metavar="HOST", help="Address to listen on.")] = "127.0.0.1",
          port: Annotated[int, typer.Option(metavar="PORT", help="Port to listen on.")] = 8080,
          data_dir: DataDir = None,
          distributed: Annotated[bool, typer.Option(help="Ingest to Kafka; query Elasticsearch/Qdrant.")] = False,
          dev_ui: Annotated[bool, typer.Option(help="Loopback only: the /ui page signs itself in with an in-memory "
                                                    "query+admin key for --tenant.")] = False,
          tenant: Tenant = None) -> None:
    """Run the HTTP API (OpenAPI at /docs, the memory page at /ui/) over the embedded pipeline or the
    distributed stack. Every call but /healthz and /ui needs an API key: jevmem keys create --tenant T."""
    import uvicorn

    from jevmem.assembly import key_store
    from query_api.auth import Authenticator
    from query_api.http import create_app
    from query_api.ui import DevUi, dev_key, enable_dev_ui, is_loopback

    if dev_ui and not is_loopback(host):
        raise typer.BadParameter(f"--dev-ui hands the page a key, so it needs a loopback --host (127.0.0.1, ::1 "
                                 f"or localhost), not {host!r}", param_hint="--dev-ui")
    settings = _settings(data_dir, tenant)
    require_model(settings)
    settings, service = _service(settings, distributed)
    from jevmem import logs, metrics

    if settings.mode == "distributed":  # the servers checked before the log is set up: a bad setting is one line
        _run(cli_errors.preflight(service))
    logs.setup(settings.log_level, settings.log_format)
    keys = key_store(settings)
    sign_in: DevUi | None = None
    if dev_ui:
        sign_in, keys = dev_key(settings.tenant, keys)
    api = create_app(service, Authenticator(keys, settings.auth_cache_seconds, tokens=assembly.oidc(settings)),
                     started=heap.settle)
    metrics.attach(api)
    shown = f"[{host}]" if ":" in host else host
    if sign_in is not None:
        enable_dev_ui(api, sign_in)
        console.print(escape(f"dev UI: http://{shown}:{port}/ui/ signs in as tenant {sign_in.tenant_id!r} "
                             "(query+admin key, in memory for this process only)"))
    else:
        console.print(escape(f"memory page: http://{shown}:{port}/ui/ (sign in with an API key)"))
    with cli_errors.serving(api, text_log=settings.log_format == "text"):  # a failed start: one line
        uvicorn.run(api, host=host, port=port, log_config=None)


def _recall(settings: Settings, question: str, conversations: list[str] | None, top_k: int, as_json: bool) -> None:
    """``query`` over several conversations (:func:`query_api.recall.recall`) of the embedded store;
    a named conversation the tenant does not have stops it (:func:`unknown_conversations`)."""
    from query_api import service as svc

    async def ask(service: MemoryService) -> dict[str, Any]:
        if conversations is not None:
            await svc.require_known(service, settings.tenant, conversations)
        asked = await svc.ask_across(service, svc.operator(settings.tenant), question, top_k, conversations)
        return _dumped(asked.found, asked.answer)

    out = _run(_asking(settings, conversations, ask))
    if _print_evidence(out, question, "conversation_id", as_json):
        tr = out["trace"]
        given = ", ".join(f"{c['conversation_id']} ({c['evidence']})" for c in out["conversations"] if c["evidence"])
        console.print(f"evidence from: {given or 'none'}")
        console.print(f"{out['searched']} conversations contributed candidates; depth {tr['depth']}  stop "
                      f"{tr['stop_reason']}  calls {tr['controller_calls']}  {out['ms']:.0f} ms")
        _print_answer(out)


@app.command()
def conversations(tenant: Tenant = None, data_dir: DataDir = None,
                  distributed: Annotated[bool, typer.Option(
                      help="Read the distributed stores (also with JEVMEM_MODE=distributed).")] = False,
                  as_json: Json = False) -> None:
    """List the tenant's conversations with their node counts (one "ID<tab>NODES" line each, by id)."""
    settings = _settings(data_dir, tenant)
    require_model(settings)

    from query_api import service as svc

    async def go() -> tuple[str, list[tuple[str, int]]]:
        settings_used, service = _service(settings, distributed)
        where = "the distributed stores" if settings_used.mode == "distributed" else str(settings.data_dir)
        await service.start()
        try:
            return where, sorted(await svc.listed(service, svc.operator(settings.tenant)))
        finally:
            await service.stop()

    where, found = _run(go())
    if as_json:
        sys.stdout.write(orjson.dumps({"tenant": settings.tenant, "conversations": [
            {"conversation_id": c, "nodes": n} for c, n in found]}).decode() + "\n")
        return
    for c, n in found:
        sys.stdout.write(f"{c}\t{n}\n")
    console.print(escape(f"tenant {settings.tenant!r}: {len(found)} conversation{'' if len(found) == 1 else 's'} in {where}"
                         + ("" if found else f" (add some: jevmem ingest FILE --tenant {settings.tenant})")))


@app.command()
def mcp(key: Annotated[str | None, typer.Option(
            "--key", metavar="KEY", envvar="JEVMEM_API_KEY", show_envvar=False,
            help="API key of the tenant; prefer env JEVMEM_API_KEY (a flag shows in the process list).")] = None,
        data_dir: DataDir = None,
        distributed: Annotated[bool, typer.Option(help="Ingest to Kafka; query Elasticsearch/Qdrant.")] = False) -> None:
    """Serve the memory tools (remember, recall, forget, graph, conversations) to an agent over MCP stdio,
    for the tenant of the API key. Over HTTP, jevmem serve has them at /mcp."""
    from jevmem.assembly import key_store
    from query_api.auth import Authenticator, Unauthenticated
    from query_api.mcp_server import serve_stdio
    from topology.errors import StoreUnavailable

    if not key:
        cli_errors.stop("an API key is needed: --key or JEVMEM_API_KEY (jevmem keys create --tenant T)", 2)
    settings = _settings(data_dir)
    require_model(settings)
    settings, service = _service(settings, distributed)
    try:
        _run(serve_stdio(service, Authenticator(key_store(settings), settings.auth_cache_seconds, tokens=assembly.oidc(settings)),
                         key, started=heap.settle))
    except Unauthenticated as exc:
        cli_errors.stop(f"API key refused: {exc}", 2)
    except StoreUnavailable as exc:  # e.g. the embedded store is open in another process
        cli_errors.stop(f"memory unavailable: {exc}", 1)


@app.command()
def worker() -> None:
    """Run one Faust worker of the distributed pipeline (scale by starting more)."""
    from jevmem.distributed import run_worker

    settings = _settings()
    require_model(settings)
    run_worker(settings)


@app.command()
def produce(path: Annotated[Path, typer.Argument(metavar="FILE", help="JSONL observations, or a LoCoMo .json file.")],
            tenant: Tenant = None,
            conversation: Annotated[str | None, typer.Option(metavar="ID", help="Conversation id for lines without one.")
                                    ] = None) -> None:
    """Publish JSONL observations or a LoCoMo file to the observations topic (idempotent producer)."""
    from streams.kafka_admin import ensure_topics
    from streams.producer import ObservationProducer
    from topology.errors import InvalidEvent
    from topology.schemas import DeadLetter, Observation, decode

    settings = _settings(tenant=tenant)
    payloads = read_observation_payloads(path, settings.tenant, conversation)
    ensure_topics(assembly.kafka(settings), settings.topic_prefix, settings.topic_layout())

    async def go() -> int:
        from jevmem.distributed import checked_keyring

        keyring = await checked_keyring(settings)
        try:
            async with ObservationProducer(assembly.kafka(settings), settings.topic_prefix, keyring=keyring) as producer:
                if keyring is None:
                    return len(await producer.send_raw([(partition_key(raw), raw) for raw in payloads]))
                # sealed: what decodes is sent as observations; what does not goes straight to the
                # dead letters (sealed too), never in the clear onto the observations topic
                good, bad = [], []
                for i, raw in enumerate(payloads):
                    try:
                        good.append(decode(Observation, raw))
                    except InvalidEvent as exc:
                        bad.append(DeadLetter.of(raw, exc.reason, f"{path.name}:{i + 1}"))
                if bad:
                    await producer.dead_letter(bad)
                return len(await producer.send(good)) + len(bad)
        finally:
            if keyring is not None:
                await keyring.close()

    console.print(f"published {_run(go())} records to {settings.topic_prefix}.observations.v1")


@app.command()
def forget(conversation: Annotated[str, typer.Option("--conversation", "-c", metavar="ID", help="Conversation id.")],
           event: Annotated[str | None, typer.Option("--event", metavar="EVENT_ID", help="Forget only this observation.")
                            ] = None,
           tenant: Tenant = None, data_dir: DataDir = None,
           distributed: Annotated[bool, typer.Option(help="Publish the forget to Kafka (the workers apply it).")] = False,
           ) -> None:
    """Forget one observation (--event) or a whole conversation: nodes, derived nodes built from
    them, edges, consolidation decisions, vectors and lexical entries. Embedded: deleted now;
    distributed (--distributed or JEVMEM_MODE=distributed): published, applied in order by a worker."""
    from query_api import service as svc

    settings = _settings(data_dir, tenant)
    require_model(settings)

    async def go() -> dict[str, Any]:
        _, service = _service(settings, distributed)
        await service.start()
        try:
            return (await svc.forget(service, svc.operator(settings.tenant), conversation, event)).model_dump()
        finally:
            await service.stop()

    sys.stdout.write(orjson.dumps(_run(go())).decode() + "\n")


@app.command()
def replay(source: Annotated[ReplaySource, typer.Option(
               "--from", help="edges: the memories, edges and consolidation topics (no System One calls); "
                              "observations: recompute from the observations topic.")] = ReplaySource.edges,
           to_prefix: Annotated[str | None, typer.Option(
               metavar="PREFIX", help="Store prefix of the rebuilt generation [default: jevmem-g<unix time>-].")] = None,
           switch: Annotated[bool, typer.Option(help="Make the rebuilt stores active if identical.")] = False) -> None:
    """Rebuild memory into fresh stores from the Kafka log, verify it equals the active graph, switch over."""
    import time

    from jevmem.distributed import replay as do_replay
    from storage.elastic.store import check_prefix

    prefix = to_prefix or f"jevmem-g{int(time.time())}-"
    try:
        check_prefix(prefix)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--to-prefix") from None
    settings = _settings()
    require_model(settings)
    out = _run(do_replay(settings, source.value, prefix, switch))
    sys.stdout.write(orjson.dumps(out).decode() + "\n")
    if not out["identical"]:
        raise typer.Exit(1)




def main() -> None:
    """The ``jevmem`` command: every failure ends as one line on stderr saying what to check and
    a non-zero exit status (2: configuration or usage), its traceback only with ``--debug``
    (:mod:`jevmem.cli_errors`)."""
    raise SystemExit(cli_errors.run(app))
