"""Recall over a user's sessions is scored with weights learned on realm pools; a recall inside one
conversation keeps the single-conversation weights; an embedder without realm weights falls back
to its single-conversation ones."""

from __future__ import annotations

import asyncio

from query_api.retrieval.features import ScoreRow
from query_api.retrieval.scoring import LocalScorer, local_judgements
from topology.systemone.features import SCORE_FEATURES
from topology.systemone.learned import REALM_SHIPPED, ScoreModel, shipped_file
from topology.systemone.local import LocalSystemOne
from topology.systemone.port import CountingSystemOne


def test_the_shipped_realm_weights_are_their_own_and_say_where_they_came_from() -> None:
    realm, single = ScoreModel.shipped(realm=True), ScoreModel.shipped()
    assert shipped_file(realm=True) == REALM_SHIPPED
    assert realm.meta["source"] == "LongMemEval dev" and realm.meta["trained_by"] == "scripts/train_realm_relevance.py"
    assert not (realm.coef.shape == single.coef.shape and (realm.coef == single.coef).all())
    fallback = ScoreModel.shipped("some-other-embedder@1", realm=True)
    assert fallback.meta["realm"] is False and (fallback.coef == single.coef).all()


def test_the_scorer_uses_the_realm_weights_for_a_realm_only() -> None:
    realm, single = ScoreModel.shipped(realm=True), ScoreModel.shipped()
    backend = LocalSystemOne(score_model=single, realm_score_model=realm)
    scorer = LocalScorer(backend)
    rows = [ScoreRow.of({name: v for name in SCORE_FEATURES}) for v in (0.1, 0.5, 0.9)]

    def judge(is_realm: bool) -> list[tuple[float, float, float, float]]:
        return asyncio.run(scorer.judge(CountingSystemOne(backend), "q", rows, lambda: [], realm=is_realm))

    assert judge(True) == local_judgements(realm, rows) != local_judgements(single, rows)
    assert judge(False) == local_judgements(single, rows)
    # a caller's own weights answer both kinds of recall unless realm weights are given too
    own = LocalSystemOne(score_model=single)
    assert own.realm_score_model is single
