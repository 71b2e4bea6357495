"""The learned relevance model (loading, validation, fitting) and the consolidation gates."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from jevmem.bench.train import Rows, fit
from topology.embedding import MODELS
from topology.errors import SystemOneError
from topology.params import Params
from topology.ports import Embedder
from topology.schemas import MemoryNode
from topology.stages import consolidation
from topology.stages.memory_nodes import embedding_text
from topology.systemone.features import SCORE_FEATURES, ConsolidationState
from topology.systemone.learned import SHIPPED_EMBEDDER, ScoreModel
from topology.systemone.local import LocalSystemOne
from topology.systemone.local import consolidation as judge_pair


def test_shipped_model_loads_and_scores_in_range() -> None:
    m = ScoreModel.shipped()
    assert m.features == SCORE_FEATURES and m.meta
    assert 0.0 < m.probability([0.5] * len(SCORE_FEATURES)) < 1.0


@pytest.mark.parametrize("embedder", sorted(MODELS))
def test_every_embedding_model_has_its_own_shipped_weights(embedder: str) -> None:
    """Cosine features depend on the model, so each named model ships weights trained with it."""
    m = ScoreModel.shipped(embedder)
    assert m.meta["trained_with"] == embedder
    assert LocalSystemOne(embedder=embedder).score_model.meta["trained_with"] == embedder


def test_a_model_without_weights_gets_the_default_ones_marked_untuned() -> None:
    m = ScoreModel.shipped("some-other-model@1")
    assert m.meta["trained_with"] == SHIPPED_EMBEDDER and m.coef.tolist() == ScoreModel.shipped().coef.tolist()


def test_models_on_other_features_or_broken_arrays_are_rejected() -> None:
    m = ScoreModel.prior()
    with pytest.raises(SystemOneError):
        ScoreModel(("cosine",), (), np.zeros(1), np.ones(1), np.zeros(1), 0.0)
    with pytest.raises(SystemOneError):
        ScoreModel(m.features, (("cosine", "nope"),), np.zeros(len(m.coef) + 1), np.ones(len(m.coef) + 1),
                   np.zeros(len(m.coef) + 1), 0.0)
    with pytest.raises(SystemOneError):
        ScoreModel(m.features, (), m.mean, np.zeros_like(m.scale), m.coef, 0.0)
    with pytest.raises(SystemOneError):
        ScoreModel.from_json(b'{"features": []}')


def test_fit_is_deterministic_learns_the_signal_and_round_trips() -> None:
    rng = np.random.default_rng(0)
    x = rng.random((400, len(SCORE_FEATURES)))
    y = (x[:, SCORE_FEATURES.index("bm25")] + 0.2 * rng.random(400) > 0.8).astype(float)
    rows = Rows(x, y, np.asarray(["a"] * 400))
    m1, m2 = fit(rows, meta={"seed": 0}), fit(rows, meta={"seed": 0})
    assert m1.to_json() == m2.to_json()
    hi, lo = np.full(len(SCORE_FEATURES), 0.5), np.full(len(SCORE_FEATURES), 0.5)
    hi[SCORE_FEATURES.index("bm25")], lo[SCORE_FEATURES.index("bm25")] = 0.95, 0.05
    assert m1.probability(hi.tolist()) > 0.8 > 0.2 > m1.probability(lo.tolist())
    back = ScoreModel.from_json(m1.to_json())
    assert back.probability(hi.tolist()) == pytest.approx(m1.probability(hi.tolist()))


async def test_local_backend_uses_the_model_it_is_given() -> None:
    from topology.systemone.catalog import SCORE
    from topology.systemone.port import Item

    state = {"question": "q", "memory": "m", "speaker": "", "view": "anchor", **{f: 0.5 for f in SCORE_FEATURES}}
    n = len(SCORE_FEATURES)
    always = ScoreModel(SCORE_FEATURES, (), np.zeros(n), np.ones(n), np.zeros(n), 4.0)
    never = ScoreModel(SCORE_FEATURES, (), np.zeros(n), np.ones(n), np.zeros(n), -4.0)
    (a,), (b,) = await LocalSystemOne(always).ask([Item(SCORE, state)]), await LocalSystemOne(never).ask([Item(SCORE, state)])
    assert a.p("relevance") > 0.95 > 0.05 > b.p("relevance")


def _state(**kw: float) -> ConsolidationState:
    base = {"newer": "n", "older": "o", "cosine": 0.8, "entity": 0.0, "negation_mix": 0.0, "update_cue": 0.0,
            "same_speaker": 1.0, "slot_overlap": 0.2, "older_state": 0.0}
    return ConsolidationState.model_validate({**base, **kw})


def _decision(st: ConsolidationState) -> consolidation.ConsolidationDecision:
    ans = judge_pair(st.model_dump())
    dist = dict(ans.choices["representation"])
    return consolidation.ConsolidationDecision(
        id="d", tenant_id="t", conversation_id="c", run=1, left="o", right="n", redundant=ans.p("redundant"),
        contradiction=ans.p("contradiction"), obsolete=ans.p("obsolete"), link_useful=ans.p("link_useful"),
        representation=dist, chosen=max(dist, key=lambda k: dist[k]))  # type: ignore[arg-type]


def test_gates_open_for_duplicates_updates_and_contradictions_only() -> None:
    p = Params()
    dup = _decision(_state(cosine=0.99, slot_overlap=0.9))
    assert dup.chosen == "merge" and consolidation.gate(dup, p) and not consolidation.superseded(dup, p)
    moved = _decision(_state(cosine=0.8, update_cue=1.0, older_state=1.0))
    assert consolidation.superseded(moved, p) and not consolidation.gate(moved, p)
    neg = _decision(_state(cosine=0.88, negation_mix=1.0, slot_overlap=0.7))
    assert neg.contradiction >= p.theta_contradiction
    assert not consolidation.gate(neg, p) and not consolidation.superseded(neg, p)
    unrelated = _decision(_state(cosine=0.8))
    assert unrelated.chosen == "keep_separate" and not consolidation.gate(unrelated, p)
    assert not consolidation.superseded(unrelated, p)


def _node(embedder: Embedder, seq: int, content: str) -> MemoryNode:
    return MemoryNode(id=f"n{seq}", tenant_id="t", conversation_id="c", event_id=f"e{seq}", seq=seq, content=content,
                      speaker="Ana", observed_at=datetime(2023, 5, 1 + seq, tzinfo=UTC),
                      tokens=__import__("topology.text", fromlist=["tokens"]).tokens(content),
                      embedding=embedder.embed([embedding_text("Ana", content)])[0])


class _Summariser:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    async def summarise(self, texts: list[str]) -> str:
        self.calls.append(list(texts))
        return "Ana: " + " / ".join(texts)


@pytest.mark.model
async def test_consolidation_writes_supersedes_edges_and_gated_derived_nodes(model_embedder: Embedder) -> None:
    denver = _node(model_embedder, 0, "I live in Denver with my two cats.")
    boston = _node(model_embedder, 1, "I moved to Boston last month, I love the harbour.")
    puppy = _node(model_embedder, 2, "I adopted a puppy named Biscuit last week, he is a golden retriever.")
    again = _node(model_embedder, 3, "I adopted a puppy named Biscuit last week; he is a golden retriever!")
    s2 = _Summariser()
    decisions, edges, derived = await consolidation.consolidate(
        1, [(boston, denver), (again, puppy)], LocalSystemOne(), Params(), s2)
    by_label = {e.label: e for e in edges}
    assert by_label["supersedes"].source == boston.id and by_label["supersedes"].target == denver.id
    assert len(derived) == 1 and derived[0].derived_from == [puppy.id, again.id] and derived[0].kind == "derived"
    assert s2.calls == [[puppy.content, again.content]]
    assert decisions[1].derived_node_id == derived[0].id
    assert {(e.source, e.target) for e in edges if e.label == "summarises"} == {(derived[0].id, puppy.id),
                                                                               (derived[0].id, again.id)}


@pytest.mark.model
async def test_consolidation_supersedes_only_where_the_update_judge_agrees(model_embedder: Embedder) -> None:
    """The consolidation answer reads change cues; its ``supersedes`` edge also needs the learned
    update judge's answer, asked in the same request: the same pair, judged an update by the
    consolidation answer, gets the edge when the judge agrees and none when it does not."""
    from topology.systemone.catalog import RELATION
    from topology.systemone.port import Answer, Item

    class _Judge:
        """The local backend, with the relation question's ``updates`` answer set by the newer text."""

        def __init__(self, p: dict[str, float]) -> None:
            self.inner, self.p, self.requests = LocalSystemOne(), p, 0

        async def ask(self, items: list[Item]) -> list[Answer]:
            self.requests += 1
            answers = await self.inner.ask(items)
            return [Answer({**a.nouls, "updates": self.p[it.state["newer"]]}, a.choices) if it.task is RELATION else a
                    for it, a in zip(items, answers, strict=True)]

    denver = _node(model_embedder, 0, "I live in Denver with my two cats.")
    boston = _node(model_embedder, 1, "I moved to Boston last month, I love the harbour.")
    for p_update, edge in ((0.95, True), (0.2, False)):
        so = _Judge({boston.content: p_update})
        decisions, edges, _ = await consolidation.consolidate(1, [(boston, denver)], so, Params())
        assert consolidation.superseded(decisions[0], Params())  # the consolidation answer alone says update
        assert so.requests == 1 and any(e.label == "supersedes" for e in edges) is edge
