"""Where wrapped data keys (``topology.sealing``) live: SQLite (embedded) or Elasticsearch; both
implement :class:`storage.ports.DataKeyStore` (records: :class:`storage.ports.WrappedKey`).

A record is one data key wrapped by a key-encryption key: its id, its scope, the node it protects
(None for a dead letter of no known event), the wrapping key's fingerprint and when it was made.
Destroying a key deletes its record; nothing else holds the key, so what it sealed in the log is
then unreadable. The records belong to the log (a topic prefix), not to a store generation: a
replay into new stores reads the same keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from elasticsearch import ApiError, AsyncElasticsearch

from storage.elastic.client import es_errors, failed_items
from storage.ports import WrappedKey
from storage.sqlite.base import scrub
from storage.sqlite.store import open_file, sqlite_errors, translated
from topology.errors import StoreUnavailable
from topology.schemas import Scope


class SqliteDataKeys:
    """Data keys in ``path`` (its own SQLite file beside the store; ``:memory:`` for tests)."""

    def __init__(self, path: str | Path) -> None:
        self._conn = open_file(path)
        with sqlite_errors(str(path)):
            self._conn.execute("CREATE TABLE IF NOT EXISTS data_keys (kid TEXT PRIMARY KEY, tenant TEXT NOT NULL, "
                               "conversation TEXT NOT NULL, node TEXT, kek TEXT NOT NULL, wrapped TEXT NOT NULL, "
                               "created REAL NOT NULL)")
            self._conn.execute("CREATE INDEX IF NOT EXISTS data_keys_scope ON data_keys (tenant, conversation, node)")
            self._conn.execute("CREATE INDEX IF NOT EXISTS data_keys_kek ON data_keys (kek)")

    @translated
    async def put(self, keys: Sequence[WrappedKey]) -> None:
        self._conn.executemany("INSERT OR REPLACE INTO data_keys VALUES (?, ?, ?, ?, ?, ?, ?)", [
            (k.kid, k.tenant_id, k.conversation_id, k.node_id, k.kek_id, k.wrapped, k.created_at) for k in keys])

    @staticmethod
    def _record(row: tuple[Any, ...]) -> WrappedKey:
        return WrappedKey(kid=row[0], tenant_id=row[1], conversation_id=row[2], node_id=row[3], kek_id=row[4],
                          wrapped=row[5], created_at=row[6])

    @translated
    async def get(self, kids: Sequence[str]) -> list[WrappedKey]:
        out: list[WrappedKey] = []
        for i in range(0, len(kids), 500):
            part = list(kids[i: i + 500])
            rows = self._conn.execute(f"SELECT * FROM data_keys WHERE kid IN ({','.join('?' * len(part))})",
                                      part).fetchall()
            out += [self._record(r) for r in rows]
        return out

    @translated
    async def destroy(self, scope: Scope, node_ids: Sequence[str] | None, before: float) -> int:
        """Deletes the keys, then checkpoints and truncates the write-ahead log (the file is opened
        with ``secure_delete``): a destroyed key is in neither file when this returns."""
        where, args = "tenant = ? AND conversation = ? AND created <= ?", [scope.tenant_id, scope.conversation_id, before]
        if node_ids is None:
            n = self._conn.execute(f"DELETE FROM data_keys WHERE {where}", args).rowcount
        else:
            n = 0
            for i in range(0, len(node_ids), 500):
                part = list(node_ids[i: i + 500])
                n += self._conn.execute(f"DELETE FROM data_keys WHERE {where} AND node IN ({','.join('?' * len(part))})",
                                        [*args, *part]).rowcount
        if n:
            scrub(self._conn, ())
        return n

    @translated
    async def of_nodes(self, scope: Scope, node_ids: Sequence[str]) -> list[WrappedKey]:
        out: list[WrappedKey] = []
        for i in range(0, len(node_ids), 500):
            part = list(node_ids[i: i + 500])
            rows = self._conn.execute("SELECT * FROM data_keys WHERE tenant = ? AND conversation = ? AND node IN "
                                      f"({','.join('?' * len(part))})", [scope.tenant_id, scope.conversation_id, *part])
            out += [self._record(r) for r in rows.fetchall()]
        return out

    @translated
    async def kek_ids(self) -> set[str]:
        return {r[0] for r in self._conn.execute("SELECT DISTINCT kek FROM data_keys")}

    @translated
    async def wrapped_by(self, kek_id: str, limit: int) -> list[WrappedKey]:
        rows = self._conn.execute("SELECT * FROM data_keys WHERE kek = ? LIMIT ?", (kek_id, limit)).fetchall()
        return [self._record(r) for r in rows]

    async def close(self) -> None:
        self._conn.close()


class ElasticDataKeys:
    """Data keys in one Elasticsearch index (``_id`` = key id). Writes are durable without a
    refresh; :meth:`get` reads by id (real time); :meth:`destroy` refreshes first, so it finds
    every key written before it, and deletes what a search finds, page by page."""

    MAPPING: ClassVar[dict[str, Any]] = {"dynamic": "strict", "properties": {
        "tenant_id": {"type": "keyword"}, "conversation_id": {"type": "keyword"}, "node_id": {"type": "keyword"},
        "kek_id": {"type": "keyword"}, "created_at": {"type": "double"},
        "wrapped": {"type": "keyword", "index": False, "doc_values": False}}}

    def __init__(self, es: AsyncElasticsearch, index: str) -> None:
        self._es, self._index, self._ready = es, index, False

    @property
    def index(self) -> str:
        return self._index

    async def _ensure(self) -> None:
        if self._ready:
            return
        with es_errors(f"datakeys {self._index}"):
            try:
                if not await self._es.indices.exists(index=self._index):
                    await self._es.indices.create(index=self._index, mappings=self.MAPPING,
                                                  # small, and the log is unreadable without it:
                                                  # a copy on every node of the cluster
                                                  settings={"auto_expand_replicas": "0-all"})
            except ApiError as exc:
                if "resource_already_exists" not in str(exc):
                    raise
        self._ready = True

    async def put(self, keys: Sequence[WrappedKey]) -> None:
        if not keys:
            return
        await self._ensure()
        ops: list[dict[str, Any]] = []
        for k in keys:
            ops += [{"index": {"_id": k.kid}}, k.model_dump(exclude={"kid"})]
        with es_errors(f"datakeys put {self._index}"):
            res = await self._es.bulk(index=self._index, operations=ops)
        failed = failed_items(res)
        if failed:
            raise StoreUnavailable(f"elasticsearch datakeys put {self._index}: {len(failed)} of {len(keys)} "
                                   f"keys not written: {failed[0].get('error')}")

    async def get(self, kids: Sequence[str]) -> list[WrappedKey]:
        if not kids:
            return []
        await self._ensure()
        with es_errors(f"datakeys get {self._index}"):
            res = await self._es.mget(index=self._index, ids=list(kids))
        return [WrappedKey(kid=d["_id"], **d["_source"]) for d in res["docs"] if d.get("found")]

    def _query(self, scope: Scope, node_ids: Sequence[str] | None, before: float) -> dict[str, Any]:
        must: list[dict[str, Any]] = [{"term": {"tenant_id": scope.tenant_id}},
                                      {"term": {"conversation_id": scope.conversation_id}},
                                      {"range": {"created_at": {"lte": before}}}]
        if node_ids is not None:
            must.append({"terms": {"node_id": list(node_ids)}})
        return {"bool": {"filter": must}}

    async def destroy(self, scope: Scope, node_ids: Sequence[str] | None, before: float) -> int:
        if node_ids is not None and not node_ids:
            return 0
        await self._ensure()
        query, n = self._query(scope, node_ids, before), 0
        # found by a search and bulk-deleted, page after page (no _delete_by_query in every build)
        with es_errors(f"datakeys destroy {self._index}"):
            await self._es.indices.refresh(index=self._index)
            while True:
                res = await self._es.search(index=self._index, query=query, size=1000, source=False)
                hits = [h["_id"] for h in res["hits"]["hits"]]
                if not hits:
                    return n
                out = await self._es.bulk(index=self._index, refresh=True,
                                          operations=[{"delete": {"_id": i}} for i in hits])
                failed = [i for i in failed_items(out) if i.get("status") != 404]
                if failed:
                    raise StoreUnavailable(f"elasticsearch datakeys destroy {self._index}: {failed[0].get('error')}")
                n += len(hits)

    async def of_nodes(self, scope: Scope, node_ids: Sequence[str]) -> list[WrappedKey]:
        """Refreshes first, so it finds every key written before it."""
        if not node_ids:
            return []
        await self._ensure()
        query = {"bool": {"filter": [{"term": {"tenant_id": scope.tenant_id}},
                                     {"term": {"conversation_id": scope.conversation_id}},
                                     {"terms": {"node_id": list(node_ids)}}]}}
        with es_errors(f"datakeys of nodes {self._index}"):
            await self._es.indices.refresh(index=self._index)
            res = await self._es.search(index=self._index, query=query, size=10_000)
        return [WrappedKey(kid=h["_id"], **h["_source"]) for h in res["hits"]["hits"]]

    async def kek_ids(self) -> set[str]:
        await self._ensure()
        with es_errors(f"datakeys kek ids {self._index}"):
            await self._es.indices.refresh(index=self._index)
            res = await self._es.search(index=self._index, size=0,
                                        aggs={"keks": {"terms": {"field": "kek_id", "size": 1000}}})
        return {b["key"] for b in res["aggregations"]["keks"]["buckets"]}

    async def wrapped_by(self, kek_id: str, limit: int) -> list[WrappedKey]:
        await self._ensure()
        with es_errors(f"datakeys wrapped by {self._index}"):
            await self._es.indices.refresh(index=self._index)
            res = await self._es.search(index=self._index, query={"term": {"kek_id": kek_id}}, size=limit)
        return [WrappedKey(kid=h["_id"], **h["_source"]) for h in res["hits"]["hits"]]

    async def close(self) -> None:
        await self._es.close()
