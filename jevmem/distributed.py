"""The distributed deployment: Kafka topics, Elasticsearch + Qdrant stores, Faust workers, the
HTTP service over them, and the active store generation used by replay's switch-over. The write
and read paths over those stores come from :func:`jevmem.assembly.paths` (``embedded=False``)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
from elasticsearch import AsyncElasticsearch, ConflictError, NotFoundError

from jevmem import assembly
from jevmem.settings import Settings
from query_api.items import ItemError
from query_api.retrieval.controller import Retrieval, RetrievalController
from query_api.service import ForgetAccepted
from storage.elastic.client import es_errors
from storage.elastic.edges import GROUPS, ElasticEdgeStore
from storage.elastic.store import (
    ElasticLexicalIndex,
    ElasticNodeStore,
    Visibility,
    check_prefix,
    memories_index,
)
from storage.elastic.vectors import ElasticVectorIndex
from storage.ports import VectorIndex
from storage.purge import Expunger
from storage.qdrant.index import QdrantVectorIndex, check_server
from streams.kafka_admin import ensure_topics, read_topic
from streams.keyring import Keyring
from streams.producer import ObservationProducer
from streams.write_path import Stores
from topology.errors import ModelMismatch, StoreUnavailable
from topology.ports import Embedder
from topology.schemas import (
    ConsolidationDecision,
    DeadLetter,
    EdgeEvent,
    Forget,
    MemoryNode,
    Observation,
    Realm,
    Scope,
    decode,
)
from topology.topics import topics

META_INDEX = "jevmem-meta"
DEFAULT_GENERATION = "jevmem-g0-"


async def active_generation(es: AsyncElasticsearch) -> str:
    """The store prefix the query side and workers use (set by ``jevmem replay --switch``)."""
    with es_errors("active generation"):
        try:
            doc = await es.get(index=META_INDEX, id="active")
            return str(doc["_source"]["prefix"])
        except NotFoundError:
            return DEFAULT_GENERATION


async def set_active_generation(es: AsyncElasticsearch, prefix: str) -> None:
    with es_errors("active generation"):
        await es.index(index=META_INDEX, id="active", document={"prefix": prefix}, refresh=True)


async def check_model(settings: Settings, prefix: str, embedder: str) -> None:
    """Record ``embedder`` with the store generation ``prefix`` (first use), or raise
    :class:`ModelMismatch` if that generation was built with another model: its vectors would not
    be comparable. ``jevmem replay --from observations`` re-embeds into a fresh generation.

    Also brings an older generation's layout up to date: its shared memories index (BM25 over all
    tenants) is split into one index per tenant (:meth:`ElasticNodeStore.migrate_shared`)."""
    es = assembly.elasticsearch(settings)
    try:
        with es_errors("meta"):
            with contextlib.suppress(ConflictError):
                await es.index(index=META_INDEX, id=f"model:{prefix}", document={"embedder": embedder},
                               op_type="create", refresh=True)
            recorded = str((await es.get(index=META_INDEX, id=f"model:{prefix}"))["_source"]["embedder"])
        if recorded == embedder:
            await ElasticNodeStore(es, prefix).migrate_shared()
    finally:
        await es.close()
    if recorded != embedder:
        raise ModelMismatch(f"store generation {prefix!r} was built with embedding model {recorded!r}, not {embedder!r}: "
                            "configure that model, or rebuild with `jevmem replay --from observations`")


async def check_vectors(settings: Settings) -> None:
    """Fail fast at startup: the configured Qdrant server answers and its version is supported
    (:func:`storage.qdrant.index.check_server`); nothing to check for the Elasticsearch fallback."""
    if settings.qdrant_url:
        try:
            await check_server(settings.qdrant_url, assembly.qdrant_key(settings),
                               str(settings.qdrant_ca_file) if settings.qdrant_ca_file else None)
        except StoreUnavailable as exc:
            raise StoreUnavailable(f"qdrant at {settings.qdrant_url}: {exc}; check JEVMEM_QDRANT_URL"
                                   f"{' and JEVMEM_QDRANT_API_KEY' if assembly.qdrant_key(settings) else ''}") from exc


async def prepare_indices(settings: Settings, prefix: str, dim: int) -> None:
    """Create the generation's shared indices (Elasticsearch edge groups and decisions, moving a
    legacy one-document-per-edge index into groups; vectors: the
    Qdrant collection and its payload indexes, or Elasticsearch's vector index) before a worker
    takes records, so its first batch does not wait for them (tenants' memories indices are still
    created on a tenant's first write)."""
    es = assembly.elasticsearch(settings)
    try:
        await ElasticEdgeStore(es, prefix).prepare()
        if not settings.qdrant_url:
            await ElasticVectorIndex(es, prefix, dim).prepare()
    finally:
        await es.close()
    if settings.qdrant_url:
        vectors = _qdrant_vectors(settings, prefix, dim)
        try:
            await vectors.prepare()
        finally:
            await vectors.close()


def _qdrant_vectors(settings: Settings, prefix: str, dim: int) -> QdrantVectorIndex:
    """The vector index of the store generation ``prefix`` on the configured Qdrant node(s)."""
    return assembly.qdrant(settings, dim, prefix.replace("-", "_") + "memories")


def distributed_stores(settings: Settings, prefix: str, dim: int, owner: bool = False,
                       keyring: Keyring | None = None) -> Stores:
    """Elasticsearch (lexical, nodes, edges) + vectors in Qdrant (one collection per store
    generation, ``<prefix>memories``) when ``qdrant_url`` is set, else in Elasticsearch's exact
    (flat) vector index. Dead letters live on their Kafka topic.

    Every read sees every write acknowledged before it began (``storage.elastic.store.Visibility``);
    ``owner`` (a worker, or the service): only after :meth:`Stores.fresh_reads`, which the
    owner calls when that matters (a partition assignment, a request), and always for what
    this process wrote itself. ``keyring``: dead letters are sealed (and read) with it. After
    forgets, :attr:`Stores.purge` expunges the deleted documents of the generation's indices and
    of the data-key index (``storage.purge.Expunger``) and, with Qdrant, purges its collection's
    files of the deleted points (:func:`storage.qdrant.purge.purge`)."""
    es = assembly.elasticsearch(settings)
    seen = Visibility(es, strict_reads=not owner)  # one bulk per batch; reads refresh what they need
    vectors: VectorIndex = (_qdrant_vectors(settings, prefix, dim) if settings.qdrant_url
                            else ElasticVectorIndex(es, prefix, dim, seen))
    # forgotten means gone from the index files too: the generation's indices and the data keys'
    expunger = Expunger(es, [f"{prefix}*", f"{settings.topic_prefix.lower()}-datakeys"])

    async def purge(_scopes: Sequence[Scope]) -> None:
        await expunger.expunge()
        if isinstance(vectors, QdrantVectorIndex):
            await vectors.purge()

    def refresh_ahead(tenant_id: str) -> None:  # what a request reads that a refresh makes current
        seen.ahead([prefix + memories_index(tenant_id), prefix + GROUPS])

    return Stores(nodes=ElasticNodeStore(es, prefix, seen), edges=ElasticEdgeStore(es, prefix, seen), vectors=vectors,
                  lexical=ElasticLexicalIndex(es, prefix, seen), dead_letters=TopicDeadLetters(settings, keyring),
                  visibility=seen.flush, invalidate=seen.invalidate, refresh_ahead=refresh_ahead, purge=purge)


async def open_for_reads(stores: Stores) -> None:
    """Do at a reader's start what its first request would otherwise do on the way: the vector
    index's collection (or index) checked and made ready, as its first search would, and the
    edge-group index looked up. A tenant's first request still looks its memories index up, once
    a process."""
    if isinstance(stores.vectors, QdrantVectorIndex | ElasticVectorIndex):
        await stores.vectors.prepare()
    if isinstance(stores.edges, ElasticEdgeStore):
        await stores.edges.look_up()


def purged_stores(settings: Settings) -> tuple[str, ...]:
    """The stores whose files a purge of :func:`distributed_stores` cleans (named in ``forget purged``)."""
    return ("elasticsearch", "qdrant") if settings.qdrant_url else ("elasticsearch",)


class TopicDeadLetters:
    """Dead letters on the dead-letter topic (DeadLetterSink port)."""

    def __init__(self, settings: Settings, keyring: Keyring | None = None) -> None:
        self.settings = settings
        self.keyring = keyring
        self._producer: ObservationProducer | None = None

    async def put(self, letters: Sequence[DeadLetter]) -> None:
        if self._producer is None:
            self._producer = ObservationProducer(assembly.kafka(self.settings), self.settings.topic_prefix, keyring=self.keyring)
        await self._producer.dead_letter(letters)

    async def recent(self, limit: int = 100, tenant_id: str | None = None) -> list[DeadLetter]:
        """Reads the whole topic (an operator's view, not a hot path), newest ``limit`` kept;
        sealed letters whose keys a forget destroyed are left out."""
        topic = topics(self.settings.topic_prefix)["deadletters"].name
        records = await asyncio.to_thread(read_topic, assembly.kafka(self.settings), topic)
        values: Sequence[bytes | dict[str, Any]] = [r.value for r in records]
        if self.keyring is not None:
            values, _ = await self.keyring.open_readable([r.value for r in records], cache=False)
        letters = [decode(DeadLetter, v) for v in values]
        return [d for d in letters if tenant_id is None or d.tenant_id == tenant_id][-limit:]

    async def forget(self, scope: Scope, event_id: str | None) -> int:
        """Nothing to delete here: the topic keeps its letters, sealed under keys the forget destroys."""
        return 0


async def resolve_prefix(settings: Settings) -> str:
    if settings.store_prefix:
        return settings.store_prefix
    es = assembly.elasticsearch(settings)
    try:
        return await active_generation(es)
    finally:
        await es.close()


async def prepare_tenant(settings: Settings, tenant_id: str) -> None:
    """Make the tenant's memories index in the active store generation now (``jevmem keys
    create``), so that its first writes do not wait for the index to be created."""
    es = assembly.elasticsearch(settings)
    try:
        prefix = settings.store_prefix or await active_generation(es)
        await ElasticNodeStore(es, prefix).prepare_tenant(tenant_id)
    finally:
        await es.close()


class DistributedService:
    """:class:`query_api.service.MemoryService` for the distributed stack: ingest goes to Kafka,
    queries read Elasticsearch and the vector index directly. Its stores and producer translate
    their own failures (:class:`~topology.errors.StoreUnavailable`,
    :class:`~topology.errors.BrokerUnavailable`)."""

    def __init__(self, settings: Settings, embedder: Embedder | None = None) -> None:
        self.settings = settings
        self.embedder = embedder or assembly.load_embedder(settings)
        self._stores: Stores | None = None
        self._producer: ObservationProducer | None = None
        self._controller: RetrievalController | None = None
        self._keyring: Keyring | None = None
        self._s2 = assembly.system_two(settings)

    async def start(self) -> None:
        ensure_topics(assembly.kafka(self.settings), self.settings.topic_prefix, self.settings.topic_layout())
        prefix = await resolve_prefix(self.settings)
        await check_model(self.settings, prefix, self.embedder.name)
        await check_vectors(self.settings)
        self._keyring = await checked_keyring(self.settings)
        self._stores = distributed_stores(self.settings, prefix, self.embedder.dim, owner=True, keyring=self._keyring)
        await open_for_reads(self._stores)
        self._producer = ObservationProducer(assembly.kafka(self.settings), self.settings.topic_prefix, keyring=self._keyring)
        self._controller = assembly.paths(self.settings, self._stores, self.embedder, embedded=False,
                                          writes=False).controller
        await self._controller.warm()

    @property
    def stores(self) -> Stores:
        """The stores, refreshed for a request: each request reads every write acknowledged
        before it began (one refresh per index it reads, and none where nothing changed)."""
        if self._stores is None:
            raise RuntimeError("service not started")
        self._stores.fresh_reads()
        return self._stores

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.close()
        if self._stores is not None:
            await self._stores.close()
        if self._keyring is not None:
            await self._keyring.close()
        if self._s2 is not None:
            await self._s2.aclose()

    async def submit(self, observations: Sequence[Observation]) -> list[ItemError]:
        """Acknowledged by the broker: nothing is refused here (the worker dead-letters what it
        cannot write, see ``streams.faust_app``)."""
        assert self._producer is not None
        await self._producer.send(observations)
        return []

    async def reject(self, letters: Sequence[DeadLetter]) -> None:
        assert self._producer is not None
        await self._producer.dead_letter(letters)

    async def retrieve(self, scope: Scope, question: str, top_k: int, as_of: datetime | None = None) -> Retrieval:
        assert self._controller is not None and self._stores is not None, "service not started"
        self._stores.fresh_reads(scope.tenant_id)
        return await self._controller.retrieve(scope, question, top_k, as_of)

    async def recall(self, realm: Realm, question: str, top_k: int, as_of: datetime | None = None) -> Retrieval:
        assert self._controller is not None and self._stores is not None, "service not started"
        self._stores.fresh_reads(realm.tenant_id)
        return await self._controller.retrieve_realm(realm, question, top_k, as_of)

    async def answer(self, question: str, evidence: Sequence[str]) -> str | None:
        return None if self._s2 is None else await self._s2.answer(question, evidence)

    async def nodes(self, scope: Scope) -> list[MemoryNode]:
        return await self.stores.nodes.scan(scope)

    async def edges(self, scope: Scope) -> list[EdgeEvent]:
        return await self.stores.edges.scan(scope)

    async def dead_letters(self, tenant_id: str, limit: int) -> list[DeadLetter]:
        return await self.stores.dead_letters.recent(limit, tenant_id)

    async def conversations(self, tenant_id: str, users: Collection[str] | None = None) -> list[tuple[str, int]]:
        return await self.stores.nodes.conversations(tenant_id, users)

    async def decisions(self, scope: Scope) -> list[ConsolidationDecision]:
        return await self.stores.edges.decisions(scope)

    async def forget(self, scope: Scope, event_id: str | None) -> ForgetAccepted:
        """Publish a :class:`Forget` for one observation (``event_id``) or the whole conversation
        (None) to the observations topic; returns once the broker acknowledged it. The
        conversation's worker applies it after the events sent before it."""
        request = Forget(tenant_id=scope.tenant_id, conversation_id=scope.conversation_id, event_id=event_id,
                         requested_at=datetime.now(UTC))
        assert self._producer is not None
        await self._producer.forget([request])
        return ForgetAccepted()

    async def health(self) -> dict[str, Any]:
        return {"status": "ok", "mode": "distributed", "embedder": self.embedder.name,
                "system_one": self.settings.system_one, "system_two": self._s2 is not None}


def run_worker(settings: Settings) -> None:
    """Start one Faust worker process (blocks until it stops); JSON logs, and Prometheus metrics
    on ``settings.metrics_port`` when set, with the readiness check at ``/ready`` there (503
    while a partition is stalled, see :mod:`streams.stalls`)."""
    from faust.worker import Worker

    from jevmem import logs, metrics
    from streams.faust_app import AppConfig, Services, consumer_lag, create_app
    from streams.purging import Purger
    from streams.stalls import Stalls

    stalls = Stalls()

    def ready() -> dict[str, Any]:
        stalled = stalls.stalled()
        return {"ready": not stalled, "stalled": {f"{t}:{p}": round(s, 1) for (t, p), s in sorted(stalled.items())}}

    if settings.metrics_port:
        metrics.serve(settings.metrics_port, ready=ready)
    else:
        metrics.install()

    ensure_topics(assembly.kafka(settings), settings.topic_prefix, settings.topic_layout())
    settings.worker_datadir.mkdir(parents=True, exist_ok=True)
    prefix = asyncio.run(resolve_prefix(settings))
    embedder = assembly.load_embedder(settings)
    asyncio.run(check_model(settings, prefix, embedder.name))
    asyncio.run(prepare_indices(settings, prefix, embedder.dim))  # checks the Qdrant server's version too
    embedder.embed(["warm up"] * 4)  # first inferences allocate: not on the first batch's clock
    asyncio.run(check_keys(settings))
    keyring = assembly.keyring(settings)  # its client connects on the worker's event loop
    stores = distributed_stores(settings, prefix, embedder.dim, owner=True, keyring=keyring)
    config = AppConfig(kafka=assembly.kafka(settings), app_id=settings.app_id, prefix=settings.topic_prefix,
                       layout=settings.topic_layout(), batch=settings.write_batch, within_s=settings.write_wait_s,
                       datadir=str(settings.worker_datadir))
    output = ObservationProducer(assembly.kafka(settings), settings.topic_prefix, None,
                                 **{"compression.type": settings.kafka_output_compression})
    write_path = assembly.paths(settings, stores, embedder, embedded=False).writer()
    purge = stores.purge
    purger = Purger(functools.partial(purge, []), purged_stores(settings)) if purge is not None else None
    app = create_app(config, Services(write_path, stores, output.publish, keyring, stalls, purger))

    @app.timer(5.0)  # type: ignore[untyped-decorator]
    async def report_lag() -> None:
        lags = consumer_lag(app)
        metrics.CONSUMER_LAG.clear()  # partitions this worker no longer owns disappear
        for (topic, partition), lag in lags.items():
            metrics.CONSUMER_LAG.labels(topic, str(partition)).set(lag)

    @app.timer(1.0)  # type: ignore[untyped-decorator]
    async def report_stalls() -> None:
        stalls.keep((tp.topic, tp.partition) for tp in app.consumer.assignment())
        metrics.report_stalled(stalls.stalled().items())
        metrics.FORGET_UNPURGED.set(round(purger.oldest_s(), 1) if purger is not None else 0.0)

    Worker(app, loglevel=settings.log_level,
           logging_config=logs.config(settings.log_level, settings.log_format)).execute_from_commandline()


async def replay(settings: Settings, source: str, new_prefix: str, switch: bool) -> dict[str, Any]:
    """Rebuild into stores under ``new_prefix`` from the log (``source`` = "edges": memories, edges
    and consolidation topics, no System One calls; "observations": recompute), verify the rebuilt
    graph equals the active one, and make it active when ``switch`` and identical."""
    from streams.in_process import InProcessWriter
    from streams.replay import Unreadable, rebuild_from_log, recompute, verify

    check_prefix(new_prefix)
    spec = topics(settings.topic_prefix)
    embedder = assembly.load_embedder(settings)
    old_prefix = await resolve_prefix(settings)
    if new_prefix == old_prefix:
        raise ValueError(f"{new_prefix!r} is the active generation; choose a fresh prefix")
    if source == "edges":  # the memories topic carries the old generation's vectors
        await check_model(settings, old_prefix, embedder.name)
    await check_model(settings, new_prefix, embedder.name)
    keyring = await checked_keyring(settings)
    old = distributed_stores(settings, old_prefix, embedder.dim, keyring=keyring)
    new = distributed_stores(settings, new_prefix, embedder.dim, keyring=keyring)
    unreadable = 0

    async def log(role: str) -> list[bytes | dict[str, Any] | Unreadable]:
        """The topic's values, opened: a record sealed under a destroyed key (forgotten) is left
        out, or, on the observations topic, an :class:`~streams.replay.Unreadable` in its place."""
        nonlocal unreadable
        values: list[bytes] = [r.value for r in await asyncio.to_thread(read_topic, assembly.kafka(settings), spec[role].name)]
        if keyring is None:
            return list(values)
        opened = await keyring.open(values)
        unreadable += opened.forgotten
        out: list[bytes | dict[str, Any] | Unreadable] = []
        for raw, value in zip(values, opened.values, strict=True):
            if value is not None:
                out.append(value)
            elif role == "observations":
                clear = orjson.loads(raw)
                out.append(Unreadable(Scope(tenant_id=clear["tenant_id"], conversation_id=clear["conversation_id"]),
                                      clear["event_id"]))
        return out

    try:
        if source == "edges":
            memories, edges, decisions = await log("memories"), await log("edges"), await log("consolidation")
            report = await rebuild_from_log(new, [v for v in memories if not isinstance(v, Unreadable)],
                                            [v for v in edges if not isinstance(v, Unreadable)],
                                            [v for v in decisions if not isinstance(v, Unreadable)])
        elif source == "observations":
            wp = assembly.paths(settings, new, embedder, embedded=False).writer()
            report = await recompute(InProcessWriter(new, wp, wp.so), await log("observations"), settings.write_batch)
        else:
            raise ValueError("source must be 'edges' or 'observations'")
        problems = await verify(old, new, report.scopes)
        switched = False
        if switch and not problems:
            es = assembly.elasticsearch(settings)
            try:
                await set_active_generation(es, new_prefix)
            finally:
                await es.close()
            switched = True
        return {"source": source, "from_prefix": old_prefix, "to_prefix": new_prefix,
                "scopes": len(report.scopes), "nodes": report.nodes, "edges": report.edges,
                "decisions": report.decisions, "forgets": report.forgets, "controller_calls": report.controller_calls,
                "unreadable": unreadable, "identical": not problems, "problems": problems, "switched": switched}
    finally:
        await old.close()
        await new.close()
        if keyring is not None:
            await keyring.close()


async def check_keys(settings: Settings) -> None:
    """:func:`checked_keyring`, closed again (a start-up check on its own event loop)."""
    keyring = await checked_keyring(settings)
    if keyring is not None:
        await keyring.close()


async def checked_keyring(settings: Settings) -> Keyring | None:
    """The deployment's keyring when encryption is on (None otherwise), checked against the
    stored keys: :class:`~topology.errors.KekMissing` when the key-encryption key is missing,
    malformed, or not the one the stored keys are wrapped by."""
    keyring = assembly.keyring(settings)
    if keyring is not None:
        try:
            await keyring.check()
        except BaseException:
            await keyring.close()
            raise
    return keyring
