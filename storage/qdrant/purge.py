"""The purge of a Qdrant collection: after deletes, no file of the collection holds a deleted point.

A delete in Qdrant hides a point at once, but its vector, id and payload stay in two kinds of
files (measured on Qdrant 1.18.1):

* **segments**: a deleted point is only marked deleted; its vector stays in the segment's vector
  storage until the vacuum optimizer rebuilds the segment, which it does only when the segment's
  deleted share passes ``deleted_threshold`` (default 0.2) and the segment holds at least
  ``vacuum_min_vector_number`` vectors (default 1,000, at least 100);
* **the write-ahead log**: every upsert (vector, id, payload) and every delete (its filter: the
  tenant and conversation) stays in the shard's WAL segment file until the segment is full, is
  closed, and is dropped once the shard has flushed past it (``wal_retain_closed`` closed segments
  are kept besides).

:func:`purge` therefore, on the collection of a :class:`~storage.qdrant.index.QdrantVectorIndex`:

1. **rolls the write-ahead log**: it overwrites one filler point (no tenant: the empty tenant id,
   which no scope can name) with a payload of the WAL's capacity, until every WAL segment that
   held the deletes is closed and no longer among the retained ones, then deletes the filler. A
   collection made by this release has a WAL of :data:`WAL_CAPACITY_MB` (1 MB), so this writes
   about 3 MB; an older collection's (32 MB by default) costs about 100 MB per purge;
2. **pads** small segments: a segment under the vacuum's minimum of 100 vectors is never vacuumed,
   so while one holds deleted points, filler points (no tenant, zero vectors) are written until it
   is large enough, and deleted again;
3. **vacuums**: it sets ``deleted_threshold`` 0 and ``vacuum_min_vector_number`` 100 on the
   collection, waits until every segment that held a deleted vector when it began (on any listed
   node: each node's telemetry) has been rebuilt without it, and puts the optimizer settings back
   as they were (deletes written meanwhile, in other segments, are the next purge's);
4. waits one flush interval, after which the shard has flushed past the rolled log and dropped it.

Every step is idempotent, and a purge that fails part way (a node down, the optimizer not done
within :data:`VACUUM_TIMEOUT_S`) raises :class:`~topology.errors.StoreUnavailable`: the caller
retries. The byte-level proof is ``tests/integration/test_qdrant.py`` and
``tests/integration/test_forget_qdrant.py``, which scan the collection's folder for the
forgotten vectors, ids and conversation id.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from typing import TYPE_CHECKING, Any

from qdrant_client import models

from topology.errors import StoreUnavailable

if TYPE_CHECKING:
    from storage.qdrant.index import QdrantVectorIndex

#: The WAL segment size of a collection this release creates (MB; Qdrant's default is 32).
WAL_CAPACITY_MB = 1
#: Qdrant's smallest allowed ``vacuum_min_vector_number``: a segment needs this many vectors to be vacuumed.
VACUUM_MIN_VECTORS = 100
#: Seconds the vacuum may take before the purge fails (and is retried).
VACUUM_TIMEOUT_S = 120.0
#: The most payload one filler upsert carries (MB; Qdrant refuses requests over 32 MB by default).
FILLER_CHUNK_MB = 8
#: Rounds of padding before the purge gives up on a small segment (one that takes no new points).
PAD_ROUNDS = 3
#: The tenant of filler points: the empty id, which no tenant, scope or realm can have.
FILLER_TENANT = ""
_NAMESPACE = uuid.UUID("6f1c0d1e-8a51-4c55-9a57-0b7f3c5e2a10")
FILLER_ID = str(uuid.uuid5(_NAMESPACE, "wal-filler"))


def pad_ids(n: int) -> list[str]:
    """The ids of ``n`` padding points (the same ones each purge: a retry overwrites them)."""
    return [str(uuid.uuid5(_NAMESPACE, f"pad-{i}")) for i in range(n)]


def roll_chunks(capacity_mb: int, retain_closed: int) -> list[int]:
    """The filler payload sizes (bytes) that close the WAL segment holding the deletes and push it
    past the ``retain_closed`` closed segments kept: ``capacity_mb`` times (``retain_closed`` + 2),
    in pieces of one segment's size (at most :data:`FILLER_CHUNK_MB`), so the log fills and closes
    its segments as it does for ordinary writes."""
    piece = min(max(1, capacity_mb), FILLER_CHUNK_MB) << 20
    total = max(1, capacity_mb) * (max(0, retain_closed) + 2) << 20
    return [piece] * math.ceil(total / piece)


def segments_of(telemetry: dict[str, Any], collection: str) -> list[tuple[str, int, int]]:
    """(id, deleted vectors, vectors) of each local segment of ``collection`` in one node's
    telemetry (``GET /telemetry?details_level=4``)."""
    out: list[tuple[str, int, int]] = []
    for col in telemetry.get("result", {}).get("collections", {}).get("collections", []):
        if col.get("id") != collection:
            continue
        for shard in col.get("shards") or []:
            for seg in (shard.get("local") or {}).get("segments") or []:
                info = seg.get("info", {})
                out.append((str(info.get("uuid", "")), int(info.get("num_deleted_vectors", 0)),
                            int(info.get("num_vectors", 0))))
    return out


async def purge(index: QdrantVectorIndex) -> None:
    """Purge the collection of ``index`` of every point deleted before the call (see the module)."""
    await index.prepare()
    config = (await index.call(lambda c: c.get_collection(index.collection), "collection info")).config
    await _roll(index, config.wal_config.wal_capacity_mb if config.wal_config else 32,
                config.wal_config.wal_retain_closed or 0 if config.wal_config else 1)
    optimizer = config.optimizer_config
    await _set_vacuum(index, 0.0, VACUUM_MIN_VECTORS)
    try:
        await _vacuumed(index)
    finally:
        await _set_vacuum(index, optimizer.deleted_threshold, optimizer.vacuum_min_vector_number)
    # the shard flushes past the filler, then drops the rolled log segments
    await asyncio.sleep(optimizer.flush_interval_sec + 1)


async def _roll(index: QdrantVectorIndex, capacity_mb: int, retain_closed: int) -> None:
    """Close and push out the WAL segments holding every operation before the call."""
    zero = [0.0] * index.dim
    for size in roll_chunks(capacity_mb, retain_closed):
        point = models.PointStruct(id=FILLER_ID, vector=zero, payload={"tenant_id": FILLER_TENANT, "fill": "0" * size})
        await index.call(lambda c, p=point: c.upsert(index.collection, [p], wait=True), "purge: roll the log")  # type: ignore[misc]
    await index.call(lambda c: c.delete(index.collection, models.PointIdsList(points=[FILLER_ID]), wait=True),
                     "purge: roll the log")


async def _set_vacuum(index: QdrantVectorIndex, threshold: float | None, minimum: int | None) -> None:
    diff = models.OptimizersConfigDiff(deleted_threshold=threshold, vacuum_min_vector_number=minimum)
    await index.call(lambda c: c.update_collection(index.collection, optimizers_config=diff), "purge: vacuum settings")


async def _segments(index: QdrantVectorIndex) -> list[tuple[str, int, int]]:
    """(id, deleted, vectors) of every segment of the collection on every node (a node that does
    not answer fails the purge: its files are not known to be clean)."""
    out: list[tuple[str, int, int]] = []
    for client in index.clients:
        telemetry = await index.call_on(client, lambda c: c.http.client.request(
            type_=dict, method="GET", url="/telemetry", params={"details_level": 4}), "purge: telemetry")
        out.extend(segments_of(telemetry, index.collection))
    return out


async def _vacuumed(index: QdrantVectorIndex) -> None:
    """Wait until every segment that held a deleted vector when the wait began is rebuilt without
    it (deletes written meanwhile, in other segments, are the next purge's), padding segments too
    small to be vacuumed first."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + VACUUM_TIMEOUT_S
    segments = await _segments(index)
    for _ in range(PAD_ROUNDS):
        if not any(d and n < VACUUM_MIN_VECTORS for _, d, n in segments):
            break
        await _pad(index, VACUUM_MIN_VECTORS * len(segments))
        segments = await _segments(index)
    dirty = {uid for uid, d, _ in segments if d}
    while dirty:
        await asyncio.sleep(0.5)
        dirty &= {uid for uid, d, _ in await _segments(index) if d}
        if dirty and loop.time() > deadline:
            raise StoreUnavailable(f"qdrant purge of {index.collection}: {len(dirty)} segments still hold deleted "
                                   f"vectors after {VACUUM_TIMEOUT_S:.0f} s")
    while True:  # the optimizer done: the segments it replaced are removed from disk
        info = await index.call(lambda c: c.get_collection(index.collection), "purge: collection status")
        if info.status == models.CollectionStatus.GREEN:
            return
        if loop.time() > deadline:
            raise StoreUnavailable(f"qdrant purge of {index.collection}: the optimizer still runs after "
                                   f"{VACUUM_TIMEOUT_S:.0f} s")
        await asyncio.sleep(0.5)


async def _pad(index: QdrantVectorIndex, n: int) -> None:
    """Write ``n`` filler points and delete them: the segments they land in reach the vacuum's size."""
    ids = pad_ids(n)
    zero = [0.0] * index.dim
    points = [models.PointStruct(id=i, vector=zero, payload={"tenant_id": FILLER_TENANT}) for i in ids]
    await index.call(lambda c: c.upsert(index.collection, points, wait=True), "purge: pad")
    await index.call(lambda c: c.delete(index.collection, models.PointIdsList(points=list(ids)), wait=True),
                     "purge: pad")
