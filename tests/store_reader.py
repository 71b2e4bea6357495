"""A test oracle: the write path's read-your-writes view (:class:`topology.ports.MemoryReader`)
straight over the stores, one store call per answer: the reference that the in-memory
:class:`storage.scope_cache.ScopeCache` must agree with."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from storage.ports import EarlierNodes, Hit, LexicalIndex, NodeReader, VectorSearch
from topology.schemas import MemoryNode, Scope


class BatchVectorSearch(VectorSearch, Protocol):
    """A vector index that answers many searches in one round trip (the Qdrant adapters and the
    node table's exact search)."""

    async def search_many(self, queries: Sequence[tuple[Scope, Sequence[float], int | None]],
                          limit: int) -> list[list[Hit]]:
        """``[await search(scope, vector, limit, before_seq) for scope, vector, before_seq in queries]``."""
        ...


class ReaderNodes(NodeReader, EarlierNodes, Protocol):
    """What :class:`StoreReader` reads of the node store."""


class StoreReader:
    """Every :class:`~topology.ports.MemoryReader` call answered by one store call."""

    def __init__(self, vectors: BatchVectorSearch, lexical: LexicalIndex, nodes: ReaderNodes) -> None:
        self.vectors, self.lexical, self.nodes = vectors, lexical, nodes

    async def similar_before(self, scope: Scope, vector: Sequence[float], before_seq: int, limit: int) -> list[str]:
        return [h.id for h in await self.vectors.search(scope, vector, limit, before_seq=before_seq)]

    async def similar_before_many(self, queries: Sequence[tuple[Scope, Sequence[float], int]],
                                  limit: int) -> list[list[str]]:
        hits = await self.vectors.search_many(queries, limit)
        return [[h.id for h in hs] for hs in hits]

    async def overlapping_before(self, scope: Scope, tokens: Sequence[str], before_seq: int, limit: int) -> list[str]:
        return await self.lexical.overlapping(scope, tokens, before_seq, limit)

    async def sharing_entities_before(self, scope: Scope, entity_ids: Sequence[str], before_seq: int, limit: int) -> list[str]:
        return await self.nodes.sharing_entities_before(scope, entity_ids, before_seq, limit)

    async def preceding(self, scope: Scope, before_seq: int, limit: int) -> list[str]:
        return await self.nodes.preceding(scope, before_seq, limit)

    async def get_nodes(self, scope: Scope, ids: Sequence[str]) -> list[MemoryNode]:
        return await self.nodes.get(scope, ids)

    async def embeddings(self, scope: Scope, ids: Sequence[str], dim: int) -> np.ndarray:
        found = {n.id: n.embedding for n in await self.nodes.get(scope, ids)}
        m = np.zeros((len(ids), dim), dtype=np.float64)
        for row, i in enumerate(ids):
            v = found.get(i)
            if v:
                m[row] = v
        return m
