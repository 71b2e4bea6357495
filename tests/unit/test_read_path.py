"""The retrieval controller end to end on the embedded stores, and the static baselines."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from jevmem.settings import Settings
from jevmem.wiring import Embedded, build_embedded
from query_api.retrieval.baselines import StaticRetriever
from tests.conftest import chat_observations
from topology.params import HardLimits, Params
from topology.ports import Embedder
from topology.schemas import MemoryNode, Observation, Scope
from topology.systemone.features import ScoreState
from topology.systemone.port import Answer, Item
from topology.systemone.turn_kinds import turn_kind

SCOPE = Scope(tenant_id="t1", conversation_id="c1")


async def test_retrieval_finds_evidence_with_a_full_trace(memory: Embedded) -> None:
    await memory.pipeline.ingest(chat_observations())
    res = await memory.controller.retrieve(SCOPE, "What is the name of Ana's puppy?", top_k=5)
    assert len(res.evidence) == 5
    # the hashing embedder knows words, not meaning: the adoption and the other Biscuit turn tie
    # within 0.001 at the top, and the adoption is one of them
    assert "I adopted a puppy named Biscuit last week, he is a golden retriever." in {e.content for e in res.evidence[:2]}
    assert all("Biscuit" in e.content for e in res.evidence[:2])
    assert [e.score for e in res.evidence] == sorted((e.score for e in res.evidence), reverse=True)
    tr = res.trace
    assert set(tr.route) == {"semantic", "temporal", "causal", "entity", "multi_hop", "recency", "past"}
    assert sum(tr.budgets.values()) == 80 and set(tr.budgets) == set(tr.active_views)
    assert 1 <= tr.depth <= 3 and tr.stop_reason
    assert 2 <= tr.controller_calls <= 16
    assert tr.visited <= 60 and tr.examined_edges <= 2400
    assert {"embed", "anchors", "total"} <= set(tr.timings_ms)
    assert res.evidence[0].observed_at is not None and res.evidence[0].provenance == {}


async def test_graph_expansion_brings_neighbours(embedder: Embedder) -> None:
    mem = build_embedded(Settings(params=Params(anchors=2)), embedder=embedder, data_dir=":memory:")
    try:
        await mem.pipeline.ingest(chat_observations())
        res = await mem.controller.retrieve(SCOPE, "Why did Ben start training for the marathon and how did it go?", 10)
    finally:
        await mem.close()
    assert res.trace.anchors == 2
    assert res.trace.rounds and res.trace.rounds[0].added > 0
    assert {e.via for e in res.evidence} - {"anchor"}
    assert len(res.evidence) == min(10, res.trace.visited)


async def test_a_round_reads_the_nodes_its_views_pick_in_one_read(embedder: Embedder,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Every view's picks of a round are read together (one read for the anchors, then one a
    round that adds); with ``as_of`` before the later turns, the picks that are not recallable are
    read and left out, and nothing said after ``as_of`` is evidence."""
    mem = build_embedded(Settings(params=Params(anchors=2)), embedder=embedder, data_dir=":memory:")
    question = "Why did Ben start training for the marathon and how did it go?"
    try:
        await mem.pipeline.ingest(chat_observations())
        reads: list[list[str]] = []
        fetch = mem.controller._fetch

        async def counting(reach: object, ids: Sequence[str], edges_next: bool = False) -> object:
            reads.append(list(ids))
            return await fetch(reach, ids, edges_next)  # type: ignore[arg-type]
        monkeypatch.setattr(mem.controller, "_fetch", counting)
        res = await mem.controller.retrieve(SCOPE, question, 10)
        adding = [r for r in res.trace.rounds if r.added]
        assert adding and len(res.trace.active_views) > 1
        assert len(reads) == 1 + len(adding)
        assert len({e.via for e in res.evidence} - {"anchor"}) > 1  # more than one view picked, in that one read
        cut = chat_observations()[5].observed_at
        reads.clear()
        before = await mem.controller.retrieve(SCOPE, question, 10, as_of=cut)
        assert before.evidence and all(e.observed_at is not None and e.observed_at <= cut for e in before.evidence)
        assert len({i for ids in reads for i in ids}) > before.trace.visited  # later turns read, not kept
    finally:
        await mem.close()


async def test_temporal_question_gets_grounded_dates(memory: Embedded) -> None:
    await memory.pipeline.ingest(chat_observations())
    res = await memory.controller.retrieve(SCOPE, "When did Ana buy chew toys?", 3)
    top = res.evidence[0]
    assert "chew toys" in top.content and top.event_time == "2023-05-09"
    assert res.trace.route["temporal"] > res.trace.route["causal"]


class _Greedy:
    """A controller that never wants to stop: the hard limits must still hold."""

    async def ask(self, items: list[Item]) -> list[Answer]:
        out = []
        for item in items:
            out.append(Answer(nouls={q.key: 0.99 if q.key != "sufficient" else 0.0 for q in item.task.nouls()},
                              choices={}))
        return out

    async def aclose(self) -> None:
        return None


async def test_hard_limits_hold_whatever_the_controller_says(embedder: Embedder) -> None:
    limits = HardLimits(depth=8, visited_nodes=15, examined_edges=40, controller_calls=6, seconds=15)
    mem = build_embedded(Settings(params=Params(depth_max=8, limits=limits, anchors=5)), embedder=embedder,
                         data_dir=":memory:")
    try:
        await mem.pipeline.ingest(chat_observations())
        mem.controller.so = _Greedy()
        res = await mem.controller.retrieve(SCOPE, "Tell me everything about Ana and Ben", 10)
        assert res.trace.controller_calls <= 6
        assert res.trace.visited <= 15
        assert res.trace.examined_edges <= 40
        assert res.trace.stop_reason in ("controller_call_limit", "exhausted", "depth")
    finally:
        await mem.close()


async def test_static_baselines_rank_the_same_indexes(memory: Embedded) -> None:
    await memory.pipeline.ingest(chat_observations())
    static = StaticRetriever(memory.embedder, memory.stores.vectors, memory.stores.lexical, memory.stores.nodes,
                             Params())
    got = await static.all(SCOPE, "Biscuit chew toys", 3)
    assert set(got) == {"bm25", "vector", "hybrid_rrf"}
    assert got["bm25"][0] == "e2" and "e2" in got["hybrid_rrf"][:2]
    assert all(len(v) == 3 for v in got.values())


@pytest.mark.model
async def test_an_obsolete_memory_is_shown_with_what_superseded_it(model_embedder: Embedder) -> None:
    from datetime import UTC, datetime

    from topology.schemas import Observation

    mem = build_embedded(Settings(params=Params(consolidate_every=2)), embedder=model_embedder, data_dir=":memory:")
    texts = ["I live in Denver with my two cats.", "I moved to Boston last month, I love the harbour."]
    try:
        await mem.pipeline.ingest([Observation(
            tenant_id="t1", conversation_id="c1", event_id=f"m{i}", content=t, speaker="Ana",
            observed_at=datetime(2023, 5, 1 + i, tzinfo=UTC)) for i, t in enumerate(texts)])
        res = await mem.controller.retrieve(SCOPE, "Where does Ana live?", 5)
    finally:
        await mem.close()
    by_content = {e.content: e for e in res.evidence}
    assert by_content[texts[0]].superseded_by == [texts[1]]
    assert by_content[texts[1]].superseded_by == []


async def test_system_two_summary_over_http_becomes_a_reachable_derived_node(embedder: Embedder) -> None:
    from datetime import UTC, datetime

    from tests.conftest import fake_llm, serve_http
    from topology.schemas import Observation

    llm, seen = fake_llm()
    texts = ["I adopted a puppy named Biscuit last week, he is a golden retriever.",
             "I adopted a puppy named Biscuit last week; he is a golden retriever!"]
    with serve_http(llm) as url:
        settings = Settings(system_two_url=f"{url}/v1", system_two_model="small", params=Params(consolidate_every=2))
        mem = build_embedded(settings, embedder=embedder, data_dir=":memory:")
        try:
            await mem.pipeline.ingest([Observation(
                tenant_id="t1", conversation_id="c1", event_id=f"p{i}", content=t, speaker="Ana",
                observed_at=datetime(2023, 5, 1 + i, tzinfo=UTC)) for i, t in enumerate(texts)])
            nodes = await mem.stores.nodes.scan(SCOPE)
            res = await mem.controller.retrieve(SCOPE, "What kind of dog did Ana adopt?", 5)
        finally:
            await mem.close()
    derived = [n for n in nodes if n.kind == "derived"]
    assert len(derived) == 1 and derived[0].content == f"Summary: {texts[0]}"
    assert len(seen) == 1 and "both memories" in seen[0]["messages"][0]["content"]
    assert derived[0].id in {e.node_id for e in res.evidence}


async def test_evidence_for_system_two_carries_grounded_event_dates(memory: Embedded) -> None:
    await memory.pipeline.ingest(chat_observations())
    res = await memory.controller.retrieve(SCOPE, "When did Ana buy chew toys?", 3)
    line = res.evidence[0].for_prompt()
    assert line.startswith('[recorded 2023-05-10; event 2023-05-09 ("yesterday")] Ana: He chews everything')
    plain = res.evidence[0].model_copy(update={"observed_at": None, "temporal_refs": [], "speaker": None,
                                                "superseded_by": ["I moved"], "valid_until": None})
    assert plain.for_prompt() == f"{plain.content} (superseded by: I moved)"


async def test_the_scorer_is_told_how_much_a_memory_states(memory: Embedded) -> None:
    """``statement`` is the memory's p(statement) as a turn kind: a fact stated scores it high, a
    question low; the learned scorer reads it with the other features."""
    texts = ["I drive a red Toyota Corolla to work every day.", "Have you ever driven a Toyota Corolla?"]
    await memory.pipeline.ingest([Observation(tenant_id="t1", conversation_id="c1", event_id=f"e{i}", content=t,
                                              speaker="Ana") for i, t in enumerate(texts)])
    seen: dict[str, ScoreState] = {}

    def keep(_q: str, nodes: Sequence[MemoryNode], states: Sequence[ScoreState]) -> None:
        seen.update({n.content: s for n, s in zip(nodes, states, strict=True)})

    memory.controller.recorder = keep
    await memory.controller.retrieve(SCOPE, "What car does Ana drive?", top_k=5)
    stated, asked = (seen[t] for t in texts)
    nodes = {n.content: n for n in await memory.stores.nodes.scan(SCOPE)}
    assert stated.statement == round(turn_kind(nodes[texts[0]].types)["statement"], 6)
    assert stated.statement > 0.5 > asked.statement
