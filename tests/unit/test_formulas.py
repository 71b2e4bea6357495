"""Each read-path formula of DESIGN.md."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from query_api.retrieval import formulas
from topology.params import Params, ScoreWeights


def test_active_views_threshold() -> None:
    assert formulas.active_views({"semantic": 0.5, "temporal": 0.1, "causal": 0.099, "entity": 0.0}, 0.10) == [
        "semantic", "temporal"]


def test_budget_largest_remainder_example() -> None:
    # rest = 80 - 3 = 77 shared 0.5:0.3:0.2 -> 38.5, 23.1, 15.4 -> floors 38, 23, 15 (76), +1 to semantic
    got = formulas.allocate_budget({"semantic": 0.5, "temporal": 0.3, "entity": 0.2}, 80, 1, 1.0)
    assert got == {"semantic": 40, "temporal": 24, "entity": 16}


def test_budget_gamma_sharpens() -> None:
    flat = formulas.allocate_budget({"semantic": 0.8, "temporal": 0.2}, 80, 1, 1.0)
    sharp = formulas.allocate_budget({"semantic": 0.8, "temporal": 0.2}, 80, 1, 2.0)
    assert sharp["semantic"] > flat["semantic"]


@given(st.dictionaries(st.sampled_from(["semantic", "temporal", "causal", "entity"]),
                       st.floats(0.0, 1.0), min_size=1), st.integers(0, 200), st.integers(0, 5))
def test_budget_sums_and_minimum(probs: dict[str, float], total: int, minimum: int) -> None:
    got = formulas.allocate_budget(probs, total, minimum, 1.0)  # type: ignore[arg-type]
    assert set(got) == set(probs)
    assert all(v >= minimum for v in got.values())
    assert sum(got.values()) == max(total, minimum * len(probs))


@pytest.mark.parametrize(("h", "d"), [(0.0, 1), (0.2, 1), (0.34, 2), (0.5, 2), (0.99, 3), (1.0, 3)])
def test_depth(h: float, d: int) -> None:
    assert formulas.depth(h, 3, 8) == d


def test_depth_respects_hard_limit() -> None:
    assert formulas.depth(1.0, 20, 8) == 8


def test_rrf_kappa_60() -> None:
    fused = formulas.rrf([["a", "b", "c"], ["b", "d"]], 60)
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["a"] == pytest.approx(1 / 61)
    assert formulas.fused_order(fused)[:2] == ["b", "a"]


def test_combined_score_is_weighted_mean() -> None:
    w = ScoreWeights(cosine=1, relevance=2, relation=1, novelty=1, support=1)
    s = formulas.combined_score(z=0.5, a=1.0, p_g=0.5, l=0.8, n=0.0, pi_e=1.0, c=0.0, w=w)
    assert s == pytest.approx((0.5 + 2.0 + 0.4 + 0.0 + 0.5) / 6)
    assert formulas.combined_score(1, 1, 1, 1, 1, 1, 1, w) == pytest.approx(1.0)


def test_recency() -> None:
    now = datetime(2024, 1, 10, tzinfo=UTC)
    assert formulas.recency_rho(now, now) == 1.0
    assert formulas.recency_rho(now, now - timedelta(days=1)) == pytest.approx(0.5)
    assert formulas.recency_rho(now, now + timedelta(days=3)) == 1.0  # future clamps to 0 days
    assert formulas.recency_rho(None, now) == 0.0
    assert formulas.recency_adjust(0.5, 0.0, 1.0, 0.1) == 0.5
    assert formulas.recency_adjust(0.5, 1.0, 1.0, 0.1) == pytest.approx(0.5)  # today's memory keeps its score
    assert formulas.recency_adjust(0.5, 1.0, 0.0, 0.1) == pytest.approx(0.5 / 1.1)  # an old one loses a little
    assert formulas.recency_adjust(0.0, 1.0, 1.0, 0.1) == 0.0  # recency never lifts an irrelevant memory


def test_stop_rules() -> None:
    p = Params()
    done = {"sufficient": 0.96, "missing": 0.1, "contradiction": 0.1, "continue_useful": 0.9}
    assert formulas.stop_reason(done, p) == "sufficient"
    assert formulas.stop_reason({**done, "missing": 0.2}, p) is None
    assert formulas.stop_reason({**done, "contradiction": 0.2}, p) is None
    assert formulas.stop_reason({**done, "sufficient": 0.5, "continue_useful": 0.1}, p) == "not_useful"


def test_a_score_row_has_the_scorers_features_in_order_and_rounds_once() -> None:
    from query_api.retrieval.features import EXACT, ScoreRow
    from topology.systemone.features import SCORE_FEATURES

    assert ScoreRow._fields == SCORE_FEATURES
    assert set(SCORE_FEATURES) >= EXACT
    row = ScoreRow.of({name: 1 / 3 for name in SCORE_FEATURES})
    assert row.values() == [1 / 3 if name in EXACT else 0.333333 for name in SCORE_FEATURES]
    assert list(row.as_dict()) == list(SCORE_FEATURES)
    with pytest.raises(ValueError, match="length"):
        ScoreRow.of({name: 0.5 for name in SCORE_FEATURES if name != "length"})
