"""The pipeline's topics on a cluster: creating them with their layout, checking the existing
ones against it, and reading a topic whole (replay, dead letters, benchmarks)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka import admin as kafka_admin
from confluent_kafka.admin._metadata import TopicMetadata

from streams.kafka_client import KafkaClient
from topology.errors import BrokerUnavailable
from topology.topics import TopicLayout, TopicState, layout_problems

log = logging.getLogger("jevmem.kafka")

#: Seconds an admin request may take.
ADMIN_TIMEOUT_S = 15.0


class TopicLayoutError(BrokerUnavailable):
    """An existing topic does not have the configured layout (the message says what to do)."""


def ensure_topics(kafka: KafkaClient | str, prefix: str, layout: TopicLayout | None = None) -> list[str]:
    """Create the pipeline's missing topics with ``layout`` and check the existing ones against
    it (:func:`topology.topics.layout_problems`): raises :class:`TopicLayoutError` listing every
    error, logs and returns the warnings. Fails fast (:meth:`KafkaClient.check`) when the cluster
    cannot be reached or refuses the credentials."""
    client = KafkaClient.of(kafka)
    layout = layout or TopicLayout()
    meta = client.check(ADMIN_TIMEOUT_S)
    specs = layout.specs(prefix)
    if layout.replication_factor > len(meta.brokers):
        missing = [s.name for s in specs.values() if s.name not in meta.topics]
        if missing:
            raise TopicLayoutError(
                f"kafka {client.bootstrap} has {len(meta.brokers)} broker(s): topics with replication factor "
                f"{layout.replication_factor} cannot be created; for a single-broker development setup set "
                "JEVMEM_KAFKA_REPLICATION_FACTOR=1 and JEVMEM_KAFKA_MIN_INSYNC_REPLICAS=1")
    admin = kafka_admin.AdminClient(client.librdkafka())
    existing = {s.name: _state(admin, meta.topics[s.name]) for s in specs.values() if s.name in meta.topics}
    problems: list[str] = []
    warnings: list[str] = []
    for state in existing.values():
        e, w = layout_problems(layout, state)
        problems += e
        warnings += w
    if problems:
        raise TopicLayoutError("; ".join(problems))
    for warning in warnings:
        log.warning("%s", warning)
    new = [kafka_admin.NewTopic(s.name, num_partitions=layout.partitions,  # type: ignore[attr-defined]
                                replication_factor=layout.replication_factor,
                                config=s.config(layout.min_insync_replicas))
           for s in specs.values() if s.name not in existing]
    raced: list[str] = []
    if new:
        for name, fut in admin.create_topics(new, request_timeout=ADMIN_TIMEOUT_S).items():
            try:
                fut.result()
            except KafkaException as exc:  # another process created it first (or our metadata was stale)
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise BrokerUnavailable(f"create topic {name}: {exc}") from exc
                raced.append(name)
    # A topic that already existed after all (another process made it, or the broker we asked
    # did not list it yet) is checked like any existing one: it may have been made otherwise.
    problems = [e for name in raced for e in layout_problems(layout, _state(admin, _described(admin, name)))[0]]
    if problems:
        raise TopicLayoutError("; ".join(problems))
    return warnings


def _described(admin: kafka_admin.AdminClient, name: str, attempts: int = 20) -> TopicMetadata:
    """The metadata of topic ``name``, which the cluster says exists, asked again until the broker
    answering lists it (its metadata follows the controller's within moments)."""
    for _ in range(attempts):
        meta = admin.list_topics(topic=name, timeout=ADMIN_TIMEOUT_S).topics.get(name)
        if meta is not None and meta.error is None and meta.partitions:
            return meta
        time.sleep(0.25)
    raise BrokerUnavailable(f"topic {name} exists but no broker describes it")


def _state(admin: kafka_admin.AdminClient, meta: TopicMetadata) -> TopicState:
    """An existing topic's partitions, smallest replica count and ``min.insync.replicas``."""
    name = str(meta.topic)
    replicas = min((len(p.replicas) for p in meta.partitions.values()), default=0)
    resource = kafka_admin.ConfigResource(kafka_admin.ResourceType.TOPIC, name)  # type: ignore[attr-defined]
    isr: int | None = None
    try:
        configs = admin.describe_configs([resource], request_timeout=ADMIN_TIMEOUT_S)[resource].result()
        entry = configs.get("min.insync.replicas")
        isr = int(entry.value) if entry is not None and entry.value is not None else None
    except KafkaException as exc:  # not allowed to describe configs: check partitions and replicas only
        log.info("cannot describe the configuration of topic %s: %s", name, exc)
    return TopicState(name, len(meta.partitions), replicas, isr)


#: Errors that mean "ask again after a metadata refresh" which librdkafka does not flag retriable:
#: a new leader whose high watermark has not caught up with its followers yet (just after a broker
#: was lost), and a request that was in flight to a broker the cluster's metadata no longer lists
#: (librdkafka decommissions that broker's handle and fails its requests with _DESTROY_BROKER).
_TRANSIENT = {KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
              KafkaError._DESTROY_BROKER}


def watermarks(consumer: Consumer, tp: TopicPartition, attempts: int = 20) -> tuple[int, int]:
    """The partition's low and high offsets. A retriable error (the leader moved: a broker was
    lost or restarted; the new leader's high watermark is not caught up yet; the broker asked was
    dropped from the cluster's metadata while the request was in flight) is asked again
    after the client refreshed its metadata, as the protocol expects of a client, for at most
    ``attempts`` half-second waits."""
    for attempt in range(attempts):
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=ADMIN_TIMEOUT_S)
            return int(low), int(high)
        except KafkaException as exc:
            err = exc.args[0]
            if attempt + 1 == attempts or not (err.retriable() or err.code() in _TRANSIENT):
                raise
            log.info("watermarks of %s [%d]: %s; asking again", tp.topic, tp.partition, err.str())
            consumer.list_topics(tp.topic, timeout=ADMIN_TIMEOUT_S)  # refreshes the leaders
            time.sleep(0.5)
    raise AssertionError("unreachable")


@dataclass(frozen=True, order=True)
class Record:
    partition: int
    offset: int
    timestamp_ms: int
    value: bytes


def read_topic(kafka: KafkaClient | str, topic: str, timeout_s: float = 30.0) -> list[Record]:
    """Every record of ``topic`` from the beginning to the current end, in partition then offset
    order (per-partition order is what the pipeline guarantees)."""
    client = KafkaClient.of(kafka)
    consumer = Consumer(client.librdkafka(**{"group.id": f"jevmem-reader-{topic}", "enable.auto.commit": False,
                                             "auto.offset.reset": "earliest"}))
    try:
        meta = consumer.list_topics(topic, timeout=ADMIN_TIMEOUT_S).topics.get(topic)
        if meta is None or meta.error is not None:
            raise BrokerUnavailable(f"topic {topic} not found")
        ends = {p: watermarks(consumer, TopicPartition(topic, p)) for p in meta.partitions}
        todo = {p for p, (low, high) in ends.items() if high > low}
        consumer.assign([TopicPartition(topic, p, ends[p][0]) for p in todo])
        out: list[Record] = []
        deadline = time.monotonic() + timeout_s
        while todo and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=1.0):
                if msg.error() is not None:
                    continue
                p, off = msg.partition() or 0, msg.offset() or 0
                if p in todo:
                    out.append(Record(p, off, msg.timestamp()[1], msg.value() or b""))
                    if off + 1 >= ends[p][1]:
                        todo.discard(p)
        if todo:
            raise BrokerUnavailable(f"timed out reading {topic}: partitions {sorted(todo)} incomplete")
        return sorted(out)
    finally:
        consumer.close()
