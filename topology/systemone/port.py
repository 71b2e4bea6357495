"""The System One port: one ``ask`` = one controller request over a batch of items.

A *Noul* is a yes/no proposition answered with P(yes); a *Choice* picks one of N labels and is
answered with a distribution. Each item carries a ``state`` (what the controller looks at: texts
and precomputed features) and the questions to answer about it. Backends must return one
``Answer`` per item, in order, with every asked question answered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from topology.errors import SystemOneError


@dataclass(frozen=True)
class Noul:
    """A yes/no question; ``text`` is the instruction a remote model reads."""

    key: str
    text: str


@dataclass(frozen=True)
class Choice:
    """A one-of-N question over ``labels``."""

    key: str
    text: str
    labels: tuple[str, ...]


Question = Noul | Choice


@dataclass(frozen=True)
class Task:
    """A named group of questions asked together (typing, relations, route, ...)."""

    name: str
    questions: tuple[Question, ...]

    def nouls(self) -> tuple[Noul, ...]:
        return tuple(q for q in self.questions if isinstance(q, Noul))

    def choices(self) -> tuple[Choice, ...]:
        return tuple(q for q in self.questions if isinstance(q, Choice))


@dataclass(frozen=True)
class Item:
    """One thing to judge: the task's questions about ``state`` (JSON-serialisable)."""

    task: Task
    state: Mapping[str, Any]


@dataclass(frozen=True)
class Answer:
    """Probabilities for one item: Noul key -> P(yes); Choice key -> label -> probability."""

    nouls: Mapping[str, float] = field(default_factory=dict)
    choices: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def p(self, key: str) -> float:
        return self.nouls[key]


class SystemOne(Protocol):
    """Answers a batch of items (possibly of several tasks) in a single controller request."""

    async def ask(self, items: Sequence[Item]) -> list[Answer]: ...

    async def aclose(self) -> None: ...


def check_answers(items: Sequence[Item], answers: Sequence[Answer]) -> list[Answer]:
    """Enforce the port contract: one answer per item, every question present, values in [0,1]."""
    if len(answers) != len(items):
        raise SystemOneError(f"{len(answers)} answers for {len(items)} items")
    for item, ans in zip(items, answers, strict=True):
        task = item.task
        for noul in task.nouls():
            v = ans.nouls.get(noul.key)
            if v is None or not 0.0 <= v <= 1.0:
                raise SystemOneError(f"{task.name}: noul {noul.key!r} missing or out of range: {v}")
        for choice in task.choices():
            dist = ans.choices.get(choice.key)
            if dist is None or set(dist) != set(choice.labels):
                raise SystemOneError(f"{task.name}: choice {choice.key!r} missing or wrong labels")
    return list(answers)


@runtime_checkable
class Chunking(Protocol):
    """A backend that may split one batch into several requests (e.g. HTTP size limits)."""

    def requests_for(self, sizes: Sequence[int]) -> int:
        """Requests a batch of items with ``sizes`` questions each takes (pure, deterministic)."""
        ...


def requests_for(backend: object, sizes: Sequence[int]) -> int:
    """Requests ``backend`` makes for a batch of items with ``sizes`` questions each: its own
    count when it chunks, else one for a non-empty batch."""
    if not sizes:
        return 0
    return backend.requests_for(sizes) if isinstance(backend, Chunking) else 1


class CountingSystemOne:
    """Wraps a backend and counts controller requests, for the per-write/query bounds: one per
    ``ask``, or as many as the backend sends when it splits a batch (:class:`Chunking`)."""

    def __init__(self, inner: SystemOne) -> None:
        self.inner = inner
        self.calls = 0
        self.by_task: dict[str, int] = {}
        # whether the backend chunks, checked once (a Protocol isinstance check is slow)
        self._chunking = isinstance(inner, Chunking)

    async def ask(self, items: Sequence[Item]) -> list[Answer]:
        if not items:
            return []
        self.record([i.task for i in items])
        return check_answers(items, await self.inner.ask(items))

    def record(self, tasks: Sequence[Task]) -> None:
        """Count one batch of items of ``tasks`` (one task per item) as :meth:`ask` does: for a
        caller that had the wrapped backend answer that batch in-process without ``ask``."""
        if not tasks:
            return
        sizes = [len(t.questions) for t in tasks]
        self.calls += self.inner.requests_for(sizes) if self._chunking else 1  # type: ignore[attr-defined]
        name = "+".join(sorted({t.name for t in tasks}))
        self.by_task[name] = self.by_task.get(name, 0) + 1

    def requests_for(self, sizes: Sequence[int]) -> int:
        if not sizes:
            return 0
        return self.inner.requests_for(sizes) if self._chunking else 1  # type: ignore[attr-defined]

    async def aclose(self) -> None:
        await self.inner.aclose()
