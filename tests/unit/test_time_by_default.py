"""An observation without ``observed_at`` takes the time it was accepted, says so in its
provenance, and "yesterday" is grounded against that time: embedded ingest, and the worker's
decoding of records from producers that sent no time (their record timestamp)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson

from jevmem.wiring import Embedded
from streams.write_path import decode_batch
from topology.schemas import Observation


def obs(**extra: object) -> Observation:
    return Observation.model_validate({"tenant_id": "t", "conversation_id": "c", "event_id": "e1",
                                       "content": "I went hiking in the Alps yesterday", **extra})


def test_stamped_keeps_a_given_time_and_marks_an_accepted_one() -> None:
    given = obs(observed_at="2023-05-08T10:00:00Z")
    assert given.stamped(datetime(2026, 1, 1, tzinfo=UTC)) is given
    at = datetime(2026, 1, 2, 9, 30, tzinfo=UTC)
    got = obs(provenance={"source": "chat"}).stamped(at)
    assert got.observed_at == at and got.provenance == {"source": "chat", "observed_at": "accepted"}


async def test_embedded_ingest_observes_now_and_grounds_yesterday_against_it(memory: Embedded) -> None:
    before = datetime.now(UTC)
    await memory.pipeline.ingest([obs()])
    (node,) = await memory.stores.nodes.scan(obs().scope)
    assert node.observed_at is not None and before <= node.observed_at <= datetime.now(UTC)
    assert node.provenance["observed_at"] == "accepted"
    assert [r.start for r in node.temporal_refs if r.text == "yesterday"] == [(node.observed_at - timedelta(days=1)).date()]


def test_the_worker_observes_a_timeless_record_at_its_record_timestamp() -> None:
    raw = orjson.dumps(obs().model_dump(mode="json", exclude={"observed_at"}))
    timed = orjson.dumps(obs(event_id="e2", observed_at="2023-05-08T10:00:00Z").model_dump(mode="json"))
    record_time = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
    items, letters = decode_batch([(raw, "t:0:1"), (timed, "t:0:2")], [record_time.timestamp()] * 2)
    assert not letters
    first, second = items
    assert isinstance(first, Observation) and isinstance(second, Observation)
    assert first.observed_at == record_time and first.provenance["observed_at"] == "accepted"
    assert second.observed_at == datetime(2023, 5, 8, 10, tzinfo=UTC) and "observed_at" not in second.provenance
