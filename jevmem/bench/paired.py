"""Comparing two retrieval runs question by question: a paired bootstrap of the recall difference.

Two leave-one-out runs on the same questions differ by a few questions' worth of recall; whether
that is more than chance is a question about the *paired* differences (the same question under
each run), not about two independent means. :func:`paired_interval` resamples the questions
(with replacement, a fixed seed: deterministic) and gives the mean difference with a percentile
interval; :func:`compare` does it per category and k for two runs' :class:`QuestionRecall`
records, matched by conversation and question index. A run's records travel as JSON lines
(:func:`dump_lines`, :func:`load_lines`). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson


@dataclass(frozen=True)
class QuestionRecall:
    """One question's recall@k in one run: ``recall`` maps k to the fraction of its evidence turns
    among the first k retrieved."""

    conversation: str
    index: int
    category: str
    recall: dict[int, float]

    def to_json(self) -> dict[str, Any]:
        return {"conversation": self.conversation, "index": self.index, "category": self.category,
                "recall": {str(k): v for k, v in self.recall.items()}}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> QuestionRecall:
        return cls(str(d["conversation"]), int(d["index"]), str(d["category"]),
                   {int(k): float(v) for k, v in d["recall"].items()})


def dump_lines(questions: Sequence[QuestionRecall]) -> bytes:
    """The records as JSON lines (what ``scripts/train_system_one.py --questions`` writes)."""
    return b"".join(orjson.dumps(q.to_json()) + b"\n" for q in questions)


def load_lines(raw: bytes) -> list[QuestionRecall]:
    """The records of :func:`dump_lines` output (blank lines skipped)."""
    return [QuestionRecall.from_json(orjson.loads(line)) for line in raw.splitlines() if line.strip()]


def paired_interval(a: Sequence[float], b: Sequence[float], samples: int = 2000, seed: int = 0,
                    level: float = 0.95) -> tuple[float, float, float]:
    """(mean of b - a, low, high): the mean paired difference and its bootstrap percentile
    interval at ``level`` over ``samples`` resamples of the pairs. ``a`` and ``b`` are the same
    questions in the same order; raises ValueError when their lengths differ or are 0."""
    if len(a) != len(b) or not a:
        raise ValueError(f"need two equally long, non-empty series (got {len(a)} and {len(b)})")
    d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(samples, len(d)))].mean(axis=1)
    tail = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(means, [tail, 100.0 - tail])
    return float(d.mean()), float(lo), float(hi)


def compare(a: Sequence[QuestionRecall], b: Sequence[QuestionRecall], samples: int = 2000,
            seed: int = 0, only_k: int | None = None) -> dict[str, dict[str, dict[str, float]]]:
    """Per k (every k both runs hold, or only ``only_k``) and category ("overall" included):
    ``{"a", "b", "diff", "low", "high", "n"}`` for run ``b`` against run ``a``. Questions are
    matched by (conversation, index); raises ValueError when the two runs do not hold the same
    questions."""
    key_a = {(q.conversation, q.index): q for q in a}
    key_b = {(q.conversation, q.index): q for q in b}
    if set(key_a) != set(key_b):
        raise ValueError("the two runs do not hold the same questions")
    keys = sorted(key_a)
    ks = sorted(set.intersection(*(set(q.recall) for q in [*a, *b]))) if keys else []
    cats = ["overall", *sorted({key_a[x].category for x in keys})]
    out: dict[str, dict[str, dict[str, float]]] = {}
    for k in ks if only_k is None else [k for k in ks if k == only_k]:
        out[str(k)] = {}
        for cat in cats:
            sel = [x for x in keys if cat == "overall" or key_a[x].category == cat]
            ra = [key_a[x].recall[k] for x in sel]
            rb = [key_b[x].recall[k] for x in sel]
            diff, lo, hi = paired_interval(ra, rb, samples, seed)
            out[str(k)][cat] = {"a": round(float(np.mean(ra)), 4), "b": round(float(np.mean(rb)), 4),
                                "diff": round(diff, 4), "low": round(lo, 4), "high": round(hi, 4), "n": len(sel)}
    return out
