"""The learned relation judge: its weights, the fit, the batched answers and the leave-one-out report."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from jevmem.assembly import system_one_and_scorer
from jevmem.bench.train_relations import Pairs, loco
from jevmem.settings import Settings
from topology.errors import SystemOneError
from topology.schemas import EdgeEvent, RelationJudgment
from topology.stages.relations import NEAREST, consolidation_key, strongest
from topology.systemone.catalog import RELATION
from topology.systemone.learned import SHIPPED_EMBEDDER
from topology.systemone.local import LocalSystemOne, relation, relation_many
from topology.systemone.port import Item
from topology.systemone.relation_model import RELATION_FEATURES, RelationModel, fit

PAIR = {"newer": "I adopted a dog last week, her name is Luna.", "older": "We are thinking of adopting a dog.",
        "cosine": 0.86, "lexical": 0.2, "entity": 0.0, "gap": 40, "same_speaker": True}


def _signal(n: int, positives: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rows whose label follows the older text's length (a feature the hand-set rule ignores)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, len(RELATION_FEATURES)))
    y = (rng.random(n) < positives).astype(float)
    x[:, RELATION_FEATURES.index("log_len_older")] += 2.0 * y
    return x, y


def test_the_default_model_ships_a_judge_and_an_unknown_model_gets_the_rule() -> None:
    m = RelationModel.shipped(SHIPPED_EMBEDDER)
    assert m is not None and m.features == RELATION_FEATURES and m.meta["trained_with"] == SHIPPED_EMBEDDER
    assert RelationModel.shipped("some-other-model@1") is None
    assert LocalSystemOne(embedder="some-other-model@1").relation_model is None
    assert LocalSystemOne(learned_relations=False).relation_model is None
    assert LocalSystemOne().relation_model is not None


def test_fit_is_deterministic_balanced_and_round_trips() -> None:
    x, y = _signal(3000, positives=0.02)
    m1, m2 = fit(x, y, meta={"k": 1}), fit(x, y, meta={"k": 1})
    assert m1.to_json() == m2.to_json()
    p = m1.probabilities(x)
    # classes weigh half each: a rare positive class still gets p > 0.5 on average
    assert p[y > 0].mean() > 0.6 > 0.4 > p[y == 0].mean()
    back = RelationModel.from_json(m1.to_json())
    assert back.probabilities(x[:5]).tolist() == pytest.approx(p[:5].tolist())
    with pytest.raises(ValueError):
        fit(x, np.zeros(len(x)))
    with pytest.raises(ValueError):
        fit(x[:, :3], y)


def test_models_on_other_features_or_broken_arrays_are_rejected() -> None:
    n = len(RELATION_FEATURES)
    with pytest.raises(SystemOneError):
        RelationModel(("cosine",), np.zeros(1), np.ones(1), np.zeros(1), 0.0)
    with pytest.raises(SystemOneError):
        RelationModel(RELATION_FEATURES, np.zeros(n), np.zeros(n), np.zeros(n), 0.0)
    with pytest.raises(SystemOneError):
        RelationModel(RELATION_FEATURES, np.zeros(n), np.ones(n), np.full(n, np.nan), 0.0)
    with pytest.raises(SystemOneError):
        RelationModel.from_json(b'{"features": []}')


async def test_batched_answers_equal_single_ones_and_the_backend_uses_its_judge() -> None:
    x, y = _signal(500, positives=0.1)
    model = fit(x, y)
    states = [PAIR, {**PAIR, "older": "ok", "same_speaker": False, "gap": 1}, {**PAIR, "cosine": 0.2}]
    batch = relation_many(states, model)
    assert [a.nouls for a in batch] == [relation(s, model).nouls for s in states]
    assert [a.nouls for a in relation_many(states, None)] == [relation(s).nouls for s in states]
    got = await LocalSystemOne(relation_model=model).ask([Item(RELATION, s) for s in states])
    assert [a.nouls for a in got] == [a.nouls for a in batch]
    rule = await LocalSystemOne(learned_relations=False).ask([Item(RELATION, s) for s in states])
    assert [a.p("semantic") for a in rule] == [relation(s).p("semantic") for s in states]
    assert [a.p("caused_by") for a in rule] == [a.p("caused_by") for a in batch]  # the causal cues stay


def test_a_state_without_the_speaker_flag_is_still_accepted() -> None:
    legacy = {k: v for k, v in PAIR.items() if k != "same_speaker"}
    assert 0.0 < relation(legacy).p("semantic") <= 1.0


def test_leave_one_out_scores_each_conversation_with_a_judge_fitted_on_the_others() -> None:
    parts = [_signal(600, positives=0.05, seed=s) for s in range(3)]
    x, y = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    group = np.repeat(["a", "b", "c"], 600)
    rule = np.full(len(y), 0.99)  # the rule says "related" to every pair, as it does with e5
    pairs = Pairs(x, y, group, np.asarray([f"n{i // 10}" for i in range(len(y))]), rule, {"a": 60, "b": 60, "c": 60})
    out = loco(pairs, per_turn=10, floor=0.5)
    assert set(out) == {"a", "b", "c", "all"}
    assert out["all"]["auc_rule"] == 0.5 and out["all"]["auc_learned"] > 0.8
    assert out["all"]["rule"]["edges_per_turn"] == 10.0 and out["all"]["learned"]["edges_per_turn"] < 10.0
    assert out["all"]["rule"]["related_kept"] == out["all"]["rule"]["related"] == int(y.sum())
    # at most per_turn a turn: each of its 10 pairs ranked, the best kept
    top = loco(pairs, per_turn=3, floor=0.0)
    assert top["all"]["rule"]["edges_per_turn"] == top["all"]["learned"]["edges_per_turn"] == 3.0
    assert top["all"]["learned"]["related_kept"] > top["all"]["rule"]["related_kept"]


def _judgment(source: str, target: str, semantic: float) -> RelationJudgment:
    return RelationJudgment(tenant_id="t", conversation_id="c", source=source, target=target, semantic=semantic,
                            caused_by=0.0, causes=0.0)


def test_each_turn_keeps_its_most_probably_related_candidates_above_the_floor() -> None:
    js = [_judgment("a", "n1", 0.9), _judgment("b", "n1", 0.4), _judgment("c", "n1", 0.4), _judgment("d", "n1", 0.05),
          _judgment("a", "n2", 0.3)]
    assert strongest(js, 2, floor=0.1) == {("a", "n1"), ("b", "n1"), ("a", "n2")}  # a tie goes to the lower id
    assert strongest(js, 10, floor=0.1) == {("a", "n1"), ("b", "n1"), ("c", "n1"), ("a", "n2")}
    assert strongest(js, 0, floor=0.0) == set()


def test_consolidation_pairs_a_turn_with_its_most_similar_candidate_first() -> None:
    def edge(source: str, p: float, label: str) -> EdgeEvent:
        return EdgeEvent(id=f"{source}-{label}", tenant_id="t", conversation_id="c", view="semantic", source=source,
                         target="n", direction="undirected", probability=p, label=label, created_by="system_one")

    judged, close = edge("x", 0.9, "related"), edge("y", 0.2, NEAREST)
    assert max([judged, close], key=consolidation_key) is close
    assert max([judged, edge("z", 0.5, "related")], key=consolidation_key) is judged  # an older store: strongest


def test_the_relation_judge_setting_picks_learned_rule_or_a_weights_file(tmp_path: Path) -> None:
    x, y = _signal(300, positives=0.2)
    path = tmp_path / "judge.json"
    path.write_bytes(fit(x, y).to_json())
    learned, _ = system_one_and_scorer(Settings(), SHIPPED_EMBEDDER)
    rule, _ = system_one_and_scorer(Settings(relation_judge="rule"), SHIPPED_EMBEDDER)
    from_file, _ = system_one_and_scorer(Settings(relation_judge=str(path)), "some-other-model@1")
    assert isinstance(learned, LocalSystemOne) and isinstance(rule, LocalSystemOne) and isinstance(from_file, LocalSystemOne)
    assert learned.relation_model is not None and rule.relation_model is None
    assert from_file.relation_model is not None and from_file.relation_model.to_json() == fit(x, y).to_json()
    with pytest.raises(FileNotFoundError):
        system_one_and_scorer(Settings(relation_judge=str(tmp_path / "missing.json")))


def test_a_nearest_edge_is_logged_in_the_clear_like_the_other_judged_edges() -> None:
    """Its label names nothing; sealed, it would stay readable after the older turn is forgotten
    (an edge is sealed under its newer end's key)."""
    from topology.sealing import RULE_LABELS

    assert {NEAREST, "related"} <= RULE_LABELS
