"""The paired comparison of two retrieval runs (jevmem.bench.paired) and its script's file format."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from jevmem.bench.paired import QuestionRecall, compare, dump_lines, paired_interval

ROOT = Path(__file__).resolve().parents[2]


def _run(recalls: list[tuple[str, float]]) -> list[QuestionRecall]:
    return [QuestionRecall("c1" if i % 2 else "c2", i, cat, {10: r, 5: r / 2}) for i, (cat, r) in enumerate(recalls)]


def test_identical_runs_differ_by_nothing() -> None:
    a = [0.0, 0.5, 1.0, 1.0, 0.25]
    assert paired_interval(a, a) == (0.0, 0.0, 0.0)


def test_a_constant_shift_is_the_difference_and_its_whole_interval() -> None:
    a = [0.0, 0.5, 0.2, 0.7]
    diff, lo, hi = paired_interval(a, [x + 0.25 for x in a])
    assert diff == pytest.approx(0.25) and lo == pytest.approx(0.25) and hi == pytest.approx(0.25)


def test_the_interval_holds_the_mean_and_is_deterministic() -> None:
    a = [1.0, 0.0, 1.0, 0.0, 1.0, 0.5, 0.0, 1.0]
    b = [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.5, 1.0]
    first = paired_interval(a, b)
    assert first == paired_interval(a, b)
    diff, lo, hi = first
    assert diff == pytest.approx(0.125)
    assert lo < diff < hi and lo < 0 < hi  # a gain of one question in eight pairs: not told from chance


def test_unequal_or_empty_series_are_refused() -> None:
    with pytest.raises(ValueError):
        paired_interval([1.0], [1.0, 0.0])
    with pytest.raises(ValueError):
        paired_interval([], [])


def test_compare_matches_questions_and_splits_by_category() -> None:
    a = _run([("multi_hop", 0.0), ("single_hop", 1.0), ("multi_hop", 0.5), ("single_hop", 1.0)])
    b = _run([("multi_hop", 1.0), ("single_hop", 1.0), ("multi_hop", 0.5), ("single_hop", 0.0)])
    out = compare(a, list(reversed(b)))  # matched by (conversation, index), not by position
    assert set(out) == {"5", "10"}
    assert out["10"]["overall"]["n"] == 4 and out["10"]["multi_hop"]["n"] == 2
    assert out["10"]["multi_hop"]["diff"] == pytest.approx(0.5)
    assert out["10"]["single_hop"]["diff"] == pytest.approx(-0.5)
    assert out["10"]["overall"]["diff"] == pytest.approx(0.0)
    assert out["5"]["multi_hop"]["a"] == pytest.approx(0.125)


def test_compare_refuses_runs_over_other_questions() -> None:
    a = _run([("multi_hop", 0.0), ("single_hop", 1.0)])
    with pytest.raises(ValueError, match="same questions"):
        compare(a, a[:1])


def test_the_script_reads_the_training_scripts_question_files(tmp_path: Path) -> None:
    a = _run([("multi_hop", 0.0), ("single_hop", 1.0), ("multi_hop", 0.5)])
    b = _run([("multi_hop", 1.0), ("single_hop", 1.0), ("multi_hop", 0.5)])
    for name, run in (("a", a), ("b", b)):
        (tmp_path / f"{name}.jsonl").write_bytes(dump_lines(run))
    assert [QuestionRecall.from_json(q.to_json()) for q in a] == a
    done = subprocess.run([sys.executable, str(ROOT / "scripts/compare_recall.py"), str(tmp_path / "a.jsonl"),
                           str(tmp_path / "b.jsonl"), "--k", "10", "--json"], capture_output=True, check=True, cwd=ROOT)
    out = orjson.loads(done.stdout)
    assert set(out) == {"10"} and out["10"]["multi_hop"]["diff"] == pytest.approx(0.5)
    (tmp_path / "c.jsonl").write_bytes((tmp_path / "a.jsonl").read_bytes().splitlines(keepends=True)[0])
    refused = subprocess.run([sys.executable, str(ROOT / "scripts/compare_recall.py"), str(tmp_path / "a.jsonl"),
                              str(tmp_path / "c.jsonl")], capture_output=True, cwd=ROOT)
    assert refused.returncode != 0 and b"same questions" in refused.stderr
