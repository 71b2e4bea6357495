"""The purge of applied forgets, in the background: a forget's two states.

* **Applied**: the stores no longer return the forgotten data through any read, and its data keys
  are destroyed (the log's sealed copies are unreadable). The worker reports it (``forget
  applied``) before it commits the batch that held the forget; ingest behind it does not wait.
* **Purged**: no file of the purged stores holds the forgotten text, vectors or wrapped keys any
  more (Elasticsearch's soft-deleted documents merged away: ``storage.purge``; Qdrant's segments
  vacuumed and its write-ahead log rolled: ``storage.qdrant.purge``; the line names the stores).
  :class:`Purger` runs the stores' purge after each batch with forgets, and
  once at start (a forget applied by a worker that died before its purge), retries it with capped
  backoff until it succeeds, and reports each forget ``forget purged`` with the times it was
  accepted, applied and purged. A forget not purged within :data:`PURGE_DEADLINE_S` of being
  applied is logged ``forget purge overdue`` at every further failure.

:meth:`Purger.oldest_s` (the metric ``jevmem_forget_unpurged_oldest_seconds``) is the age of the
oldest applied forget not yet purged: what to watch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from topology.errors import kind_of

log = logging.getLogger("jevmem.worker")

#: How long after being applied a forget must be purged. Elasticsearch retains soft deletes until
#: its peer-recovery retention leases pass them (renewed every 30 s), so a purge takes up to about
#: 30 s after the deletes; the deadline leaves room for a few retries behind a busy or restarting
#: store.
PURGE_DEADLINE_S = 300.0
#: Backoff between failed purges (seconds, then the last one repeated).
RETRY_S = (1.0, 2.0, 5.0, 10.0, 30.0)


@dataclass(frozen=True)
class Pending:
    """An applied forget waiting for its purge: what the ``forget purged`` line repeats, and when
    it was applied (monotonic seconds, for the deadline and the metric)."""

    what: Mapping[str, Any]
    applied_at: datetime
    applied_mono: float


@dataclass
class Purger:
    """Runs ``purge`` (the stores' purge of everything they deleted: idempotent, and a purge finds
    what is left to purge by itself) until it succeeds after every :meth:`submit`. One purge
    covers every forget submitted before it started."""

    purge: Callable[[], Awaitable[object]]
    #: the stores whose files ``purge`` purges (named in each ``forget purged`` line)
    stores: tuple[str, ...] = ()
    deadline_s: float = PURGE_DEADLINE_S
    retry_s: tuple[float, ...] = RETRY_S
    clock: Callable[[], float] = time.monotonic
    _pending: list[Pending] = field(default_factory=list, init=False)
    _wake: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _sweep: bool = field(default=True, init=False)  # once at start: forgets a dead worker applied, unpurged
    purges: int = field(default=0, init=False)
    failures: int = field(default=0, init=False)

    def submit(self, what: Mapping[str, Any]) -> None:
        """An applied forget (``what``: the fields its log lines carry) to purge."""
        self._pending.append(Pending(dict(what), datetime.now(UTC), self.clock()))
        self._wake.set()

    def oldest_s(self) -> float:
        """Seconds since the oldest applied forget not yet purged was applied (0: none waits)."""
        return max(0.0, self.clock() - self._pending[0].applied_mono) if self._pending else 0.0

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def once(self) -> bool:
        """One purge of everything submitted so far; whether it succeeded (failures are logged)."""
        taken = list(self._pending)
        try:
            await self.purge()
        except Exception as exc:
            self.failures += 1
            overdue = [p for p in taken if self.clock() - p.applied_mono > self.deadline_s]
            extra = {"pending": len(taken), "error": f"{type(exc).__name__}: {exc}"[:500], "kind": kind_of(exc)}
            if overdue:
                log.error("forget purge overdue", extra={**extra, "overdue": len(overdue),
                                                         "oldest_s": round(self.oldest_s(), 1)})
            else:
                log.warning("forget purge failed; retrying", extra=extra)
            return False
        self.purges += 1
        self._sweep = False
        now = datetime.now(UTC)
        for p in taken:
            log.info("forget purged", extra={**p.what, "stores": list(self.stores), "applied_at": p.applied_at.isoformat(),
                                             "purged_at": now.isoformat(),
                                             "purge_s": round((now - p.applied_at).total_seconds(), 3)})
        del self._pending[:len(taken)]
        return True

    async def run(self) -> None:
        """Purge after every submit (and once at start), retrying with backoff until it succeeds;
        runs until cancelled."""
        attempt = 0
        while True:
            if not (self._pending or self._sweep):
                self._wake.clear()
                await self._wake.wait()
            if await self.once():
                attempt = 0
                continue
            await asyncio.sleep(self.retry_s[min(attempt, len(self.retry_s) - 1)])
            attempt += 1
