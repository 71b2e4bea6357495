"""Producer SDK for agent runtimes: observations onto the observations topic.

confluent-kafka with the idempotent producer (``enable.idempotence``, ``acks=all``): retries never
duplicate or reorder within a partition. The key is :attr:`Scope.key` (tenant + conversation) so
a conversation stays ordered, partitioned by murmur2 like the Java and aiokafka clients.
``send`` resolves only when the broker acknowledged every record and raises
:class:`BrokerUnavailable` listing the records that failed (delivery reports surfaced).

With a :class:`~streams.keyring.Keyring` (``JEVMEM_ENCRYPTION``), every observation and dead
letter is sealed under a new data key of its own, stored before the record is produced
(``topology.sealing``); forget requests travel in the clear (they carry only ids).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from streams.kafka_client import FATAL_CODES, KafkaClient
from streams.keyring import Keyring, letter_owner, sealed
from topology import ids, observe
from topology.errors import BrokerUnavailable
from topology.schemas import DeadLetter, Forget, Observation, encode
from topology.topics import topics


@dataclass(frozen=True)
class Delivery:
    topic: str
    partition: int
    offset: int
    key: str


#: Seconds a produced record may wait for its acknowledgement.
ACK_TIMEOUT_S = 30.0


def producer_config(kafka: KafkaClient | str, **extra: Any) -> dict[str, Any]:
    return KafkaClient.of(kafka).librdkafka(**{
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        # the observations topic's consumers (aiokafka in the Faust workers) read none/gzip
        # natively; the workers' output producer compresses (Settings.kafka_output_compression)
        "compression.type": "none",
        "message.timeout.ms": 30_000,
        # the Java client's (and aiokafka's, so Faust's) partitioner: a key lands on the same
        # partition whichever client wrote it (librdkafka's default, consistent_random, is CRC32)
        "partitioner": "murmur2_random",
        **extra,
    })


class ObservationProducer:
    """Thread-safe; one per process. Use ``async with`` or call ``close``. A connection that can
    never work (authentication or TLS refused) fails the pending call at once with what to fix,
    instead of after the acknowledgement timeout."""

    def __init__(self, kafka: KafkaClient | str, prefix: str = "jevmem", keyring: Keyring | None = None,
                 **config: Any) -> None:
        self._kafka = KafkaClient.of(kafka)
        self.keyring = keyring
        self._fatal: KafkaError | None = None
        self._closed = False
        self._producer = Producer(producer_config(self._kafka, error_cb=self._on_error, **config))
        spec = topics(prefix)
        self.topic = spec["observations"].name
        self.dead_letter_topic = spec["deadletters"].name
        self._poller: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ObservationProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _put(self, topic: str, key: str, value: bytes, on_delivery: Any,
                   headers: list[tuple[str, str | bytes | None]] | None) -> None:
        """Queue one record; a full local queue is drained (delivery reports served) and retried."""
        while True:
            try:
                self._producer.produce(topic, key=key.encode(), value=value, on_delivery=on_delivery, headers=headers)
                return
            except BufferError:
                self._raise_fatal()
                await asyncio.to_thread(self._producer.poll, 0.1)

    def _on_error(self, err: KafkaError) -> None:  # librdkafka's thread
        if err.code() in FATAL_CODES:
            self._fatal = err

    def _raise_fatal(self) -> None:
        if self._fatal is not None:
            err, self._fatal = self._fatal, None
            raise BrokerUnavailable(self._kafka.explain(err))

    def _drain(self) -> int:
        """Flush in short steps until nothing is pending, the timeout passed or the connection
        proved wrong; returns the records still pending."""
        deadline = time.monotonic() + ACK_TIMEOUT_S
        pending = self._producer.flush(0.2)
        while pending and time.monotonic() < deadline and self._fatal is None:
            pending = self._producer.flush(0.2)
        return pending

    async def _flush(self, n: int) -> None:
        """Wait (in a thread) until every queued record is acknowledged or failed."""
        pending = await asyncio.to_thread(self._drain)
        self._raise_fatal()
        if pending:
            raise BrokerUnavailable(f"{pending} of {n} records not acknowledged within {ACK_TIMEOUT_S:.0f} s")

    async def _produce(self, topic: str, records: Sequence[tuple[str, bytes]]) -> list[Delivery]:
        """Produce and wait for every acknowledgement; records carry the current trace id
        (:data:`topology.observe.TRACE_ID`) as a ``trace_id`` header when one is set."""
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[Delivery]] = []

        def report(fut: asyncio.Future[Delivery], key: str) -> Any:
            def cb(err: KafkaError | None, msg: Message) -> None:
                if err is not None:
                    loop.call_soon_threadsafe(_fail, fut, BrokerUnavailable(f"{key}: {err.str()}"))
                else:
                    d = Delivery(msg.topic() or topic, msg.partition() or 0, msg.offset() or 0, key)
                    loop.call_soon_threadsafe(_done, fut, d)
            return cb

        headers = _trace_headers()
        for key, value in records:
            fut: asyncio.Future[Delivery] = loop.create_future()
            futures.append(fut)
            await self._put(topic, key, value, report(fut, key), headers)
        await self._flush(len(records))
        results = await asyncio.gather(*futures, return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            raise BrokerUnavailable(f"{len(failed)} of {len(records)} records failed: {failed[0]}")
        return [r for r in results if isinstance(r, Delivery)]

    async def publish(self, batches: Sequence[tuple[str, Sequence[tuple[str, bytes]]]]) -> int:
        """Produce every record of every ``(topic, [(key, value), ...])`` and return once the
        broker acknowledged all of them (the count); raises :class:`BrokerUnavailable` when any
        failed or was not acknowledged within 30 s. For bulk output (a worker logs thousands of
        records per batch): no per-record future or event-loop callback, one shared delivery
        report, the wait in a thread. Records carry the trace id header like :meth:`send`."""
        failed: list[str] = []

        def report(err: KafkaError | None, msg: Message) -> None:  # runs in the flushing thread
            if err is not None:
                failed.append(f"{msg.topic()}: {err.str()}")

        headers = _trace_headers()
        n = 0
        for topic, records in batches:
            for key, value in records:
                await self._put(topic, key, value, report, headers)
                n += 1
        await self._flush(n)
        if failed:
            raise BrokerUnavailable(f"{len(failed)} of {n} records failed: {failed[0]}")
        return n

    async def send(self, observations: Sequence[Observation]) -> list[Delivery]:
        """Publish observations; returns their partitions/offsets once all are acknowledged. One
        without ``observed_at`` is observed now (:meth:`Observation.stamped`): the time is in the
        log, so a replay sees the same."""
        now = datetime.now(UTC)
        if self.keyring is None:
            return await self._produce(self.topic, [(o.scope.key, encode(o.stamped(now))) for o in observations])
        keys = await self.keyring.create([(o.tenant_id, o.conversation_id, ids.node_id(o.tenant_id, o.conversation_id,
                                                                                        o.event_id))
                                          for o in observations])
        return await self._produce(self.topic, [(o.scope.key, sealed(o.stamped(now), k))
                                                for o, k in zip(observations, keys, strict=True)])

    async def forget(self, requests: Sequence[Forget]) -> list[Delivery]:
        """Publish forget requests onto the observations topic, keyed like the conversation's
        events (:attr:`Scope.key`): each lands on its conversation's partition after the events
        sent before it, and the worker applies it in that order."""
        return await self._produce(self.topic, [(f.scope.key, encode(f)) for f in requests])

    async def send_raw(self, records: Sequence[tuple[str, bytes]]) -> list[Delivery]:
        """Publish pre-encoded values (operators' tools, tests of the dead-letter path)."""
        return await self._produce(self.topic, records)

    async def dead_letter(self, letters: Sequence[DeadLetter]) -> list[Delivery]:
        """Publish dead letters (sealed, each under a new key of the conversation it names, when
        the producer has a keyring)."""
        if self.keyring is None:
            return await self._produce(self.dead_letter_topic, [("rejected", encode(d)) for d in letters])
        keys = await self.keyring.create([letter_owner(d) for d in letters])
        return await self._produce(self.dead_letter_topic, [("rejected", sealed(d, k))
                                                            for d, k in zip(letters, keys, strict=True)])

    async def close(self) -> None:
        """Wait for what is queued (at most the acknowledgement timeout; nothing when the
        connection proved wrong), drop the rest and release the client: its connections and
        threads end here, not whenever the object is collected (a client with refused
        credentials would otherwise go on retrying them). Calling it again does nothing."""
        if self._closed:
            return
        self._closed = True

        def shut() -> None:
            if self._drain():
                self._producer.purge()
            self._producer.close()

        await asyncio.to_thread(shut)


def _trace_headers() -> list[tuple[str, str | bytes | None]] | None:
    """The current trace id (:data:`topology.observe.TRACE_ID`) as a ``trace_id`` record header."""
    trace_id = observe.TRACE_ID.get()
    return [("trace_id", trace_id.encode())] if trace_id else None


def _done(fut: asyncio.Future[Delivery], value: Delivery) -> None:
    if not fut.done():
        fut.set_result(value)


def _fail(fut: asyncio.Future[Delivery], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)
