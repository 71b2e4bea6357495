"""``jevmem``: ingest, query, serve, bench (and, in distributed mode, worker/produce/replay)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import orjson
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from jevmem import locomo
from jevmem.cli_keys import keys_app
from jevmem.settings import Settings

app = typer.Typer(help="Streaming System-One memory for AI agents.", no_args_is_help=True)
bench_app = typer.Typer(help="Benchmarks.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")
models_app = typer.Typer(help="Embedding models (files from Maven Central, cached, verified).", no_args_is_help=True)
app.add_typer(models_app, name="models")
app.add_typer(keys_app, name="keys")
console = Console(stderr=True)
T = TypeVar("T")

DataDir = Annotated[Path | None, typer.Option("--data-dir", help="Embedded store directory [env JEVMEM_DATA_DIR].")]
Tenant = Annotated[str | None, typer.Option("--tenant", help="Tenant id [env JEVMEM_TENANT].")]


def _settings(data_dir: Path | None = None, tenant: str | None = None) -> Settings:
    s = Settings()
    updates: dict[str, Any] = {}
    if data_dir is not None:
        updates["data_dir"] = data_dir
    if tenant is not None:
        updates["tenant"] = tenant
    return s.model_copy(update=updates)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True)


def read_observation_payloads(path: Path, tenant: str, conversation: str | None) -> list[bytes]:
    """A LoCoMo file becomes observations; a JSONL file is read line by line (raw bytes, so
    invalid lines can be dead-lettered). ``tenant`` fills lines that omit ``tenant_id``."""
    raw = path.read_bytes()
    if path.suffix == ".json":
        data = orjson.loads(raw)
        if locomo.is_locomo(data):
            conv = conversation or f"locomo-{path.stem}"
            return [o.model_dump_json().encode() for o in locomo.observations(data, tenant, conv)]
    out = []
    for line in raw.splitlines():
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            out.append(line)
            continue
        if isinstance(obj, dict):
            obj.setdefault("tenant_id", tenant)
            if conversation:
                obj.setdefault("conversation_id", conversation)
            out.append(orjson.dumps(obj))
        else:
            out.append(line)
    return out


@app.command()
def ingest(path: Path, data_dir: DataDir = None, tenant: Tenant = None,
           conversation: Annotated[str | None, typer.Option(help="Conversation id for lines without one.")] = None) -> None:
    """Ingest JSONL observations or a LoCoMo conversation file into the embedded memory."""
    from jevmem.wiring import build_embedded

    settings = _settings(data_dir, tenant)
    payloads = read_observation_payloads(path, settings.tenant, conversation)

    async def go() -> None:
        mem = build_embedded(settings)
        accepted = new = edges = dead = 0
        try:
            with _progress() as bar:
                task = bar.add_task(f"ingest {path.name}", total=len(payloads))
                for i in range(0, len(payloads), settings.write_batch):
                    rep = await mem.pipeline.ingest_raw(payloads[i: i + settings.write_batch], source=str(path.name))
                    accepted, new, edges = accepted + rep.accepted, new + rep.new_nodes, edges + rep.edges
                    dead += len(rep.dead_letters)
                    for d in rep.dead_letters:
                        console.print(f"[yellow]dead letter[/] {d.source}: {d.reason}")
                    bar.update(task, advance=len(payloads[i: i + settings.write_batch]))
        finally:
            await mem.close()
        console.print(f"accepted {accepted} ({new} new nodes), {edges} edges, {dead} dead letters "
                      f"-> {settings.data_dir}")

    _run(go())


@app.command()
def query(question: str, conversation: Annotated[str, typer.Option("--conversation", "-c")],
          data_dir: DataDir = None, tenant: Tenant = None, top_k: int = 10,
          as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False) -> None:
    """Retrieve evidence for QUESTION from a conversation (and an answer if System Two is set)."""
    from jevmem.wiring import build_embedded, system_two
    from topology.schemas import Scope

    settings = _settings(data_dir, tenant)

    async def go() -> dict[str, Any]:
        mem = build_embedded(settings)
        s2 = system_two(settings)
        try:
            res = await mem.controller.retrieve(Scope(tenant_id=settings.tenant, conversation_id=conversation),
                                                question, top_k=top_k)
            out: dict[str, Any] = res.model_dump(mode="json")
            if s2 is not None:
                out["answer"] = await s2.answer(question, [e.for_prompt() for e in res.evidence])
                await s2.aclose()
            return out
        finally:
            await mem.close()

    out = _run(go())
    if as_json:
        sys.stdout.write(orjson.dumps(out).decode() + "\n")
        return
    table = Table(title=question)
    for col in ("#", "score", "via", "speaker", "when", "memory"):
        table.add_column(col)
    for i, e in enumerate(out["evidence"], start=1):
        when = (e["observed_at"] or "")[:10]
        table.add_row(str(i), f"{e['score']:.3f}", e["via"], e["speaker"] or "", when, e["content"])
    Console().print(table)
    tr = out["trace"]
    console.print(f"route {tr['route']}  depth {tr['depth']}  stop {tr['stop_reason']}  "
                  f"calls {tr['controller_calls']}  {tr['timings_ms']['total']:.0f} ms")
    if "answer" in out:
        Console().print(f"[bold]answer:[/] {out['answer']}")


@app.command()
def serve(host: str = "127.0.0.1", port: int = 8080, data_dir: DataDir = None,
          distributed: Annotated[bool, typer.Option(help="Ingest to Kafka; query Elasticsearch/Qdrant.")] = False) -> None:
    """Run the HTTP API (OpenAPI at /docs) over the embedded pipeline or the distributed stack.
    Every call but /healthz needs an API key: ``jevmem keys create --tenant T``."""
    import uvicorn

    from jevmem.wiring import EmbeddedService, key_store
    from query_api.auth import Authenticator
    from query_api.http import MemoryService, create_app

    settings = _settings(data_dir)
    service: MemoryService
    if distributed or settings.mode == "distributed":
        from jevmem.distributed import DistributedService

        settings = settings.model_copy(update={"mode": "distributed"})
        service = DistributedService(settings)
    else:
        service = EmbeddedService(settings)
    auth = Authenticator(key_store(settings), settings.auth_cache_seconds)
    uvicorn.run(create_app(service, auth), host=host, port=port)


@app.command()
def worker() -> None:
    """Run one Faust worker of the distributed pipeline (scale by starting more)."""
    from jevmem.distributed import run_worker

    run_worker(_settings())


@app.command()
def produce(path: Path, tenant: Tenant = None,
            conversation: Annotated[str | None, typer.Option(help="Conversation id for lines without one.")] = None) -> None:
    """Publish JSONL observations or a LoCoMo file to the observations topic (idempotent producer)."""
    from jevmem.distributed import ensure_topics
    from streams.producer import ObservationProducer

    settings = _settings(tenant=tenant)
    payloads = read_observation_payloads(path, settings.tenant, conversation)
    ensure_topics(settings.kafka_bootstrap, settings.topic_prefix, settings.partitions)

    async def go() -> int:
        async with ObservationProducer(settings.kafka_bootstrap, settings.topic_prefix) as producer:
            return len(await producer.send_raw([(partition_key(raw), raw) for raw in payloads]))

    console.print(f"published {_run(go())} records to {settings.topic_prefix}.observations.v1")


def partition_key(raw: bytes) -> str:
    """tenant/conversation of a raw observation, or "invalid" (it will be dead-lettered)."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return "invalid"
    if not isinstance(obj, dict):
        return "invalid"
    return f"{obj.get('tenant_id', '')}/{obj.get('conversation_id', '')}"


@app.command()
def replay(source: Annotated[str, typer.Option("--from", help="'edges' (no System One calls) or 'observations'.")] = "edges",
           to_prefix: Annotated[str | None, typer.Option(help="Store prefix of the rebuilt generation.")] = None,
           switch: Annotated[bool, typer.Option(help="Make the rebuilt stores active if identical.")] = False) -> None:
    """Rebuild memory into fresh stores from the Kafka log, verify it equals the active graph, switch over."""
    import time

    from jevmem.distributed import replay as do_replay

    prefix = to_prefix or f"jevmem-g{int(time.time())}-"
    out = _run(do_replay(_settings(), source, prefix, switch))
    sys.stdout.write(orjson.dumps(out).decode() + "\n")
    if not out["identical"]:
        raise typer.Exit(1)


@bench_app.command("locomo")
def bench_locomo(directory: Path,
                 as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
                 ablate: Annotated[bool, typer.Option(
                     "--ablate", help="Also report jevmem_no_graph (expansion rounds off), same run.")] = False) -> None:
    """Evidence recall@5/10/20 of jevmem vs bm25/vector/hybrid_rrf on LoCoMo conversation files."""
    from jevmem.bench import CATS, KS, methods, run_locomo
    from topology.embedding import load_embedder

    settings = _settings()
    with _progress() as bar:
        tasks: dict[str, Any] = {}

        def progress(label: str, done: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=total)
            bar.update(tasks[label], completed=done)

        out = _run(run_locomo(directory, settings, load_embedder(settings.embedder, settings.model_cache), progress,
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


@bench_app.command("scale")
def bench_scale(observations: Annotated[int, typer.Option(help="Synthetic observations to ingest.")] = 100_000,
                conversations: int = 1000, tenants: int = 10,
                as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False) -> None:
    """Ingest rate per tenth of a synthetic multi-tenant stream, then query latency, peak RSS, disk."""
    from jevmem.bench_scale import run_scale
    from topology.embedding import load_embedder

    settings = _settings()
    with _progress() as bar:
        task = bar.add_task("ingest", total=observations)
        out = _run(run_scale(settings, load_embedder(settings.embedder, settings.model_cache), observations,
                             conversations, tenants, progress=lambda done, _: bar.update(task, completed=done)))
    if as_json:
        sys.stdout.write(orjson.dumps(out).decode() + "\n")
    else:
        Console().print(out)


@bench_app.command("kafka")
def bench_kafka(directory: Path, workers: int = 2,
                rate: Annotated[float, typer.Option(help="Producer pace in observations/s (0: all at once).")] = 0.0,
                as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False) -> None:
    """Observations/s and end-to-end lag through Kafka + N Faust workers vs the embedded pipeline
    (needs a running broker and Elasticsearch node)."""
    from jevmem.bench_kafka import run_kafka

    out = _run(run_kafka(directory, _settings(), workers, rate))
    if as_json:
        sys.stdout.write(orjson.dumps(out).decode() + "\n")
    else:
        Console().print(out)


@models_app.command("fetch")
def models_fetch(name: Annotated[str | None, typer.Option(help="Model name (default: the configured one).")] = None,
                 archives: Annotated[Path | None, typer.Option(help="A folder of already downloaded archives.")] = None,
                 ) -> None:
    """Download (once), verify and extract an embedding model's files into the model cache."""
    from jevmem.models import fetch

    settings = _settings()
    path = fetch(name or settings.embedder, settings.model_cache, archives=archives)
    console.print(f"model {name or settings.embedder} ready in {path}")


@models_app.command("list")
def models_list() -> None:
    """Known embedding models and whether their files are in the cache."""
    from topology.embedding import MODELS, ModelMissing, default_cache, model_files

    settings = _settings()
    for name, spec in MODELS.items():
        try:
            model_files(spec, settings.model_cache or default_cache())
            state = "ready"
        except ModelMissing:
            state = "missing (jevmem models fetch)"
        where = " + ".join(a.coordinate for a in spec.archives.values())
        default = "  [default]" if name == settings.embedder else ""
        sys.stdout.write(f"{name}\t{spec.dim}\t{where}\t{state}{default}\n")


@bench_app.command("chaos")
def bench_chaos(directory: Path,
                rounds: Annotated[int, typer.Option(help="Rounds, cycling through the faults.")] = 10,
                turns: Annotated[int, typer.Option(help="Turns per conversation.")] = 30,
                fault: Annotated[list[str] | None, typer.Option(help="Only these faults (repeatable).")] = None,
                seed: Annotated[int | None, typer.Option(help="Random seed (kill points, victims).")] = None,
                as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False) -> None:
    """Worker kills, a second kill during recovery, a broker restart, an Elasticsearch outage and
    scaling mid-stream, on real servers: nothing lost, duplicated or stalled, same graph as embedded."""
    from jevmem.bench_chaos import FAULTS, run_chaos

    faults = tuple(fault) if fault else FAULTS
    unknown = set(faults) - set(FAULTS)
    if unknown:
        raise typer.BadParameter(f"unknown faults {sorted(unknown)}; choose from {FAULTS}")
    out = _run(run_chaos(directory, _settings(), rounds, turns, faults, seed))
    if as_json:
        sys.stdout.write(orjson.dumps(out).decode() + "\n")
    else:
        Console().print({k: v for k, v in out.items() if k != "results"})


def main() -> None:
    app()
