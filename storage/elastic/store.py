"""Lexical index, node store and edge store on Elasticsearch (the official async client).

Layout, for an index prefix ``p`` (default ``jevmem-``):

* ``p memories-<h>``: one index per tenant (``h`` = a hash of the tenant id, :func:`memories_index`),
  so BM25 statistics are the tenant's own: another tenant's writes never change its rankings.
  Every node-store and lexical call is scoped, so it targets one tenant's index; a read of a
  tenant with no index yet answers empty (nothing is created by reads).
  One document per node, ``_id`` = node id. :class:`ElasticLexicalIndex` and
  :class:`ElasticNodeStore` share it and each writes only its own fields with a partial update
  (``update`` + ``doc_as_upsert``), so the two writes commute and repeating either is a no-op.
  The lexical side owns ``content`` (BM25, standard tokenizer + lowercase + English stopwords) and
  ``tokens``; the node side owns ``event_id``, ``kind``, ``entity_ids``, ``body`` (the node JSON
  without embedding, as a string: a partial update would deep-merge an object) and
  ``embedding_f32`` (base64 of the float32 values, exact like the SQLite store; kept when a later
  upsert carries none; documents of older releases carry a JSON float list, ``embedding``, read
  the same) and ``context_f16`` (the context vector, base64 of its float16 values; written, or
  cleared, with every embedding). Both write the scope fields, ``node_id``, ``seq`` and, when the
  node has one, ``user_id`` (keyword; added to the indexes of older releases, see ``_add_fields``).
* ``p edges-grouped`` and ``p decisions``: the edge store (:mod:`storage.elastic.edges`: edges in
  one document per conversation per write; a decision per document).
* ``p forgotten``: forgotten-event records ``(scope, event_id, seq)`` (see ``streams.forget``).
* An older generation's shared ``p memories`` index (BM25 over all tenants) is split into the
  per-tenant indices by :meth:`ElasticNodeStore.migrate_shared` (``jevmem.distributed.check_model``
  runs it when a worker, the service or a replay opens a generation).

* ``p vectors``: ``_id`` = node id; a ``dense_vector`` with a *flat* (exact, brute-force) index:
  :class:`storage.elastic.vectors.ElasticVectorIndex`, the vector index of the distributed stack
  when no Qdrant server is configured; exact search ranks as the embedded store does.

Deletes (forgetting): this Elasticsearch build has no ``_delete_by_query`` (no reindex module), so
a delete finds the ids with a scoped search and bulk-deletes them (refresh=true), page after page
until the search comes back empty.

Contracts: every query filters on tenant AND conversation, except a realm search's (tenant AND,
when the :class:`~topology.schemas.Realm` names them, user AND conversation list: one ranking over
the tenant's index, ties by earlier seq then id, each hit naming its conversation); every write refreshes the index
(``refresh=true``, not ``wait_for``, which would hold each batch up to a refresh interval) so the
next query sees it, except the write path's writes through a shared :class:`Visibility`, which
are sent as one bulk per batch and refreshed by the reads that need them (see there); indices are created lazily and idempotently;
any transport, API or bulk-item failure raises :class:`StoreUnavailable` (:func:`es_errors`). Rankings equal the
SQLite adapters': overlap and shared-entity counts are sums of ``constant_score`` clauses (one per
distinct query token/entity), ties broken by seq descending, then node id.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
from collections.abc import Callable, Collection, Sequence
from typing import Any, Self

import numpy as np
import orjson
from elasticsearch import AsyncElasticsearch, BadRequestError, NotFoundError

from storage.elastic.client import es_client as es_client
from storage.elastic.client import es_errors, failed_items, retrieved
from storage.elastic.decoded import VECTOR_FIELDS, DecodedNodes, encode_vector, full_node, rows_matrix
from storage.ports import Hit
from topology import ids as idsmod
from topology.errors import StoreUnavailable
from topology.schemas import MemoryNode, Realm, Scope

log = logging.getLogger("jevmem.elastic")

_PAGE = 1000
_KW = {"type": "keyword"}
_OPAQUE = {"type": "keyword", "index": False, "doc_values": False}
_SETTINGS: dict[str, Any] = {
    "number_of_replicas": 0,
    # a non-deferred write refreshes what it wrote (refresh=true), a read refreshes what it needs
    # (Visibility.fresh): no periodic refresh on top (each one a new segment per index written)
    "refresh_interval": "-1",
    # compressed hardest where reads are rare or fetch little of each document (decisions,
    # forgotten events); see READ_HOT for the indices every recall fetches documents of
    "codec": "best_compression",
    "analysis": {
        "filter": {"jevmem_stop": {"type": "stop", "stopwords": "_english_"}},
        "analyzer": {"jevmem_text": {"type": "custom", "tokenizer": "standard",
                                     "filter": ["lowercase", "jevmem_stop"]}},
    },
}
#: The settings of the indices each retrieval fetches many documents of (a tenant's memories, the
#: edge groups): the default codec's smaller blocks, so that a hit's stored fields are read
#: without decompressing a large block each. At 4,139 turns this made a realm's BM25 search of 50
#: hits about 10x and an mget of 30 nodes about 4x faster than ``best_compression``, for 40% more
#: disk; on the edge groups, a recall 1-3 ms faster at p50 for 2.7x their disk (docs/benchmarks.md,
#: "Recall latency across many sessions").
READ_HOT: dict[str, Any] = {**_SETTINGS, "codec": "default"}
_MEMORIES: dict[str, Any] = {"dynamic": "strict", "properties": {
    "tenant_id": _KW, "conversation_id": _KW, "user_id": _KW, "node_id": _KW, "event_id": _KW, "kind": _KW,
    "seq": {"type": "integer"}, "entity_ids": _KW, "tokens": _KW,
    "content": {"type": "text", "analyzer": "jevmem_text"},
    "body": _OPAQUE, "embedding": {"type": "float", "index": False, "doc_values": False},
    "embedding_f32": {"type": "binary"}, "context_f16": {"type": "binary"},
}}
#: A keyword that is only filtered on (no sort, no aggregation): no column of values on disk.
_FILTER_KW = {"type": "keyword", "doc_values": False}
_FORGOTTEN: dict[str, Any] = {"dynamic": "strict", "properties": {
    "tenant_id": _KW, "conversation_id": _KW, "event_id": _KW, "seq": {"type": "integer"},
}}


#: What Elasticsearch accepts at the start of an index name, as a store prefix: lowercase letters,
#: digits and ``-_.+`` only (no ``\\ / * ? " < > | , #`` or space), not starting with ``-_+.``.
_PREFIX = re.compile(r"[a-z0-9][a-z0-9._+-]{0,99}")


def check_prefix(prefix: str) -> str:
    """``prefix`` if Elasticsearch index names may start with it (:data:`_PREFIX`), else a
    :class:`ValueError` saying what it may hold (checked before a rebuild starts, not 9 s later by
    Elasticsearch)."""
    if not _PREFIX.fullmatch(prefix):
        raise ValueError(f"store prefix {prefix!r} cannot start an Elasticsearch index name: use lowercase letters, "
                         "digits and - _ . + only, at most 100 characters, starting with a letter or a digit")
    return prefix


def memories_index(tenant_id: str) -> str:
    """The tenant's memories index name (without the prefix): lowercase, any tenant id."""
    return "memories-" + hashlib.sha256(tenant_id.encode("utf-8")).hexdigest()[:24]


def _scoped(scope: Scope, *extra: dict[str, Any]) -> list[dict[str, Any]]:
    """Filter clauses: the scope's tenant and conversation, plus ``extra``."""
    return [{"term": {"tenant_id": scope.tenant_id}}, {"term": {"conversation_id": scope.conversation_id}}, *extra]


def _in_realm(realm: Realm) -> list[dict[str, Any]]:
    """Filter clauses: the realm's tenant, and its user and conversations when it names them."""
    user = [{"term": {"user_id": realm.user_id}}] if realm.user_id is not None else []
    convs = [{"terms": {"conversation_id": sorted(set(realm.conversation_ids))}}] if realm.conversation_ids is not None else []
    return [{"term": {"tenant_id": realm.tenant_id}}, *user, *convs]


def _user(n: MemoryNode) -> dict[str, str]:
    """The node's ``user_id`` field, when it has one (absent otherwise: never written as null)."""
    return {"user_id": n.user_id} if n.user_id is not None else {}


def _count_of(field: str, values: Sequence[str], filters: list[dict[str, Any]]) -> dict[str, Any]:
    """A query whose score is the number of distinct ``values`` the doc holds in ``field``."""
    should = [{"constant_score": {"filter": {"term": {field: v}}, "boost": 1.0}} for v in sorted(set(values))]
    return {"bool": {"filter": filters, "should": should, "minimum_should_match": 1}}


def _source(fields: list[str]) -> dict[str, Any]:
    """Search kwargs fetching only ``fields`` of ``_source`` (none when empty)."""
    return {"source_includes": fields} if fields else {"source": False}


class Visibility:
    """When the write path's documents are sent, and when a search must refresh an index first.

    Writes: without a ``Visibility`` every write is a bulk request with a refresh (searchable when
    acknowledged). With one, the write path's bulks (``deferred=True``) are buffered here and sent
    as one bulk request by :meth:`flush` (durable: fsync'd translog) without a refresh; the write
    path flushes before a batch is acknowledged (``Stores.sync`` at the end of
    ``streams.write_path.write_batch``). Partial updates of the same document in the buffer (a
    node's lexical and canonical fields) are merged into one update.

    Reads: a search or count through an adapter sharing it first sends the buffer, then refreshes
    the index it reads (:meth:`fresh`) when

    * ``strict_reads`` (the default): always, so each read sees every write acknowledged before it
      began, by any process (a refresh of an index with nothing new is cheap);
    * otherwise (an owner: the write path, or a service that calls :meth:`invalidate` per
      request): when this process wrote the index since its last refresh, or when the index was
      not refreshed since the last :meth:`invalidate`. The write path reads its own
      conversations (one writer per conversation), so it refreshes only when it reads what it
      wrote, and after :meth:`invalidate` on a partition assignment, which makes it read what the
      previous owner acknowledged.

    Gets (``mget``, realtime) and every other request (a delete, a non-deferred write) send the
    buffer first (:meth:`_Elastic._sent`), so requests apply in the order this process made them.

    It also remembers the indices any adapter sharing it has seen to exist, so a process looks
    each index up once, and, for an owner (not ``strict_reads``), those seen not to exist until
    the next :meth:`invalidate` (an index another process creates is then looked up again: an
    owner reads what it writes itself until a partition assignment invalidates; a service
    invalidates every request). A strict reader looks an absent index up at every read.

    Failure: a flush that fails raises :class:`StoreUnavailable` from the call that triggered
    it and drops the buffer (the caller's batch is retried as a whole and writes it again; every
    write is an idempotent upsert); a failed refresh leaves the index to be refreshed by the
    next read. Writes left unsent by a crash are rewritten by the batch's redelivery
    (deterministic ids). One write path (one worker process) owns a ``Visibility``: the buffer is
    not safe for concurrent batches; reads may run concurrently."""

    def __init__(self, client: AsyncElasticsearch, strict_reads: bool = True) -> None:
        self._client = client
        self._strict = strict_reads
        self._pending: set[str] = set()                           # written since its last refresh
        self._ops: list[dict[str, Any]] = []
        self._updates: dict[tuple[str, str], dict[str, Any]] = {}  # (index, id) -> buffered partial doc
        self._epoch = 0
        #: index -> (epoch its latest refresh started in, that refresh)
        self._refreshes: dict[str, tuple[int, asyncio.Future[None]]] = {}
        #: refresh requests sent (for tests and benchmarks)
        self.refreshes = 0
        #: indices seen to exist by any adapter sharing this (each is looked up once a process)
        self.found: set[str] = set()
        #: indices made, or given this release's fields, by any adapter sharing this (once a process)
        self.ready: set[str] = set()
        #: indices seen not to exist since the last :meth:`invalidate` (looked up again after it;
        #: never remembered with ``strict_reads``, whose every read sees what exists by then)
        self.absent: set[str] = set()

    def defer(self, index: str | None, ops: list[dict[str, Any]]) -> None:
        """Buffer bulk ``ops`` (action lines without ``_index`` go to ``index``); an
        ``update`` + ``doc_as_upsert`` of a document already buffered that way merges into it."""
        i = 0
        while i < len(ops):
            action = ops[i]
            (verb, meta), = action.items()
            meta = meta if "_index" in meta else {**meta, "_index": index}
            body = ops[i + 1] if verb != "delete" else None
            i += 1 if verb == "delete" else 2
            key = (str(meta["_index"]), str(meta.get("_id")))
            if verb == "update" and body is not None and set(body) == {"doc", "doc_as_upsert"} and body["doc_as_upsert"]:
                merged = self._updates.get(key)
                if merged is not None:
                    merged.update(body["doc"])
                    continue
                body = {"doc": dict(body["doc"]), "doc_as_upsert": True}
                self._updates[key] = body["doc"]
            else:
                self._updates.pop(key, None)  # a later op on the document: no merging across it
            self._ops.append({verb: meta})
            if body is not None:
                self._ops.append(body)

    async def flush(self) -> None:
        """Send the buffered writes as one bulk request (nothing when none are buffered); they
        are durable when this returns and searchable after the next refresh of their index."""
        if not self._ops:
            return
        ops, self._ops, self._updates = self._ops, [], {}
        with es_errors(f"bulk ({len(ops)} lines)"):
            res = await self._client.bulk(operations=ops)
        self._pending |= {str(i["_index"]) for item in res["items"] for i in item.values() if "_index" in i}
        bad = failed_items(res)
        if bad:
            raise StoreUnavailable(f"elasticsearch bulk: {len(bad)} failed, first: {bad[0]['error']}")

    @property
    def strict(self) -> bool:
        """Whether every read refreshes what it reads (``strict_reads``)."""
        return self._strict

    def invalidate(self) -> None:
        """From now on, the first read of each index refreshes it (it then sees every write any
        process acknowledged before this call)."""
        self._epoch += 1
        self.absent.clear()

    async def fresh(self, index: str) -> None:
        """Send the buffer, then refresh ``index`` when the read about to be made needs it (see
        the class contract); concurrent reads share a refresh started for their epoch (also one
        started by :meth:`ahead`)."""
        await self.flush()
        if self._strict:
            self.invalidate()
        started = self._refreshes.get(index)
        if started is not None and started[0] >= self._epoch and index not in self._pending:
            await asyncio.shield(started[1])
            return
        await self._refresh([index])

    def ahead(self, indices: Sequence[str]) -> None:
        """Start refreshing now, in one request, those of ``indices`` that the reads of this
        epoch would refresh (an owner's: not ``strict_reads``, nothing buffered), e.g. at the
        start of a request, while its question is embedded; each such read then waits for it. An
        index that does not exist is skipped; a failure is raised by the reads that wait for it."""
        if self._strict or self._ops:
            return
        wanted = [i for i in dict.fromkeys(indices)
                  if (started := self._refreshes.get(i)) is None or started[0] < self._epoch or i in self._pending]
        if wanted:
            asyncio.ensure_future(self._send(wanted, self._started(wanted))).add_done_callback(retrieved)

    async def _refresh(self, indices: list[str]) -> None:
        """Refresh ``indices`` in one request, as the refresh of this epoch for each of them."""
        await self._send(indices, self._started(indices))

    def _started(self, indices: list[str]) -> asyncio.Future[None]:
        """Record a refresh of ``indices`` as started in this epoch; it is done when the future is."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for index in indices:
            self._pending.discard(index)
            self._refreshes[index] = (self._epoch, done)
        self.refreshes += 1
        return done

    async def _send(self, indices: list[str], done: asyncio.Future[None]) -> None:
        names = ",".join(indices)
        try:
            with es_errors(f"refresh {names}"), contextlib.suppress(NotFoundError):  # none: nothing to read yet
                await self._client.indices.refresh(index=names, ignore_unavailable=True)
        except StoreUnavailable as exc:
            for index in indices:
                self._pending.add(index)
                if self._refreshes.get(index, (0, None))[1] is done:
                    self._refreshes.pop(index)
            done.set_exception(StoreUnavailable(str(exc)))
            done.exception()  # retrieved: a waiter re-raises it
            raise
        done.set_result(None)


class _Elastic:
    """Client, prefix, lazy index creation and the shared read/write helpers. With a
    :class:`Visibility`, the write path's bulks (``deferred=True``) leave refreshing to it."""

    def __init__(self, client: AsyncElasticsearch, prefix: str = "jevmem-", visibility: Visibility | None = None) -> None:
        self._client = client
        self._prefix = prefix
        self._visibility = visibility
        # created or given this release's fields by this process: shared by the adapters sharing
        # the visibility (the lexical index and the node store write one memories index)
        self._ready: set[str] = visibility.ready if visibility is not None else set()
        # seen to exist (by a read: its fields may be an older release's), by every adapter sharing
        # the visibility: the lexical index and the node store read one memories index
        self._found: set[str] = visibility.found if visibility is not None else set()
        self._lock = asyncio.Lock()

    @classmethod
    def connect(cls, url: str, prefix: str = "jevmem-", api_key: str | None = None) -> Self:
        """An adapter over a new client for ``url``."""
        return cls(es_client(url, api_key), prefix)

    async def close(self) -> None:
        await self._client.close()

    async def _ensure(self, name: str, mappings: dict[str, Any], settings: dict[str, Any] = _SETTINGS) -> str:
        """The full index name, creating the index if missing with ``settings`` (idempotent,
        race-tolerant; an existing index keeps the settings it was made with)."""
        index = self._prefix + name
        if index in self._ready:
            return index
        async with self._lock:
            if index not in self._ready:
                with es_errors(f"create {index}"):
                    try:
                        await self._client.indices.create(index=index, settings=settings, mappings=mappings)
                    except BadRequestError as exc:
                        if exc.error != "resource_already_exists_exception":
                            raise
                        await self._await_active(index)  # created by another process: maybe not started yet
                        await self._add_fields(index, mappings)
                self._ready.add(index)
                if self._visibility is not None:
                    self._visibility.absent.discard(index)
        return index

    async def _add_fields(self, index: str, mappings: dict[str, Any]) -> None:
        """Add the fields of ``mappings`` that an index made by an older release lacks (fields it
        has are left as they were made). An index that cannot take them is left as it is: the
        writes that need them fail and say so."""
        with es_errors(f"mapping of {index}"):
            current: dict[str, Any] = dict((await self._client.indices.get_mapping(index=index)).body)
        have = {k for spec in current.values() for k in spec.get("mappings", {}).get("properties", {})}
        missing = {k: v for k, v in mappings["properties"].items() if k not in have}
        if not missing:
            return
        with es_errors(f"mapping of {index}"):
            try:
                await self._client.indices.put_mapping(index=index, properties=missing)
            except BadRequestError as exc:
                log.warning("elasticsearch index %s lacks fields %s and cannot take them: %s", index, sorted(missing), exc)

    async def _await_active(self, index: str) -> None:
        """Wait until ``index``'s primary shard is started (an index another process has just
        created exists before it can be searched: a search would fail with 503 meanwhile).

        ``wait_for_active_shards`` is what waits: the health of a just-created index whose primary
        is still initialising is already reported yellow, so a status wait alone returns at once."""
        with es_errors(f"health {index}"):
            res = await self._client.cluster.health(index=index, wait_for_status="yellow", wait_for_active_shards="1",
                                                    timeout="30s")
        if res.get("timed_out"):
            raise StoreUnavailable(f"elasticsearch {index}: primary shard not started within 30 s")

    async def _existing(self, name: str) -> str | None:
        """The full index name if the index exists (reads of an absent index answer empty)."""
        index = self._prefix + name
        if index in self._ready or index in self._found:
            return index
        absent = self._visibility.absent if self._visibility is not None and not self._visibility.strict else None
        if absent is not None and index in absent:
            return None
        with es_errors(f"exists {index}"):
            found = bool(await self._client.indices.exists(index=index))
        if found:
            await self._await_active(index)
            self._found.add(index)  # not _ready: the first write still adds missing fields (_ensure)
            return index
        if absent is not None:
            absent.add(index)
        return None

    async def _own_writes(self, index: str) -> None:
        """Before a search or count of ``index``: see :meth:`Visibility.fresh`."""
        if self._visibility is not None:
            await self._visibility.fresh(index)

    async def _sent(self) -> None:
        """Send this process's buffered writes before a get or another request (order kept)."""
        if self._visibility is not None:
            await self._visibility.flush()

    async def _bulk(self, index: str | None, ops: list[dict[str, Any]], conflicts_ok: bool = False,
                    deferred: bool = False) -> list[dict[str, Any]]:
        """Run bulk ``ops`` (``index`` None: each op names its ``_index``); returns the response
        items once all are acknowledged and visible to search, or, ``deferred`` with a
        :class:`Visibility`, none: the ops are buffered there (sent by its next flush, visible
        after its next sync). ``conflicts_ok``: a ``create`` of an existing document is not a failure."""
        if not ops:
            return []
        if deferred and self._visibility is not None:
            self._visibility.defer(index, ops)
            return []
        await self._sent()
        with es_errors(f"bulk {index}"):
            res = await (self._client.bulk(index=index, operations=ops, refresh=True) if index
                         else self._client.bulk(operations=ops, refresh=True))
        bad = failed_items(res, conflicts_ok)
        if bad:
            raise StoreUnavailable(f"elasticsearch bulk {index}: {len(bad)} failed, first: {bad[0]['error']}")
        items: list[dict[str, Any]] = res["items"]
        return items

    async def _delete_matching(self, index: str | None, query: dict[str, Any]) -> int:
        """Delete every document of ``index`` matching ``query`` (scoped search for ids, bulk
        delete, until none is left); returns how many were deleted. A missing index holds none."""
        if index is None:
            return 0
        deleted = 0
        await self._own_writes(index)
        while True:
            with es_errors(f"search {index}"):
                try:
                    res = await self._client.search(index=index, query=query, size=_PAGE, source=False,
                                                    track_total_hits=False)
                except NotFoundError:
                    return deleted
            page = [h["_id"] for h in res["hits"]["hits"]]
            if not page:
                return deleted
            out = await self._bulk(index, [{"delete": {"_id": i}} for i in page])
            deleted += sum(1 for item in out if item.get("delete", {}).get("result") == "deleted")

    async def _hits(self, index: str, query: dict[str, Any], sort: list[Any], source: list[str],
                    limit: int | None = None, versions: bool = False) -> list[dict[str, Any]]:
        """Hits of ``query`` in ``sort`` order (up to ``limit``; all when None), paged by search_after;
        ``versions``: each with its ``_seq_no`` and ``_primary_term``."""
        out: list[dict[str, Any]] = []
        after: list[Any] | None = None
        await self._own_writes(index)
        while limit is None or len(out) < limit:
            size = _PAGE if limit is None else min(_PAGE, limit - len(out))
            with es_errors(f"search {index}"):
                res = await self._client.search(index=index, query=query, sort=sort, size=size, **_source(source),
                                                search_after=after, track_total_hits=False,
                                                seq_no_primary_term=True if versions else None)
            page: list[dict[str, Any]] = res["hits"]["hits"]
            out.extend(page)
            if len(page) < size:
                break
            after = page[-1]["sort"]
        return out


class _Memories(_Elastic):
    """The per-tenant memories indices, shared by the lexical index and the node store."""

    async def _write(self, nodes: Sequence[MemoryNode], doc: Any) -> None:
        """Partial-update (``doc_as_upsert``) ``doc(node)`` into each node's tenant index: one bulk."""
        if not nodes:
            return
        names = {t: await self._tenant_index(t) for t in sorted({n.tenant_id for n in nodes})}
        ops: list[dict[str, Any]] = []
        for n in nodes:
            ops.append({"update": {"_index": names[n.tenant_id], "_id": n.id}})
            ops.append({"doc_as_upsert": True, "doc": doc(n)})
        await self._bulk(None, ops, deferred=True)

    async def _tenant_index(self, tenant_id: str) -> str:
        """The tenant's memories index, made now if missing (:meth:`_ensure`, :data:`READ_HOT`)."""
        return await self._ensure(memories_index(tenant_id), _MEMORIES, READ_HOT)

    async def _index(self, scope: Scope) -> str | None:
        """The scope's tenant index, or None when the tenant has none yet (reads answer empty)."""
        return await self._existing(memories_index(scope.tenant_id))

    async def _scoped_hits(self, scope: Scope, query: dict[str, Any], sort: list[Any], source: list[str],
                           limit: int | None = None) -> list[dict[str, Any]]:
        index = await self._index(scope)
        return [] if index is None else await self._hits(index, query, sort, source, limit)

    async def _delete_nodes(self, scope: Scope, ids: Sequence[str]) -> int:
        """Delete the scope's node documents ``ids`` (content, tokens, body, embedding: all of it)."""
        if not ids:
            return 0
        query = {"bool": {"filter": _scoped(scope, {"terms": {"node_id": sorted(set(ids))}})}}
        return await self._delete_matching(await self._index(scope), query)

    async def _delete_all(self, scope: Scope) -> int:
        return await self._delete_matching(await self._index(scope), {"bool": {"filter": _scoped(scope)}})


class ElasticLexicalIndex(_Memories):
    """BM25 on ``content`` and distinct-token overlap on ``tokens`` (the tenant's memories index).

    A delete removes the whole node document: the lexical side and the node side share it."""

    async def upsert(self, nodes: Sequence[MemoryNode]) -> None:
        """Write each node's lexical fields (partial update; idempotent)."""
        await self._write(nodes, lambda n: {
            "tenant_id": n.tenant_id, "conversation_id": n.conversation_id, "node_id": n.id, "seq": n.seq, **_user(n),
            "content": n.content, "tokens": sorted(set(n.tokens))})

    async def search(self, scope: Scope, text: str, limit: int) -> list[Hit]:
        """BM25 ranking of the scope's nodes for ``text``, best first (ties: node id); the
        statistics are the tenant's only."""
        if not text.strip() or limit <= 0:
            return []
        query = {"bool": {"filter": _scoped(scope), "must": [{"match": {"content": text}}]}}
        hits = await self._scoped_hits(scope, query, [{"_score": "desc"}, {"node_id": "asc"}], [], limit)
        return [Hit(h["_id"], float(h["_score"])) for h in hits]

    async def search_realm(self, realm: Realm, query: Sequence[float] | str, limit: int) -> list[Hit]:
        """BM25 over the realm's nodes (the tenant's statistics) for ``query`` (a text), one ranking
        over its conversations: best first, ties by earlier seq, then id; each hit names its
        conversation. Refreshes the tenant's index first as any search does (:class:`Visibility`)."""
        if not isinstance(query, str):
            raise TypeError("a lexical realm search takes a text")
        index = await self._existing(memories_index(realm.tenant_id))
        if index is None or not query.strip() or limit <= 0 or realm.conversation_ids == ():
            return []
        q = {"bool": {"filter": _in_realm(realm), "must": [{"match": {"content": query}}]}}
        hits = await self._hits(index, q, [{"_score": "desc"}, {"seq": "asc"}, {"node_id": "asc"}], ["conversation_id"], limit)
        return [Hit(h["_id"], float(h["_score"]), str(h["_source"]["conversation_id"])) for h in hits]

    async def overlapping(self, scope: Scope, tokens: Sequence[str], before_seq: int, limit: int) -> list[str]:
        """Nodes with seq < ``before_seq`` by number of distinct shared tokens, then seq desc."""
        if not tokens or limit <= 0:
            return []
        query = _count_of("tokens", tokens, _scoped(scope, {"range": {"seq": {"lt": before_seq}}}))
        hits = await self._scoped_hits(scope, query, [{"_score": "desc"}, {"seq": "desc"}, {"node_id": "asc"}], [], limit)
        return [h["_id"] for h in hits]

    async def delete(self, scope: Scope, ids: Sequence[str]) -> None:
        await self._delete_nodes(scope, ids)

    async def delete_scope(self, scope: Scope) -> None:
        await self._delete_all(scope)


class ElasticNodeStore(_Memories):
    """Canonical nodes (JSON body + embedding and context vector) in the tenant's memories index, and the
    forgotten-event records (``p forgotten``)."""

    def __init__(self, client: AsyncElasticsearch, prefix: str = "jevmem-", visibility: Visibility | None = None) -> None:
        super().__init__(client, prefix, visibility)
        self._decoded = DecodedNodes()

    async def prepare_tenant(self, tenant_id: str) -> None:
        """Make the tenant's memories index now, if missing (idempotent), so that the tenant's
        first writes do not: creating an index is a cluster-state change, which a new tenant's
        first batch would otherwise wait for."""
        await self._tenant_index(tenant_id)

    async def upsert(self, nodes: Sequence[MemoryNode]) -> None:
        """Write each node's canonical fields (partial update: a node without an embedding keeps
        its stored vectors, one with an embedding replaces both, a missing context vector too)."""
        def doc(n: MemoryNode) -> dict[str, Any]:
            d: dict[str, Any] = {
                "tenant_id": n.tenant_id, "conversation_id": n.conversation_id, "node_id": n.id, "seq": n.seq, **_user(n),
                "event_id": n.event_id, "kind": n.kind, "entity_ids": sorted({e.id for e in n.entities}),
                "body": orjson.dumps(n.without_embedding().model_dump(mode="json")).decode()}
            if n.embedding is not None:
                d["embedding_f32"] = encode_vector(n.embedding)
                d["context_f16"] = encode_vector(n.context, "<f2") if n.context is not None else None
            return d
        await self._write(nodes, doc)

    async def get(self, scope: Scope, ids: Sequence[str]) -> list[MemoryNode]:
        """Nodes (with their vectors) in the order of ``ids``; unknown and other-scope ids are skipped."""
        return (await self.get_many([(scope, ids)]))[0]

    async def get_heads(self, scope: Scope, ids: Sequence[str]) -> list[MemoryNode]:
        """:class:`~storage.ports.NodeHeads`: :meth:`get`'s nodes without their vectors (not read)."""
        return (await self.get_many([(scope, ids)], vectors=False))[0]

    async def get_many(self, reads: Sequence[tuple[Scope, Sequence[str]]],
                       vectors: bool = True) -> list[list[MemoryNode]]:
        """:class:`~storage.ports.NodeReads`: each read as :meth:`get` (``vectors`` False:
        :meth:`get_heads`) answers it, with one ``mget`` a tenant index for all of them."""
        found = {k: full_node(doc["_source"], vectors) for k, (_, doc) in (await self._mget(reads, vectors)).items()}
        return [[n for i in ids if (n := found.get((scope.tenant_id, scope.conversation_id, i))) is not None]
                for scope, ids in reads]

    async def get_rows_many(self, reads: Sequence[tuple[Scope, Sequence[str]]],
                            dim: int) -> list[tuple[list[MemoryNode], np.ndarray]]:
        """:class:`~storage.ports.NodeRowReads`: each read as :meth:`get` answers it, without the
        vectors, with the nodes' retrieval rows; one ``mget`` a tenant index for all of them.
        A node decoded before (:class:`DecodedNodes`) is asked for its version only, and is not
        decoded again unless it changed since (then it is read again, whole)."""
        found: dict[tuple[str, str, str], tuple[MemoryNode, np.ndarray | None]] = {}
        changed: dict[tuple[str, str], list[str]] = {}
        for key, (index, doc) in (await self._mget(reads, True, self._decoded.held)).items():
            taken = self._decoded.take(index, doc)
            if taken is None:
                changed.setdefault(key[:2], []).append(key[2])
            else:
                found[key] = taken
        if changed:  # read again, whole
            again = [(Scope(tenant_id=t, conversation_id=c), ids) for (t, c), ids in changed.items()]
            for key, (index, doc) in (await self._mget(again, True)).items():
                if (taken := self._decoded.take(index, doc)) is not None:
                    found[key] = taken
        out: list[tuple[list[MemoryNode], np.ndarray]] = []
        for scope, ids in reads:
            got = [g for i in ids if (g := found.get((scope.tenant_id, scope.conversation_id, i))) is not None]
            out.append(([n for n, _ in got], rows_matrix([r for _, r in got], dim)))
        return out

    async def _mget(self, reads: Sequence[tuple[Scope, Sequence[str]]], vectors: bool,
                    held: Callable[[str, str], MemoryNode | None] | None = None,
                    ) -> dict[tuple[str, str, str], tuple[str, dict[str, Any]]]:
        """(tenant, conversation, node id) -> (its index, its found ``mget`` document, with its
        body and, with ``vectors``, its vectors) for the ids of ``reads``: one ``mget`` a tenant
        index. An id whose node ``held(index, id)`` names is asked for its version only (no
        ``_source``), and is placed by that node's scope."""
        by_index: dict[str, list[int]] = {}
        for k, (scope, ids) in enumerate(reads):
            index = await self._index(scope) if ids else None
            if index is not None:
                by_index.setdefault(index, []).append(k)
        found: dict[tuple[str, str, str], tuple[str, dict[str, Any]]] = {}
        if not by_index:
            return found
        await self._sent()
        fields = ["tenant_id", "conversation_id", "body", *(VECTOR_FIELDS if vectors else ())]
        for index, ks in by_index.items():
            wanted = list(dict.fromkeys(i for k in ks for i in reads[k][1]))
            known = {i: n for i in wanted if held is not None and (n := held(index, i)) is not None}
            docs = [{"_id": i, "_source": False if i in known else fields} for i in wanted]
            with es_errors(f"mget {index}"):
                res = await self._client.mget(index=index, docs=docs)
            for d in res["docs"]:
                if not d.get("found"):
                    continue
                if (n := known.get(d["_id"])) is not None:
                    found[(n.tenant_id, n.conversation_id, d["_id"])] = (index, d)
                elif "body" in (src := d.get("_source") or {}):
                    found[(str(src.get("tenant_id")), str(src.get("conversation_id")), d["_id"])] = (index, d)
        return found

    async def seqs(self, scope: Scope, event_ids: Sequence[str]) -> dict[str, int]:
        """event_id -> seq for the events already stored."""
        if not event_ids:
            return {}
        query = {"bool": {"filter": _scoped(scope, {"terms": {"event_id": sorted(set(event_ids))}})}}
        hits = await self._scoped_hits(scope, query, [{"node_id": "asc"}], ["event_id", "seq"])
        return {h["_source"]["event_id"]: int(h["_source"]["seq"]) for h in hits}

    async def next_seq(self, scope: Scope) -> int:
        """One past the largest observation seq of the scope (0 when empty)."""
        query = {"bool": {"filter": _scoped(scope, {"term": {"kind": "observation"}})}}
        hits = await self._scoped_hits(scope, query, [{"seq": "desc"}], ["seq"], 1)
        return int(hits[0]["_source"]["seq"]) + 1 if hits else 0

    async def observation_count(self, scope: Scope) -> int:
        """Number of observation nodes of the scope (exact: ``count`` API)."""
        index = await self._index(scope)
        if index is None:
            return 0
        query = {"bool": {"filter": _scoped(scope, {"term": {"kind": "observation"}})}}
        await self._own_writes(index)
        with es_errors(f"count {index}"):
            res = await self._client.count(index=index, query=query)
        return int(res["count"])

    async def used_seqs(self, scope: Scope) -> list[int]:
        """Every observation seq of the scope, ascending."""
        query = {"bool": {"filter": _scoped(scope, {"term": {"kind": "observation"}})}}
        hits = await self._scoped_hits(scope, query, [{"seq": "asc"}, {"node_id": "asc"}], ["seq"])
        return [int(h["_source"]["seq"]) for h in hits]

    async def scan(self, scope: Scope) -> list[MemoryNode]:
        """All nodes of the scope by (seq, id), without embeddings."""
        query = {"bool": {"filter": _scoped(scope, {"exists": {"field": "event_id"}})}}
        hits = await self._scoped_hits(scope, query, [{"seq": "asc"}, {"node_id": "asc"}], ["body"])
        return [MemoryNode.model_validate(orjson.loads(h["_source"]["body"])) for h in hits]

    async def conversations(self, tenant_id: str, users: Collection[str] | None = None) -> list[tuple[str, int]]:
        """The tenant's conversations by id with node counts (a terms aggregation, at most 10,000);
        with ``users``, those holding a node of one of them, with the count of those nodes."""
        index = await self._existing(memories_index(tenant_id))
        if index is None or (users is not None and not users):
            return []
        convs: dict[str, Any] = {"terms": {"field": "conversation_id", "size": 10_000, "order": {"_key": "asc"}}}
        aggs = {"convs": convs}
        wanted: list[dict[str, Any]] = [] if users is None else [{"terms": {"user_id": sorted(users)}}]
        query = {"bool": {"filter": [{"term": {"tenant_id": tenant_id}}, {"exists": {"field": "event_id"}}, *wanted]}}
        await self._own_writes(index)
        with es_errors(f"conversations {index}"):
            res = await self._client.search(index=index, query=query, aggs=aggs, size=0)
        return [(str(b["key"]), int(b["doc_count"])) for b in res["aggregations"]["convs"]["buckets"]]

    async def sharing_entities_before(
            self, scope: Scope, entity_ids: Sequence[str], before_seq: int, limit: int) -> list[str]:
        """Nodes with seq < ``before_seq`` by number of shared entity ids, then seq desc."""
        if not entity_ids or limit <= 0:
            return []
        query = _count_of("entity_ids", entity_ids, _scoped(scope, {"range": {"seq": {"lt": before_seq}}}))
        hits = await self._scoped_hits(scope, query, [{"_score": "desc"}, {"seq": "desc"}, {"node_id": "asc"}], [], limit)
        return [h["_id"] for h in hits]

    async def preceding(self, scope: Scope, before_seq: int, limit: int) -> list[str]:
        """The ``limit`` observations just before ``before_seq``, latest first."""
        if limit <= 0:
            return []
        query = {"bool": {"filter": _scoped(scope, {"term": {"kind": "observation"}},
                                            {"range": {"seq": {"lt": before_seq}}})}}
        hits = await self._scoped_hits(scope, query, [{"seq": "desc"}, {"node_id": "asc"}], [], limit)
        return [h["_id"] for h in hits]

    async def delete(self, scope: Scope, ids: Sequence[str]) -> int:
        return await self._delete_nodes(scope, ids)

    async def delete_scope(self, scope: Scope) -> int:
        """Every node of the scope, then its forgotten-event records."""
        n = await self._delete_all(scope)
        await self._delete_matching(await self._existing("forgotten"), {"bool": {"filter": _scoped(scope)}})
        return n

    async def record_forgotten(self, scope: Scope, event_id: str, seq: int) -> None:
        index = await self._ensure("forgotten", _FORGOTTEN)
        rid = idsmod.stable_uuid("forgotten", scope.tenant_id, scope.conversation_id, event_id)
        await self._bulk(index, [{"index": {"_id": rid}}, {"tenant_id": scope.tenant_id,
                                 "conversation_id": scope.conversation_id, "event_id": event_id, "seq": seq}])

    async def forgotten(self, scope: Scope) -> dict[str, int]:
        index = await self._existing("forgotten")
        if index is None:
            return {}
        hits = await self._hits(index, {"bool": {"filter": _scoped(scope)}}, [{"event_id": "asc"}], ["event_id", "seq"])
        return {h["_source"]["event_id"]: int(h["_source"]["seq"]) for h in hits}

    async def migrate_shared(self) -> int:
        """Split an older generation's shared ``p memories`` index into per-tenant indices (whole
        documents, ids kept; a document already in the tenant's index, written by this build, is
        kept), then delete it; returns the documents read (0: nothing to do). Idempotent: an
        interrupted migration is finished by the next call."""
        old = self._prefix + "memories"
        with es_errors(f"exists {old}"):
            if not await self._client.indices.exists(index=old):
                return 0
        moved = 0
        after: list[Any] | None = None
        while True:
            with es_errors(f"search {old}"):
                res = await self._client.search(index=old, query={"match_all": {}}, sort=[{"node_id": "asc"}],
                                                size=_PAGE, search_after=after, track_total_hits=False)
            page = res["hits"]["hits"]
            ops: list[dict[str, Any]] = []
            for h in page:
                index = await self._tenant_index(h["_source"]["tenant_id"])
                ops += [{"create": {"_index": index, "_id": h["_id"]}}, h["_source"]]
            await self._bulk(None, ops, conflicts_ok=True)  # never overwrite a document written since
            moved += len(page)
            if len(page) < _PAGE:
                break
            after = page[-1]["sort"]
        with es_errors(f"delete {old}"):
            await self._client.indices.delete(index=old, ignore_unavailable=True)
        return moved
