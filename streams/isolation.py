"""One bad record costs one dead letter: a batch that fails permanently is split until the
records that fail are isolated, and the rest is written, in order.

:func:`isolate` is what both drivers wrap around a batch's write (the in-process writer and the
Faust agent): the batch is attempted whole; when the attempt fails with a *permanent* error
(``topology.errors.kind_of``: a refusal, validation, a record the stages cannot process), it is
split in two halves, the first attempted (and split again if it fails) before the second, down to
single records. A single record whose attempt still fails permanently is returned with its error;
the caller dead-letters it. Records after it are written after it, so per-conversation order
holds as without a failure. Transient and configuration errors are raised as they are: the
caller retries the whole batch (every write is an idempotent upsert, seqs come from the store).

Cost: a batch of ``n`` records with one poison record is attempted about ``2 * log2(n)`` times
in parts whose sizes halve, so its work (embedding, System One requests) is repeated on about
``2n`` records in all; a clean batch costs nothing more.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from topology.errors import kind_of, stage_of

log = logging.getLogger("jevmem.streams")

T = TypeVar("T")


@dataclass(frozen=True)
class Failed(Generic[T]):
    """A record whose attempt alone failed permanently: the record, the error, and the write-path
    stage it escaped (``embed``, ``typing``, ``relations``, ...; "" when unknown)."""

    item: T
    error: Exception
    stage: str

    @property
    def reason(self) -> str:
        """What its dead letter says: the stage, the exception's type and message."""
        where = f"{self.stage}: " if self.stage else ""
        return f"permanent failure in {where}{type(self.error).__name__}: {self.error}"


async def isolate(items: Sequence[T], attempt: Callable[[list[T]], Awaitable[None]],
                  on_failed: Callable[[Failed[T]], Awaitable[None]] | None = None) -> list[Failed[T]]:
    """Run ``attempt(items)``; on a permanent failure, isolate the failing records by halving (see
    the module's docstring) and return them in order with their errors (none: everything was
    written). ``on_failed`` is awaited for each as soon as it is isolated, before any later
    record is attempted again (to undo what the failed attempts stored of it, so that later
    records do not meet it). Every record not returned was passed to a successful attempt after
    the last failed attempt that held it, in the order of ``items``. Raises the first transient
    or configuration error met (the part written before it stays written: retrying the whole
    call rewrites it by id)."""
    failed: list[Failed[T]] = []

    async def run(part: list[T]) -> None:
        try:
            await attempt(part)
            return
        except Exception as exc:
            if kind_of(exc) != "permanent":
                raise
            if len(part) == 1:
                failed.append(Failed(part[0], exc, stage_of(exc)))
                if on_failed is not None:
                    await on_failed(failed[-1])
                return
            log.info("a batch of %d failed permanently (%s: %s): splitting it", len(part), type(exc).__name__, exc)
        half = (len(part) + 1) // 2
        await run(part[:half])
        await run(part[half:])

    if items:
        await run(list(items))
    return failed
