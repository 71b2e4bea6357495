"""Static top-k baselines on the same indexes: ``bm25``, ``vector`` and ``hybrid_rrf``."""

from __future__ import annotations

import asyncio

from query_api.retrieval import formulas
from storage.ports import LexicalIndex, NodeStore, VectorIndex
from topology.params import Params
from topology.ports import Embedder
from topology.schemas import Scope


class StaticRetriever:
    def __init__(self, embedder: Embedder, vectors: VectorIndex, lexical: LexicalIndex, nodes: NodeStore,
                 params: Params) -> None:
        self.embedder, self.vectors, self.lexical, self.nodes, self.params = embedder, vectors, lexical, nodes, params

    async def all(self, scope: Scope, question: str, k: int) -> dict[str, list[str]]:
        """Event ids of the top-``k`` of each baseline."""
        qvec = (await asyncio.to_thread(self.embedder.embed_query, [question]))[0]
        pool = max(k, self.params.anchor_pool)
        vec, lex = await asyncio.gather(self.vectors.search(scope, qvec, pool), self.lexical.search(scope, question, pool))
        fused = formulas.fused_order(formulas.rrf([[h.id for h in vec], [h.id for h in lex]], self.params.rrf_kappa))
        rankings = {"bm25": [h.id for h in lex][:k], "vector": [h.id for h in vec][:k], "hybrid_rrf": fused[:k]}
        ids = sorted({i for r in rankings.values() for i in r})
        events = {n.id: n.event_id for n in await self.nodes.get(scope, ids)}
        return {m: [events[i] for i in r if i in events] for m, r in rankings.items()}
