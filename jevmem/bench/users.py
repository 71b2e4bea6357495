"""``jevmem bench users``: does the product remember a *user* across sessions?

The product is measured through its service layer as an API user would: an embedded service
(:class:`jevmem.wiring.EmbeddedService`) in a fresh temporary directory, observations sent with
``service.submit``, questions asked with :func:`query_api.recall.recall` (the code behind
``POST /v1/recall``) and nothing else. With ``stores="distributed"`` the same, over the
Elasticsearch and Qdrant servers (:mod:`jevmem.bench.servers`).
The data are :mod:`jevmem.bench.users_data`'s synthetic users; only each question's text goes to the
product, its gold (the stating turn's event id) stays here.

Two product generations are supported, detected at run time:

- recall takes ``user_id`` (and observations carry it): every user is in one tenant and each
  question is asked with its user's id (``mode: "user_id"``);
- it does not: each user gets a tenant of their own, so tenant-wide recall is that user's memory
  (``mode: "tenant_per_user"``). Observations then carry no ``user_id``.

Scenarios (each in its own fresh store):

- ``users``: fact@1, fact in top 5 / top 10 (and the same of plain dense search over the user's
  turns, :mod:`jevmem.bench.dense`), and for each distractor class (:data:`CLASSES`)
  the fraction of questions where some turn of that class ranks above the stating turn:
  ``above_fact`` counts a fact missing from the top 10 as "above" for every class,
  ``above_fact_recalled`` only classes with a turn actually recalled above it (:func:`above`);
  ``other_user_recalled``: questions whose top 10 held another user's turn; recall latency
  p50/p95; ingest rate.
- ``many_sessions``: one user, N sessions of three turns, one of which states a locker code; the
  question asked repeatedly: whether the fact is first, how many sessions the recall skipped
  (the result's ``skipped`` where the product reports one, else 0), latency p50/p95.
- ``scale`` (off unless asked; minutes of ingest): one user with many sessions (10,000 sessions
  are about 100,000 turns); recall p50/p95 and the process's peak RSS.

``many_sessions`` and ``scale`` then stop the service, start another over the same store (a
process started afresh, the model already loaded) and ask every question again:
``recall_ms_after_restart`` is the first recall's ms and the later ones' p50/p95.
"""

from __future__ import annotations

import contextlib
import inspect
import resource
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime
from typing import Any, Literal, Protocol, TypeVar

from jevmem import heap
from jevmem.bench.dense import DenseSearch
from jevmem.bench.folds import Fold, attributes_of
from jevmem.bench.locomo import percentile
from jevmem.bench.servers import ServerStores
from jevmem.bench.users_data import Dataset, Question, Turn, Wordings, generate, many_sessions
from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService
from query_api.items import ItemError
from query_api.recall import recall
from query_api.retrieval.controller import Retrieval
from topology.ports import Embedder
from topology.schemas import Observation, Realm
from topology.stages.memory_nodes import embedding_text

TOP_K = 10
"""Evidence items asked for per question (the fact must be among them to count as found)."""
BATCH = 500
"""Observations per ``service.submit`` call (the API takes at most 1,000 per request)."""
TENANT = "bench-users"
"""The one tenant of every user when recall takes ``user_id``."""
CLASSES = ("own_question", "tool", "advice", "one_turn_session", "small_talk", "other_statement")
"""Distractor classes of the user's own turns, as :func:`distractor_class` names them. The first
four are the ones the benchmark is about; small talk and another fact's statement are reported
too. Another user's turn is not a class: it should never be recalled at all (``other_user_recalled``)."""

Progress = Callable[[str, int, int], None]
Deployment = Literal["embedded", "distributed"]
"""Where a run's memory lives: an embedded store, or the Elasticsearch and Qdrant servers."""


class BenchService(Protocol):
    """What a run asks of a deployment (:class:`jevmem.wiring.EmbeddedService`,
    :class:`jevmem.bench.servers.ServerStores`): a subset of
    :class:`query_api.service.MemoryService`, and a restart."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def submit(self, observations: Sequence[Observation]) -> list[ItemError]: ...

    async def recall(self, realm: Realm, question: str, top_k: int, as_of: datetime | None = None) -> Retrieval: ...

    def restarted(self) -> BenchService: ...


def user_scoped() -> bool:
    """Whether this product's recall takes ``user_id`` and its observations can carry one."""
    return ("user_id" in inspect.signature(recall).parameters
            and "user_id" in Observation.model_fields)


def distractor_class(turn: Turn, question: Question) -> str | None:
    """The class of a turn recalled for ``question`` (None: the gold, or no class)."""
    if turn.user_id != question.user_id:
        return "other_user"
    if turn.event_id == question.gold:
        return None
    if turn.session == "one_turn":
        return "one_turn_session"
    return {"question": "own_question", "tool_call": "tool", "tool_result": "tool", "advice": "advice",
            "small_talk": "small_talk", "statement": "other_statement"}[turn.kind]


def above(ranked: Sequence[str], question: Question, turns: dict[str, Turn], missing_counts: bool = True) -> set[str]:
    """The classes with some turn ranked above the gold in ``ranked`` (event ids, best first). A
    gold missing from ``ranked`` ranks below all of it; with ``missing_counts`` every class is
    then "above" whether or not one of its turns was recalled. Ids the dataset does not know,
    and other users' turns, are ignored."""
    if question.gold not in ranked and missing_counts:
        return set(CLASSES)
    cut = ranked.index(question.gold) if question.gold in ranked else len(ranked)
    out = set()
    for eid in ranked[:cut]:
        turn = turns.get(eid)
        cls = None if turn is None else distractor_class(turn, question)
        if cls is not None and cls != "other_user":
            out.add(cls)
    return out


def peak_rss_mb() -> float:
    """The process's peak resident memory so far (MB)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (2**20 if sys.platform == "darwin" else 1024), 1)


class SyntheticTurn(Protocol):
    """What a synthetic bench sends of one of its turns."""

    @property
    def event_id(self) -> str: ...
    @property
    def conversation_id(self) -> str: ...
    @property
    def user_id(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def speaker(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def observed_at(self) -> datetime: ...


class SyntheticData(Protocol):
    """A synthetic bench's dataset: its turns in arrival order."""

    def stream(self) -> Sequence[SyntheticTurn]: ...


_S = TypeVar("_S", bound=BenchService)


class SyntheticRun:
    """One fresh embedded service fed a synthetic dataset in arrival order: each person under
    ``tenant`` with their ``user_id`` when recall takes one (:func:`user_scoped`), else in a
    tenant of their own. ``label`` prefixes the progress names."""

    def __init__(self, settings: Settings, embedder: Embedder, data: SyntheticData, progress: Progress | None,
                 tenant: str, label: str | None = None, stores: Deployment = "embedded") -> None:
        self.settings, self.embedder, self.progress = settings, embedder, progress
        self.synthetic, self.shared_tenant, self.label = data, tenant, label
        self.scoped = user_scoped()
        self.stores = stores
        #: the service :meth:`_live` stops on exit (a restart replaces it)
        self.live: BenchService | None = None

    def tenant(self, user_id: str) -> str:
        return self.shared_tenant if self.scoped else f"bench-{user_id}"

    @contextlib.asynccontextmanager
    async def fresh_service(self, prefix: str) -> AsyncIterator[EmbeddedService]:
        """A started embedded service over a new temporary directory (named ``prefix``...),
        stopped and removed on exit."""
        with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
            async with self._live(EmbeddedService(self.settings, embedder=self.embedder, data_dir=tmp)) as service:
                yield service

    @contextlib.asynccontextmanager
    async def fresh_deployment(self, prefix: str) -> AsyncIterator[BenchService]:
        """:meth:`fresh_service`, or with ``stores="distributed"`` a started
        :class:`jevmem.bench.servers.ServerStores` over a new store generation on the configured
        servers (named ``prefix``...), stopped and dropped on exit."""
        if self.stores == "embedded":
            async with self.fresh_service(prefix) as service:
                yield service
            return
        servers = ServerStores(self.settings, self.embedder, f"{prefix}{uuid.uuid4().hex[:8]}-")
        try:
            async with self._live(servers) as live:
                yield live
        finally:
            await servers.drop()

    @contextlib.asynccontextmanager
    async def _live(self, service: _S) -> AsyncIterator[_S]:
        """``service`` started; on exit, the service then live (a restart replaces it) stopped."""
        await service.start()
        heap.settle()  # as a server settles after its start (jevmem.heap)
        self.live = service
        try:
            yield service
        finally:
            await (self.live or service).stop()
            heap.thaw()

    def observation(self, t: SyntheticTurn) -> Observation:
        fields: dict[str, Any] = {"tenant_id": self.tenant(t.user_id), "conversation_id": t.conversation_id,
                                  "event_id": t.event_id, "content": t.content, "speaker": t.speaker, "role": t.role,
                                  "observed_at": t.observed_at}
        if self.scoped:
            fields["user_id"] = t.user_id
        return Observation(**fields)

    async def ingest(self, service: BenchService) -> float:
        """Submit every turn in arrival order; seconds taken."""
        stream = self.synthetic.stream()
        spent = 0.0
        name = f"{self.label}: ingest" if self.label else "ingest"
        for i in range(0, len(stream), BATCH):
            batch = [self.observation(t) for t in stream[i:i + BATCH]]  # built outside the timed part
            t0 = time.perf_counter()
            await service.submit(batch)
            spent += time.perf_counter() - t0
            if self.progress:
                self.progress(name, min(i + BATCH, len(stream)), len(stream))
        return spent


class _Run(SyntheticRun):
    """One fresh embedded service in a temporary directory, fed and asked one dataset."""

    def __init__(self, settings: Settings, embedder: Embedder, data: Dataset, progress: Progress | None,
                 label: str, dense: bool = True, restart: bool = False, stores: Deployment = "embedded") -> None:
        super().__init__(settings, embedder, data, progress, TENANT, label, stores)
        self.data, self.dense, self.restart = data, dense, restart
        self.turns = {t.event_id: t for t in data.turns()}

    async def ask(self, service: BenchService, q: Question) -> tuple[list[str], float, int, int]:
        """(event ids recalled best first, ms, sessions skipped, sessions searched) for ``q``."""
        extra: dict[str, Any] = {"user_id": q.user_id} if self.scoped else {}
        t0 = time.perf_counter()
        res = await recall(service, self.tenant(q.user_id), q.text, TOP_K, None, **extra)
        ms = (time.perf_counter() - t0) * 1000
        return [e.event_id for e in res.evidence], ms, int(getattr(res, "skipped", 0)), int(res.searched)

    async def after_restart(self, service: BenchService) -> dict[str, float]:
        """Stop ``service``, start another over its store (a process started afresh; the model is
        loaded already) and ask every question again: the first recall's ms (``first``) and the
        later ones' p50 / p95."""
        await service.stop()
        again = self.live = service.restarted()
        await again.start()
        heap.settle()
        ms = [(await self.ask(again, q))[1] for q in self.data.questions]
        later = ms[1:] or ms
        return {"first": round(ms[0], 1) if ms else 0.0, "p50": round(percentile(later, 50), 1),
                "p95": round(percentile(later, 95), 1)}

    async def run(self) -> dict[str, Any]:
        """Ingest, then ask every question (again after a restart, with ``restart``): the
        scenario's figures (see the module docstring)."""
        n = len(self.turns)
        found = {1: 0, 5: 0, 10: 0}
        hits = dict.fromkeys(CLASSES, 0)
        seen_above = dict.fromkeys(CLASSES, 0)
        foreign = 0
        latencies: list[float] = []
        skipped: list[int] = []
        searched: list[int] = []
        dense_found = {1: 0, 5: 0, 10: 0}
        async with self.fresh_deployment("jevmem-users-") as service:
            ingest_s = await self.ingest(service)
            rss_after_ingest = peak_rss_mb()
            turns = list(self.turns.values())
            dense = await DenseSearch.over(self.embedder, [t.event_id for t in turns],
                                           [embedding_text(t.speaker, t.content) for t in turns] if self.dense else [])
            for j, q in enumerate(self.data.questions):
                ranked, ms, skip, seen = await self.ask(service, q)
                plain = await dense.search(q.text, TOP_K, [t.event_id for t in turns if t.user_id == q.user_id]) \
                    if self.dense else []
                for k in dense_found:
                    dense_found[k] += q.gold in plain[:k]
                latencies.append(ms)
                skipped.append(skip)
                searched.append(seen)
                for k in found:
                    found[k] += q.gold in ranked[:k]
                for cls in above(ranked, q, self.turns):
                    hits[cls] += 1
                for cls in above(ranked, q, self.turns, missing_counts=False):
                    seen_above[cls] += 1
                foreign += any(eid in self.turns and self.turns[eid].user_id != q.user_id for eid in ranked)
                if self.progress:
                    self.progress(f"{self.label}: recall", j + 1, len(self.data.questions))
            restart = await self.after_restart(service) if self.restart else None
        nq = len(self.data.questions)
        return {
            "users": len(self.data.users()), "sessions": len(self.data.sessions), "observations": n, "questions": nq,
            "ingest_seconds": round(ingest_s, 2),
            "observations_per_second": round(n / ingest_s, 1) if ingest_s else None,
            "fact_at_1": _frac(found[1], nq), "fact_in_top5": _frac(found[5], nq), "fact_in_top10": _frac(found[10], nq),
            "dense": {"fact_at_1": _frac(dense_found[1], nq), "fact_in_top5": _frac(dense_found[5], nq),
                      "fact_in_top10": _frac(dense_found[10], nq)},
            "above_fact": {c: _frac(hits[c], nq) for c in CLASSES},
            "above_fact_recalled": {c: _frac(seen_above[c], nq) for c in CLASSES},
            "other_user_recalled": _frac(foreign, nq),
            "recall_ms": {"p50": round(percentile(latencies, 50), 1), "p95": round(percentile(latencies, 95), 1)},
            "recall_ms_after_restart": restart,
            "skipped": {"mean": round(sum(skipped) / nq, 1) if nq else 0.0, "max": max(skipped, default=0)},
            "searched_mean": round(sum(searched) / nq, 1) if nq else 0.0,
            "peak_rss_mb_after_ingest": rss_after_ingest,
        }


def _frac(k: int, n: int) -> float:
    return round(k / n, 4) if n else 0.0


async def run_users(settings: Settings, embedder: Embedder, users: int = 6, sessions: int = 16, facts: int = 5,
                    wordings: Wordings = "all", seed: int = 7, many: int = 400, repeats: int = 20,
                    scale_sessions: int = 0, progress: Progress | None = None, attributes: Fold = "all",
                    stores: Deployment = "embedded") -> dict[str, Any]:
    """Run the scenarios (``many`` 0 or ``scale_sessions`` 0 leaves that one out) and return::

        {"mode": "user_id" | "tenant_per_user", "config": {...}, "users": {...},
         "many_sessions": {...} | None, "scale": {...} | None}

    Every fraction is in [0, 1]; latencies are ms around ``recall`` (p50/p95, nearest rank).
    ``attributes``: the users state facts of one fold of the attributes only
    (:mod:`jevmem.bench.folds`; the many-sessions fact, ``locker``, is asked in its fold or all).
    ``stores``: each scenario's memory in a fresh embedded store, or in a fresh store generation
    on the configured servers (``distributed``: :mod:`jevmem.bench.servers`)."""
    out: dict[str, Any] = {
        "mode": "user_id" if user_scoped() else "tenant_per_user",
        "config": {"users": users, "sessions": sessions, "facts": facts, "wordings": wordings, "seed": seed,
                   "many_sessions": many, "repeats": repeats, "scale_sessions": scale_sessions, "top_k": TOP_K,
                   "embedder": embedder.name, "attributes": attributes, "stores": stores,
                   "vectors": ("qdrant" if settings.qdrant_url else "elasticsearch") if stores == "distributed"
                   else "embedded"},
    }
    names = attributes_of(attributes)
    data = generate(users, sessions, facts, wordings, seed, attributes=names)
    out["users"] = await _Run(settings, embedder, data, progress, "users", stores=stores).run()
    out["many_sessions"] = None
    if many and (names is None or "locker" in names):
        m = await _Run(settings, embedder, many_sessions(many, repeats, wordings, seed), progress, "many sessions",
                       restart=True, stores=stores).run()
        out["many_sessions"] = {k: m[k] for k in ("sessions", "observations", "questions", "fact_at_1", "fact_in_top10",
                                                  "skipped", "searched_mean", "recall_ms", "recall_ms_after_restart")}
    out["scale"] = None
    if scale_sessions:
        # every fact asked in every question wording the split allows: more recalls for the percentiles
        big = generate(1, scale_sessions, facts, wordings, seed, gap_hours=(1.0, 6.0), every_wording=True,
                       attributes=names)
        s = await _Run(settings, embedder, big, progress, "scale", dense=False, restart=True, stores=stores).run()
        out["scale"] = {k: s[k] for k in ("sessions", "observations", "questions", "ingest_seconds",
                                          "observations_per_second", "fact_at_1", "fact_in_top10", "recall_ms",
                                          "recall_ms_after_restart", "skipped", "searched_mean")}
        out["scale"]["peak_rss_mb"] = peak_rss_mb()
    return out
