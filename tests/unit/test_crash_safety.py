"""Crash safety without servers: seq assignment from the node store (holes refilled), a batch
cut short anywhere and run again gives the clean run's graph, unambiguous scope keys, dead
letters for undecodable records, and the retry loop the Faust agent runs a batch in."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jevmem.settings import Settings
from jevmem.wiring import build_embedded
from streams.faust_app import retrying
from streams.replay import graph_of
from streams.write_path import decode_batch, number, write_batch
from tests.conftest import CHAT, chat_observations
from topology.pipeline import SeqState, assign_seqs, dedupe
from topology.ports import Embedder
from topology.schemas import Observation, Scope

A = Scope(tenant_id="t1", conversation_id="c1")
B = Scope(tenant_id="t1", conversation_id="c2")


def obs(scope: Scope, *events: str) -> list[Observation]:
    return [Observation(tenant_id=scope.tenant_id, conversation_id=scope.conversation_id, event_id=e,
                        content=f"text {e}") for e in events]


def test_known_events_keep_their_seq_and_new_ones_follow_in_arrival_order() -> None:
    batch = obs(A, "x", "old", "y") + obs(B, "z")
    got = assign_seqs(batch, {("t1", "c1", "old"): 3}, {A: SeqState(5), B: SeqState(0)})
    assert [(o.event_id, s) for o, s in got] == [("x", 5), ("old", 3), ("y", 6), ("z", 0)]


def test_new_events_fill_holes_first_in_ascending_order() -> None:
    state = SeqState.of(count=3, next_seq=6, used=[0, 4, 5])
    assert state == SeqState(6, (1, 2, 3))
    got = assign_seqs(obs(A, "a", "b", "c", "d"), {}, {A: state})
    assert [s for _, s in got] == [1, 2, 3, 6]


def test_a_late_write_of_the_same_batch_cannot_make_two_events_share_a_seq() -> None:
    """The counters were read (next = 22), then a timed-out earlier attempt's bulk write landed
    (e22..e25 with seqs 22..25), then the batch's known events were read."""
    batch = obs(A, *(f"e{i}" for i in range(22, 30)))
    known = {("t1", "c1", f"e{i}"): i for i in range(22, 26)}
    got = assign_seqs(batch, known, {A: SeqState(22)})
    assert [s for _, s in got] == list(range(22, 30))
    holes = assign_seqs(obs(A, "x", "k", "y"), {("t1", "c1", "k"): 1}, {A: SeqState.of(1, 4, [3])})
    assert [s for _, s in holes] == [0, 1, 2]


def test_seq_state_needs_the_used_seqs_only_when_there_are_holes() -> None:
    assert SeqState.of(4, 4) == SeqState(4)
    with pytest.raises(ValueError, match="holes"):
        SeqState.of(3, 4)


def test_a_duplicate_event_in_one_batch_is_the_same_event() -> None:
    batch = [*obs(A, "e1", "e2"), obs(A, "e1")[0].model_copy(update={"content": "resent"})]
    kept = dedupe(batch)
    assert [(o.event_id, o.content) for o in kept] == [("e1", "text e1"), ("e2", "text e2")]


def test_scope_keys_are_unambiguous() -> None:
    left = Scope(tenant_id="a/b", conversation_id="c")
    right = Scope(tenant_id="a", conversation_id="b/c")
    assert left.key != right.key
    assert Scope(tenant_id="a%2Fb", conversation_id="c").key != left.key
    assert Scope(tenant_id="acme", conversation_id="c1").key == "acme/c1"  # unchanged for plain ids


def test_undecodable_records_become_dead_letters_with_their_offset() -> None:
    good = obs(A, "e1")[0].model_dump_json().encode()
    out, letters = decode_batch([(good, "t:0:7"), (b"not json", "t:0:8"), (b'{"tenant_id": "t"}', "t:1:9"),
                                 (good, "t:0:10")])
    assert [o.event_id for o in out] == ["e1"]
    assert [d.source for d in letters] == ["t:0:8", "t:1:9"]
    assert all(d.reason for d in letters) and letters[0].original == "not json"


async def test_a_failing_batch_is_retried_until_it_succeeds() -> None:
    attempts: list[int] = []

    async def flaky() -> None:
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("store down")

    assert await retrying("batch", flaky, first_s=0.0) == 2
    assert len(attempts) == 3


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(min_value=1, max_value=len(CHAT) - 2), written=st.sets(st.integers(0, 7), max_size=8),
       data=st.data())
async def test_a_batch_cut_short_anywhere_then_redelivered_gives_the_clean_graph(
        embedder: Embedder, cut: int, written: set[int], data: st.DataObject) -> None:
    """A worker dies after materialising an arbitrary subset of a batch's nodes (ES bulk writes are
    per document); redelivery from the batch start, in any batch size, rebuilds the same graph."""
    events = chat_observations()
    clean = build_embedded(Settings(), embedder=embedder, data_dir=":memory:")
    crashed = build_embedded(Settings(), embedder=embedder, data_dir=":memory:")
    try:
        for i in range(0, len(events), 4):
            await clean.pipeline.ingest(events[i: i + 4])
        await crashed.pipeline.ingest(events[:cut])
        batch = dedupe(events[cut: cut + 8])
        numbered, _ = await number(crashed.stores.nodes, batch)
        nodes = await crashed.pipeline.write_path.build_nodes(numbered)
        await crashed.stores.materialise([n for i, n in enumerate(nodes) if i in written])  # then SIGKILL
        size = data.draw(st.integers(1, 8), label="redelivery batch size")
        for i in range(cut, len(events), size):
            await write_batch(crashed.stores, crashed.pipeline.write_path, dedupe(events[i: i + size]))
        assert await graph_of(crashed.stores, A) == await graph_of(clean.stores, A)
        assert await crashed.stores.edges.decisions(A) == await clean.stores.edges.decisions(A)
    finally:
        await clean.close()
        await crashed.close()
