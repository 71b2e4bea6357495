"""Embedded vector index on Qdrant's in-process engine (``qdrant-edge-py``): one shard directory.

Why not qdrant-client's local mode: it scans every point of the collection with a pure-Python
payload filter, so each search costs O(all points of all tenants) (about 1.5 s per filtered
search at 100,000 points). The edge engine is Qdrant's own segment code in-process: payload
indexes on ``tenant_id`` (``is_tenant``), ``conversation_id`` and ``seq`` make a filtered search
touch only the conversation's points (about 0.3 ms at 100,000 points, flat in the store's size).

Contracts:

* Points are keyed by the deterministic node id, so re-indexing is an upsert.
* Every search is filtered by tenant and conversation (and ``seq < before_seq`` when given), and
  is exact (no HNSW): results equal a brute-force cosine ranking of the scope's points, as the
  distributed stores' exact index does, so embedded and distributed graphs agree.
* Writes go through the shard's write-ahead log; :meth:`flush` (called on close and every
  :data:`FLUSH_EVERY` points) persists segments. ``optimize()`` is never called on the hot path:
  it blocks the process while it rebuilds segments.
* The engine is synchronous: calls run in a worker thread, serialised by a lock, so the event loop
  stays free. One process owns a shard directory at a time.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from storage.ports import Hit
from topology.errors import StoreUnavailable
from topology.schemas import MemoryNode, Scope

T = TypeVar("T")

#: Persist segments after this many upserted points (the WAL covers what happens in between).
FLUSH_EVERY = 20_000


class QdrantEdgeVectorIndex:
    def __init__(self, path: str | Path, dim: int, remove_on_close: bool = False) -> None:
        try:
            import qdrant_edge as qe
        except ImportError as exc:  # pragma: no cover - install problem, not logic
            raise StoreUnavailable("qdrant-edge-py is not installed") from exc
        self._qe: Any = qe
        self._dim = dim
        self._lock = threading.Lock()
        self._since_flush = 0
        p = Path(path)
        try:
            if (p / "edge_config.json").exists() or (p.is_dir() and any(p.iterdir())):
                self._shard = qe.EdgeShard.load(str(p))
            else:
                p.mkdir(parents=True, exist_ok=True)
                cfg = qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine))
                self._shard = qe.EdgeShard.create(str(p), cfg)
                for op in (qe.UpdateOperation.create_field_index("tenant_id", qe.KeywordIndexParams(is_tenant=True)),
                           qe.UpdateOperation.create_field_index("conversation_id", qe.PayloadSchemaType.Keyword),
                           qe.UpdateOperation.create_field_index("seq", qe.PayloadSchemaType.Integer)):
                    self._shard.update(op)
        except Exception as exc:  # the engine raises plain exceptions
            if "WouldBlock" in str(exc):
                raise StoreUnavailable(f"vector store {p} is in use by another process (one process owns an embedded "
                                       "store: stop the other `jevmem serve`/`ingest`, or use another --data-dir)") from exc
            raise StoreUnavailable(f"qdrant-edge {p}: {exc}") from exc
        self._closed = False
        self._remove = p if remove_on_close else None

    @classmethod
    def temporary(cls, dim: int) -> QdrantEdgeVectorIndex:
        """A shard in a fresh temporary directory, deleted on close (the ``:memory:`` store)."""
        return cls(tempfile.mkdtemp(prefix="jevmem-vectors-"), dim, remove_on_close=True)

    async def _call(self, fn: Callable[[], T], what: str) -> T:
        def locked() -> T:
            with self._lock:
                if self._closed:
                    raise StoreUnavailable("qdrant-edge: index is closed")
                return fn()
        try:
            return await asyncio.to_thread(locked)
        except StoreUnavailable:
            raise
        except Exception as exc:
            raise StoreUnavailable(f"qdrant-edge {what}: {exc}") from exc

    def _filter(self, scope: Scope, before_seq: int | None, ids: Sequence[str] | None = None) -> Any:
        qe = self._qe
        must = [qe.FieldCondition(key="tenant_id", match=qe.MatchValue(scope.tenant_id)),
                qe.FieldCondition(key="conversation_id", match=qe.MatchValue(scope.conversation_id))]
        if ids is not None:
            must.append(qe.HasIdCondition(set(ids)))
        if before_seq is not None:
            must.append(qe.FieldCondition(key="seq", range=qe.RangeFloat(lt=before_seq)))
        return qe.Filter(must=must)

    async def upsert(self, nodes: Sequence[MemoryNode]) -> None:
        qe = self._qe
        points = [qe.Point(n.id, list(n.embedding), {"tenant_id": n.tenant_id, "conversation_id": n.conversation_id,
                                                      "seq": n.seq, "kind": n.kind})
                  for n in nodes if n.embedding is not None]
        if not points:
            return

        def write() -> None:
            self._shard.update(qe.UpdateOperation.upsert_points(points))
            self._since_flush += len(points)
            if self._since_flush >= FLUSH_EVERY:
                self._shard.flush()
                self._since_flush = 0

        await self._call(write, "upsert")

    def _request(self, scope: Scope, vector: Sequence[float], limit: int, before_seq: int | None) -> Any:
        qe = self._qe
        return qe.QueryRequest(limit=limit, query=qe.Query.Nearest(list(vector)), filter=self._filter(scope, before_seq),
                               with_payload=False, params=qe.SearchParams(exact=True))

    async def search(self, scope: Scope, vector: Sequence[float], limit: int, before_seq: int | None = None) -> list[Hit]:
        req = self._request(scope, vector, limit, before_seq)
        res = await self._call(lambda: self._shard.query(req), "search")
        return [Hit(str(p.id), float(p.score)) for p in res]

    async def search_many(self, queries: Sequence[tuple[Scope, Sequence[float], int | None]],
                          limit: int) -> list[list[Hit]]:
        """One planned batch of searches, ``(scope, vector, before_seq)`` each, in one thread hop."""
        if not queries:
            return []
        qe = self._qe
        batch = qe.QueryBatchRequest([self._request(s, v, limit, b) for s, v, b in queries])
        res = await self._call(lambda: self._shard.query_batch(batch), "search")
        return [[Hit(str(p.id), float(p.score)) for p in hits] for hits in res]

    async def delete(self, scope: Scope, ids: Sequence[str]) -> None:
        """Remove the points ``ids`` of ``scope`` (by id, restricted to the scope's filter)."""
        if not ids:
            return
        op = self._qe.UpdateOperation.delete_points_by_filter(self._filter(scope, None, ids))
        await self._call(lambda: self._shard.update(op), "delete")

    async def delete_scope(self, scope: Scope) -> None:
        op = self._qe.UpdateOperation.delete_points_by_filter(self._filter(scope, None))
        await self._call(lambda: self._shard.update(op), "delete")

    async def close(self) -> None:
        def shut() -> None:
            with self._lock:
                if not self._closed:
                    self._closed = True
                    self._shard.flush()
                    self._shard.close()
                    if self._remove is not None:
                        shutil.rmtree(self._remove, ignore_errors=True)
        await asyncio.to_thread(shut)
