"""Forgotten means gone from the files too: what a store keeps of deleted data, removed before a
forget is reported applied.

A delete in either store leaves the deleted bytes in its files for a while:

* **SQLite** keeps the old versions of changed pages in the write-ahead log until a checkpoint,
  the deleted cells' bytes in their pages (and freed pages) unless ``secure_delete`` is on (it is,
  for every file this package opens: ``storage.sqlite.base.open_file``), and FTS5 keeps a deleted
  document's terms in its index segments until they are merged (FTS5's own ``secure-delete``
  needs SQLite 3.44). :func:`storage.sqlite.base.scrub` merges the forgotten tenants' FTS5 segments
  (``optimize``) and checkpoints the log into the database, truncating it (``TRUNCATE``).
* **Elasticsearch** (Lucene) marks a deleted document deleted (a soft delete) and drops it when
  its segment is merged, which happens only for a segment with more than
  ``index.merge.policy.expunge_deletes_allowed`` percent deleted documents (10 by default), and
  only for documents no retention lease retains (a shard copy's peer-recovery lease retains the
  operations above what it has synced, renewed about every 30 s). :class:`Expunger` sets the
  threshold to 0 on the indices it merges, waits until every peer-recovery lease is past the
  deletes, flushes (a merge also keeps every soft delete above the last commit's local
  checkpoint: without the flush a merge right after the deletes keeps them all, while ``_stats``
  already counts 0 deleted), and forces a merge that expunges the deleted documents
  (``_forcemerge?only_expunge_deletes=true``, which flushes again, so the translog no longer
  holds them either), one merge per index with deleted documents, however many forgets came
  before it. Which indices hold deleted documents, before and after, is read from their segments
  (``_segments``), never from ``_stats``.

Both are called by the drivers through :attr:`streams.write_path.Stores.purge` after a forget's
deletes: the embedded store before the forget returns, the worker in the background
(:mod:`streams.purging`: a burst of forgets costs one merge per index).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from elasticsearch import AsyncElasticsearch

from storage.elastic.client import es_errors
from topology.errors import StoreUnavailable

log = logging.getLogger("jevmem.storage")

#: How long an expunge waits for the retention leases to pass the deletes: the peer-recovery leases
#: are renewed every 30 s, so twice that means a shard copy is missing or lagging (then the forget
#: is retried, and a worker reports its partition stalled, rather than claiming it is done).
EXPUNGE_WAIT_S = 60.0
#: Poll interval while waiting for the leases.
LEASE_POLL_S = 1.0
#: Percent of deleted documents above which a segment is merged by an expunge: 0 = any.
EXPUNGE_DELETES_ALLOWED = 0


class Expunger:
    """Expunges the deleted documents of the Elasticsearch indices matching ``patterns`` (see the
    module's docstring). :meth:`expunge` returns the indices it merged."""

    def __init__(self, client: AsyncElasticsearch, patterns: Sequence[str], wait_s: float = EXPUNGE_WAIT_S) -> None:
        self._client, self._patterns, self._wait_s = client, list(patterns), wait_s
        self._configured: set[str] = set()

    async def _deleted(self, indices: Sequence[str] | None = None) -> list[str]:
        """Indices (of ``indices``, default every matching one) whose segments hold deleted
        documents, read from the segments themselves (``_segments``): ``_stats`` counts only what
        the searcher sees, and says 0 while soft-deleted documents are still in the files."""
        with es_errors("purge segments"):
            got = await self._client.options(ignore_status=404).indices.segments(
                index=",".join(indices or self._patterns), expand_wildcards="open")
        return sorted(name for name, s in got.body.get("indices", {}).items()
                      if any(seg.get("deleted_docs", 0) > 0 for copies in s.get("shards", {}).values()
                             for copy in copies for seg in copy.get("segments", {}).values()))

    async def _shards(self, indices: list[str]) -> dict[tuple[str, str], list[dict[str, Any]]]:
        with es_errors("purge stats"):
            stats = await self._client.indices.stats(index=",".join(indices), level="shards", metric="docs")
        return {(name, shard): copies for name, s in stats.body.get("indices", {}).items()
                for shard, copies in s.get("shards", {}).items()}

    async def _max_seq(self, indices: list[str]) -> dict[tuple[str, str], int]:
        """Each shard's max seq no (its latest operation)."""
        return {k: max(int(c.get("seq_no", {}).get("max_seq_no", -1)) for c in copies)
                for k, copies in (await self._shards(indices)).items()}

    async def _leases_past(self, indices: list[str]) -> dict[tuple[str, str], int]:
        """Wait until every shard copy's peer-recovery lease retains nothing at or below the shard's
        max seq no as it is now (the deletes already made); returns those max seq nos."""
        target = await self._max_seq(indices)
        deadline = time.monotonic() + self._wait_s
        while True:
            behind = []
            for key, copies in (await self._shards(indices)).items():
                for copy in copies:
                    for lease in copy.get("retention_leases", {}).get("leases", []):
                        if lease.get("source") == "peer recovery" and int(lease["retaining_seq_no"]) <= target.get(key, -1):
                            behind.append(f"{key[0]}[{key[1]}]")
            if not behind:
                return target
            if time.monotonic() > deadline:
                raise StoreUnavailable(f"elasticsearch purge: retention leases of {', '.join(sorted(set(behind)))} still "
                                       f"retain the deleted documents after {self._wait_s:.0f} s (a shard copy missing?)")
            await asyncio.sleep(LEASE_POLL_S)

    async def expunge(self) -> list[str]:
        """Merge away the deleted documents of every matching index whose segments hold some, and
        check the segments afterwards; returns those indices. Raises
        :class:`~topology.errors.StoreUnavailable` when Elasticsearch fails, the retention leases do
        not move within ``wait_s``, or a segment of an index written to by nothing since still holds a
        deleted document (a retry purges it)."""
        t0 = time.perf_counter()
        indices = await self._deleted()
        if not indices:
            return []
        fresh = [i for i in indices if i not in self._configured]
        if fresh:
            with es_errors("purge settings"):
                await self._client.indices.put_settings(
                    index=",".join(fresh), settings={"index.merge.policy.expunge_deletes_allowed": EXPUNGE_DELETES_ALLOWED})
            self._configured.update(fresh)
        target = await self._leases_past(indices)
        with es_errors("purge forcemerge"):
            # the deletes into a commit first: a merge keeps every soft delete above the safe
            # commit's local checkpoint, so without it the merge leaves them all in the files
            await self._client.indices.flush(index=",".join(indices))
            await self._client.indices.forcemerge(index=",".join(indices), only_expunge_deletes=True, flush=True)
        left = await self._deleted(indices)
        if left:
            # deleted documents written after the deletes purged here (an update's old version, a
            # later forget) are the next purge's; any other leftover is a failure, retried
            moved = await self._max_seq(left)
            still = sorted({i for (i, shard), seq in moved.items() if seq <= target.get((i, shard), -1)})
            if still:
                raise StoreUnavailable(f"elasticsearch purge: segments of {', '.join(still)} still hold deleted "
                                       "documents after the merge (retried)")
        log.info("expunged deleted documents", extra={"indices": indices, "ms": round(1000 * (time.perf_counter() - t0))})
        return indices
