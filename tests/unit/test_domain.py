"""Ids, schemas and codecs, text features."""

from __future__ import annotations

import hashlib
import uuid
from datetime import date

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import ids, text
from topology.errors import InvalidEvent
from topology.schemas import SCHEMA_VERSION, Observation, decode, encode


def test_node_ids_are_deterministic_and_scoped() -> None:
    a = ids.node_id("t", "c", "e1")
    assert a == ids.node_id("t", "c", "e1")
    assert len({a, ids.node_id("t2", "c", "e1"), ids.node_id("t", "c2", "e1"), ids.node_id("t", "c", "e2")}) == 4
    # length prefixing: moving a separator between parts changes the id
    assert ids.node_id("a/b", "c", "e") != ids.node_id("a", "b/c", "e")


def test_edge_ids_distinguish_view_direction_and_label() -> None:
    e = ids.edge_id("causal", "a", "b", "causes")
    assert e == ids.edge_id("causal", "a", "b", "causes")
    assert len({e, ids.edge_id("causal", "b", "a", "causes"), ids.edge_id("semantic", "a", "b", "causes"),
                ids.edge_id("causal", "a", "b", "related")}) == 4


@given(st.lists(st.text(max_size=40), min_size=1, max_size=5))
@settings(max_examples=300, deadline=None)
def test_stable_uuid_is_the_version_5_uuid_of_the_length_prefixed_digest(parts: list[str]) -> None:
    """Ids are persisted: the fast formatter must equal the ``uuid`` module's, bit for bit."""
    h = hashlib.sha256()
    for part in parts:
        raw = part.encode("utf-8")
        h.update(len(raw).to_bytes(8, "big") + raw)
    assert ids.stable_uuid(*parts) == str(uuid.UUID(bytes=h.digest()[:16], version=5))


def test_observation_round_trips_through_orjson() -> None:
    obs = Observation(tenant_id="t", conversation_id="c", event_id="e", content="hello", speaker="Ana",
                      metadata={"k": [1, 2]}, provenance={"source": "test"})
    back = decode(Observation, encode(obs))
    assert back == obs
    assert back.schema_version == SCHEMA_VERSION


@pytest.mark.parametrize(("raw", "needle"), [
    (b"not json", "not JSON"),
    (b"[1, 2]", "expected a JSON object"),
    (b'{"tenant_id": "t", "conversation_id": "c", "event_id": "e"}', "content: Field required"),
    (b'{"tenant_id": "t", "conversation_id": "c", "event_id": "e", "content": "   "}', "content is blank"),
    (b'{"tenant_id": "", "conversation_id": "c", "event_id": "e", "content": "x"}', "tenant_id"),
    (b'{"tenant_id": "t", "conversation_id": "c", "event_id": "e", "content": "x", "schema_version": 99}',
     "unsupported schema_version 99"),
    (b'{"tenant_id": "t", "conversation_id": "c", "event_id": "e", "content": "x", "surprise": 1}', "surprise"),
])
def test_invalid_observations_carry_a_readable_reason(raw: bytes, needle: str) -> None:
    with pytest.raises(InvalidEvent) as info:
        decode(Observation, raw)
    assert needle in info.value.reason


def test_yesterday_is_grounded_against_the_observation_date() -> None:
    refs = text.temporal_refs("I went to a support group yesterday.", date(2023, 5, 8))
    assert [(r.text, r.start, r.granularity) for r in refs] == [("yesterday", date(2023, 5, 7), "day")]


@pytest.mark.parametrize(("phrase", "start", "end"), [
    ("last week", date(2023, 5, 1), date(2023, 5, 7)),
    ("two days ago", date(2023, 5, 6), date(2023, 5, 6)),
    ("last month", date(2023, 4, 1), date(2023, 4, 30)),
    ("next month", date(2023, 6, 1), date(2023, 6, 30)),
    ("last year", date(2022, 1, 1), date(2022, 12, 31)),
    ("last Friday", date(2023, 5, 5), date(2023, 5, 5)),
    ("tomorrow", date(2023, 5, 9), date(2023, 5, 9)),
    ("3 weeks ago", date(2023, 4, 17), date(2023, 4, 23)),
])
def test_relative_expressions(phrase: str, start: date, end: date) -> None:
    (ref,) = text.temporal_refs(f"It happened {phrase}.", date(2023, 5, 8))  # a Monday
    assert (ref.start, ref.end) == (start, end)


def test_absolute_dates_need_no_observation_time() -> None:
    refs = text.temporal_refs("The race is on 24 September 2023, and the trip in May 2024.", None)
    assert [(r.start, r.granularity) for r in refs] == [(date(2023, 9, 24), "day"), (date(2024, 5, 1), "month")]


def test_entities_skip_sentence_openers_and_keep_names() -> None:
    found = {e.name for e in text.entities("Sorry I missed you. Clara and I flew to New York with Biscuit.")}
    assert found == {"Clara", "New York", "Biscuit"}


@pytest.mark.parametrize(("said", "names"), [
    ("Seeing Caroline was great!", {"Caroline"}),  # a gerund opening the sentence is not part of a name
    ("Now I'm in Boston.", {"Boston"}),
    ("Taking Toby to the park. Aww, Yup, Gotta go.", {"Toby"}),  # interjections, wherever they stand
    ("It'll be fun. Agreed. Emily is here.", {"Emily"}),
    ("Exploring Lisbon with Pepper and Scout.", {"Lisbon", "Pepper", "Scout"}),
    ("We met Sterling at the Reading Festival.", {"Sterling", "Reading Festival"}),  # not at a start: kept
])
def test_entities_drop_common_words_that_open_a_sentence(said: str, names: set[str]) -> None:
    assert {e.name for e in text.entities(said)} == names


def test_tokens_drop_stopwords_and_stem() -> None:
    assert text.tokens("The dogs were running in the parks") == ["dog", "runn", "park"]


@pytest.mark.parametrize(("a", "b", "likely"), [
    ("Mel", "Melanie", True), ("Smith", "John Smith", True), ("NYC", "New York City", True),
    ("Paris", "London", False), ("Al", "Alice", False),
])
def test_alias_plausibility(a: str, b: str, likely: bool) -> None:
    assert (text.alias_plausibility(a, b) >= 0.5) is likely
