"""The Elasticsearch vector index (the distributed mode's fallback when no Qdrant server is
configured): exact search over a flat ``dense_vector`` of each node's retrieval vector, in the
``p vectors`` index, one document per node (``_id`` = node id)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from elasticsearch import AsyncElasticsearch

from storage.elastic import _KW, Visibility, _Elastic, _scoped, es_errors
from storage.ports import Hit
from topology.schemas import MemoryNode, Scope


def _inner_product(score: float) -> float:
    """The dot product behind a ``max_inner_product`` score (``1 + dot``, or ``1 / (1 - dot)``
    for a negative one)."""
    return score - 1.0 if score >= 1.0 else 1.0 - 1.0 / score


class ElasticVectorIndex(_Elastic):
    """Exact search on a flat ``dense_vector`` of retrieval vectors (VectorIndex port): the dot
    product (``max_inner_product`` similarity). An index made by a release before context vectors
    has ``cosine`` similarity and ranks by the cosine of the retrieval vector (the same for nodes
    without a context vector); rebuilding it into a fresh prefix makes it exact."""

    def __init__(self, client: AsyncElasticsearch, prefix: str = "jevmem-", dim: int = 384,
                 visibility: Visibility | None = None) -> None:
        super().__init__(client, prefix, visibility)
        self._mappings: dict[str, Any] = {"dynamic": "strict", "properties": {
            "tenant_id": _KW, "conversation_id": _KW, "seq": {"type": "integer"}, "kind": _KW,
            "vector": {"type": "dense_vector", "dims": dim, "similarity": "max_inner_product", "index": True,
                       "index_options": {"type": "flat"}},
        }}
        self._similarity: str | None = None

    async def _index_similarity(self, index: str) -> str:
        """The similarity the index was made with (read once)."""
        if self._similarity is None:
            with es_errors(f"mapping of {index}"):
                got = dict((await self._client.indices.get_mapping(index=index)).body)
            props = next(iter(got.values()))["mappings"]["properties"]
            self._similarity = str(props["vector"].get("similarity", "cosine"))
        return self._similarity

    async def prepare(self) -> None:
        """Create the vectors index now (a worker at startup), not on first write."""
        await self._ensure("vectors", self._mappings)

    async def upsert(self, nodes: Sequence[MemoryNode]) -> None:
        index = await self._ensure("vectors", self._mappings)
        ops: list[dict[str, Any]] = []
        for n in nodes:
            if n.embedding is None:
                continue
            ops += [{"index": {"_id": n.id}}, {"tenant_id": n.tenant_id, "conversation_id": n.conversation_id,
                                                "seq": n.seq, "kind": n.kind, "vector": n.retrieval_vector()}]
        await self._bulk(index, ops, deferred=True)

    async def search(self, scope: Scope, vector: Sequence[float], limit: int, before_seq: int | None = None) -> list[Hit]:
        index = await self._ensure("vectors", self._mappings)
        extra = [{"range": {"seq": {"lt": before_seq}}}] if before_seq is not None else []
        await self._own_writes(index)
        with es_errors(f"knn {index}"):
            res = await self._client.search(index=index, size=limit, source=False, knn={
                "field": "vector", "query_vector": list(vector), "k": limit, "num_candidates": max(limit, 1000),
                "filter": _scoped(scope, *extra)})
        if await self._index_similarity(index) == "cosine":  # reported as (1 + cos) / 2
            return [Hit(h["_id"], 2.0 * float(h["_score"]) - 1.0) for h in res["hits"]["hits"]]
        return [Hit(h["_id"], _inner_product(float(h["_score"]))) for h in res["hits"]["hits"]]

    async def delete(self, scope: Scope, ids: Sequence[str]) -> None:
        """Remove the vectors of the scope's nodes ``ids``."""
        if ids:
            query = {"bool": {"filter": _scoped(scope, {"ids": {"values": sorted(set(ids))}})}}
            await self._delete_matching(await self._existing("vectors"), query)

    async def delete_scope(self, scope: Scope) -> None:
        await self._delete_matching(await self._existing("vectors"), {"bool": {"filter": _scoped(scope)}})
