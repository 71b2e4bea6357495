"""``jevmem bench longmemeval``: LongMemEval's metrics as its evaluation computes them, a stable
stratified subset and split, and a run over a small haystack in LongMemEval's format (made here,
not taken from the data set) that ingests once and asks again from a kept build."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from jevmem.bench.longmemeval import (
    dcg,
    half,
    load_question,
    parse_date,
    question_metrics,
    retrieval_metrics,
    run_longmemeval,
    select,
    sessions_of,
)
from jevmem.settings import Settings
from topology.ports import Embedder


def test_dcg_and_ndcg_follow_longmemeval() -> None:
    # its dcg: the first gain undiscounted, the i-th over log2(i) from i = 2 on
    assert dcg([1.0, 1.0, 0.0, 1.0], 10) == pytest.approx(1 + 1 / math.log2(2) + 1 / math.log2(4))
    m = retrieval_metrics(["x", "g1", "y", "g2"], {"g1", "g2"}, 3)
    assert m["recall_any"] == 1.0 and m["recall_all"] == 0.0 and m["recall_frac"] == 0.5
    assert m["ndcg_any"] == pytest.approx((1 / math.log2(2)) / 2.0)
    assert retrieval_metrics(["g1"], {"g1"}, 5)["ndcg_any"] == 1.0


def test_sessions_come_from_the_smallest_prefix_covering_k_of_them() -> None:
    session = {"a0": "A", "a1": "A", "b0": "B", "c0": "C"}
    assert sessions_of(["a0", "a1", "b0", "c0"], session, 2) == ["A", "B"]
    assert sessions_of(["a0", "a1"], session, 5) == ["A"]


def _haystack(qid: str, category: str, tmp: Path) -> Path:
    sessions = [[{"role": "user", "content": "I moved my sourdough starter to the fridge, it was too active."},
                 {"role": "assistant", "content": "Good idea, feed it weekly."}],
                [{"role": "user", "content": "My neighbour's cat keeps visiting the balcony.", "has_answer": True},
                 {"role": "assistant", "content": "Cats love balconies."}],
                [{"role": "user", "content": "Can you suggest a film for tonight?"},
                 {"role": "assistant", "content": "Try a classic comedy."}]]
    d = {"question_id": qid, "question_type": category, "question": "Whose cat visits my balcony?",
         "answer": "the neighbour's", "question_date": "2023/05/30 (Tue) 10:00",
         "haystack_session_ids": ["s1", "s2", "s3"],
         "haystack_dates": ["2023/05/02 (Tue) 09:00", "2023/05/01 (Mon) 09:00", "2023/05/03 (Wed) 09:00"],
         "haystack_sessions": sessions, "answer_session_ids": ["s2"]}
    path = tmp / f"{qid}.json"
    path.write_text(json.dumps(d))
    return path


def test_a_question_file_is_read_in_time_order_with_its_evidence(tmp_path: Path) -> None:
    q = load_question(_haystack("q1", "single-session-user", tmp_path))
    assert [t.session for t in q.turns] == ["s2", "s2", "s1", "s1", "s3", "s3"]  # sessions by date
    assert q.evidence == {"s2:0"} and q.date == parse_date("2023/05/30 (Tue) 10:00")
    assert q.turns[1].at > q.turns[0].at
    perfect = question_metrics(["s2:0", "s1:0"], q)
    assert perfect["turn_recall_all@5"] == 1.0 and perfect["session_ndcg_any@5"] == 1.0


def test_the_subset_takes_categories_in_turn_and_leaves_abstention_out(tmp_path: Path) -> None:
    paths = [_haystack(f"u{i}", "single-session-user", tmp_path) for i in range(3)]
    paths += [_haystack(f"m{i}", "multi-session", tmp_path) for i in range(3)]
    paths.append(_haystack("u9_abs", "single-session-user", tmp_path))
    assert [p.stem for p in select(paths, 3)] == ["m0", "u0", "m1"]
    assert len(select(paths, None)) == 6
    a, b = select(paths, None, "a"), select(paths, None, "b")
    assert {p.stem for p in a} | {p.stem for p in b} == {p.stem for p in select(paths, None)}
    assert all(half(p.stem) == "a" for p in a) and not {p.stem for p in a} & {p.stem for p in b}


async def test_a_kept_build_is_asked_again_without_ingesting(tmp_path: Path, embedder: Embedder) -> None:
    data = tmp_path / "data"
    data.mkdir()
    _haystack("q1", "single-session-user", data)
    _haystack("q2", "multi-session", data)
    build = tmp_path / "build"
    first = await run_longmemeval(data, Settings(), embedder, data_dir=build)
    assert first["ingest"]["turns"] == 12 and first["ingest"]["rejected"] == 0
    assert set(first["metrics"]) == {"jevmem", "dense", "bm25", "hybrid_rrf", "stored_vectors"}
    for method, cats in first["metrics"].items():
        assert cats["all"]["questions"] == 2, method
        assert all(0.0 <= v <= 1.0 for k, v in cats["all"].items() if k != "questions"), method
    assert sum(first["head_to_head"].values()) == 2
    again = await run_longmemeval(data, Settings(), embedder, data_dir=build)
    assert again["ingest"]["turns"] == 0
    assert again["metrics"] == first["metrics"]
