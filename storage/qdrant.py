"""Vector index on Qdrant: local mode (embedded, a directory or ``:memory:``) or a server URL.

Points are keyed by the deterministic node id (a UUID), so re-indexing is an upsert. A local-mode
directory is locked by its client: one process owns it at a time (the embedded runner and the
HTTP API share one client inside ``jevmem serve``).
"""

from __future__ import annotations

from collections.abc import Sequence

from qdrant_client import AsyncQdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from storage.ports import Hit
from topology.errors import StoreUnavailable
from topology.schemas import MemoryNode, Scope

COLLECTION = "jevmem_memories"


class QdrantVectorIndex:
    def __init__(self, client: AsyncQdrantClient, dim: int, collection: str = COLLECTION,
                 payload_indexes: bool = True) -> None:
        self._client = client
        self._payload_indexes = payload_indexes
        self._dim = dim
        self._collection = collection
        self._ready = False

    @classmethod
    def local(cls, path: str, dim: int) -> QdrantVectorIndex:
        client = AsyncQdrantClient(location=":memory:") if path == ":memory:" else AsyncQdrantClient(path=path)
        return cls(client, dim, payload_indexes=False)  # local mode scans; indexes are a no-op there

    @classmethod
    def server(cls, url: str, dim: int, api_key: str | None = None, collection: str = COLLECTION) -> QdrantVectorIndex:
        return cls(AsyncQdrantClient(url=url, api_key=api_key), dim, collection)

    async def _ensure(self) -> None:
        if self._ready:
            return
        try:
            if not await self._client.collection_exists(self._collection):
                await self._client.create_collection(
                    self._collection,
                    vectors_config=models.VectorParams(size=self._dim, distance=models.Distance.COSINE),
                )
                for field, schema in () if not self._payload_indexes else (("tenant_id", models.PayloadSchemaType.KEYWORD),
                                      ("conversation_id", models.PayloadSchemaType.KEYWORD),
                                      ("seq", models.PayloadSchemaType.INTEGER)):
                    await self._client.create_payload_index(self._collection, field, field_schema=schema)
        except (UnexpectedResponse, ResponseHandlingException, OSError) as exc:
            raise StoreUnavailable(f"qdrant: {exc}") from exc
        self._ready = True

    async def upsert(self, nodes: Sequence[MemoryNode]) -> None:
        points = [
            models.PointStruct(id=n.id, vector=n.embedding, payload={
                "tenant_id": n.tenant_id, "conversation_id": n.conversation_id, "seq": n.seq, "kind": n.kind})
            for n in nodes if n.embedding is not None
        ]
        if not points:
            return
        await self._ensure()
        try:
            await self._client.upsert(self._collection, points=points, wait=True)
        except (UnexpectedResponse, ResponseHandlingException, OSError) as exc:
            raise StoreUnavailable(f"qdrant upsert: {exc}") from exc

    async def search(self, scope: Scope, vector: Sequence[float], limit: int, before_seq: int | None = None) -> list[Hit]:
        await self._ensure()
        must: list[models.Condition] = [
            models.FieldCondition(key="tenant_id", match=models.MatchValue(value=scope.tenant_id)),
            models.FieldCondition(key="conversation_id", match=models.MatchValue(value=scope.conversation_id)),
        ]
        if before_seq is not None:
            must.append(models.FieldCondition(key="seq", range=models.Range(lt=before_seq)))
        try:
            res = await self._client.query_points(
                self._collection, query=list(vector), limit=limit, query_filter=models.Filter(must=must),
                with_payload=False)
        except (UnexpectedResponse, ResponseHandlingException, OSError) as exc:
            raise StoreUnavailable(f"qdrant search: {exc}") from exc
        return [Hit(str(p.id), float(p.score)) for p in res.points]

    async def close(self) -> None:
        await self._client.close()
