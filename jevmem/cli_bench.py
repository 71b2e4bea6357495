"""``jevmem bench longmemeval``: kept apart from :mod:`jevmem.cli` (registered there on its
``bench`` group) so that module stays one screenful of commands per concern."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import orjson
import typer
from rich.console import Console
from rich.table import Table


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
    from jevmem import assembly
    from jevmem.bench.longmemeval import METHODS, PARTS, run_longmemeval
    from jevmem.cli import _labelled, _progress, _run, _settings
    from jevmem.cli_models import require_model

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
        sys.stdout.write(orjson.dumps(out).decode() + "\n")
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
