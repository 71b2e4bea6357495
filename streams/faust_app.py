"""The Faust app: one agent runs the whole write path per micro-batch, then logs what it wrote.

    observations --write--> [decode -> seqs -> nodes -> materialise -> candidates -> relations
                             -> edges -> consolidation]  --> memories, candidates, judgments,
                                                             edges, consolidation, deadletters

Forgetting: a :class:`~topology.schemas.Forget` on the observations topic (same key, so after the
events it deletes) splits its micro-batch: the observations before it are written, then it is
applied, then the rest. Applying it: plan (``streams.forget.plan``), log the
:class:`~topology.schemas.Forgotten` marker on the memories, edges and consolidation topics, then
delete. Logging first means a crash between the two leaves a marker whose deletion the retry (or a
rebuild from the derived log) performs; the deletion is idempotent. Once per batch, after its
forgets, they are logged applied and the batch is committed; the stores' files are purged of what
they deleted in the background (:mod:`streams.purging`: Elasticsearch's deleted documents
expunged), and each forget is logged purged.

Contracts (what makes a worker's death harmless, see docs/guarantees.md):

* One consumed topic, no Faust Table. A conversation (the record key) lives on one partition, so
  it has one writer at a time: the partition's owner.
* A batch's seqs come from the node store (``streams.write_path.number``), the same authority the
  in-process writer uses. Nodes are materialised (acknowledged, read-your-writes) before the batch's
  offsets can be committed, so whoever owns the partition next reads the seqs the previous owner
  wrote; a crash mid-batch leaves holes that redelivery refills with the same seqs
  (``topology.pipeline.assign_seqs``). There is no cached counter to go stale or to lose.
* The batch's events are acknowledged (and so their offsets committed) only after every store
  write and every output record was acknowledged: at-least-once into idempotent upserts keyed by
  deterministic ids. A batch failing with a transient (or configuration) error is retried in
  place with capped exponential backoff (an Elasticsearch or broker outage stalls the stream,
  loses nothing, and resumes by itself); after ``STALL_AFTER_ATTEMPTS`` attempts its partitions
  are reported stalled (:class:`streams.stalls.Stalls`: a metric and a failing readiness check).
* One bad record costs one dead letter. A batch failing with a *permanent* error
  (``topology.errors.kind_of``: a refusal, a record the stages cannot process) is split until the
  failing records are isolated (:func:`streams.isolation.isolate`); each goes to the dead-letter
  topic with the exception, the stage and its ``topic:partition:offset``, whatever the failed
  attempts stored of it is removed, and the rest of the batch is written and committed in order
  (records after a dead-lettered one are written after it).
* ``stream_wait_empty`` (Faust's default) stays on: on a rebalance (and on a graceful stop) the
  worker finishes and acks its batch before giving up the partition, so the next owner never
  overlaps it (no zombie writes) and a stop never acks a batch it did not finish.
* A record that does not decode becomes a dead letter (reason, original bytes,
  ``topic:partition:offset``) and the stream goes on.

Why no Table: with a table, Faust's recovery resumes the stream partitions, awaits the seek to the
committed offsets and only then resumes flow control, which clears every agent's input buffer;
records of a taken-over partition fetched in that window are dropped after aiokafka's fetch
position moved past them, and nothing seeks back (the partition stalls; later records may even be
committed across the gap). Without tables Faust resumes with the consumer's flow still stopped.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import faust
import orjson

from streams import forget as forgetting
from streams.isolation import Failed, isolate
from streams.kafka_client import KafkaClient
from streams.keyring import Keyring, letter_owner, sealed
from streams.purging import Purger
from streams.stalls import Partition, Stalls
from streams.write_path import (
    EventKey,
    Stores,
    Written,
    decode_batch,
    discard,
    relinker,
    stored_events,
    write_batch,
)
from topology import observe, sealing
from topology.errors import kind_of
from topology.pipeline import WritePath
from topology.schemas import DeadLetter, EdgeEvent, Forget, Observation, Scope, encode
from topology.sealing import DataKey
from topology.topics import TopicLayout

log = logging.getLogger("jevmem.streams")

#: Backoff between attempts of a failing batch: doubles from FIRST to at most MAX seconds.
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 10.0


@dataclass
class AppConfig:
    kafka: KafkaClient = field(default_factory=lambda: KafkaClient("127.0.0.1:9092"))
    app_id: str = "jevmem"
    prefix: str = "jevmem"
    layout: TopicLayout = field(default_factory=TopicLayout)
    batch: int = 64              # the write path's chunk (observations embedded / linked at a time)
    chunks: int = 4              # a micro-batch takes up to batch * chunks records
    within_s: float = 0.1        # how long a micro-batch waits to fill: the idle stream's latency floor
    store: str = "memory://"
    web_port: int = 6066
    datadir: str = ".jevmem/worker"


#: Log records: ``[(topic name, [(key, value), ...]), ...]``; returns once the broker acknowledged
#: every record, raises when any failed.
Publish = Callable[[Sequence[tuple[str, Sequence[tuple[str, bytes]]]]], Awaitable[object]]


@dataclass
class Services:
    """What the agent calls: the write path, the stores it materialises into, and how it logs
    its output records (the worker passes :meth:`streams.producer.ObservationProducer.publish`:
    one librdkafka producer and a shared delivery report measured about 10x less CPU per record
    than a Faust send and future per record; a batch of 64 turns logs about 2,500 records)."""

    write_path: WritePath
    stores: Stores
    publish: Publish
    #: seals the personal fields of every output record and opens sealed input (None: plaintext)
    keyring: Keyring | None = None
    #: the partitions whose batch keeps failing (the worker's metric and readiness check read it)
    stalls: Stalls = field(default_factory=Stalls)
    #: purges the stores' files after forgets, in the background (None: the stores need no purge)
    purger: Purger | None = None


async def retrying(what: str, attempt: Callable[[], Awaitable[None]],
                   first_s: float = RETRY_FIRST_S, max_s: float = RETRY_MAX_S,
                   stalls: Stalls | None = None, partitions: Sequence[Partition] = ()) -> int:
    """Run ``attempt`` until it succeeds; returns the number of failed attempts. Only safe for an
    idempotent attempt (a batch: upserts by deterministic ids, seqs from the store). Every failed
    attempt is logged with its kind (``topology.errors.kind_of``: a permanent error reaching here
    is one isolation could not pin on a record) and told to ``stalls`` for ``partitions``, which
    report them stalled after ``stalls.after_attempts`` failures; success clears them."""
    failures, delay, first = 0, first_s, 0.0
    while True:
        try:
            await attempt()
            if stalls is not None:
                stalls.cleared(partitions)
            return failures
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failures += 1
            if failures == 1:
                first = time.monotonic()
            if stalls is not None:
                stalls.failed(partitions, failures, first)
                if failures == stalls.after_attempts:
                    log.error("%s stalled: %d attempts failed over %.1f s; partitions %s reported stalled, still "
                              "retrying: %r", what, failures, time.monotonic() - first,
                              ", ".join(f"{t}:{p}" for t, p in partitions), exc)
            log.warning("%s failed (attempt %d, %s), retrying in %.1f s: %r", what, failures, kind_of(exc), delay, exc)
            await asyncio.sleep(delay)
            delay = min(max_s, delay * 2)


def trace_id_of(headers: Any) -> str | None:
    """The ``trace_id`` record header (a mapping or (key, value) pairs, as Faust gives them)."""
    pairs = headers.items() if isinstance(headers, Mapping) else (headers or ())
    for key, value in pairs:
        if key == "trace_id" and value:
            text = value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)
            return text[:64]
    return None


def consumer_lag(app: faust.App) -> dict[tuple[str, int], int]:
    """Records behind the log end per assigned partition (high watermark minus the committed
    offset, or minus the read position when nothing is committed yet)."""
    consumer: Any = app.consumer
    out: dict[tuple[str, int], int] = {}
    for tp in consumer.assignment():
        try:
            high = consumer.highwater(tp)
        except Exception:  # not fetched yet
            continue
        if high is None:
            continue
        done = consumer._committed_offset.get(tp)
        if done is None:
            read = consumer._read_offset.get(tp)
            done = read + 1 if read is not None else 0
        out[(tp.topic, tp.partition)] = max(0, int(high) - int(done))
    return out


def _key(tenant_id: str, conversation_id: str) -> str:
    return Scope(tenant_id=tenant_id, conversation_id=conversation_id).key


def credentials(kafka: KafkaClient) -> faust.types.auth.CredentialsT | None:
    """Faust's (aiokafka's) credentials for ``kafka``: SASL with its TLS context, TLS alone, or
    None for plaintext."""
    if kafka.sasl:
        password = kafka.sasl_password.get_secret_value() if kafka.sasl_password else None
        return faust.SASLCredentials(username=kafka.sasl_username, password=password,
                                     ssl_context=kafka.ssl_context(), mechanism=kafka.sasl_mechanism)
    context = kafka.ssl_context()
    return faust.SSLCredentials(context) if context is not None else None


def create_app(config: AppConfig, services: Services) -> faust.App:
    layout = config.layout
    app = faust.App(
        config.app_id,
        broker=[f"kafka://{h.strip()}" for h in config.kafka.bootstrap.split(",") if h.strip()],
        broker_credentials=credentials(config.kafka),
        store=config.store,
        topic_partitions=layout.partitions,
        topic_replication_factor=layout.replication_factor,
        producer_acks=-1,
        consumer_auto_offset_reset="earliest",
        web_port=config.web_port,
        datadir=config.datadir,
        web_enabled=False,
        broker_commit_every=256,
        broker_commit_interval=1.0,
        # a dead worker's partitions move within ~10 s instead of the 60 s default
        broker_session_timeout=10.0,
        broker_heartbeat_interval=1.0,
    )
    spec = layout.specs(config.prefix)

    def topic(role: str) -> faust.TopicT:
        s = spec[role]
        return app.topic(s.name, key_serializer="raw", value_serializer="raw", partitions=layout.partitions,
                         retention=None if s.retention_ms < 0 else s.retention_ms / 1000.0,
                         replicas=layout.replication_factor, config=s.config(layout.min_insync_replicas))

    outputs = ("memories", "candidates", "judgments", "edges", "consolidation", "deadletters")
    observations = topic("observations")
    for role in outputs:  # declared so the app creates them with their retention and configs
        topic(role)
    memories, candidates, judgments, edges, consolidation, deadletters = (spec[r].name for r in outputs)
    wp, stores, publish, keyring = services.write_path, services.stores, services.publish, services.keyring
    stores.embedder = wp.embedder  # a forget (or an undone record) re-embeds the turn after the forgotten one
    stores.relink = relinker(stores, wp)  # and links it again
    stalls, purger = services.stalls, services.purger

    async def process(values: Sequence[tuple[bytes, str]], trace_ids: Sequence[str],
                      timestamps: Sequence[float]) -> None:
        # the batch's trace ids (from the producers' record headers) label its log lines and the
        # records it emits; one id when the whole batch came from one API request
        token = observe.TRACE_ID.set(",".join(trace_ids) if trace_ids else None)
        try:
            await process_traced(values, timestamps)
        finally:
            observe.TRACE_ID.reset(token)

    async def process_traced(values: Sequence[tuple[bytes, str]], timestamps: Sequence[float]) -> None:
        inputs: Sequence[tuple[bytes | dict[str, Any], str]] = values
        event_keys: dict[tuple[str, str, str], DataKey] = {}
        if keyring is not None:
            opened = await keyring.open([v for v, _ in values])
            kept = [i for i, v in enumerate(opened.values) if v is not None]
            if opened.forgotten:  # sealed under a key a forget destroyed: forgotten, not invalid
                observe.count("forgotten_record", opened.forgotten, "topic")
                log.info("skipped records whose keys were destroyed by a forget",
                         extra={"records": opened.forgotten, "first": values[0][1]})
            inputs = [(v if isinstance((v := opened.values[i]), dict) else values[i][0], values[i][1]) for i in kept]
            timestamps = [timestamps[i] for i in kept]
            for i in kept:
                key, v = opened.keys[i], opened.values[i]
                if key is not None and isinstance(v, dict) and isinstance(v.get("event_id"), str):
                    event_keys[(key.tenant_id, key.conversation_id, v["event_id"])] = key
        origins: dict[EventKey, tuple[bytes | dict[str, Any], str]] = {}
        items, letters = decode_batch(inputs, timestamps, origins)
        await reject(letters, "topic")
        applied: list[tuple[Scope, dict[str, Any]]] = []
        for part in forgetting.split_at_forgets(items):
            if isinstance(part, Forget):
                applied.append(await forget(part))
            else:
                await write_isolated(part, event_keys, origins)
        for _, what in applied:  # applied: deleted and keys destroyed; the files' purge follows (purging)
            log.info("forget applied", extra=what)
            if purger is not None:
                purger.submit(what)

    async def reject(letters: Sequence[DeadLetter], origin: str) -> None:
        """Log ``letters`` on the dead-letter topic (each sealed under a key of its own)."""
        if not letters:
            return
        keys = await keyring.create([letter_owner(d) for d in letters]) if keyring is not None else []
        await publish([(deadletters, [("rejected", sealed(d, keys[i] if keys else None))
                                      for i, d in enumerate(letters)])])
        observe.count("dead_letter", len(letters), origin)
        for d in letters:
            log.warning("dead letter %s: %s", d.source, d.reason)

    async def write_isolated(obs: list[Observation], event_keys: Mapping[tuple[str, str, str], DataKey],
                             origins: Mapping[EventKey, tuple[bytes | dict[str, Any], str]]) -> None:
        """:func:`write`, isolating the records that fail permanently (see the module's docstring):
        each is undone from the stores as soon as it is isolated, and dead-lettered with its
        record's value and ``topic:partition:offset`` once the rest is written."""
        before = await stored_events(stores, obs)

        async def undo(f: Failed[Observation]) -> None:
            await discard(stores, f.item, before)

        failed = await isolate(obs, functools.partial(write, event_keys=event_keys), undo)
        letters = []
        for f in failed:
            value, source = origins.get((f.item.tenant_id, f.item.conversation_id, f.item.event_id),
                                        (f.item.model_dump(mode="json"), "write"))
            original = value if isinstance(value, bytes) else orjson.dumps(value)
            letters.append(DeadLetter.of(original, f.reason, source, f.item.tenant_id))
        await reject(letters, "write")

    async def forget(request: Forget) -> tuple[Scope, dict[str, Any]]:
        """Apply ``request``; returns its scope and what its log lines carry (``forget applied``
        once the batch's forgets are applied, ``forget purged`` once the files are purged)."""
        marker = await forgetting.plan(stores, request)
        key, value = marker.scope.key, encode(marker)
        await publish([(memories, [(key, value)]), (edges, [(key, value)]), (consolidation, [(key, value)])])
        report = await forgetting.apply(stores, marker, embedder=stores.embedder, relink=stores.relink)
        if report.rewritten:  # the next turn, re-embedded after its new turn before and linked again: logged after the marker
            own = await keyring.of_nodes(marker.scope, [n.id for n in report.rewritten]) if keyring is not None else {}
            keys = await keyring.node_keys(report.rewritten, own) if keyring is not None else {}
            written = {n.id for n in report.rewritten}
            await publish([(memories, [(n.scope.key, sealed(n, keys.get(n.id))) for n in report.rewritten]),
                           (edges, [(_key(e.tenant_id, e.conversation_id),
                                     sealed(e, own.get(sealing.edge_owner(e.source, e.target, written))))
                                    for e in report.relinked])])
        destroyed = None
        if keyring is not None:  # after the stores are clean: from now on the log's copies are unreadable
            destroyed = await keyring.destroy(marker.scope, None if marker.event_id is None else marker.node_ids,
                                              before=request.requested_at.timestamp())
        return marker.scope, {"event": marker.event_id, "nodes": len(marker.node_ids),
                              "keys_destroyed": destroyed, "accepted_at": request.requested_at.isoformat()}

    async def output_keys(w: Written, event_keys: Mapping[tuple[str, str, str], DataKey]) -> dict[str, DataKey]:
        """The key sealing each output record, by node id: an observation's node (and what was
        judged for it) under the key its observation came with, every other node under a new one."""
        assert keyring is not None
        by_node: dict[str, DataKey] = {}
        for n in w.nodes:
            k = event_keys.get((n.tenant_id, n.conversation_id, n.event_id))
            if k is not None:
                by_node[n.id] = k
        written = {n.id for n in w.nodes + w.derived}
        scope_of = {n.id: (n.tenant_id, n.conversation_id) for n in w.nodes + w.derived}
        for e in w.edges + w.links:
            scope_of.setdefault(sealing.edge_owner(e.source, e.target, written), (e.tenant_id, e.conversation_id))
        owners = [nid for nid in scope_of if nid not in by_node]
        for nid, k in zip(owners, await keyring.create([(*scope_of[nid], nid) for nid in owners]), strict=True):
            by_node[nid] = k
        return by_node

    async def write(obs: list[Observation], event_keys: Mapping[tuple[str, str, str], DataKey]) -> None:
        # in chunks, pipelined: chunk i+1 is embedded while chunk i is linked and written (the
        # stores take one bulk request per batch, see Stores.sync, so chunks cost no extra requests)
        t0 = time.perf_counter()
        with observe.tally() as stages:
            w = await write_batch(stores, wp, obs, chunk=config.batch)
            with observe.timed("emit"):
                keys = await output_keys(w, event_keys) if keyring is not None else {}
                # a node read after the turn before it: sealed under both turns' keys
                sealing_nodes = await keyring.node_keys(w.nodes, keys) if keyring is not None else {}
                written = {n.id for n in w.nodes + w.derived}

                def edge_key(e: EdgeEvent) -> DataKey | None:
                    return keys.get(sealing.edge_owner(e.source, e.target, written))

                await publish([
                    (memories, [(n.scope.key, sealed(n, sealing_nodes.get(n.id, keys.get(n.id))))
                                for n in w.nodes + w.derived]),
                    # the node travels whole on the memories topic; here it is named, not repeated
                    (candidates, [(c.node.scope.key, sealed(c.model_copy(update={"node": c.node.without_embedding()}),
                                                            keys.get(c.node.id)))
                                  for c in w.candidates]),
                    (judgments, [(_key(j.tenant_id, j.conversation_id), encode(j)) for j in w.judgments]),
                    (edges, [(_key(e.tenant_id, e.conversation_id), sealed(e, edge_key(e))) for e in w.edges + w.links]),
                    (consolidation, [(_key(d.tenant_id, d.conversation_id), encode(d)) for d in w.decisions]),
                ])
        log.info("stored", extra={"observations": len(obs), "new": w.new, "edges": len(w.edges),
                                  "decisions": len(w.decisions), "ms": round(1000 * (time.perf_counter() - t0), 1),
                                  "stage_ms": {k: round(1000 * v, 1) for k, v in sorted(stages.items())},
                                  "events": [o.event_id for o in obs[:50]]})

    # the write path's in-memory conversations are only fresh while this worker owns their
    # partitions: forget them whenever the assignment changes (reloaded from the stores on use,
    # which then read everything the previous owner acknowledged)
    async def drop_views(_app: Any, /, *_args: Any, **_kw: Any) -> None:
        stores.reassigned()

    app.on_partitions_revoked.connect(drop_views)
    app.on_partitions_assigned.connect(drop_views)

    @app.agent(observations)
    async def write_agent(stream: faust.StreamT[bytes]) -> AsyncIterator[None]:
        async for events in stream.take_events(config.batch * config.chunks, within=config.within_s):  # type: ignore[attr-defined]
            values = [(ev.value, f"{ev.message.topic}:{ev.message.partition}:{ev.message.offset}") for ev in events]
            trace_ids = sorted({t for ev in events if (t := trace_id_of(ev.message.headers))})
            stamps = [float(ev.message.timestamp) for ev in events]
            first = values[0][1] if values else "empty"
            partitions = sorted({(ev.message.topic, ev.message.partition) for ev in events})
            await retrying(f"batch from {first} ({len(values)} records)",
                           functools.partial(process, values, trace_ids, stamps), stalls=stalls, partitions=partitions)
            yield None  # the batch's events are acked when the stream moves on

    if purger is not None:
        @app.task  # type: ignore[untyped-decorator]
        async def purge_forgotten() -> None:
            """The background purge of applied forgets (:mod:`streams.purging`), with a sweep at start."""
            await purger.run()

    @app.task  # type: ignore[untyped-decorator]
    async def dump_on_sigusr2() -> None:
        """``kill -USR2 <worker>`` logs every asyncio task's stack and the consumer's per-partition
        positions (diagnosing a stalled worker)."""
        import io
        import signal

        def dump() -> None:
            buf = io.StringIO()
            for task in asyncio.all_tasks():
                task.print_stack(file=buf)
            log.warning("task dump:\n%s", buf.getvalue())
            log.warning("consumer state: %s", consumer_state(app))

        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR2, dump)

    app.jevmem_agents = (write_agent,)  # type: ignore[attr-defined]
    return app


def consumer_state(app: faust.App) -> dict[str, Any]:
    """Per assigned partition: aiokafka's fetch position, Faust's read/committed offsets and
    whether Faust considers it active or paused (diagnosing a partition that stopped moving)."""
    consumer: Any = app.consumer
    out: dict[str, Any] = {}
    try:
        inner = consumer._thread._ensure_consumer()
        assignment = inner._subscription.subscription.assignment
    except Exception:  # diagnostics only: internals differ across versions
        inner, assignment = None, None
    active = consumer._active_partitions or set()
    for tp in sorted(consumer.assignment()):
        pos = None
        if assignment is not None:
            try:
                pos = assignment.state_value(tp).position
            except Exception:
                pos = None
        out[f"{tp.topic}:{tp.partition}"] = {
            "fetch_position": pos, "read_offset": consumer._read_offset.get(tp),
            "committed": consumer._committed_offset.get(tp), "active": tp in active,
            "paused": tp in consumer._paused_partitions}
    return out
