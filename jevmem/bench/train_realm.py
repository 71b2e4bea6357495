"""Training the relevance weights for recall over a user's sessions (``REALM_SHIPPED``), on
LongMemEval dev haystacks, and validating them across sources.

Each question is asked through recall (a realm: the question's user, as of the end of its day)
with a recorder on the controller; the final pool's rows are labelled with the question's
evidence turns (labels are read here only, never at run time), and a logistic model is fitted as
:func:`jevmem.bench.train.fit` fits the single-conversation one (two collect/refit rounds from the
shipped single-conversation weights, since the pool depends on the scores).

:func:`train_realm` also validates them: the questions split in two halves by id
(:func:`jevmem.bench.longmemeval.half`), weights fitted on one half evaluated on the other,
beside the single-conversation weights (trained on LoCoMo only) on the same questions.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jevmem.bench.longmemeval import USER, Build, Question, half, ingest, load_question, question_metrics, select
from jevmem.bench.train import Rows, fit
from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService
from query_api import service as service_api
from topology.embedding import Embedder
from topology.schemas import MemoryNode
from topology.systemone.features import ScoreState
from topology.systemone.learned import ScoreModel
from topology.systemone.local import LocalSystemOne

#: Evidence depth asked for (LongMemEval's metrics read the first 10; the pool is what is learned).
DEPTH = 50


def _backend(service: EmbeddedService) -> LocalSystemOne:
    scorer = service.mem.controller.scorer
    backend = getattr(scorer, "backend", None)
    if not isinstance(backend, LocalSystemOne):
        raise ValueError("training the realm weights needs the local System One")
    return backend


async def collect(service: EmbeddedService, questions: Sequence[Question], model: ScoreModel) -> Rows:
    """Each question's final realm pool, scored with ``model``, labelled by its evidence turns
    (``group``: the question's half)."""
    backend, ctrl = _backend(service), service.mem.controller
    backend.realm_score_model = model
    last: list[tuple[Sequence[MemoryNode], Sequence[ScoreState]]] = []

    def keep(_q: str, nodes: Sequence[MemoryNode], states: Sequence[ScoreState]) -> None:
        last[:] = [(nodes, states)]

    xs: list[list[float]] = []
    ys: list[float] = []
    gs: list[str] = []
    ctrl.recorder = keep
    try:
        for q in questions:
            last.clear()
            await service_api.recall_across(service, q.tenant, q.question, DEPTH, None, user_id=USER, as_of=q.as_of)
            for node, st in zip(*last[0], strict=True):
                xs.append(st.vector())
                ys.append(1.0 if node.event_id in q.evidence else 0.0)
                gs.append(half(q.question_id))
    finally:
        ctrl.recorder = None
    return Rows(np.asarray(xs, dtype=np.float64), np.asarray(ys), np.asarray(gs))


async def evaluate(service: EmbeddedService, questions: Sequence[Question], model: ScoreModel) -> dict[str, dict[str, float]]:
    """Share of evidence and NDCG@10 per question id of recall with ``model`` as the realm weights."""
    _backend(service).realm_score_model = model
    out: dict[str, dict[str, float]] = {}
    for q in questions:
        res = await service_api.recall_across(service, q.tenant, q.question, DEPTH, None, user_id=USER, as_of=q.as_of)
        out[q.question_id] = question_metrics([e.event_id for e in res.evidence], q)
    return out


async def fit_on(service: EmbeddedService, questions: Sequence[Question], rounds: int, l2: float,
                 meta: dict[str, Any]) -> ScoreModel:
    """``rounds`` collect/refit rounds from the single-conversation weights."""
    model = _backend(service).score_model
    rows: list[Rows] = []
    for _ in range(rounds):
        rows.append(await collect(service, questions, model))
        merged = Rows(*(np.concatenate([getattr(r, f) for r in rows]) for f in ("x", "y", "group")))
        model = fit(merged, l2, meta=meta)
    return model


def _mean(got: dict[str, dict[str, float]], ids: Sequence[str]) -> dict[str, float]:
    return {k: round(float(np.mean([got[i][k] for i in ids])), 4) for k in ("turn_recall_frac@10", "turn_ndcg_any@10")}


def _report(got: dict[str, dict[str, float]], chosen: Sequence[Question]) -> dict[str, dict[str, float]]:
    """Means on each half, on all, and per category."""
    out = {h: _mean(got, [q.question_id for q in chosen if half(q.question_id) == h]) for h in ("a", "b")}
    out["all"] = _mean(got, [q.question_id for q in chosen])
    for cat in sorted({q.category for q in chosen}):
        out[cat] = _mean(got, [q.question_id for q in chosen if q.category == cat])
    return out


async def train_realm(directory: Path, settings: Settings, embedder: Embedder, questions: int | None,
                      data_dir: Path, rounds: int = 2, l2: float = 100.0) -> dict[str, Any]:
    """Ingest what the kept build lacks, fit the realm weights on every selected question, and
    validate across halves: ``{"model", "questions", "single_conversation_weights",
    "cross_half", "in_sample"}`` (share of evidence and NDCG@10 on each half, on all and per
    category)."""
    chosen = [load_question(p) for p in select(list(directory.glob("*.json")), questions)]
    build = Build(data_dir)
    held = build.held()
    service = EmbeddedService(settings, embedder=embedder, data_dir=data_dir / "store")
    await service.start()
    try:
        for q in chosen:
            if q.question_id not in held:
                await ingest(service, q)
                held.add(q.question_id)
                build.record(held, embedder.name)
        meta = {"trained_by": "scripts/train_realm_relevance.py", "source": "LongMemEval dev",
                "questions": len(chosen), "rounds": rounds, "l2": l2}
        single = await evaluate(service, chosen, _backend(service).score_model)
        cross: dict[str, dict[str, float]] = {}
        for train_half, test_half in (("a", "b"), ("b", "a")):
            part = [q for q in chosen if half(q.question_id) == train_half]
            model = await fit_on(service, part, rounds, l2, {**meta, "questions": len(part)})
            got = await evaluate(service, [q for q in chosen if half(q.question_id) == test_half], model)
            cross.update(got)
        model = await fit_on(service, chosen, rounds, l2, meta)
        in_sample = await evaluate(service, chosen, model)
    finally:
        await service.stop()
    return {
        "model": model, "questions": {h: sum(1 for q in chosen if half(q.question_id) == h) for h in ("a", "b")},
        "single_conversation_weights": _report(single, chosen), "cross_half": _report(cross, chosen),
        "in_sample": _report(in_sample, chosen),
    }
