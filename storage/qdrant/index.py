"""Vector index on a Qdrant server (the distributed mode's VectorIndex), over REST.

Layout: one collection per store generation (``<prefix>memories``), dot-product distance over
each node's retrieval vector (:meth:`~topology.schemas.MemoryNode.retrieval_vector`; a collection
made by a release before context vectors has cosine distance, which ranks nodes without a
context vector the same, and is made exact by rebuilding into a fresh prefix), points keyed
by the deterministic node id (a UUID), so re-indexing is an upsert. Payload: ``tenant_id``,
``conversation_id``, ``seq``, ``kind``, and ``user_id`` when the node has one, with payload
indexes on ``tenant_id`` (keyword, ``is_tenant=True``: Qdrant groups a tenant's points together on
disk), ``conversation_id`` and ``user_id`` (keyword) and ``seq`` (integer).

Contracts:

* Every search and every delete is filtered by tenant AND conversation (and ``seq < before_seq``
  when given): one tenant's points never answer another's query, whatever ids they share.
  A realm search (:meth:`QdrantVectorIndex.search_realm`) is filtered by tenant AND, when the
  realm names them, user AND conversation list: one ranking over all of the realm's points
  (ties: earlier seq, then id, :func:`storage.realm.rank_with_ties`), each hit naming its
  conversation. A point written without ``user_id`` answers tenant-wide realms only.
* Searches are exact (``SearchParams(exact=True)``, no HNSW): the result is the brute-force
  dot-product ranking of the scope's (or realm's) points, as the embedded store
  (:mod:`storage.sqlite.vectors`) and the Elasticsearch fallback
  (:class:`storage.elastic.vectors.ElasticVectorIndex`) compute it, so a distributed query starts
  from the same candidates as the embedded one. The one exception is opt-in: given ``realm_ef``,
  realm searches go through the collection's HNSW index with that ``hnsw_ef`` (approximate:
  some of the exact ranking's points may be missing, more as ``realm_ef`` is lower). Qdrant
  still scans a realm whose filtered points are too few for its index to pay (its
  ``full_scan_threshold``), so small realms keep the exact answer either way.
* Writes and deletes use ``wait=True``: a call returns once the server applied the operation (it
  is in the server's write-ahead log, which survives a SIGKILL), so a caller may commit its input
  offset afterwards.
* Any failure to reach the server, or a refusal, raises :class:`StoreUnavailable` (the Faust
  agent retries the batch in place with capped backoff); every call is idempotent.
* Given several nodes of a cluster (``url`` a comma-separated list), calls go to one node; when
  it does not answer at all (refused, reset, timed out), the same call goes to the next node, so
  losing a node of a cluster whose collection is replicated costs a reconnect, not an outage.
  A node that answers with an error is not skipped: the error is the cluster's answer.
* ``https`` URLs verify the server's certificate against ``ca_file`` (or the system's CAs); the
  API key travels in the ``api-key`` header and never appears in an error.

Versions, checked on purpose. The client is pinned (``qdrant-client>=1.20,<1.21`` in
``pyproject.toml``) and the server is Qdrant 1.18.1 (the test binary, and the compose image
``qdrant/qdrant:v1.18.1``). qdrant-client's own check (``check_compatibility=True``) only logs a
warning when the minor versions differ by more than one, which they do here (1.20 vs 1.18), and
it cannot tell whether the calls this module makes work. So the client is built with
``check_compatibility=False`` and this module checks instead, once before first use (and in
:func:`check_server`, which workers and the API call at startup): the server's version (``GET /``)
must be in :data:`SUPPORTED_SERVERS`, else :class:`IncompatibleStore` says which version was found
and which are supported. The range is 1.18 (the version every integration test here runs
against) up to 1.21 (the client's documented window of one minor version either side of 1.20).
Everything used here exists on 1.18: ``query_points`` / ``query_batch_points`` with
``SearchParams(exact=True)``, keyword indexes with ``is_tenant``, delete by filter.
"""

from __future__ import annotations

import asyncio
import functools
import re
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import httpx
from qdrant_client import AsyncQdrantClient, models
from qdrant_client.http.exceptions import ApiException, UnexpectedResponse

from storage.ports import Hit
from storage.qdrant.purge import WAL_CAPACITY_MB, purge
from storage.realm import Point, complete, first, first_ask, rank_with_ties
from topology.errors import IncompatibleStore, StoreUnavailable
from topology.schemas import MemoryNode, Realm, Scope

T = TypeVar("T")

COLLECTION = "jevmem_memories"
#: Server versions this build accepts, as inclusive (major, minor) bounds (see the module docstring).
SUPPORTED_SERVERS = ((1, 18), (1, 21))
#: Seconds a REST call may take before it counts as a failure.
TIMEOUT_S = 30
#: Seconds a new collection's replicas may take to leave ``Initializing``.
SETTLE_S = 30.0
#: The most points one realm search asks for (a tie wider than this is cut in the server's order).
REALM_MOST = 10_000


def parse_version(text: str) -> tuple[int, int, int]:
    """``"1.18.1"`` (or ``"v1.18.1-dev"``) -> ``(1, 18, 1)``; a missing patch part is 0."""
    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    if m is None:
        raise IncompatibleStore(f"qdrant: cannot read the server version {text!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def require_supported(version: str) -> tuple[int, int, int]:
    """The parsed ``version``, or :class:`IncompatibleStore` if it is outside :data:`SUPPORTED_SERVERS`."""
    v = parse_version(version)
    low, high = SUPPORTED_SERVERS
    if not low <= v[:2] <= high:
        raise IncompatibleStore(
            f"qdrant server {version} is not supported by this build (supported: {low[0]}.{low[1]} to "
            f"{high[0]}.{high[1]}.x, tested against 1.18.1); run a supported server (docker-compose.yml pins one)")
    return v


def urls(url: str) -> list[str]:
    """The nodes of a comma-separated ``url`` list."""
    out = [u.strip() for u in url.split(",") if u.strip()]
    if not out:
        raise ValueError("no Qdrant URL given")
    return out


def _client(url: str, api_key: str | None, ca_file: str | None = None) -> AsyncQdrantClient:
    # check_compatibility=False: the version check is ours (require_supported), see the module docstring
    tls: dict[str, Any] = {"verify": ssl.create_default_context(cafile=ca_file)} if ca_file else {}
    return AsyncQdrantClient(url=url, api_key=api_key, timeout=TIMEOUT_S, check_compatibility=False, **tls)


async def check_server(url: str, api_key: str | None = None, ca_file: str | None = None) -> str:
    """The version of the Qdrant server at ``url`` (the first node that answers, of a list);
    :class:`StoreUnavailable` if none answers or it refuses ``api_key``, :class:`IncompatibleStore`
    if its version is not supported. For startup checks."""
    index = QdrantVectorIndex.server(url, 1, api_key, ca_file=ca_file)
    try:
        info = await index._failover(lambda: index._client.info(), "version check")
        require_supported(info.version)
        # the version answers without credentials: a listing proves the API key is accepted
        await index._failover(lambda: index._client.get_collections(), "credentials check")
        return info.version
    finally:
        await index.close()


async def _guard(call: Callable[[], Awaitable[T]], what: str) -> T:
    """``await call()`` with the client's and the transport's errors turned into
    :class:`StoreUnavailable` ``"qdrant {what}: ..."`` (the original as its cause): the one place
    this adapter translates its backend's exceptions."""
    try:
        return await call()
    except UnexpectedResponse as exc:
        raise StoreUnavailable(f"qdrant {what}: HTTP {exc.status_code}: {exc.content[:300]!r}") from exc
    except (ApiException, httpx.HTTPError, OSError) as exc:  # ResponseHandlingException: cannot connect, timeout
        raise StoreUnavailable(f"qdrant {what}: {exc}") from exc


def _http_status(exc: StoreUnavailable) -> int | None:
    """The HTTP status the server answered the failed call with; None when it gave no answer."""
    cause = exc.__cause__
    return cause.status_code if isinstance(cause, UnexpectedResponse) else None


def _unanswered(exc: StoreUnavailable) -> bool:
    """The node gave no answer (refused, reset, timed out), as opposed to an HTTP error."""
    return _http_status(exc) is None


class QdrantVectorIndex:
    """VectorIndex port on one collection of a Qdrant server or cluster (see the module docstring).
    ``shards`` and ``replication_factor`` apply when this index creates the collection (None: the
    server's defaults)."""

    def __init__(self, clients: AsyncQdrantClient | Sequence[AsyncQdrantClient], dim: int,
                 collection: str = COLLECTION, *, shards: int | None = None,
                 replication_factor: int | None = None, realm_ef: int | None = None) -> None:
        self._clients = [clients] if isinstance(clients, AsyncQdrantClient) else list(clients)
        self._current = 0
        self._dim = dim
        self._collection = collection
        self._shards = shards
        self._replication_factor = replication_factor
        #: how realm searches search (module docstring: exact, or HNSW with ``realm_ef``)
        self.realm_params = models.SearchParams(exact=True) if realm_ef is None else models.SearchParams(hnsw_ef=realm_ef)
        self._ready = False

    @classmethod
    def server(cls, url: str, dim: int, api_key: str | None = None, collection: str = COLLECTION, *,
               ca_file: str | None = None, shards: int | None = None,
               replication_factor: int | None = None, realm_ef: int | None = None) -> QdrantVectorIndex:
        """An index over the node(s) of ``url`` (comma-separated for a cluster)."""
        return cls([_client(u, api_key, ca_file) for u in urls(url)], dim, collection, shards=shards,
                   replication_factor=replication_factor, realm_ef=realm_ef)

    @property
    def _client(self) -> AsyncQdrantClient:
        return self._clients[self._current]

    async def _failover(self, call: Callable[[], Awaitable[T]], what: str) -> T:
        """``await call()`` on the current node, then on each other node in turn while none answers."""
        for tried in range(len(self._clients)):
            try:
                return await _guard(call, what)
            except StoreUnavailable as exc:
                if tried + 1 == len(self._clients) or not _unanswered(exc):
                    raise
                self._current = (self._current + 1) % len(self._clients)
        raise AssertionError("unreachable")

    @property
    def collection(self) -> str:
        return self._collection

    async def _ensure(self) -> None:
        """Check the server's version and create the collection and its payload indexes (each
        idempotent: workers racing to create them all succeed), once per instance."""
        if self._ready:
            return
        info = await self._failover(lambda: self._client.info(), "version check")
        require_supported(info.version)
        exists = await self._failover(lambda: self._client.collection_exists(self._collection), "collection check")
        if not exists:
            try:
                await _guard(lambda: self._client.create_collection(
                    self._collection, vectors_config=models.VectorParams(size=self._dim, distance=models.Distance.DOT),
                    shard_number=self._shards, replication_factor=self._replication_factor,
                    wal_config=models.WalConfigDiff(wal_capacity_mb=WAL_CAPACITY_MB)),
                    f"create collection {self._collection}")
            except StoreUnavailable as exc:
                if _http_status(exc) != 409:  # 409: another worker created it first
                    raise
        await self._settled()
        indexes: list[tuple[str, models.PayloadSchemaType | models.KeywordIndexParams]] = [
            ("tenant_id", models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True)),
            ("conversation_id", models.PayloadSchemaType.KEYWORD),
            ("user_id", models.PayloadSchemaType.KEYWORD),
            ("seq", models.PayloadSchemaType.INTEGER),
        ]
        for field, schema in indexes:
            await self._failover(functools.partial(self._payload_index, field, schema), f"payload index {field}")
        self._ready = True

    async def _settled(self) -> None:
        """Wait (at most :data:`SETTLE_S`) until no replica of the collection is still being set
        up: on a cluster, a new collection's replicas on other nodes start ``Initializing``, and
        an update reaching one of them fails ("consistency not guaranteed")."""
        deadline = asyncio.get_running_loop().time() + SETTLE_S
        while True:
            info = await self._failover(lambda: self._client.collection_cluster_info(self._collection), "cluster info")
            states = [r.state for r in info.local_shards] + [r.state for r in info.remote_shards]
            if models.ReplicaState.INITIALIZING not in states:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise StoreUnavailable(f"qdrant collection {self._collection}: replicas still initializing after "
                                       f"{SETTLE_S:.0f} s ({[str(s) for s in states]})")
            await asyncio.sleep(0.2)

    async def _payload_index(self, field: str, schema: models.PayloadSchemaType | models.KeywordIndexParams) -> None:
        await self._client.create_payload_index(self._collection, field, field_schema=schema, wait=True)

    async def prepare(self) -> None:
        """Create the collection and its payload indexes now (a worker at startup), not on first write."""
        await self._ensure()

    async def _call(self, call: Callable[[], Awaitable[T]], what: str) -> T:
        """Run ``call`` on the collection; a 404 (the collection vanished: a server reset) makes
        the next call create it again instead of failing forever."""
        await self._ensure()
        try:
            return await self._failover(call, what)
        except StoreUnavailable as exc:
            if _http_status(exc) == 404:
                self._ready = False
            raise

    async def call(self, call: Callable[[AsyncQdrantClient], Awaitable[T]], what: str) -> T:
        """``await call(client)`` on the collection's current node, as every call of this index
        runs (created first, failing over, errors as :class:`StoreUnavailable`)."""
        return await self._call(lambda: call(self._client), what)

    async def call_on(self, client: AsyncQdrantClient, call: Callable[[AsyncQdrantClient], Awaitable[T]],
                      what: str) -> T:
        """``await call(client)`` on that node only (no failover): a question for each node."""
        await self._ensure()
        return await _guard(lambda: call(client), what)

    @property
    def clients(self) -> list[AsyncQdrantClient]:
        """One client per node of the server's URL list."""
        return list(self._clients)

    @property
    def dim(self) -> int:
        return self._dim

    async def purge(self) -> None:
        """Purge the collection's files of every point deleted before the call
        (:func:`storage.qdrant.purge.purge`)."""
        await purge(self)

    @staticmethod
    def _filter(scope: Scope, before_seq: int | None = None, ids: Sequence[str] | None = None) -> models.Filter:
        must: list[models.Condition] = [
            models.FieldCondition(key="tenant_id", match=models.MatchValue(value=scope.tenant_id)),
            models.FieldCondition(key="conversation_id", match=models.MatchValue(value=scope.conversation_id)),
        ]
        if before_seq is not None:
            must.append(models.FieldCondition(key="seq", range=models.Range(lt=before_seq)))
        if ids is not None:
            must.append(models.HasIdCondition(has_id=list(ids)))
        return models.Filter(must=must)

    @staticmethod
    def _realm_filter(realm: Realm) -> models.Filter:
        must: list[models.Condition] = [
            models.FieldCondition(key="tenant_id", match=models.MatchValue(value=realm.tenant_id))]
        if realm.user_id is not None:
            must.append(models.FieldCondition(key="user_id", match=models.MatchValue(value=realm.user_id)))
        if realm.conversation_ids is not None:
            must.append(models.FieldCondition(key="conversation_id",
                                              match=models.MatchAny(any=sorted(set(realm.conversation_ids)))))
        return models.Filter(must=must)

    async def upsert(self, nodes: Sequence[MemoryNode]) -> None:
        """Index each node's retrieval vector (nodes without an embedding are skipped); returns
        once applied."""
        points = [
            models.PointStruct(id=n.id, vector=n.retrieval_vector(), payload={
                "tenant_id": n.tenant_id, "conversation_id": n.conversation_id, "seq": n.seq, "kind": n.kind,
                **({"user_id": n.user_id} if n.user_id is not None else {})})
            for n in nodes if n.embedding is not None
        ]
        if not points:
            return
        await self._call(lambda: self._client.upsert(self._collection, points=points, wait=True), "upsert")

    def _request(self, scope: Scope, vector: Sequence[float], limit: int, before_seq: int | None) -> models.QueryRequest:
        return models.QueryRequest(query=list(vector), filter=self._filter(scope, before_seq), limit=limit,
                                   params=models.SearchParams(exact=True), with_payload=False, with_vector=False)

    async def search(self, scope: Scope, vector: Sequence[float], limit: int, before_seq: int | None = None) -> list[Hit]:
        """The scope's nearest points by cosine, best first (exact); ``before_seq`` keeps earlier ones."""
        res = await self._call(lambda: self._client.query_points(
            self._collection, query=list(vector), query_filter=self._filter(scope, before_seq), limit=limit,
            search_params=models.SearchParams(exact=True), with_payload=False, with_vectors=False), "search")
        return [Hit(str(p.id), float(p.score)) for p in res.points]

    async def search_many(self, queries: Sequence[tuple[Scope, Sequence[float], int | None]],
                          limit: int) -> list[list[Hit]]:
        """:meth:`search` for each ``(scope, vector, before_seq)``, in order, in one request."""
        if not queries:
            return []
        requests = [self._request(s, v, limit, b) for s, v, b in queries]
        res = await self._call(lambda: self._client.query_batch_points(self._collection, requests=requests), "search")
        return [[Hit(str(p.id), float(p.score)) for p in r.points] for r in res]

    async def search_realm(self, realm: Realm, query: Sequence[float] | str, limit: int) -> list[Hit]:
        """The realm's best ``limit`` points by dot product with ``query`` (a vector), exact unless
        ``realm_ef`` was given (module docstring), in one
        ranking over its conversations: best first, ties by earlier seq, then id; each hit names
        its conversation. An empty ``conversation_ids`` holds nothing."""
        if isinstance(query, str):
            raise TypeError("a vector realm search takes a vector")
        if limit <= 0 or realm.conversation_ids == ():
            return []
        vector, where = list(query), self._realm_filter(realm)

        async def fetch(n: int) -> list[Point]:
            res = await self._call(lambda: self._client.query_points(
                self._collection, query=vector, query_filter=where, limit=n, search_params=self.realm_params,
                with_payload=["seq", "conversation_id"], with_vectors=False), "realm search")
            return _points(res.points)

        return await rank_with_ties(fetch, limit, REALM_MOST)

    async def search_realms(self, queries: Sequence[tuple[Realm, Sequence[float]]], limit: int) -> list[list[Hit]]:
        """:meth:`search_realm` for each ``(realm, vector)``, in order, with the same hits: one batch
        request (a query whose answer cuts a tie at the ``limit``-th hit is asked again alone)."""
        out: list[list[Hit]] = [[] for _ in queries]
        asked = [(i, realm, list(vector)) for i, (realm, vector) in enumerate(queries) if realm.conversation_ids != ()]
        if limit <= 0 or not asked:
            return out
        n = first_ask(limit, REALM_MOST)
        requests = [models.QueryRequest(query=vector, filter=self._realm_filter(realm), limit=n,
                                        params=self.realm_params, with_payload=["seq", "conversation_id"],
                                        with_vector=False) for _, realm, vector in asked]
        res = await self._call(lambda: self._client.query_batch_points(self._collection, requests=requests), "realm search")
        for (i, realm, vector), answer in zip(asked, res, strict=True):
            points = _points(answer.points)
            whole = complete(points, n, limit, REALM_MOST)
            out[i] = first(points, limit) if whole else await self.search_realm(realm, vector, limit)
        return out

    async def ids(self, scope: Scope) -> set[str]:
        """Every point id of the scope (for checks and tests; pages through the whole scope)."""
        out: set[str] = set()
        offset: models.ExtendedPointId | None = None
        while True:
            page, offset = await self._call(lambda at=offset: self._client.scroll(  # type: ignore[misc]
                self._collection, scroll_filter=self._filter(scope), limit=1000, offset=at,
                with_payload=False, with_vectors=False), "scroll")
            out.update(str(p.id) for p in page)
            if offset is None:
                return out

    async def delete(self, scope: Scope, ids: Sequence[str]) -> None:
        """Delete the scope's points with these ids (ids of other scopes are left alone); returns once applied."""
        if not ids:
            return
        selector = models.FilterSelector(filter=self._filter(scope, ids=ids))
        await self._call(lambda: self._client.delete(self._collection, points_selector=selector, wait=True), "delete")

    async def delete_scope(self, scope: Scope) -> None:
        """Delete every point of the scope (tenant + conversation); returns once applied."""
        selector = models.FilterSelector(filter=self._filter(scope))
        await self._call(lambda: self._client.delete(self._collection, points_selector=selector, wait=True), "delete")

    async def close(self) -> None:
        for client in self._clients:
            await client.close()


def _points(scored: Sequence[models.ScoredPoint]) -> list[Point]:
    """A realm search's answer (payload ``seq`` and ``conversation_id``) as :class:`Point` s."""
    return [Point(str(p.id), float(p.score), int((p.payload or {})["seq"]), str((p.payload or {})["conversation_id"]))
            for p in scored]
