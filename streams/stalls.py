"""Say when a partition is stalled, rather than silently waiting.

A worker retries a batch that fails with a transient (or configuration) error in place, with
capped exponential back-off, forever: nothing accepted is ever skipped. After
:data:`STALL_AFTER_ATTEMPTS` failed attempts of one batch, every partition the batch came from
is *stalled*: the worker reports itself unhealthy until the batch goes through, through
:class:`Stalls` (``jevmem_partition_stalled_seconds{topic, partition}``: seconds since the batch
first failed; ``GET /ready`` on the worker's metrics port answers 503 naming the partitions).
A permanent failure never stalls a partition: the failing records are isolated and
dead-lettered (:mod:`streams.isolation`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

#: Failed attempts of one batch before its partitions count as stalled: with the back-off (0.5 s
#: doubling) that is about 7.5 s of retries, longer than a broker's leader election or a store
#: node's restart take, so a stall means something an operator should look at.
STALL_AFTER_ATTEMPTS = 5

Partition = tuple[str, int]


@dataclass
class Stalls:
    """Partitions whose batch keeps failing: since when (monotonic seconds) and how many attempts.
    One per worker process; the write agent reports every failed attempt (:meth:`failed`) and
    every batch that went through (:meth:`cleared`)."""

    after_attempts: int = STALL_AFTER_ATTEMPTS
    _since: dict[Partition, float] = field(default_factory=dict)
    _attempts: dict[Partition, int] = field(default_factory=dict)

    def failed(self, partitions: Iterable[Partition], attempts: int, first_failure: float) -> None:
        """A batch from ``partitions`` failed for the ``attempts``-th time; its first failure was
        at ``first_failure`` (``time.monotonic()``)."""
        for p in partitions:
            self._since[p] = min(self._since.get(p, first_failure), first_failure)
            self._attempts[p] = attempts

    def cleared(self, partitions: Iterable[Partition]) -> None:
        """A batch from ``partitions`` went through: they move again."""
        for p in partitions:
            self._since.pop(p, None)
            self._attempts.pop(p, None)

    def keep(self, partitions: Iterable[Partition]) -> None:
        """Forget every partition not in ``partitions`` (the worker's assignment changed)."""
        mine = set(partitions)
        for p in [p for p in self._since if p not in mine]:
            self.cleared([p])

    def stalled(self) -> dict[Partition, float]:
        """Stalled partitions (at least ``after_attempts`` failed attempts of their batch) and the
        seconds since their batch first failed."""
        now = time.monotonic()
        since, attempts = list(self._since.items()), dict(self._attempts)  # copies: a metrics thread reads too
        return {p: now - t for p, t in since if attempts.get(p, 0) >= self.after_attempts}

    def ready(self) -> bool:
        """False while any partition is stalled (the worker's readiness check)."""
        return not self.stalled()
