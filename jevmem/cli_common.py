"""What the ``jevmem`` command's modules share (:mod:`jevmem.cli`, :mod:`jevmem.cli_bench`): the
console messages go to, the ``--json`` flag, the settings a command starts from, and progress
bars."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import orjson
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from jevmem.settings import Settings

#: Where messages go (stderr: stdout carries what a command prints as its result).
console = Console(stderr=True)
T = TypeVar("T")
Json = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def settings_for(data_dir: Path | None = None, tenant: str | None = None) -> Settings:
    """The settings of the environment, with ``--data-dir`` and ``--tenant`` when given."""
    s = Settings()
    updates: dict[str, Any] = {}
    if data_dir is not None:
        updates["data_dir"] = data_dir
    if tenant is not None:
        updates["tenant"] = tenant
    return s.model_copy(update=updates)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``coro`` run to its end in a new event loop."""
    return asyncio.run(coro)


def progress_bar() -> Progress:
    """Transient progress bars on :data:`console`."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True)


def labelled(bar: Progress) -> Callable[[str, int, int], None]:
    """A benchmark's progress callback ``(label, done, total)``: one bar per label, added on first use."""
    tasks: dict[str, Any] = {}

    def progress(label: str, done: int, total: int) -> None:
        if label not in tasks:
            tasks[label] = bar.add_task(label, total=total)
        bar.update(tasks[label], completed=done)

    return progress


def emit(out: Any, as_json: bool, shown: Any = None) -> None:
    """A command's result on stdout: ``out`` as one JSON line with ``as_json``, else ``shown``
    (default ``out``) pretty-printed."""
    if as_json:
        sys.stdout.write(orjson.dumps(out).decode() + "\n")
    else:
        Console().print(out if shown is None else shown)
