"""The embedded write path: graph shape, idempotency, batch invariance, bounds, dead letters."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jevmem.settings import Settings
from jevmem.wiring import Embedded, build_embedded
from tests.conftest import CHAT, chat_observations
from topology import ids
from topology.params import Params
from topology.ports import Embedder
from topology.schemas import Candidate, CandidateFeatures, CandidateSet, Entity, MemoryNode, Scope
from topology.stages.relations import NEAREST, rule_edges

SCOPE = Scope(tenant_id="t1", conversation_id="c1")


async def graph(mem: Embedded, scope: Scope = SCOPE) -> tuple[list[tuple[str, int, str]], list[tuple[str, ...]]]:
    nodes = [(n.id, n.seq, n.content) for n in await mem.stores.nodes.scan(scope)]
    edges = [(e.id, e.view, e.source, e.target, e.label, f"{e.probability:.6f}", e.created_by)
             for e in await mem.stores.edges.scan(scope)]
    return nodes, edges


async def test_nodes_keep_raw_text_and_get_typed(memory: Embedded) -> None:
    await memory.pipeline.ingest(chat_observations())
    nodes = await memory.stores.nodes.scan(SCOPE)
    assert [n.content for n in nodes] == [t for _, t in CHAT]
    assert [n.seq for n in nodes] == list(range(len(CHAT)))
    assert nodes[0].id == ids.node_id("t1", "c1", "e0")
    chew = nodes[2]
    assert chew.temporal_refs[0].start.isoformat() == "2023-05-09"  # "yesterday" on 10 May
    assert 0.0 <= chew.types.episodic <= 1.0 and chew.types.episodic > chew.types.procedural
    assert nodes[7].types.preference > 0.5  # "My favourite food is ramen"


async def test_edges_cover_the_views_and_respect_the_threshold(memory: Embedded) -> None:
    await memory.pipeline.ingest(chat_observations())
    edges = await memory.stores.edges.scan(SCOPE)
    views = {e.view for e in edges}
    assert {"temporal", "semantic", "entity"} <= views
    params = memory.pipeline.write_path.params
    per_turn: dict[str, int] = {}
    for e in edges:
        if e.view == "semantic":  # a new turn's most probably related candidates above the floor,
            per_turn[e.target] = per_turn.get(e.target, 0) + 1  # and its most similar one
            assert e.probability >= params.theta_semantic or e.label == NEAREST
        elif e.created_by == "system_one":
            assert e.probability >= params.theta_rel
    assert per_turn and max(per_turn.values()) <= params.semantic_per_turn + 1
    nearest = [e for e in edges if e.label == NEAREST]
    assert len({e.target for e in nearest}) == len(nearest) == len(CHAT) - 1  # one each, but the first turn
    by_id = {n.id: n for n in await memory.stores.nodes.scan(SCOPE)}
    for e in edges:
        if e.view == "entity" and e.label.startswith("shares:"):
            shared = set(e.label.removeprefix("shares:").split(","))
            assert shared <= {x.id for x in by_id[e.source].entities} & {x.id for x in by_id[e.target].entities}
        if e.view == "temporal" and e.label == "before":
            assert e.probability >= 0.60  # gated like judged edges
            a, b = by_id[e.source], by_id[e.target]
            assert (a.event_time, a.seq) <= (b.event_time, b.seq) or a.event_time < b.event_time  # type: ignore[operator]
        if e.view == "temporal" and e.label == "next":  # consecutive turns, in turn order
            assert by_id[e.target].seq == by_id[e.source].seq + 1
    # every turn but the first is linked to the turn before it
    assert sum(1 for e in edges if e.label == "next") == len(by_id) - 1


async def test_every_write_sees_every_earlier_observation(memory: Embedded) -> None:
    """Each node (but the first) has a temporal edge to its immediate predecessor, even inside one batch."""
    await memory.pipeline.ingest(chat_observations())
    nodes = await memory.stores.nodes.scan(SCOPE)
    assert len(nodes) == len(CHAT)  # every turn was written (the loop below checks what was)
    pairs = {frozenset((e.source, e.target)) for e in await memory.stores.edges.scan(SCOPE) if e.view == "temporal"}
    for prev, cur in itertools.pairwise(nodes):
        assert frozenset((prev.id, cur.id)) in pairs


async def test_controller_calls_per_write_are_bounded(memory: Embedded) -> None:
    one = await memory.pipeline.ingest(chat_observations(n=1))
    assert one.write_calls == 1  # typing only: no earlier memory, so no relation request
    rest = await memory.pipeline.ingest(chat_observations(start=1))
    assert rest.write_calls == 2  # one typing + one relation request for the whole batch
    single = await memory.pipeline.ingest(chat_observations(conversation="c2", n=2))
    assert single.write_calls <= 2 * 2


async def test_redelivery_is_idempotent(memory: Embedded) -> None:
    await memory.pipeline.ingest(chat_observations())
    first = await graph(memory)
    again = await memory.pipeline.ingest(chat_observations()[3:7])
    assert again.new_nodes == 0
    assert await graph(memory) == first


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(1, 5), min_size=1, max_size=6))
async def test_graph_does_not_depend_on_batching(embedder: Embedder, cuts: list[int]) -> None:
    obs = chat_observations()
    reference = build_embedded(Settings(), embedder=embedder, data_dir=":memory:")
    other = build_embedded(Settings(), embedder=embedder, data_dir=":memory:")
    try:
        await reference.pipeline.ingest(obs)
        i = 0
        for cut in cuts * 12:
            if i >= len(obs):
                break
            await other.pipeline.ingest(obs[i: i + cut])
            i += cut
        await other.pipeline.ingest(obs)  # replay of everything on top changes nothing
        assert await graph(other) == await graph(reference)
    finally:
        await reference.close()
        await other.close()


async def test_invalid_input_goes_to_dead_letters_and_valid_input_is_kept(memory: Embedded) -> None:
    good = chat_observations(n=2)
    payloads = [good[0].model_dump_json().encode(), b"{broken", b'{"tenant_id": "t1"}', good[1].model_dump_json().encode()]
    report = await memory.pipeline.ingest_raw(payloads, source="test")
    assert report.accepted == 2
    assert [d.source for d in report.dead_letters] == ["test#1", "test#2"]
    stored = await memory.stores.dead_letters.recent()
    assert [d.original for d in stored] == ["{broken", '{"tenant_id": "t1"}']
    assert "not JSON" in stored[0].reason and "content: Field required" in stored[1].reason
    assert len(await memory.stores.nodes.scan(SCOPE)) == 2


async def test_tenants_are_isolated(memory: Embedded) -> None:
    await memory.pipeline.ingest(chat_observations(tenant="a"))
    await memory.pipeline.ingest(chat_observations(tenant="b", n=3))
    a, b = Scope(tenant_id="a", conversation_id="c1"), Scope(tenant_id="b", conversation_id="c1")
    assert len(await memory.stores.nodes.scan(a)) == len(CHAT)
    assert len(await memory.stores.nodes.scan(b)) == 3
    b_ids = {n.id for n in await memory.stores.nodes.scan(b)}
    assert all(e.source in b_ids and e.target in b_ids for e in await memory.stores.edges.scan(b))
    res = await memory.controller.retrieve(b, "What is Ben training for?", top_k=10)
    assert {e.node_id for e in res.evidence} <= b_ids


@pytest.mark.model
async def test_consolidation_runs_every_twenty_writes(model_embedder: Embedder) -> None:
    mem = build_embedded(Settings(params=Params(consolidate_every=5)), embedder=model_embedder, data_dir=":memory:")
    try:
        report = await mem.pipeline.ingest(chat_observations())
        decisions = await mem.stores.edges.decisions(SCOPE)
        assert report.consolidation_calls == 2  # writes 5 and 10 complete a block; 12 does not
        assert {d.run for d in decisions} <= {1, 2} and decisions
        assert all(abs(sum(d.representation.values()) - 1.0) < 1e-3 for d in decisions)
        assert [n.content for n in await mem.stores.nodes.scan(SCOPE)] == [t for _, t in CHAT]  # raw text kept
        await mem.pipeline.ingest(chat_observations())
        assert await mem.stores.edges.decisions(SCOPE) == decisions  # replay: same decisions, no duplicates
    finally:
        await mem.close()


async def test_consolidation_reads_recent_links_from_memory_as_the_store_has_them(embedder: Embedder) -> None:
    """A window linked by this process is answered from the write path's memory (no edge-store
    search); a window partly linked before a reload (a rebalance) falls back to the store; both
    give the same decisions and graph."""
    obs = chat_observations()
    runs: list[tuple[Embedded, list[int]]] = []
    for _ in range(2):
        mem = build_embedded(Settings(params=Params(consolidate_every=5)), embedder=embedder, data_dir=":memory:")
        searched: list[int] = []

        def counting(mem: Embedded = mem, searched: list[int] = searched) -> object:
            inner = mem.stores.edges.neighbours

            async def neighbours(*args: object, **kw: object) -> object:
                searched.append(1)
                return await inner(*args, **kw)  # type: ignore[arg-type]
            return neighbours

        mem.stores.edges.neighbours = counting()  # type: ignore[method-assign]
        runs.append((mem, searched))
    (whole, searched_whole), (split, searched_split) = runs
    try:
        await whole.pipeline.ingest(obs)
        assert searched_whole == []  # both runs (writes 5 and 10) read their windows from memory
        links = whole.stores.links
        assert links is not None
        window = await whole.stores.nodes.preceding(SCOPE, 10, 5)
        remembered = links.incoming(SCOPE, window)
        into = await whole.stores.edges.neighbours(SCOPE, window, ["semantic"], 10_000)
        # the strongest edge into each window node, as the store has it (leaving out the links
        # this run wrote into its window: they name the same pairs)
        best: dict[str, tuple[float, str, str]] = {}
        for e in into:
            if e.target in window and e.view == "semantic" and e.label != "consolidation_link":
                best[e.target] = max(best.get(e.target, (-1.0, "", "")), (e.probability, e.source, e.id))
        assert remembered is not None and sorted(e.id for e in remembered) == sorted(v[2] for v in best.values())
        searched_whole.clear()

        await split.pipeline.ingest(obs[:8])
        split.stores.reassigned()  # a rebalance, as the Faust app reports it: nothing remembered
        await split.pipeline.ingest(obs[8:])  # the run at write 10 spans writes 5-7, linked before
        assert searched_split == [1]
        assert await split.stores.edges.decisions(SCOPE) == await whole.stores.edges.decisions(SCOPE)
        assert await graph(split) == await graph(whole)
    finally:
        await whole.close()
        await split.close()


def test_chunks_pipeline_a_batch_that_fits_one_chunk() -> None:
    from streams.write_path import PIPELINE_MIN, chunk_size

    assert chunk_size(300, 64) == 64  # several chunks already
    assert chunk_size(40, 64) == 20 and chunk_size(41, None) == 21  # one chunk: halves
    assert chunk_size(PIPELINE_MIN - 1, 64) == PIPELINE_MIN - 1  # too small to split
    assert chunk_size(0, None) == 1


async def test_the_attribute_space_is_asked_for_before_any_chunk_is_embedded(
        memory: Embedded, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first chunk's linking reads the attribute space, embedded once per process on first
    use: asked for then, it would queue for the model behind the chunks already handed to it,
    with the event loop waiting on it."""
    wp = memory.pipeline.write_path
    order: list[str] = []
    space, embed = wp.attribute_space, wp.embed

    async def asked() -> object:
        order.append("space")
        return await space()

    async def embedded(nodes: list[MemoryNode], batch: object = None) -> list[MemoryNode]:
        order.append("embed")
        return await embed(nodes, batch)  # type: ignore[arg-type]

    monkeypatch.setattr(wp, "attribute_space", asked)
    monkeypatch.setattr(wp, "embed", embedded)
    await memory.pipeline.ingest(chat_observations())
    assert order[0] == "space" and "embed" in order


async def test_alias_resolution_links_different_entity_ids(memory: Embedded) -> None:
    from topology.schemas import Observation

    obs = [Observation(tenant_id="t1", conversation_id="c9", event_id=f"a{i}", content=text, speaker="Ana")
           for i, text in enumerate(["Yesterday Melanie went hiking in the Alps.", "I think Mel loves the Alps."])]
    report = await memory.pipeline.ingest(obs)
    assert report.write_calls == 2  # alias questions ride in the relation request
    edges = await memory.stores.edges.scan(Scope(tenant_id="t1", conversation_id="c9"))
    aliases = [e for e in edges if e.label.startswith("alias:")]
    assert [(a.view, a.created_by, a.label) for a in aliases] == [("entity", "system_one", "alias:ent:melanie=ent:mel")]


def _turn(seq: int, speaker: str, names: list[str]) -> MemoryNode:
    return MemoryNode(id=f"n{seq}", tenant_id="t1", conversation_id="c1", event_id=f"e{seq}", seq=seq,
                      content=f"turn {seq}", speaker=speaker,
                      entities=[Entity(id="ent:" + n.lower(), name=n) for n in names])


def _candidate(node: MemoryNode, temporal: float) -> Candidate:
    return Candidate(node_id=node.id, seq=node.seq, score=1.0,
                     features=CandidateFeatures(cosine=0.5, lexical=0.0, entity=0.0, temporal=temporal))


def test_rule_edges_leave_out_participant_names_and_weak_temporal_order() -> None:
    """Two speakers who name themselves and each other, one by a nickname: only the topic they
    share (Rome) makes an entity edge; a far turn gets no ``before`` edge, the previous turn keeps
    its ``next``."""
    far = _turn(0, "Caroline", ["Caroline", "Rome", "Mel"])
    prev = _turn(4, "Melanie", ["Melanie", "Caroline"])
    node = _turn(5, "Caroline", ["Caroline", "Mel", "Rome"])
    cset = CandidateSet(node=node, candidates=[_candidate(far, 0.2), _candidate(prev, 1.0)])
    edges = rule_edges(cset, {far.id: far, prev.id: prev}, theta_rel=0.6)
    got = sorted((e.view, e.label, e.source) for e in edges)
    assert got == [("entity", "shares:ent:rome", far.id), ("temporal", "before", prev.id),
                   ("temporal", "next", prev.id)]
    # with no gate every candidate is ordered, and the participants' names still link nothing
    loose = rule_edges(cset, {far.id: far, prev.id: prev}, theta_rel=0.0)
    assert sum(1 for e in loose if e.label == "before") == 2
    assert [e.label for e in loose if e.view == "entity"] == ["shares:ent:rome"]
    # a name that is no speaker's still links
    other = _turn(6, "Melanie", ["Melanie", "Oscar"])
    later = _turn(7, "Caroline", ["Oscar"])
    assert [e.label for e in rule_edges(CandidateSet(node=later, candidates=[_candidate(other, 1.0)]),
                                        {other.id: other}, 0.6) if e.view == "entity"] == ["shares:ent:oscar"]
