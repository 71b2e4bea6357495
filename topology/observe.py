"""Observation hooks: stage timings, counters and the current trace id, with no dependency but
the error tree (an exception leaving a stage is noted with the stage's name).

The stages report here; the composition root decides where it goes (Prometheus metrics, logs).
With no observer registered every hook is a cheap no-op, so pure code and tests pay nothing.

- :func:`timed` and :func:`observe` report how long a named stage took (``embed``, ``typing``,
  ``numbering``, ``store_writes``, ``candidates``, ``relations``, ``consolidation``, ``emit``: a
  worker logging its output records, ``query``).
- :func:`count` reports counted events (``accepted``, ``dead_letter``, ``store_error``) with a
  label from a small fixed set; :func:`measure` one value of a distribution
  (``controller_requests_per_write``, ``controller_requests_per_query``).
- :data:`TRACE_ID` carries the trace id of the request or batch being served (an API request,
  or the records of a Kafka batch), so logs and outgoing records can name it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol

from topology.errors import STAGE_NOTE


class Observer(Protocol):
    def stage(self, name: str, seconds: float) -> None: ...

    def count(self, name: str, value: float, label: str) -> None: ...

    def measure(self, name: str, value: float) -> None: ...


OBSERVERS: list[Observer] = []
TRACE_ID: ContextVar[str | None] = ContextVar("jevmem_trace_id", default=None)
_TALLY: ContextVar[dict[str, float] | None] = ContextVar("jevmem_stage_tally", default=None)


def observe(name: str, seconds: float) -> None:
    for o in OBSERVERS:
        o.stage(name, seconds)


def count(name: str, value: float = 1.0, label: str = "") -> None:
    """``label`` must come from a small fixed set (never a tenant or conversation id)."""
    for o in OBSERVERS:
        o.count(name, value, label)


def measure(name: str, value: float) -> None:
    """One observation of a distributed quantity (``controller_requests_per_write``: System One
    requests per observation of a write batch; ``controller_requests_per_query``)."""
    for o in OBSERVERS:
        o.measure(name, value)


@contextmanager
def timed(name: str) -> Iterator[None]:
    """Report the wall time of the ``with`` block as stage ``name`` (also when it raises). An
    exception leaving the block carries the stage in its notes, the innermost stage first
    (``topology.errors.stage_of`` reads it: a dead letter names where its record failed)."""
    t0 = time.perf_counter()
    try:
        yield
    except Exception as exc:
        if not any(isinstance(n, str) and n.startswith(STAGE_NOTE) for n in getattr(exc, "__notes__", ())):
            exc.add_note(STAGE_NOTE + name)
        raise
    finally:
        tally = _TALLY.get()
        if OBSERVERS or tally is not None:
            seconds = time.perf_counter() - t0
            observe(name, seconds)
            if tally is not None:
                tally[name] = tally.get(name, 0.0) + seconds


@contextmanager
def tally() -> Iterator[dict[str, float]]:
    """Seconds per stage of every :func:`timed` block run inside the ``with`` block (tasks it
    creates included), summed by name: one batch's breakdown for its log line. Stages that
    overlap (the next chunk's ``embed`` while this one links) are each counted in full."""
    stages: dict[str, float] = {}
    token = _TALLY.set(stages)
    try:
        yield stages
    finally:
        _TALLY.reset(token)
