"""``jevmem``: ingest, query, conversations, serve, mcp, bench (and, in distributed mode,
worker/produce/replay).

Help is rendered as plain text (no Rich markup), so option help may name settings as
``[env JEVMEM_...]`` and every non-flag option names its value (``DIR``, ``TENANT``, ``ID``)
instead of its Python type. Messages name what was written or read and where."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from jevmem import assembly, cli_errors, heap
from jevmem.cli_bench import bench_longmemeval
from jevmem.cli_encryption import encryption_app
from jevmem.cli_keys import keys_app
from jevmem.cli_models import models_app, require_model
from jevmem.observation_files import partition_key, read_observation_payloads
from jevmem.settings import Settings

if TYPE_CHECKING:
    from pydantic import BaseModel

    from jevmem.bench.folds import Fold
    from query_api.service import MemoryService

# rich_markup_mode=None: plain help text, so "[env JEVMEM_DATA_DIR]" is printed as written (Rich
# markup would swallow it) and flags show no "<bool>" type column.
app = typer.Typer(help="Streaming System-One memory for AI agents.", no_args_is_help=True, rich_markup_mode=None)
bench_app = typer.Typer(help="Benchmarks.", no_args_is_help=True)
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
console = Console(stderr=True)
T = TypeVar("T")

DataDir = Annotated[Path | None, typer.Option(
    "--data-dir", metavar="DIR", help="Embedded store directory [env JEVMEM_DATA_DIR, default .jevmem].")]
Tenant = Annotated[str | None, typer.Option("--tenant", metavar="TENANT", help="Tenant id [env JEVMEM_TENANT, default 'default'].")]
Json = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
#: How many conversations a message lists before pointing at ``jevmem conversations``.
SHOWN_CONVERSATIONS = 10
#: Write batches per ingest call of `jevmem ingest` (chunks of one call are pipelined).
INGEST_CALL_BATCHES = 16


class Fault(StrEnum):
    """``jevmem bench chaos --fault``: the names of :data:`jevmem.bench.chaos.FAULTS` (kept equal by a test;
    listed here so the CLI need not import the benchmark to print its help)."""

    kill = "kill"
    double_kill = "double_kill"
    broker_restart = "broker_restart"
    es_outage = "es_outage"
    scale = "scale"
    qdrant_kill = "qdrant_kill"
    broker_loss = "broker_loss"
    broker_rolling = "broker_rolling"
    qdrant_node_loss = "qdrant_node_loss"
    poison = "poison"


class ReplaySource(StrEnum):
    """``jevmem replay --from``: the topics a rebuild reads."""

    edges = "edges"
    observations = "observations"


class Vectors(StrEnum):
    """``jevmem bench kafka --vectors``: where the workers keep vectors."""

    qdrant = "qdrant"
    elastic = "elastic"
    both = "both"


class Encryption(StrEnum):
    """``jevmem bench kafka --encryption``: whether the runs seal the log."""

    off = "off"
    on = "on"
    both = "both"


def _settings(data_dir: Path | None = None, tenant: str | None = None) -> Settings:
    s = Settings()
    updates: dict[str, Any] = {}
    if data_dir is not None:
        updates["data_dir"] = data_dir
    if tenant is not None:
        updates["tenant"] = tenant
    return s.model_copy(update=updates)


def _service(settings: Settings, distributed: bool) -> tuple[Settings, MemoryService]:
    """The deployment a command serves: the distributed stack (``--distributed`` or
    ``JEVMEM_MODE=distributed``; the settings then say so, for the key store) or the embedded one."""
    if distributed or settings.mode == "distributed":
        from jevmem.distributed import DistributedService

        settings = settings.model_copy(update={"mode": "distributed"})
        return settings, DistributedService(settings)
    from jevmem.wiring import EmbeddedService

    return settings, EmbeddedService(settings)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True)


def _labelled(bar: Progress) -> Callable[[str, int, int], None]:
    """A benchmark's progress callback ``(label, done, total)``: one bar per label, added on first use."""
    tasks: dict[str, Any] = {}

    def progress(label: str, done: int, total: int) -> None:
        if label not in tasks:
            tasks[label] = bar.add_task(label, total=total)
        bar.update(tasks[label], completed=done)

    return progress


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


@bench_app.command("locomo")
def bench_locomo(directory: Annotated[Path, typer.Argument(metavar="DIR", help="LoCoMo conversations (*.json).")],
                 as_json: Json = False,
                 ablate: Annotated[bool, typer.Option(
                     "--ablate", help="Also report jevmem_no_graph (expansion rounds off), same run.")] = False) -> None:
    """Evidence recall@5/10/20 of jevmem vs bm25/vector/hybrid_rrf on LoCoMo conversation files."""
    from jevmem.bench.locomo import CATS, KS, methods, run_locomo

    settings = _settings()
    require_model(settings)
    with _progress() as bar:
        progress = _labelled(bar)
        out = _run(run_locomo(directory, settings, assembly.load_embedder(settings), progress,
                              ablate=ablate))
    if as_json:
        sys.stdout.write(orjson.dumps(out).decode() + "\n")
        return
    for k in KS:
        table = Table(title=f"evidence recall@{k}")
        table.add_column("method")
        for c in CATS:
            table.add_column(c)
        for m in methods(ablate):
            row = out["recall"][m][str(k)]
            table.add_row(m, *[("-" if row[c] is None else f"{row[c]:.3f}") for c in CATS])
        Console().print(table)
    Console().print({k: v for k, v in out.items() if k != "recall"})


@bench_app.command("edges")
def bench_edges(directory: Annotated[Path, typer.Argument(metavar="DIR", help="LoCoMo conversations (*.json).")],
                as_json: Json = False) -> None:
    """How well each view's edge probabilities separate turns that are evidence for one question
    from the other candidate pairs (ROC AUC), and edges per turn by view."""
    from jevmem.bench.edges import run_edges

    settings = _settings()
    require_model(settings)
    out = _run(run_edges(directory, settings, assembly.load_embedder(settings)))
    if as_json:
        sys.stdout.write(orjson.dumps(out).decode() + "\n")
        return
    Console().print(out)


@bench_app.command("scale")
def bench_scale(observations: Annotated[int, typer.Option(metavar="N", help="Synthetic observations to ingest.")] = 100_000,
                conversations: Annotated[int, typer.Option(metavar="N", help="Conversations.")] = 1000,
                tenants: Annotated[int, typer.Option(metavar="N", help="Tenants.")] = 10,
                active: Annotated[int, typer.Option(metavar="N", help="Conversations in flight at once (0: all of them).")
                                  ] = 20,  # jevmem.bench.scale.DEFAULT_ACTIVE
                data_dir: Annotated[Path | None, typer.Option(
                    "--data-dir", metavar="DIR", help="Build the store here and keep it (an empty directory); "
                                                      "default: a temporary one, removed after the run.")] = None,
                as_json: Json = False) -> None:
    """Ingest rate per tenth of a synthetic multi-tenant stream, then query latency, peak RSS, disk."""
    from jevmem.bench.scale import run_scale

    settings = _settings()
    require_model(settings)
    with _progress() as bar:
        task = bar.add_task("ingest", total=observations)
        out = _run(run_scale(settings, assembly.load_embedder(settings), observations,
                             conversations, tenants, active=active or None,
                             progress=lambda done, _: bar.update(task, completed=done), data_dir=data_dir))
    if as_json:
        sys.stdout.write(orjson.dumps(out).decode() + "\n")
    else:
        Console().print(out)


def _fold(value: str) -> Fold:
    """``--attributes``' value as a fold of :mod:`jevmem.bench.folds`."""
    from jevmem.bench.folds import FOLDS

    fold = next((f for f in FOLDS if f == value), None)
    if fold is None:
        raise typer.BadParameter(f"--attributes must be one of {', '.join(FOLDS)}")
    return fold


@bench_app.command("users")
def bench_users(users: Annotated[int, typer.Option(metavar="N", help="Users.")] = 6,
                sessions: Annotated[int, typer.Option(metavar="N", help="Sessions (conversations) per user.")] = 16,
                facts: Annotated[int, typer.Option(metavar="N", help="Facts each user states once (at most 8).")] = 5,
                wordings: Annotated[str, typer.Option(
                    metavar="SPLIT", help="Wording templates: train, heldout or all.")] = "all",
                seed: Annotated[int, typer.Option(metavar="N", help="Generator seed.")] = 7,
                many_sessions: Annotated[int, typer.Option(
                    metavar="N", help="One user with N three-turn sessions, one stating a code (0: skip).")] = 400,
                repeats: Annotated[int, typer.Option(metavar="N", help="Times the many-sessions question is asked.")] = 20,
                scale_sessions: Annotated[int, typer.Option(
                    metavar="N", help="One user with N sessions (10000: about 100,000 turns; minutes of ingest; "
                                      "0: skip).")] = 0,
                attributes: Annotated[str, typer.Option(
                    metavar="FOLD", help="Facts of one fold of the attributes only (a or b; all: every one): with "
                                         "JEVMEM_ATTRIBUTE_MODEL and JEVMEM_UPDATE_JUDGE trained on the other fold, "
                                         "facts of attributes the models never saw.")] = "all",
                stores: Annotated[str, typer.Option(
                    metavar="WHERE", help="embedded (a fresh store a scenario), or distributed: a fresh store "
                                          "generation a scenario on the Elasticsearch and Qdrant servers of "
                                          "JEVMEM_ELASTICSEARCH_URL and JEVMEM_QDRANT_URL, written by a worker's "
                                          "write path in this process (no broker).")] = "embedded",
                as_json: Json = False) -> None:
    """User memory across sessions through recall (POST /v1/recall's code): is a fact the user
    stated once ranked first, above their own later questions about it, tool calls and results,
    advice and one-turn sessions? Also recall latency, ingest rate, and many or very many sessions."""
    from jevmem.bench.users import run_users
    from jevmem.bench.users_data import WORDINGS

    split = next((w for w in WORDINGS if w == wordings), None)
    if split is None:
        raise typer.BadParameter(f"--wordings must be one of {', '.join(WORDINGS)}")
    fold = _fold(attributes)
    where = next((w for w in ("embedded", "distributed") if w == stores), None)
    if where is None:
        raise typer.BadParameter("--stores must be embedded or distributed")
    settings = _settings()
    require_model(settings)
    with _progress() as bar:
        progress = _labelled(bar)
        out = _run(run_users(settings, assembly.load_embedder(settings), users, sessions, facts, split, seed, many_sessions,
                             repeats, scale_sessions, progress, fold, where))
    if as_json:
        sys.stdout.write(orjson.dumps(out).decode() + "\n")
        return
    table = Table(title=f"bench users ({out['mode']})")
    table.add_column("scenario")
    table.add_column("figure")
    table.add_column("value")
    for scenario in ("users", "many_sessions", "scale"):
        for key, value in (out[scenario] or {}).items():
            for name, v in (value.items() if isinstance(value, dict) else [("", value)]):
                table.add_row(scenario, f"{key}.{name}" if name else key, str(v))
    Console().print(table)


@bench_app.command("updates")
def bench_updates(conversations: Annotated[int, typer.Option(
                      metavar="N", help="Conversations (every third person has two: updates across sessions).")] = 12,
                  wordings: Annotated[str, typer.Option(
                      metavar="SPLIT", help="Wording templates: train, heldout or all.")] = "all",
                  seed: Annotated[int, typer.Option(metavar="N", help="Generator seed.")] = 7,
                  seeds: Annotated[int, typer.Option(metavar="N", min=1, help=(
                      "Datasets, seeds SEED .. SEED+N-1, figures pooled over their questions."))] = 1,
                  turns: Annotated[int, typer.Option(metavar="N", help="Turns per conversation (at least 60).")] = 100,
                  attributes: Annotated[str, typer.Option(
                      metavar="FOLD", help="Facts of one fold of the attributes only (a or b; all: every one): with "
                                           "JEVMEM_ATTRIBUTE_MODEL and JEVMEM_UPDATE_JUDGE trained on the other fold, "
                                           "facts of attributes the models never saw.")] = "all",
                  as_json: Json = False) -> None:
    """Facts that change: is the current value ranked above the one it replaced and the old one
    marked superseded, is it still found for questions about the past, and is a look-alike about
    someone else left alone? Also query latency and ingest rate."""
    from jevmem.bench.updates import run_updates
    from jevmem.bench.users_data import WORDINGS

    split = next((w for w in WORDINGS if w == wordings), None)
    if split is None:
        raise typer.BadParameter(f"--wordings must be one of {', '.join(WORDINGS)}")
    fold = _fold(attributes)
    settings = _settings()
    require_model(settings)
    with _progress() as bar:
        progress = _labelled(bar)
        out = _run(run_updates(settings, assembly.load_embedder(settings), conversations, split, seed, turns, progress,
                               seeds, fold))
    if as_json:
        sys.stdout.write(orjson.dumps(out).decode() + "\n")
    else:
        Console().print(out)


@bench_app.command("kafka")
def bench_kafka(directory: Annotated[Path | None, typer.Argument(
                    metavar="DIR", help="LoCoMo conversations (*.json); without it, the synthetic fan-in workload.")
                ] = None,
                workers: Annotated[int, typer.Option(metavar="N", help="Faust worker processes.")] = 2,
                conversations: Annotated[int, typer.Option(metavar="N", help="Fan-in workload: conversations.")] = 200,
                turns: Annotated[int, typer.Option(metavar="N", help="Fan-in workload: turns per conversation.")] = 10,
                tenants: Annotated[int, typer.Option(metavar="N", help="Fan-in workload: tenants.")] = 10,
                pid: Annotated[list[str] | None, typer.Option(
                    metavar="ROLE=PID",
                    help="Fan-in workload: a server's pid as ROLE=PID (broker, elasticsearch, qdrant; repeatable), "
                         "besides the ones found through the scripts' pid files.")] = None,
                rate: Annotated[float, typer.Option(metavar="OBS_PER_S",
                                                    help="Producer pace in observations/s (0: all at once).")] = 0.0,
                vectors: Annotated[Vectors | None, typer.Option(
                    help="Vectors in qdrant (JEVMEM_QDRANT_URL), elastic, or both (one run each). "
                         "Default: qdrant if configured, else elastic.")] = None,
                encryption: Annotated[Encryption, typer.Option(
                    help="Seal the log (on), not (off), or one run each (both) to compare their cost. "
                         "Without a configured key-encryption key, a fresh one is made for the run.")] = Encryption.off,
                as_json: Json = False) -> None:
    """Observations/s and end-to-end lag through Kafka + N Faust workers vs the embedded pipeline
    (needs a running broker, Elasticsearch node and, for vectors in Qdrant, a Qdrant server).
    Without DIR: the fan-in workload, with CPU and disk per observation by component."""
    from jevmem.bench.kafka import run_fanin, run_kafka, vector_stores

    settings = _settings()
    require_model(settings)
    where = None if vectors is None else vectors.value
    try:
        vector_stores(where, settings)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if directory is None:
        pids: dict[str, list[int]] = {}
        for item in pid or []:
            role, _, value = item.partition("=")
            if role not in ("broker", "elasticsearch", "qdrant") or not value.isdigit():
                raise typer.BadParameter(f"--pid {item!r}: expected ROLE=PID, ROLE one of broker, elasticsearch, qdrant")
            pids.setdefault(role, []).append(int(value))
        if where in ("elastic", "qdrant"):
            settings = settings.model_copy(update={"qdrant_url": settings.qdrant_url if where == "qdrant" else None})
        out = _run(run_fanin(settings, workers, conversations, turns, tenants, pids=pids or None,
                             encryption=encryption.value))
    else:
        out = _run(run_kafka(directory, settings, workers, rate, vectors=where, encryption=encryption.value))
    if as_json:
        sys.stdout.write(orjson.dumps(out).decode() + "\n")
    else:
        Console().print(out)


@bench_app.command("serve")
def bench_serve(directory: Annotated[Path, typer.Argument(metavar="DIR", help="LoCoMo conversations (*.json).")],
                clients: Annotated[list[int] | None, typer.Option(
                    metavar="N", help="Concurrency levels (repeatable) [default: 1, 4, 16].")] = None,
                seconds: Annotated[float, typer.Option(metavar="S", help="Seconds of load per level.")] = 30.0,
                ingest_every: Annotated[int, typer.Option(
                    metavar="N", help="One request in N is an ingest; 0: queries only.")] = 5,
                as_json: Json = False) -> None:
    """Load on `jevmem serve` (embedded, a fresh data directory): closed-loop clients querying and
    ingesting at each concurrency level; requests/s, p50/p95/p99 per kind, errors and 5xx,
    server and client CPU per request, and acknowledged observations not stored."""
    from jevmem.bench.serve import run_serve

    require_model(_settings())
    out = _run(run_serve(directory, tuple(clients) if clients else (1, 4, 16), seconds, ingest_every=ingest_every))
    if as_json:
        sys.stdout.write(orjson.dumps(out).decode() + "\n")
    else:
        Console().print(out)


@bench_app.command("chaos")
def bench_chaos(directory: Annotated[Path, typer.Argument(metavar="DIR", help="LoCoMo conversations (*.json).")],
                rounds: Annotated[int, typer.Option(metavar="N", help="Rounds, cycling through the faults.")] = 10,
                turns: Annotated[int, typer.Option(metavar="N", help="Turns per conversation.")] = 30,
                fault: Annotated[list[Fault] | None, typer.Option(
                    help="Only these faults (repeatable) [default: every fault the configured servers allow].")] = None,
                seed: Annotated[int | None, typer.Option(metavar="N", help="Random seed (kill points, victims).")] = None,
                as_json: Json = False) -> None:
    """Worker kills, a second kill during recovery, a broker restart, an Elasticsearch outage,
    scaling mid-stream, poison records (an embedding service refusing some texts) and (vectors in
    Qdrant) a Qdrant server SIGKILL + restart, on real servers: nothing lost, duplicated or
    stalled, same graph as embedded, each poison record one dead letter.

    Needs a source checkout of jevmem for the faults that restart a server (broker_restart,
    qdrant_kill, broker_loss, broker_rolling, qdrant_node_loss run its scripts/); kill,
    double_kill, es_outage and scale also run from an installed package."""
    from jevmem.bench.chaos import SourceCheckoutNeeded, run_chaos

    faults = tuple(f.value for f in fault) if fault else None
    settings = _settings()
    try:
        require_model(settings)
        out = _run(run_chaos(directory, settings, rounds, turns, faults, seed))
    except SourceCheckoutNeeded as exc:
        cli_errors.stop(str(exc), 2)
    if as_json:
        sys.stdout.write(orjson.dumps(out).decode() + "\n")
    else:
        Console().print({k: v for k, v in out.items() if k != "results"})


bench_app.command("longmemeval")(bench_longmemeval)


def main() -> None:
    """The ``jevmem`` command: every failure ends as one line on stderr saying what to check and
    a non-zero exit status (2: configuration or usage), its traceback only with ``--debug``
    (:mod:`jevmem.cli_errors`)."""
    raise SystemExit(cli_errors.run(app))
