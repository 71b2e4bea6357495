"""Training the ``local`` System One's relevance model on LoCoMo-format dev conversations.

The controller runs every question with a recorder attached; the final pool of each query (its
typed :class:`~topology.systemone.features.ScoreState` rows) is labelled with the question's
evidence ids (labels are used here only, never at run time). A logistic regression (L2,
Newton steps, pure numpy, deterministic) is fitted on the rows; training iterates
(collect with the current model, refit) because the pool depends on the model's scores.

``evaluate`` re-runs retrieval with a model and reports recall@k per category; ``loco`` fits on
all conversations but one and evaluates on the held-out one, so overfitting is visible.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from jevmem import locomo
from jevmem.bench.locomo import CATS, KS, recall
from jevmem.bench.paired import QuestionRecall
from jevmem.bench.train_relations import collect_pairs, fold_judges
from jevmem.settings import Settings
from jevmem.wiring import Embedded, build_embedded
from query_api.retrieval.controller import RetrievalController
from query_api.retrieval.scoring import LocalScorer
from topology.embedding import Embedder
from topology.schemas import MemoryNode, Scope
from topology.systemone.features import SCORE_FEATURES, ScoreState
from topology.systemone.learned import ScoreModel
from topology.systemone.local import LocalSystemOne
from topology.systemone.relation_model import RelationModel

#: Products of two features the model may weigh (question type x candidate cue).
INTERACTIONS: tuple[tuple[str, str], ...] = (
    ("speaker_match", "route_multi_hop"), ("temporal_match", "route_temporal"), ("date_match", "route_temporal"),
    ("graph_anchor", "expanded"), ("adjacent_anchor", "is_question"), ("reply_to_match", "route_causal"),
    ("entity", "lexical"), ("bm25", "cosine_in_pool"), ("graph_anchor", "route_multi_hop"),
    ("graph_relevance", "route_multi_hop"), ("expanded", "route_multi_hop"), ("speaker_match", "expanded"),
    # a separate slope for expanded candidates, which have no BM25 or rank features of their own
    ("expanded", "cosine_in_pool"), ("expanded", "lexical"), ("expanded", "entity"), ("expanded", "graph_relevance"),
)


@dataclass(frozen=True)
class Rows:
    """Labelled candidate rows: ``x`` (n, F) base features, ``y`` (n,) 0/1, ``group`` conversation."""

    x: np.ndarray
    y: np.ndarray
    group: np.ndarray


def fit(rows: Rows, l2: float = 1.0, interactions: Sequence[tuple[str, str]] = INTERACTIONS,
        meta: dict[str, Any] | None = None, iters: int = 30) -> ScoreModel:
    """L2-regularised logistic regression by Newton's method on standardised features.

    Deterministic: no sampling, fixed iteration count (stops early once the step is < 1e-8)."""
    shell = ScoreModel(SCORE_FEATURES, tuple(interactions), np.zeros(len(SCORE_FEATURES) + len(interactions)),
                       np.ones(len(SCORE_FEATURES) + len(interactions)),
                       np.zeros(len(SCORE_FEATURES) + len(interactions)), 0.0)
    x = shell.expand(rows.x)
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    z = np.column_stack([np.ones(len(x)), (x - mean) / scale])
    w = np.zeros(z.shape[1])
    reg = np.full(z.shape[1], l2)
    reg[0] = 0.0
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(z @ w)))
        grad = z.T @ (p - rows.y) + reg * w
        hess = (z * (p * (1 - p))[:, None]).T @ z + np.diag(reg) + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return ScoreModel(SCORE_FEATURES, tuple(interactions), mean, scale, w[1:], float(w[0]), meta or {})


@dataclass
class Conversation:
    """A dev conversation: its file, built memory and questions."""

    name: str
    mem: Embedded
    scope: Scope
    questions: list[locomo.Question]


async def build(files: Sequence[Path], settings: Settings, embedder: Embedder, root: Path) -> list[Conversation]:
    """Build (or reopen, when ``root/<stem>`` exists) one memory per conversation file."""
    out = []
    for path in files:
        data = locomo.load(path)
        conv = f"locomo-{path.stem}"
        d = root / path.stem
        fresh = not d.exists()
        d.mkdir(parents=True, exist_ok=True)
        mem = build_embedded(settings, embedder=embedder, data_dir=d)
        if fresh:
            await mem.pipeline.ingest(locomo.observations(data, "train", conv))
        out.append(Conversation(path.stem, mem, Scope(tenant_id="train", conversation_id=conv), locomo.questions(data)))
    return out


def _controller(c: Conversation, model: ScoreModel, settings: Settings) -> RetrievalController:
    m = c.mem
    backend = LocalSystemOne(model)
    return RetrievalController(m.embedder, backend, m.stores.vectors, m.stores.lexical, m.stores.nodes,
                               m.stores.edges, settings.params, scorer=LocalScorer(backend))


async def collect(convs: Sequence[Conversation], model: ScoreModel, settings: Settings) -> Rows:
    """Final-pool rows of every question, labelled by the question's evidence ids."""
    xs: list[list[float]] = []
    ys: list[float] = []
    gs: list[str] = []
    for c in convs:
        ctrl = _controller(c, model, settings)
        last: list[tuple[Sequence[MemoryNode], Sequence[ScoreState]]] = []

        def keep(_q: str, nodes: Sequence[MemoryNode], states: Sequence[ScoreState],
                 last: list[tuple[Sequence[MemoryNode], Sequence[ScoreState]]] = last) -> None:
            last[:] = [(nodes, states)]

        ctrl.recorder = keep
        for q in c.questions:
            last.clear()
            await ctrl.retrieve(c.scope, q.question, top_k=max(KS))
            for node, st in zip(*last[0], strict=True):
                xs.append(st.vector())
                ys.append(1.0 if node.event_id in q.evidence else 0.0)
                gs.append(c.name)
    return Rows(np.asarray(xs, dtype=np.float64), np.asarray(ys), np.asarray(gs))


Recalls = dict[tuple[int, str], list[float]]


def table(acc: Recalls) -> dict[str, dict[str, float]]:
    """Mean recall per k and category, questions pooled."""
    return {str(k): {cat: round(statistics.fmean(v), 4) for cat in CATS if (v := acc.get((k, cat)))} for k in KS}


async def evaluate(convs: Sequence[Conversation], model: ScoreModel, settings: Settings,
                   acc: Recalls | None = None, questions: list[QuestionRecall] | None = None) -> Recalls:
    """Per-question recall@k by (k, category) ("overall" included) of the controller with
    ``model``, appended to ``acc`` when given; each question's own record is appended to
    ``questions`` when given (:mod:`jevmem.bench.paired` compares two runs question by question)."""
    acc = {} if acc is None else acc
    for c in convs:
        ctrl = _controller(c, model, settings)
        for i, q in enumerate(c.questions):
            res = await ctrl.retrieve(c.scope, q.question, top_k=max(KS))
            ids = [e.event_id for e in res.evidence]
            got = {k: recall(ids, q.evidence, k) for k in KS}
            for k in KS:
                for cat in ("overall", q.category):
                    acc.setdefault((k, cat), []).append(got[k])
            if questions is not None:
                questions.append(QuestionRecall(c.name, i, q.category, got))
    return acc


def subset(rows: Rows, keep: set[str]) -> Rows:
    m = np.isin(rows.group, sorted(keep))
    return Rows(rows.x[m], rows.y[m], rows.group[m])


async def train(files: Sequence[Path], settings: Settings, embedder: Embedder, cache: Path | None = None,
                rounds: int = 2, l2: float = 1.0, seed: int = 0, loco_relations: bool = True) -> dict[str, Any]:
    """Fit on every conversation (``rounds`` collect/refit iterations from the prior) and report
    in-sample and leave-one-conversation-out recall. Returns ``{"model", "in_sample", "loco",
    "loco_questions"}`` (the last: each question's leave-one-out recall, a :class:`QuestionRecall`).

    With ``loco_relations`` (and the local learned relation judge), each held-out conversation is
    also rebuilt with a relation judge fitted on the other conversations only
    (:mod:`jevmem.bench.train_relations`), so its graph carries no labels of its own. ``seed`` is
    recorded and seeds numpy (the fit itself draws nothing)."""
    np.random.seed(seed)
    with tempfile.TemporaryDirectory() as tmp:
        convs = await build(files, settings, embedder, cache or Path(tmp))
        folds: list[list[Conversation]] = []
        try:
            names = [c.name for c in convs]
            meta = {"trained_by": "scripts/train_system_one.py", "conversations": names, "rounds": rounds,
                    "l2": l2, "seed": seed, "interactions": len(INTERACTIONS)}

            async def fit_on(pool: Sequence[Conversation], keep: set[str]) -> ScoreModel:
                model = ScoreModel.prior()
                rows: list[Rows] = []
                for _ in range(rounds):
                    rows.append(subset(await collect([c for c in pool if c.name in keep], model, settings), keep))
                    merged = Rows(*(np.concatenate([getattr(r, f) for r in rows]) for f in ("x", "y", "group")))
                    model = fit(merged, l2, meta={**meta, "conversations": sorted(keep)})
                return model

            model = await fit_on(convs, set(names))
            in_sample = table(await evaluate(convs, model, settings))
            judges = await _fold_judges(files, settings, embedder, Path(tmp)) if loco_relations else {}
            pooled: Recalls = {}
            per_question: list[QuestionRecall] = []
            for held in names:
                pool = convs
                if held in judges:
                    fold = settings.model_copy(update={"relation_judge": str(judges[held])})
                    pool = await build(files, fold, embedder, Path(tmp) / f"fold-{held}")
                    folds.append(pool)
                m = await fit_on(pool, set(names) - {held})
                await evaluate([c for c in pool if c.name == held], m, settings, pooled, per_question)
            return {"model": model, "in_sample": in_sample, "loco": table(pooled), "loco_questions": per_question,
                    "loco_relation_judge": "per fold" if judges else settings.relation_judge}
        finally:
            for c in [*convs, *(c for f in folds for c in f)]:
                await c.mem.close()


async def _fold_judges(files: Sequence[Path], settings: Settings, embedder: Embedder, root: Path) -> dict[str, Path]:
    """Per conversation, the file of a relation judge fitted on the others (none unless the local
    backend uses the learned judge for this embedder)."""
    if settings.system_one != "local" or settings.relation_judge != "learned" or RelationModel.shipped(
            embedder.name) is None:
        return {}
    out: dict[str, Path] = {}
    for held, judge in fold_judges(await collect_pairs(files, settings, embedder)).items():
        out[held] = root / f"relation-{held}.json"
        out[held].write_bytes(judge.to_json())
    return out
