"""The edge-quality benchmark: ROC AUC, evidence pairs, and a run over a small LoCoMo file."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from jevmem.bench.edges import VIEWS, related_pairs, roc_auc, run_edges
from jevmem.locomo import Question
from jevmem.settings import Settings
from tests.conftest import CHAT
from topology.params import Params
from topology.ports import Embedder


def test_roc_auc_counts_ordered_pairs_and_ties_half() -> None:
    assert roc_auc([0.1, 0.2, 0.8, 0.9], [False, False, True, True]) == 1.0
    assert roc_auc([0.9, 0.8, 0.2, 0.1], [False, False, True, True]) == 0.0
    assert roc_auc([0.5, 0.5, 0.5], [True, False, False]) == 0.5
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [False, False, True, True]) == 0.75
    assert roc_auc([0.3, 0.2], [True, True]) is None


def test_related_pairs_are_the_pairs_of_one_question_s_evidence() -> None:
    qs = [Question("q1", ("D1:1", "D1:3", "D1:1"), "multi-hop"), Question("q2", ("D1:5",), "single-hop")]
    assert related_pairs(qs) == {frozenset(("D1:1", "D1:3"))}


async def test_a_run_reports_every_view_for_each_conversation(tmp_path: Path, embedder: Embedder) -> None:
    turns = [{"speaker": s, "dia_id": f"D1:{i + 1}", "text": t} for i, (s, t) in enumerate(CHAT)]
    data = {"speaker_a": "Ana", "speaker_b": "Ben", "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": turns,
            "qa": [{"question": "What did Ana adopt and how is it?", "evidence": ["D1:1", "D1:2"], "category": 1}]}
    (tmp_path / "c1.json").write_bytes(orjson.dumps(data))
    out = await run_edges(tmp_path, Settings(params=Params()), embedder)
    conv = out["conversations"]["c1"]
    assert conv["turns"] == len(CHAT) and conv["candidate_pairs"] > 0
    assert conv["related_candidate_pairs"] == 1  # turn 2 is a candidate of turn 1's reply
    assert conv["edges_per_turn"]["temporal"] > 0
    for v in VIEWS:
        assert out["all"][f"auc_{v}"] is None or 0.0 <= out["all"][f"auc_{v}"] <= 1.0
    assert out["all"]["related_pairs_linked_by_an_edge"] == 1.0  # consecutive turns: a "next" edge
    with pytest.raises(FileNotFoundError):
        await run_edges(tmp_path / "none", Settings(params=Params()), embedder)
