"""Where API key records live: SQLite (embedded) or Elasticsearch; both implement
:class:`storage.ports.KeyStore` (records: :class:`storage.ports.ApiKeyRecord`, hashes only).

Records survive store generations and replays: the SQLite store is its own file beside the memory
store (so ``jevmem keys`` works while ``jevmem serve`` holds the memory store), and the
Elasticsearch index is not prefixed by a generation.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from elasticsearch import ApiError, AsyncElasticsearch, NotFoundError

from storage.elastic.client import es_errors
from storage.ports import ApiKeyRecord
from storage.sqlite.store import open_file, sqlite_errors, translated


class SqliteKeyStore:
    """Key records in ``path`` (its own SQLite file; ``:memory:`` for tests)."""

    def __init__(self, path: str | Path) -> None:
        self._conn = open_file(path)
        with sqlite_errors(str(path)):
            self._conn.execute("CREATE TABLE IF NOT EXISTS api_keys (key_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, "
                               "created REAL NOT NULL, body TEXT NOT NULL)")

    @translated
    async def create(self, record: ApiKeyRecord) -> None:
        self._conn.execute("INSERT INTO api_keys VALUES (?, ?, ?, ?)",
                           (record.key_id, record.tenant_id, record.created_at.timestamp(), record.model_dump_json()))

    @translated
    async def get(self, key_id: str) -> ApiKeyRecord | None:
        row = self._conn.execute("SELECT body FROM api_keys WHERE key_id = ?", (key_id,)).fetchone()
        return None if row is None else ApiKeyRecord.model_validate_json(row[0])

    @translated
    async def list(self, tenant_id: str | None = None) -> list[ApiKeyRecord]:
        if tenant_id is None:
            rows = self._conn.execute("SELECT body FROM api_keys ORDER BY created, key_id").fetchall()
        else:
            rows = self._conn.execute("SELECT body FROM api_keys WHERE tenant = ? ORDER BY created, key_id",
                                      (tenant_id,)).fetchall()
        return [ApiKeyRecord.model_validate_json(r[0]) for r in rows]

    @translated
    async def revoke(self, key_id: str) -> bool:
        record = await self.get(key_id)
        if record is None:
            return False
        if record.revoked_at is None:
            revoked = record.model_copy(update={"revoked_at": datetime.now(UTC)})
            self._conn.execute("UPDATE api_keys SET body = ? WHERE key_id = ?", (revoked.model_dump_json(), key_id))
        return True

    async def close(self) -> None:
        self._conn.close()


class ElasticKeyStore:
    """Key records in one Elasticsearch index (``_id`` = key id; writes refresh)."""

    MAPPING: ClassVar[dict[str, Any]] = {"dynamic": "strict", "properties": {
        "tenant_id": {"type": "keyword"}, "created": {"type": "double"},
        "body": {"type": "keyword", "index": False, "doc_values": False}}}

    def __init__(self, es: AsyncElasticsearch, index: str = "jevmem-keys") -> None:
        self._es, self._index, self._ready = es, index, False

    async def _ensure(self) -> None:
        if self._ready:
            return
        with es_errors("keys"):
            try:
                if not await self._es.indices.exists(index=self._index):
                    await self._es.indices.create(index=self._index, mappings=self.MAPPING,
                                                  settings={"number_of_replicas": 0})
            except ApiError as exc:
                if "resource_already_exists" not in str(exc):
                    raise
        self._ready = True

    async def _put(self, record: ApiKeyRecord) -> None:
        await self._ensure()
        with es_errors("keys"):
            await self._es.index(index=self._index, id=record.key_id, refresh=True, document={
                "tenant_id": record.tenant_id, "created": record.created_at.timestamp(),
                "body": record.model_dump_json()})

    async def create(self, record: ApiKeyRecord) -> None:
        await self._put(record)

    async def get(self, key_id: str) -> ApiKeyRecord | None:
        await self._ensure()
        with es_errors("keys"):
            try:
                doc = await self._es.get(index=self._index, id=key_id)
            except NotFoundError:
                return None
        return ApiKeyRecord.model_validate_json(doc["_source"]["body"])

    async def list(self, tenant_id: str | None = None) -> list[ApiKeyRecord]:
        await self._ensure()
        query = {"match_all": {}} if tenant_id is None else {"term": {"tenant_id": tenant_id}}
        with es_errors("keys"):
            res = await self._es.search(index=self._index, query=query, size=10_000, sort=[{"created": "asc"}])
        return [ApiKeyRecord.model_validate_json(h["_source"]["body"]) for h in res["hits"]["hits"]]

    async def revoke(self, key_id: str) -> bool:
        record = await self.get(key_id)
        if record is None:
            return False
        if record.revoked_at is None:
            await self._put(record.model_copy(update={"revoked_at": datetime.now(UTC)}))
        return True

    async def close(self) -> None:
        await self._es.close()
