"""The write path's read-your-writes view (:class:`topology.ports.MemoryReader`) over the stores."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from storage.ports import LexicalIndex, NodeStore, VectorIndex
from topology.schemas import MemoryNode, Scope


class StoreReader:
    def __init__(self, vectors: VectorIndex, lexical: LexicalIndex, nodes: NodeStore) -> None:
        self.vectors, self.lexical, self.nodes = vectors, lexical, nodes

    async def similar_before(self, scope: Scope, vector: Sequence[float], before_seq: int, limit: int) -> list[str]:
        return [h.id for h in await self.vectors.search(scope, vector, limit, before_seq=before_seq)]

    async def similar_before_many(self, queries: Sequence[tuple[Scope, Sequence[float], int]],
                                  limit: int) -> list[list[str]]:
        many = getattr(self.vectors, "search_many", None)
        if many is not None:
            hits = await many(list(queries), limit)
        else:
            hits = await asyncio.gather(*(self.vectors.search(s, v, limit, before_seq=b) for s, v, b in queries))
        return [[h.id for h in hs] for hs in hits]

    async def overlapping_before(self, scope: Scope, tokens: Sequence[str], before_seq: int, limit: int) -> list[str]:
        return await self.lexical.overlapping(scope, tokens, before_seq, limit)

    async def sharing_entities_before(self, scope: Scope, entity_ids: Sequence[str], before_seq: int, limit: int) -> list[str]:
        return await self.nodes.sharing_entities_before(scope, entity_ids, before_seq, limit)

    async def preceding(self, scope: Scope, before_seq: int, limit: int) -> list[str]:
        return await self.nodes.preceding(scope, before_seq, limit)

    async def get_nodes(self, scope: Scope, ids: Sequence[str]) -> list[MemoryNode]:
        return await self.nodes.get(scope, ids)
