"""Producer SDK for agent runtimes: observations onto the observations topic.

confluent-kafka with the idempotent producer (``enable.idempotence``, ``acks=all``): retries never
duplicate or reorder within a partition. The key is :attr:`Scope.key` (tenant + conversation) so
a conversation stays ordered, partitioned by murmur2 like the Java and aiokafka clients.
``send`` resolves only when the broker acknowledged every record and raises
:class:`BrokerUnavailable` listing the records that failed (delivery reports surfaced).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from topology import observe
from topology.errors import BrokerUnavailable
from topology.schemas import DeadLetter, Forget, Observation, encode
from topology.topics import topics


@dataclass(frozen=True)
class Delivery:
    topic: str
    partition: int
    offset: int
    key: str


def producer_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": "none",  # consumers (aiokafka in the Faust workers) read none/gzip natively
        "message.timeout.ms": 30_000,
        # the Java client's (and aiokafka's, so Faust's) partitioner: a key lands on the same
        # partition whichever client wrote it (librdkafka's default, consistent_random, is CRC32)
        "partitioner": "murmur2_random",
        **extra,
    }


class ObservationProducer:
    """Thread-safe; one per process. Use ``async with`` or call ``close``."""

    def __init__(self, bootstrap: str, prefix: str = "jevmem", **config: Any) -> None:
        self._producer = Producer(producer_config(bootstrap, **config))
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
                await asyncio.to_thread(self._producer.poll, 0.1)

    async def _flush(self, n: int) -> None:
        """Wait (in a thread) until every queued record is acknowledged or failed."""
        pending = await asyncio.to_thread(self._producer.flush, 30.0)
        if pending:
            raise BrokerUnavailable(f"{pending} of {n} records not acknowledged within 30 s")

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
        """Publish observations; returns their partitions/offsets once all are acknowledged."""
        return await self._produce(self.topic, [(o.scope.key, encode(o)) for o in observations])

    async def forget(self, requests: Sequence[Forget]) -> list[Delivery]:
        """Publish forget requests onto the observations topic, keyed like the conversation's
        events (:attr:`Scope.key`): each lands on its conversation's partition after the events
        sent before it, and the worker applies it in that order."""
        return await self._produce(self.topic, [(f.scope.key, encode(f)) for f in requests])

    async def send_raw(self, records: Sequence[tuple[str, bytes]]) -> list[Delivery]:
        """Publish pre-encoded values (operators' tools, tests of the dead-letter path)."""
        return await self._produce(self.topic, records)

    async def dead_letter(self, letters: Sequence[DeadLetter]) -> list[Delivery]:
        return await self._produce(self.dead_letter_topic, [("rejected", encode(d)) for d in letters])

    async def close(self) -> None:
        await asyncio.to_thread(self._producer.flush, 30.0)


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
