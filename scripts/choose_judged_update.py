"""Choose ``RealmRanking.judged_update`` on the update judge's wide pool, and check it on the other half.

    python scripts/choose_judged_update.py [--choose a] [--seed 0]

At recall, the asker's later statement that answers a first-person question about the present
about as well as the best one is put to the update judge as a possible replacement of it, its
attribute unknown to the judge (:meth:`query_api.retrieval.present.PresentSteps._judged_latest`).
Whether the later one changes the fact is what the judge reads. The wide pool
(:mod:`jevmem.bench.wide`: 36 attributes beyond our tables, which the shipped judge never saw)
has the pairs it meets there: a person's statement, then (changed) an explicit, contrasting or
cue-less update of it, or (unchanged) a restatement, a remark on the same thing, or a statement
of another attribute (answering one question about as well does not make two statements about
one thing, and the judge, told nothing of the attribute, reads many such pairs as changes). For
each threshold, the share of each kind judged a replacement, recall, false
positive rate and their balanced accuracy, on the half ``--choose`` (where the threshold is
chosen: the best balanced accuracy) and on the other half (where it is checked). Deterministic;
prints one JSON object. The pairs' speakers and times are fixed (one person, two weeks apart).
"""

from __future__ import annotations

import argparse
import random
import sys
from typing import Any

import orjson

from jevmem.bench.wide import WideFold, wide
from topology.systemone.features import RelationState
from topology.systemone.update_model import UpdateModel

CHANGED = ("explicit", "contrast", "implicit")
#: the unchanged kinds that repeat the first statement's value, and a statement of another attribute
SAME_VALUE = ("restate", "remark")
UNCHANGED = (*SAME_VALUE, "another")
THRESHOLDS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def pairs(fold: WideFold, seed: int) -> list[tuple[str, str, str]]:
    """(older, newer, kind) for every first statement of each attribute of ``fold`` against each
    later wording: a changed value for :data:`CHANGED`, the same value for :data:`UNCHANGED`."""
    rnd = random.Random(seed)
    out = []
    attributes = wide(fold)
    for a in attributes:
        for state in a.state:
            v1, v2 = rnd.sample(a.values, 2)
            older = state.format(v=v1)
            out += [(older, w.format(v=v2, old=v1), k) for k in CHANGED for w in getattr(a, k)]
            out += [(older, w.format(v=v1, old=v1), k) for k in SAME_VALUE for w in getattr(a, k)]
            for b in rnd.sample([b for b in attributes if b is not a], 3):  # a statement of another attribute
                out.append((older, rnd.choice(b.state).format(v=rnd.choice(b.values)), "another"))
    return out


def judged(model: UpdateModel, found: list[tuple[str, str, str]]) -> list[float]:
    """p(updates) of each pair, both said by one user two weeks apart, the attribute unknown."""
    return model.answer([RelationState(newer=n, older=o, cosine=0.0, lexical=0.0, entity=0.0, gap=20, same_speaker=True,
                                       older_speaker="user", newer_speaker="user", older_role="user",
                                       newer_role="user", hours=24 * 14, attribute=None) for o, n, _ in found])


def table(found: list[tuple[str, str, str]], ps: list[float]) -> dict[str, dict[str, float]]:
    """Per threshold: the share of each kind at or above it, recall, false positive rate, balanced accuracy."""
    out = {}
    for t in THRESHOLDS:
        share = {k: sum(p >= t for p, (_, _, kk) in zip(ps, found, strict=True) if kk == k)
                 / max(1, sum(kk == k for _, _, kk in found)) for k in CHANGED + UNCHANGED}
        pos = [p >= t for p, (_, _, k) in zip(ps, found, strict=True) if k in CHANGED]
        neg = [p >= t for p, (_, _, k) in zip(ps, found, strict=True) if k in UNCHANGED]
        recall, fpr = sum(pos) / len(pos), sum(neg) / len(neg)
        out[str(t)] = {k: round(v, 3) for k, v in share.items()} | {
            "recall": round(recall, 3), "false_positive_rate": round(fpr, 3),
            "balanced_accuracy": round((recall + 1.0 - fpr) / 2.0, 3)}
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--choose", choices=("a", "b"), default="a", help="the half the threshold is chosen on")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    model = UpdateModel.shipped()
    report: dict[str, Any] = {}
    halves: tuple[tuple[str, WideFold], ...] = (("chosen_on", "a"), ("checked_on", "b")) if args.choose == "a" \
        else (("chosen_on", "b"), ("checked_on", "a"))
    for role, fold in halves:
        found = pairs(fold, args.seed)
        report[role] = {"half": fold, "pairs": len(found), "thresholds": table(found, judged(model, found))}
    rows = report["chosen_on"]["thresholds"]
    best = max(rows, key=lambda t: (rows[t]["balanced_accuracy"], -float(t)))
    report["chosen"] = float(best)
    report["checked"] = report["checked_on"]["thresholds"][best]
    sys.stdout.buffer.write(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
