"""The read path's formulas, each a pure function with a unit test."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from datetime import datetime

from topology.params import KindPenalties, Params, ScoreWeights
from topology.schemas import VIEWS, View


def active_views(route: Mapping[str, float], theta_act: float) -> list[View]:
    """Views whose route probability reaches ``theta_act``, in canonical order."""
    return [v for v in VIEWS if route.get(v, 0.0) >= theta_act]


def allocate_budget(probs: Mapping[View, float], total: int, minimum: int, gamma: float) -> dict[View, int]:
    """Largest-remainder split of ``total`` over the views of ``probs``.

    Each view first gets ``minimum``; the rest is shared in proportion to p^gamma, floors first,
    then one unit each to the largest fractional remainders (ties: canonical view order).
    The result always sums to ``total`` (or to ``minimum * len`` when that is larger).
    """
    views = [v for v in VIEWS if v in probs]
    if not views:
        return {}
    out = {v: minimum for v in views}
    rest = total - minimum * len(views)
    if rest <= 0:
        return out
    weights = {v: max(probs[v], 0.0) ** gamma for v in views}
    norm = sum(weights.values())
    if norm == 0:
        weights, norm = {v: 1.0 for v in views}, float(len(views))
    quotas = {v: rest * weights[v] / norm for v in views}
    floors = {v: math.floor(q) for v, q in quotas.items()}
    left = rest - sum(floors.values())
    order = sorted(views, key=lambda v: (-(quotas[v] - floors[v]), VIEWS.index(v)))
    for v in order[:left]:
        floors[v] += 1
    return {v: out[v] + floors[v] for v in views}


def depth(multi_hop: float, d_max: int, hard_limit: int) -> int:
    """D(q) = min(D_max, max(1, ceil(D_max * h(q)))), never above the hard depth limit."""
    return min(hard_limit, d_max, max(1, math.ceil(d_max * multi_hop)))


def rrf(rankings: Sequence[Sequence[str]], kappa: int) -> dict[str, float]:
    """Reciprocal-rank fusion: sum over rankings of 1 / (kappa + rank), ranks from 1."""
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + 1.0 / (kappa + rank)
    return fused


def fused_order(fused: Mapping[str, float]) -> list[str]:
    """Ids by fused score, ties broken by id for determinism."""
    return sorted(fused, key=lambda i: (-fused[i], i))


def combined_score(z: float, a: float, p_g: float, l: float, n: float, pi_e: float, c: float,
                   w: ScoreWeights) -> float:
    """s = (l1*z + l2*a + l3*p_g*l + l4*n + l5*(pi_e + c)/2) / sum(l)."""
    total = w.cosine + w.relevance + w.relation + w.novelty + w.support
    return (w.cosine * z + w.relevance * a + w.relation * p_g * l + w.novelty * n
            + w.support * (pi_e + c) / 2.0) / total


def recency_rho(t_star: datetime | None, t_v: datetime | None) -> float:
    """rho = 1 / (1 + max(0, t* - t_v) / day); 0 when either time is unknown."""
    if t_star is None or t_v is None:
        return 0.0
    days = max(0.0, (t_star - t_v).total_seconds() / 86400.0)
    return 1.0 / (1.0 + days)


def recency_adjust(s: float, r: float, rho: float, weight: float) -> float:
    """s' = s * (1 + weight*r*rho) / (1 + weight*r): the newest of equally relevant memories
    first, without lifting an irrelevant one (an added term would outrank a relevant memory
    whenever scores are small)."""
    return s * (1.0 + weight * r * rho) / (1.0 + weight * r)


def spread_cosine(z: float, cos_range: tuple[float, float], min_spread: float) -> float:
    """``z`` placed in the pool's cosine range ``(lo, hi)``: ``(z - hi + span) / span`` with ``span =
    max(hi - lo, min_spread)``, so the best anchor is 1 and the worst 0 when the anchors spread over
    at least ``min_spread``; two memories of nearly the same cosine stay nearly equal in a small pool
    instead of becoming first and last."""
    lo, hi = cos_range
    span = max(hi - lo, min_spread, 1e-6)
    return (z - hi + span) / span


def exchange_lift(score: float, reply: float, weight: float) -> float:
    """A person's turn's score with ``weight`` of its reply's (a negative reply score adds nothing)."""
    return score + weight * max(0.0, reply)


def kind_adjust(s: float, kind: Mapping[str, float], penalty: KindPenalties, states: float = 0.0) -> float:
    """s' = s * (1 - min(1, (1 - states) * sum_k penalty_k * p(kind_k))) over the kinds ``penalty``
    names (:class:`~topology.params.KindPenalties`; a statement is never penalised). ``states``, the
    probability that one of the turn's sentences is a statement
    (:func:`~topology.systemone.turn_kinds.statement_within`), lifts the penalty in proportion: a
    question, request or advice that also states something may hold the answer."""
    weights = _penalties(penalty)
    cut = sum(weights[k] * p for k, p in kind.items() if k in weights)
    return s * (1.0 - min(1.0, max(0.0, (1.0 - states) * cut)))


@functools.lru_cache(maxsize=64)
def _penalties(penalty: KindPenalties) -> dict[str, float]:
    """The penalty of each kind ``penalty`` names (read once per settings object: a recall
    adjusts every candidate's score with it)."""
    return {k: float(getattr(penalty, k)) for k in KindPenalties.model_fields}


def stop_reason(assess: Mapping[str, float], params: Params) -> str | None:
    """Why to stop after an assessment, or None to continue."""
    if (assess["sufficient"] >= params.stop_sufficient and assess["missing"] < params.stop_missing
            and assess["contradiction"] < params.stop_missing):
        return "sufficient"
    if assess["continue_useful"] < params.stop_continue:
        return "not_useful"
    return None
