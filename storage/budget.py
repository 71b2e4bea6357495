"""How a process's cache memory budget (``JEVMEM_MEMORY_MB``) is shared out: pure arithmetic.

Three caches grow with what a process has seen, and share the budget: the embedded store's
SQLite page cache, the write path's in-memory conversations (:class:`storage.scope_cache.ScopeCache`)
and the embedded read path's vectors (:class:`storage.sqlite.vectors.MatrixVectorIndex`: a
conversation's rows, and a realm file's lookups; a realm file's vectors are mapped, in the
operating system's page cache rather than the process). Everything
else a process holds is bounded by constants and does not grow with the store: the embedding
model and runtime (about 150-350 MB by model), the read path's decoded-node, node-info and edge
caches (about 60 MB; with the distributed stores, their decoded node and edge-group documents,
about 75 MB more: :mod:`storage.elastic.decoded`), and the allocator's slack.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Shares of the budget: SQLite page cache, write-path conversations, read-path vectors.
SQLITE_SHARE, WRITE_SHARE, VECTOR_SHARE = 0.45, 0.35, 0.20
#: Bytes a write-path node costs beyond its float32 embedding (the node without it, its postings).
WRITE_NODE_BYTES = 2_600
#: Bytes a held vector row costs beyond its float32 values (id, seq).
VECTOR_ROW_BYTES = 120
_MIB = 2**20


@dataclass(frozen=True)
class MemoryPlan:
    """The caches' bounds: SQLite page cache (MiB, shared by the store's connections), nodes
    the write path holds, vector rows the read path holds."""

    sqlite_cache_mb: int
    write_nodes: int
    vector_rows: int


#: The write path's share in a process without an embedded store (a distributed worker).
WORKER_WRITE_SHARE = 0.8


def plan(memory_mb: int, dim: int, sqlite_cache_mb: int | None = None, write_nodes: int | None = None,
         embedded: bool = True) -> MemoryPlan:
    """The bounds for a budget of ``memory_mb`` MiB and ``dim``-dimensional embeddings; an
    explicit ``sqlite_cache_mb`` or ``write_nodes`` replaces that cache's share. Without an
    embedded store (``embedded=False``) the write path takes :data:`WORKER_WRITE_SHARE` and the
    other two caches do not exist (0)."""
    node_bytes = 4 * dim + WRITE_NODE_BYTES
    share = WRITE_SHARE if embedded else WORKER_WRITE_SHARE
    return MemoryPlan(
        sqlite_cache_mb=(sqlite_cache_mb if sqlite_cache_mb is not None else max(8, int(memory_mb * SQLITE_SHARE)))
        if embedded else 0,
        write_nodes=write_nodes if write_nodes is not None else max(1_000, int(memory_mb * share * _MIB / node_bytes)),
        vector_rows=max(1_000, int(memory_mb * VECTOR_SHARE * _MIB / (4 * dim + VECTOR_ROW_BYTES))) if embedded else 0,
    )
