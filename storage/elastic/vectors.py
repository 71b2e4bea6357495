"""The Elasticsearch vector index (the distributed mode's fallback when no Qdrant server is
configured): exact search over a flat ``dense_vector`` of each node's retrieval vector, in the
``p vectors`` index, one document per node (``_id`` = node id), with the node's scope fields,
``seq``, ``kind`` and, when the node has one, ``user_id`` (keyword; added to the index of an older
release when this release first writes it).

Searches are filtered by tenant AND conversation (:meth:`ElasticVectorIndex.search`), or by tenant
AND, when the :class:`~topology.schemas.Realm` names them, user AND conversation list
(:meth:`ElasticVectorIndex.search_realm`: one ranking over the realm, ties by earlier seq then id,
each hit naming its conversation). Every search refreshes the index first when it needs it
(:class:`storage.elastic.store.Visibility`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from elasticsearch import AsyncElasticsearch

from storage.elastic.client import es_errors
from storage.elastic.store import _KW, READ_HOT, Visibility, _Elastic, _in_realm, _scoped, _user
from storage.ports import Hit
from storage.realm import Point, rank_with_ties
from topology.schemas import MemoryNode, Realm, Scope

#: The most hits one knn search may ask for (Elasticsearch's cap on ``num_candidates``).
KNN_MOST = 10_000


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
            "tenant_id": _KW, "conversation_id": _KW, "user_id": _KW, "seq": {"type": "integer"}, "kind": _KW,
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
        await self._ensure("vectors", self._mappings, READ_HOT)

    async def upsert(self, nodes: Sequence[MemoryNode]) -> None:
        index = await self._ensure("vectors", self._mappings, READ_HOT)
        ops: list[dict[str, Any]] = []
        for n in nodes:
            if n.embedding is None:
                continue
            ops += [{"index": {"_id": n.id}}, {"tenant_id": n.tenant_id, "conversation_id": n.conversation_id, **_user(n),
                                                "seq": n.seq, "kind": n.kind, "vector": n.retrieval_vector()}]
        await self._bulk(index, ops, deferred=True)

    async def search(self, scope: Scope, vector: Sequence[float], limit: int, before_seq: int | None = None) -> list[Hit]:
        index = await self._ensure("vectors", self._mappings, READ_HOT)
        extra = [{"range": {"seq": {"lt": before_seq}}}] if before_seq is not None else []
        await self._own_writes(index)
        with es_errors(f"knn {index}"):
            res = await self._client.search(index=index, size=limit, source=False, knn={
                "field": "vector", "query_vector": list(vector), "k": limit, "num_candidates": max(limit, 1000),
                "filter": _scoped(scope, *extra)})
        score = await self._scorer(index)
        return [Hit(h["_id"], score(float(h["_score"]))) for h in res["hits"]["hits"]]

    async def _scorer(self, index: str) -> Callable[[float], float]:
        """The score a hit reports -> the score this index answers with (see the class)."""
        if await self._index_similarity(index) == "cosine":  # reported as (1 + cos) / 2
            return lambda s: 2.0 * s - 1.0
        return _inner_product

    async def search_realm(self, realm: Realm, query: Sequence[float] | str, limit: int) -> list[Hit]:
        """The realm's best ``limit`` nodes by dot product with ``query`` (a vector), exact (as
        :meth:`search`), in one ranking over its conversations: best first, ties by earlier seq,
        then id; each hit names its conversation. An empty ``conversation_ids`` holds nothing."""
        if isinstance(query, str):
            raise TypeError("a vector realm search takes a vector")
        if limit <= 0 or realm.conversation_ids == ():
            return []
        index = await self._ensure("vectors", self._mappings, READ_HOT)
        vector, where = list(query), _in_realm(realm)
        await self._own_writes(index)
        score = await self._scorer(index)

        async def fetch(n: int) -> list[Point]:
            with es_errors(f"knn {index}"):
                res = await self._client.search(index=index, size=n, source_includes=["seq", "conversation_id"], knn={
                    "field": "vector", "query_vector": vector, "k": n, "num_candidates": max(n, 1000),
                    "filter": where})
            return [Point(h["_id"], score(float(h["_score"])), int(h["_source"]["seq"]), str(h["_source"]["conversation_id"]))
                    for h in res["hits"]["hits"]]

        return await rank_with_ties(fetch, limit, KNN_MOST)

    async def delete(self, scope: Scope, ids: Sequence[str]) -> None:
        """Remove the vectors of the scope's nodes ``ids``."""
        if ids:
            query = {"bool": {"filter": _scoped(scope, {"ids": {"values": sorted(set(ids))}})}}
            await self._delete_matching(await self._existing("vectors"), query)

    async def delete_scope(self, scope: Scope) -> None:
        await self._delete_matching(await self._existing("vectors"), {"bool": {"filter": _scoped(scope)}})
