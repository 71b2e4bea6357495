"""Embedded vector search: exact ranking over the node store's own vectors, a conversation at a time.

The embedded store keeps each node's embedding and context vector once, as float32 and float16
bytes in its node tables (:class:`storage.sqlite.SqliteNodeStore`). Every search is scoped to one
conversation, so this index reads that conversation's retrieval rows (:mod:`topology.vectors`)
into one float32 matrix and answers with a matrix product: no second copy of the vectors on disk,
and the cost of a search follows the size of its conversation, never the size of the store.

Contracts:

* Exact: a hit's score is the dot product of the node's retrieval vector and the query, in
  float64 (for a node without a context vector, its embedding: the cosine, embeddings being
  L2-normalised); best first, ties by earlier seq, then id. Scoped
  by tenant and conversation, and ``seq < before_seq`` when given. Nodes without an embedding
  are never hits.
* Read-your-writes: the node store is written before this index is told (``Stores.materialise``);
  a conversation not held is read from the node store on its next search, and :meth:`upsert`
  replaces or appends the rows of a held one, so a node is one row however the two interleave.
  :meth:`delete` and :meth:`delete_scope` drop the held conversation (read again on next use).
* Memory is bounded: at most ``max_rows`` rows over all held conversations; the least recently
  searched conversations are dropped first (the one being searched is always kept).
* The store has one writing process (:class:`storage.sqlite_base.DirLock`), so no write bypasses
  :meth:`upsert`.
"""

from __future__ import annotations

import sqlite3
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from storage.ports import Hit
from storage.sqlite import WITH_CONTEXT, retrieval_matrix
from storage.sqlite_base import translated
from topology.schemas import MemoryNode, Scope

#: Rows held by default (about 1.5 KB each at 384 dimensions).
MAX_ROWS = 65_536


class _Held:
    """One conversation's rows: ``matrix[:n]`` (float32, grown by doubling), ids and seqs."""

    def __init__(self, dim: int, rows: np.ndarray | None = None, ids: list[str] | None = None,
                 seqs: list[int] | None = None) -> None:
        self.ids = ids or []
        self.row_of = {nid: j for j, nid in enumerate(self.ids)}
        self.matrix = rows if rows is not None else np.zeros((0, dim), dtype=np.float32)
        self.seqs = np.asarray(seqs or [], dtype=np.int64)
        self.n = len(self.ids)

    def put(self, nid: str, seq: int, vec: np.ndarray) -> None:
        at = self.row_of.get(nid)
        if at is None:
            if self.n == len(self.matrix):
                grown = max(16, 2 * self.n)
                self.matrix = np.resize(self.matrix, (grown, self.matrix.shape[1]))
                self.seqs = np.resize(self.seqs, grown)
            at = self.row_of[nid] = self.n
            self.ids.append(nid)
            self.n += 1
        self.matrix[at], self.seqs[at] = vec, seq


class MatrixVectorIndex:
    """A :class:`~storage.ports.VectorIndex` (and batch search) over the embeddings of the node
    table of ``conn`` (see the module)."""

    def __init__(self, conn: sqlite3.Connection, dim: int, max_rows: int = MAX_ROWS) -> None:
        self._conn, self._dim, self._max = conn, dim, max(1, max_rows)
        self._held: OrderedDict[Scope, _Held] = OrderedDict()
        self._rows = 0

    def _load(self, scope: Scope) -> _Held:
        held = self._held.get(scope)
        if held is not None:
            self._held.move_to_end(scope)
            return held
        found = [(nid, int(seq), blob, ctx) for nid, seq, blob, ctx in self._conn.execute(
            f"SELECT id, seq, embedding, c.context FROM {WITH_CONTEXT} WHERE tenant=? AND conv=? "
            "AND embedding IS NOT NULL", (scope.tenant_id, scope.conversation_id)) if len(blob) == 4 * self._dim]
        rows = retrieval_matrix([f[2] for f in found], [f[3] for f in found], self._dim)
        held = _Held(self._dim, rows, [f[0] for f in found], [f[1] for f in found])
        self._held[scope] = held
        self._rows += held.n
        self._evict()
        return held

    def _evict(self) -> None:
        while self._rows > self._max and len(self._held) > 1:
            _, gone = self._held.popitem(last=False)
            self._rows -= gone.n

    def _rank(self, held: _Held, vector: Sequence[float], limit: int, before_seq: int | None) -> list[Hit]:
        m, seqs = held.matrix[:held.n], held.seqs[:held.n]
        if not held.n or limit <= 0:
            return []
        scores = m.astype(np.float64) @ np.asarray(vector, dtype=np.float64)
        ok = np.flatnonzero(seqs < before_seq) if before_seq is not None else np.arange(len(seqs))
        if len(ok) > limit:  # only rows scoring at least the limit-th best can be hits
            kept = scores[ok]
            ok = ok[kept >= np.partition(kept, len(kept) - limit)[len(kept) - limit]]
        ids = held.ids
        order = sorted(ok.tolist(), key=lambda j: (-scores[j], seqs[j], ids[j]))[:limit]
        return [Hit(ids[j], float(scores[j])) for j in order]

    @translated
    async def search(self, scope: Scope, vector: Sequence[float], limit: int, before_seq: int | None = None) -> list[Hit]:
        return self._rank(self._load(scope), vector, limit, before_seq)

    @translated
    async def search_many(self, queries: Sequence[tuple[Scope, Sequence[float], int | None]],
                          limit: int) -> list[list[Hit]]:
        return [self._rank(self._load(s), v, limit, b) for s, v, b in queries]

    async def upsert(self, nodes: Sequence[MemoryNode]) -> None:
        for n in nodes:
            held = self._held.get(n.scope)
            if held is None or n.embedding is None or len(n.embedding) != self._dim:
                continue
            before = held.n
            held.put(n.id, n.seq, np.asarray(n.retrieval_vector(), dtype=np.float32))
            self._rows += held.n - before
        self._evict()

    async def delete(self, scope: Scope, ids: Sequence[str]) -> None:
        if ids:
            await self.delete_scope(scope)

    async def delete_scope(self, scope: Scope) -> None:
        gone = self._held.pop(scope, None)
        if gone is not None:
            self._rows -= gone.n

    async def close(self) -> None:
        """The connection belongs to the node store, which closes it."""
        self._held.clear()
        self._rows = 0
