"""``jevmem bench longmemeval``: a user's memory on LongMemEval-S, through the recall path users call.

LongMemEval (Wu et al., ICLR 2025, MIT) asks questions about one user's chat history with an
assistant: about 50 timestamped sessions (about 500 turns) a question, some of whose turns are
labelled as holding the evidence. Each question's haystack is ingested as one user's sessions
(one conversation per session, the user's ``user_id``, each session's date) into a tenant of its
own, and the question is asked with :func:`query_api.service.recall_across` (the code behind
``POST /v1/recall``) with ``user_id`` and ``as_of`` the end of the question's day. Only the question's text
reaches the product; the evidence labels stay here.

Beside jevmem, over the same turns in the same run:

- ``dense``: plain dense search, each turn embedded alone by the same embedder (the model's window
  keeps a long turn's start), ranked by cosine with the question;
- ``bm25``: the store's own BM25 index over the user's turns (a realm search);
- ``hybrid_rrf``: reciprocal-rank fusion of the two (kappa 60);
- ``stored_vectors``: cosine with the vectors jevmem stored (each turn read after the one before it),
  which tells the ranking apart from the vectors.

Metrics are LongMemEval's (its ``src/retrieval/eval_utils.py``): per question, ``recall_any@k`` (some
evidence in the top k), ``recall_all@k`` (all of it), ``ndcg_any@k`` (binary gains, the first two
ranks undiscounted as its ``dcg`` computes), at k = 5 and 10, on turns and on sessions (a turn
ranking maps to sessions through the smallest prefix that covers k distinct sessions); plus
``recall_frac@k``, the share of the evidence turns in the top k. Abstention questions (ids ending in
``_abs``) have no evidence and are left out, as LongMemEval leaves them out.

A build can be kept (``data_dir``): the store, each question's plain vectors and a manifest; a later
run over the same directory asks again without ingesting what it already holds, so a ranking change
needs no re-ingest (a directory holding only ``plain/`` re-ingests with the plain vectors kept; the
ingest rate is then not measured). Questions are split in two halves by a hash of their id (:func:`half`), for
training on one and validating on the other.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import numpy as np

from jevmem import heap
from jevmem.bench.dense import dense_order
from jevmem.bench.locomo import percentile
from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService
from query_api import service as service_api
from query_api.retrieval import formulas
from storage.ports import searches_realm
from topology import ids
from topology.ports import Embedder
from topology.schemas import Observation, Realm

CATEGORIES = ("single-session-user", "single-session-assistant", "single-session-preference", "multi-session",
              "knowledge-update", "temporal-reasoning")
"""LongMemEval's question types (abstention questions are marked by their id, not a type)."""
KS = (5, 10)
"""The cut-offs reported."""
DEPTH = 50
"""Turns ranked per method (enough for 10 distinct sessions in nearly every ranking)."""
USER = "user"
"""The ``user_id`` every haystack's turns carry (each question has a tenant of its own)."""
BATCH = 500
"""Observations per ``service.submit`` call."""
TURN_STEP = timedelta(seconds=30)
"""The time between two turns of a session (LongMemEval dates sessions, not turns)."""
METHODS = ("jevmem", "dense", "bm25", "hybrid_rrf", "stored_vectors")
"""The rankings a run compares."""
MANIFEST = "longmemeval.json"
"""The file in a kept build's directory that names the questions it holds."""
RRF_KAPPA = 60

Progress = Callable[[str, int, int], None]
Half = Literal["a", "b", "all"]
PARTS: dict[str, Half] = {"all": "all", "a": "a", "b": "b"}
"""What ``--part`` accepts: every question, or one half (:func:`half`)."""


@dataclass(frozen=True)
class Turn:
    event_id: str
    session: str
    role: str
    content: str
    at: datetime
    evidence: bool


@dataclass(frozen=True)
class Question:
    question_id: str
    category: str
    question: str
    date: datetime
    turns: tuple[Turn, ...]

    @property
    def abstention(self) -> bool:
        return self.question_id.endswith("_abs")

    @property
    def tenant(self) -> str:
        return f"lme-{self.question_id}"

    @property
    def as_of(self) -> datetime:
        """The end of the question's day: LongMemEval dates a question by its day, and some of a
        question's sessions carry a later time of that same day."""
        return self.date.replace(hour=23, minute=59, second=59)

    @property
    def evidence(self) -> set[str]:
        return {t.event_id for t in self.turns if t.evidence}


def parse_date(value: str) -> datetime:
    """``2023/02/15 (Wed) 23:50`` as a UTC datetime."""
    return datetime.strptime(value.split(" (")[0] + " " + value.rsplit(" ", 1)[1], "%Y/%m/%d %H:%M").replace(tzinfo=UTC)


#: The C0 control characters (and DEL) that observation text refuses: all but tab, newline and CR.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def printable(content: str) -> str:
    """``content`` with each control character that an observation refuses
    (:func:`topology.limits.text_problem`) replaced by a space, as a user cleans a log before
    sending it: a few LongMemEval turns carry them (pasted terminal output)."""
    return _CONTROL.sub(" ", content)


def load_question(path: Path) -> Question:
    """One LongMemEval file: its question and haystack, turns in time order (sessions by date,
    stable; turns of a session :data:`TURN_STEP` apart)."""
    d = json.loads(path.read_text())
    sessions = sorted(zip(d["haystack_session_ids"], d["haystack_dates"], d["haystack_sessions"], strict=True),
                      key=lambda s: parse_date(s[1]))
    turns: list[Turn] = []
    seen: set[str] = set()
    for sid, date, session in sessions:
        if sid in seen:  # a session listed twice is one conversation
            continue
        seen.add(sid)
        start = parse_date(date)
        for i, t in enumerate(session):
            turns.append(Turn(f"{sid}:{i}", sid, t["role"], printable(t["content"]), start + i * TURN_STEP,
                              bool(t.get("has_answer", False))))
    return Question(d["question_id"], d["question_type"], d["question"], parse_date(d["question_date"]), tuple(turns))


def half(question_id: str) -> Literal["a", "b"]:
    """The half of the dev split a question belongs to (a stable hash of its id)."""
    return "a" if hashlib.sha256(question_id.encode()).digest()[0] % 2 == 0 else "b"


def select(paths: Sequence[Path], n: int | None, part: Half = "all") -> list[Path]:
    """The scored questions (abstention left out) of ``part``; with ``n``, a stratified subset:
    categories taken in turn, each's questions in id order, until ``n``."""
    by_cat: dict[str, list[Path]] = {}
    for p in sorted(paths):
        qid = p.stem
        if qid.endswith("_abs") or (part != "all" and half(qid) != part):
            continue
        cat = json.loads(p.read_text())["question_type"]
        by_cat.setdefault(cat, []).append(p)
    if n is None:
        return [p for c in sorted(by_cat) for p in by_cat[c]]
    out: list[Path] = []
    queues = [list(by_cat[c]) for c in sorted(by_cat)]
    while len(out) < n and any(queues):
        for q in queues:
            if q and len(out) < n:
                out.append(q.pop(0))
    return out


# -- LongMemEval's metrics -------------------------------------------------------------------------

def dcg(gains: Sequence[float], k: int) -> float:
    """LongMemEval's DCG: the first gain undiscounted, the i-th (i >= 2) over log2(i)."""
    g = list(gains)[:k]
    return (g[0] + sum(x / math.log2(i) for i, x in enumerate(g[1:], start=2))) if g else 0.0


def retrieval_metrics(ranked: Sequence[str], gold: set[str], k: int) -> dict[str, float]:
    """recall_any, recall_all, ndcg_any and recall_frac of ``ranked`` at ``k`` (``gold``: non-empty)."""
    top = list(ranked[:k])
    ideal = dcg([1.0] * len(gold), k)
    return {"recall_any": float(any(g in top for g in gold)), "recall_all": float(all(g in top for g in gold)),
            "ndcg_any": dcg([1.0 if x in gold else 0.0 for x in top], k) / ideal,
            "recall_frac": sum(1 for g in gold if g in top) / len(gold)}


def sessions_of(ranked: Sequence[str], session: dict[str, str], k: int) -> list[str]:
    """The distinct sessions of the smallest prefix of ``ranked`` (turn ids) covering ``k`` of them
    (all of ``ranked`` when it covers fewer), first seen first."""
    out: list[str] = []
    for t in ranked:
        s = session[t]
        if s not in out:
            out.append(s)
            if len(out) == k:
                break
    return out


def question_metrics(ranked: Sequence[str], q: Question) -> dict[str, float]:
    """Turn and session metrics of one ranking, keyed ``turn_recall_any@5`` and so on."""
    session = {t.event_id: t.session for t in q.turns}
    gold = q.evidence
    gold_sessions = {session[g] for g in gold}
    out: dict[str, float] = {}
    for k in KS:
        for name, v in retrieval_metrics(ranked, gold, k).items():
            out[f"turn_{name}@{k}"] = v
        for name, v in retrieval_metrics(sessions_of(ranked, session, k), gold_sessions, k).items():
            out[f"session_{name}@{k}"] = v
    return out


def mean_by(rows: Sequence[tuple[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per category (and ``all``) the mean of every metric over its questions."""
    cats: dict[str, list[dict[str, float]]] = {}
    for cat, m in rows:
        cats.setdefault(cat, []).append(m)
        cats.setdefault("all", []).append(m)
    return {c: {k: round(sum(m[k] for m in ms) / len(ms), 4) for k in ms[0]} | {"questions": len(ms)}
            for c, ms in cats.items()}


# -- the run ---------------------------------------------------------------------------------------

def rrf(rankings: Sequence[Sequence[str]], depth: int) -> list[str]:
    """Reciprocal-rank fusion (kappa :data:`RRF_KAPPA`) of ``rankings``, ``depth`` long."""
    return formulas.fused_order(formulas.rrf([list(r) for r in rankings], RRF_KAPPA))[:depth]


class Build:
    """A store of LongMemEval haystacks, one tenant per question, with each question's plain
    vectors beside it (``plain/<question id>.npy``) and a manifest of what it holds."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.manifest = directory / MANIFEST
        self.plain = directory / "plain"

    def held(self) -> set[str]:
        return set(json.loads(self.manifest.read_text())["questions"]) if self.manifest.exists() else set()

    def record(self, held: set[str], embedder: str) -> None:
        self.manifest.write_text(json.dumps({"questions": sorted(held), "embedder": embedder}))

    def vectors(self, q: Question) -> np.ndarray | None:
        p = self.plain / f"{q.question_id}.npy"
        return np.load(p) if p.exists() else None

    def keep_vectors(self, q: Question, vectors: np.ndarray) -> None:
        self.plain.mkdir(parents=True, exist_ok=True)
        np.save(self.plain / f"{q.question_id}.npy", vectors)


def observation(q: Question, t: Turn) -> Observation:
    return Observation(tenant_id=q.tenant, conversation_id=t.session, event_id=t.event_id, content=t.content,
                       speaker=t.role, role=t.role, user_id=USER, observed_at=t.at)


async def ingest(service: EmbeddedService, q: Question) -> tuple[float, int]:
    """Submit ``q``'s haystack in time order: (seconds, turns rejected)."""
    spent, bad = 0.0, 0
    obs = [observation(q, t) for t in q.turns]
    for i in range(0, len(obs), BATCH):
        t0 = time.perf_counter()
        bad += len(await service.submit(obs[i:i + BATCH]))
        spent += time.perf_counter() - t0
    return spent, bad


async def rankings(service: EmbeddedService, embedder: Embedder, q: Question, plain: np.ndarray
                   ) -> tuple[dict[str, list[str]], list[float]]:
    """Every method's ranking of ``q``'s turns (event ids, best first, :data:`DEPTH` long) and the
    jevmem recall's latencies (ms: the first call on the tenant, then a second, identical call)."""
    latencies: list[float] = []
    got: list[list[str]] = []
    for _ in range(2):
        t0 = time.perf_counter()
        res = await service_api.recall_across(service, q.tenant, q.question, DEPTH, None, user_id=USER, as_of=q.as_of)
        latencies.append((time.perf_counter() - t0) * 1000)
        got.append([e.event_id for e in res.evidence])
    if got[0] != got[1]:
        raise AssertionError(f"{q.question_id}: two recalls of one question ranked differently")
    turn_ids = [t.event_id for t in q.turns]
    by_node = {ids.node_id(q.tenant, t.session, t.event_id): t.event_id for t in q.turns}
    qvec = embedder.embed_query([q.question])[0]
    realm = Realm(tenant_id=q.tenant, user_id=USER)
    mem = service.mem
    lexical = mem.stores.lexical
    assert searches_realm(lexical) and searches_realm(mem.stores.vectors)
    bm25 = [by_node[h.id] for h in await lexical.search_realm(realm, q.question, DEPTH) if h.id in by_node]
    stored = [by_node[h.id] for h in await mem.stores.vectors.search_realm(realm, qvec, DEPTH) if h.id in by_node]
    dense = dense_order(plain, qvec, turn_ids, DEPTH)
    return {"jevmem": got[0], "dense": dense, "bm25": bm25, "hybrid_rrf": rrf([dense, bm25], DEPTH),
            "stored_vectors": stored}, latencies


def plain_vectors(embedder: Embedder, q: Question) -> tuple[np.ndarray, float]:
    """Each turn of ``q`` embedded alone (the ``dense`` baseline's vectors) and the seconds it took."""
    t0 = time.perf_counter()
    v = np.asarray(embedder.embed([t.content for t in q.turns]), dtype=np.float32)
    return v, time.perf_counter() - t0


async def run_longmemeval(directory: Path, settings: Settings, embedder: Embedder, questions: int | None = None,
                          part: Half = "all", data_dir: Path | None = None,
                          progress: Progress | None = None) -> dict[str, Any]:
    """Ingest (what a kept build lacks) and ask the selected questions; every method's metrics per
    category, head-to-head counts against ``dense``, ingest rate against the embedder alone on the
    same turns, and recall latency (first and second call on a tenant)."""
    chosen = select(list(directory.glob("*.json")), questions, part)
    tmp = None
    if data_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="jevmem-lme-")
        data_dir = Path(tmp.name)
    data_dir.mkdir(parents=True, exist_ok=True)
    build = Build(data_dir)
    held = build.held()
    service = EmbeddedService(settings, embedder=embedder, data_dir=data_dir / "store")
    await service.start()
    heap.settle()  # as a server settles after its start (jevmem.heap)
    per: dict[str, list[tuple[str, dict[str, float]]]] = {m: [] for m in METHODS}
    per_q: list[dict[str, Any]] = []
    ingest_s = embed_s = 0.0
    ingested = rejected = 0
    first: list[float] = []
    later: list[float] = []
    try:
        for j, path in enumerate(chosen):
            q = load_question(path)
            plain = build.vectors(q)
            fresh = plain is None
            if plain is None:
                plain, s = plain_vectors(embedder, q)
                build.keep_vectors(q, plain)
            if q.question_id not in held:
                spent, bad = await ingest(service, q)
                if fresh:  # the embedder alone and the ingest on the same turns
                    ingest_s += spent
                    embed_s += s
                    ingested += len(q.turns)
                rejected += bad
                held.add(q.question_id)
                build.record(held, embedder.name)
            ranked, ms = await rankings(service, embedder, q, plain)
            first.append(ms[0])
            later.append(ms[1])
            row: dict[str, Any] = {"question_id": q.question_id, "category": q.category}
            for m in METHODS:
                metrics = question_metrics(ranked[m], q)
                per[m].append((q.category, metrics))
                row[m] = {k: metrics[k] for k in ("turn_recall_frac@10", "turn_ndcg_any@10")}
            per_q.append(row)
            if progress:
                progress("longmemeval", j + 1, len(chosen))
    finally:
        await service.stop()
        heap.thaw()
        if tmp is not None:
            tmp.cleanup()
    return {
        "config": {"questions": len(chosen), "part": part, "embedder": embedder.name, "depth": DEPTH},
        "metrics": {m: mean_by(per[m]) for m in METHODS},
        "head_to_head": head_to_head(per_q, "jevmem", "dense"),
        "ingest": {"turns": ingested, "rejected": rejected, "seconds": round(ingest_s, 2),
                   "turns_per_second": round(ingested / ingest_s, 1) if ingest_s else None,
                   "embedder_alone_turns_per_second": round(ingested / embed_s, 1) if embed_s else None,
                   "vs_embedder_alone": round(embed_s / ingest_s, 3) if ingest_s else None},
        "recall_ms": {"first": {"p50": round(percentile(first, 50), 1), "p95": round(percentile(first, 95), 1)},
                      "later": {"p50": round(percentile(later, 50), 1), "p95": round(percentile(later, 95), 1)}},
        "questions": per_q,
    }


def head_to_head(rows: Sequence[dict[str, Any]], a: str, b: str, key: str = "turn_ndcg_any@10") -> dict[str, int]:
    """Questions where ``a`` ranks better than ``b`` by ``key``, the same, or worse."""
    out = {"wins": 0, "ties": 0, "losses": 0}
    for r in rows:
        x, y = r[a][key], r[b][key]
        out["wins" if x > y + 1e-9 else "losses" if y > x + 1e-9 else "ties"] += 1
    return out
