"""``jevmem bench ...``: the benchmark commands, kept apart from :mod:`jevmem.cli` (which registers
:data:`bench_app` as its ``bench`` group) so that module stays one screenful of commands per
concern. Each command imports its benchmark when it runs, so ``--help`` loads none of them."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from jevmem import assembly, cli_errors
from jevmem.cli_common import Json, emit
from jevmem.cli_common import labelled as _labelled
from jevmem.cli_common import progress_bar as _progress
from jevmem.cli_common import run as _run
from jevmem.cli_common import settings_for as _settings
from jevmem.cli_models import require_model

if TYPE_CHECKING:
    from jevmem.bench.folds import Fold

bench_app = typer.Typer(help="Benchmarks.", no_args_is_help=True)


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
        emit(out, as_json)
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
    emit(out, as_json)


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
    emit(out, as_json)


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
        emit(out, as_json)
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
    emit(out, as_json)


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
    emit(out, as_json)


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
    emit(out, as_json)


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
    emit(out, as_json, {k: v for k, v in out.items() if k != "results"})


@bench_app.command("longmemeval")
def bench_longmemeval(
        directory: Annotated[Path, typer.Argument(metavar="DIR", help="LongMemEval question files (*.json).")],
        questions: Annotated[int | None, typer.Option(
            metavar="N", help="A stratified subset of N questions (categories in turn); default: all.")] = None,
        part: Annotated[str, typer.Option(
            metavar="HALF", help="all, or one half of the questions by a hash of their id: a or b.")] = "all",
        data_dir: Annotated[Path | None, typer.Option(
            "--data-dir", metavar="DIR", help="Keep the build here; a later run over it asks again without "
                                              "re-ingesting the questions it holds. Default: a temporary one.")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False) -> None:
    """LongMemEval-S retrieval through POST /v1/recall's code (each haystack one user's sessions,
    asked as of the question's date): turn and session recall_any/recall_all/ndcg_any@5/10 per
    category, beside plain dense search with the same embedder, BM25 and hybrid RRF over the same
    turns; ingest rate against the embedder alone; recall latency."""
    from jevmem.bench.longmemeval import METHODS, PARTS, run_longmemeval

    chosen = PARTS.get(part)
    if chosen is None:
        raise typer.BadParameter(f"--part must be one of {', '.join(PARTS)}")
    settings = _settings()
    require_model(settings)
    with _progress() as bar:
        progress = _labelled(bar)
        out = _run(run_longmemeval(directory, settings, assembly.load_embedder(settings), questions, chosen,
                                   data_dir, progress))
    if as_json:
        emit(out, as_json)
        return
    for key in ("turn_recall_frac@10", "turn_ndcg_any@10", "session_recall_all@5"):
        table = Table(title=key)
        table.add_column("method")
        cats = list(out["metrics"]["jevmem"])
        for c in cats:
            table.add_column(c)
        for m in METHODS:
            table.add_row(m, *[f"{out['metrics'][m][c][key]:.3f}" for c in cats])
        Console().print(table)
    Console().print({k: out[k] for k in ("config", "head_to_head", "ingest", "recall_ms")})
