"""Training the ``local`` System One's relation judge on LoCoMo-format dev conversations.

Each conversation is ingested embedded (every stage on) and every candidate pair the write path
proposed (a new turn, an earlier turn) becomes a row: the features the relation question carries
(:func:`topology.stages.relations.relation_state`, :func:`relation_features`) and a label, *related*
when both turns are evidence for one question (labels are read here only; the write path never
sees them). Candidate discovery does not read edges, so the rows do not depend on the judge that
built the memory. :func:`loco` fits on all conversations but one and scores the held-out one, so
the figures it reports are out of sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from jevmem import locomo
from jevmem.bench.edges import ingest_written, related_pairs, roc_auc
from jevmem.settings import Settings
from streams.write_path import Written
from topology.pipeline import dedupe
from topology.ports import Embedder
from topology.schemas import MemoryNode
from topology.stages.relations import relation_state
from topology.systemone.features import RelationState
from topology.systemone.local import relation_many
from topology.systemone.relation_model import RelationModel, fit, relation_features


@dataclass(frozen=True)
class Pairs:
    """Candidate pairs: features ``x`` (n, F), labels ``y``, conversation ``group``, the newer
    turn's node id ``newer``, and the hand-set rule's p(semantic) ``rule``."""

    x: np.ndarray
    y: np.ndarray
    group: np.ndarray
    newer: np.ndarray
    rule: np.ndarray
    turns: dict[str, int]


def _rows(written: Sequence[Written], related: set[frozenset[str]], name: str) -> tuple[list[Any], ...]:
    nodes: dict[str, MemoryNode] = {n.id: n for w in written for n in w.nodes}
    states, ys, newer = [], [], []
    for w in written:
        for cs in w.candidates:
            for c in cs.candidates:
                other = nodes.get(c.node_id)
                if other is None:
                    continue
                states.append(relation_state(cs.node, other, c.features))
                ys.append(1.0 if frozenset((cs.node.event_id, other.event_id)) in related else 0.0)
                newer.append(cs.node.id)
    return states, ys, newer, [name] * len(ys)


async def collect_pairs(files: Sequence[Path], settings: Settings, embedder: Embedder) -> Pairs:
    """Every candidate pair of every conversation file, labelled."""
    states: list[dict[str, object]] = []
    ys: list[float] = []
    newer: list[str] = []
    group: list[str] = []
    turns: dict[str, int] = {}
    for path in files:
        data = locomo.load(path)
        obs = dedupe(locomo.observations(data, "train", f"locomo-{path.stem}"))
        written = await ingest_written(obs, settings, embedder)
        turns[path.stem] = sum(1 for w in written for n in w.nodes if n.kind == "observation")
        s, y, nw, g = _rows(written, related_pairs(locomo.questions(data)), path.stem)
        states += s
        ys += y
        newer += nw
        group += g
    parsed = [RelationState.model_validate(s) for s in states]
    rule = [a.p("semantic") for a in relation_many(states, None)]
    return Pairs(np.asarray([relation_features(st) for st in parsed], dtype=np.float64), np.asarray(ys),
                 np.asarray(group), np.asarray(newer), np.asarray(rule), turns)


def _auc(p: np.ndarray, y: np.ndarray) -> float | None:
    auc = roc_auc(p.tolist(), (y > 0).tolist())
    return None if auc is None else round(auc, 3)


def _selectivity(p: np.ndarray, y: np.ndarray, newer: np.ndarray, turns: int, per_turn: int,
                 floor: float) -> dict[str, Any]:
    """The semantic edges the judge's ``p`` would give (each new turn's ``per_turn`` most probable
    candidates at or above ``floor``, :func:`~topology.stages.relations.strongest`), per turn, and
    how many related pairs they keep (the turn's ``nearest`` edge, which does not depend on the
    judge, left out)."""
    keep = np.zeros(len(p), dtype=bool)
    by_turn: dict[str, list[int]] = {}
    for i, nid in enumerate(newer.tolist()):
        by_turn.setdefault(nid, []).append(i)
    for rows in by_turn.values():
        ranked = sorted((i for i in rows if p[i] >= floor), key=lambda i: -p[i])
        keep[ranked[:per_turn]] = True
    return {"edges_per_turn": round(float(keep.sum()) / max(1, turns), 2),
            "related_kept": int((keep & (y > 0)).sum()), "related": int((y > 0).sum())}


def fold_judges(pairs: Pairs, l2: float = 1.0) -> dict[str, RelationModel]:
    """Per conversation, the judge fitted on the pairs of every other conversation."""
    return {held: fit(pairs.x[pairs.group != held], pairs.y[pairs.group != held], l2)
            for held in sorted(set(pairs.group.tolist()))}


def loco(pairs: Pairs, per_turn: int, floor: float, l2: float = 1.0) -> dict[str, Any]:
    """Leave-one-conversation-out: per held-out conversation and pooled, the ROC AUC of the rule's
    and the learned judge's p(semantic) over its candidate pairs, and the semantic edges per turn
    each would write (:func:`_selectivity`), with how many related pairs they keep."""
    judges = fold_judges(pairs, l2)
    names = sorted(judges)
    out: dict[str, Any] = {}
    learned_all, rule_all, y_all, newer_all = [], [], [], []
    for held in names:
        test = pairs.group == held
        p = judges[held].probabilities(pairs.x[test])
        y, r, nw = pairs.y[test], pairs.rule[test], pairs.newer[test]
        out[held] = {"pairs": int(test.sum()), "auc_rule": _auc(r, y), "auc_learned": _auc(p, y),
                     "rule": _selectivity(r, y, nw, pairs.turns[held], per_turn, floor),
                     "learned": _selectivity(p, y, nw, pairs.turns[held], per_turn, floor)}
        learned_all.append(p)
        rule_all.append(r)
        y_all.append(y)
        newer_all.append(nw)
    p, r, y, nw = (np.concatenate(a) for a in (learned_all, rule_all, y_all, newer_all))
    turns = sum(pairs.turns[n] for n in names)
    out["all"] = {"pairs": len(y), "auc_rule": _auc(r, y), "auc_learned": _auc(p, y),
                  "rule": _selectivity(r, y, nw, turns, per_turn, floor),
                  "learned": _selectivity(p, y, nw, turns, per_turn, floor)}
    return out


async def train(files: Sequence[Path], settings: Settings, embedder: Embedder,
                l2: float = 1.0) -> tuple[RelationModel, dict[str, Any]]:
    """The judge fitted on every conversation, and the leave-one-out report."""
    pairs = await collect_pairs(files, settings, embedder)
    meta = {"trained_by": "scripts/train_relations.py", "conversations": sorted(pairs.turns), "l2": l2,
            "pairs": len(pairs.y), "related": int(pairs.y.sum()), "trained_with": embedder.name}
    params = settings.params
    return fit(pairs.x, pairs.y, l2, meta=meta), loco(pairs, params.semantic_per_turn, params.theta_semantic, l2)
