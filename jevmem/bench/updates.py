"""``jevmem bench updates``: does the product answer with what is true *now*?

The product is measured through its service layer as an API user would: an embedded service
(:class:`jevmem.wiring.EmbeddedService`) in a fresh temporary directory, observations sent with
``service.submit``, questions asked with :func:`query_api.service.retrieve` (a person with one
conversation: asked in it) or :func:`query_api.service.recall_across` (a person with several:
asked across them by ``user_id`` when recall takes one, else over a tenant of the person's
own), and the conversations' edges read with ``service.edges``. The data are
:mod:`jevmem.bench.updates_data`'s conversations; only each question's text goes to the product, its
gold ids stay here.

Figures (fractions in [0, 1]; each over the questions of its kind):

- present questions ("Where does Ana live?"): ``update_at_1`` the current statement is in the
  top 10 and ranks above the one it replaced (a replaced one not recalled ranks below);
  ``current_in_top3``; ``current_first``; ``stale_flagged`` the replaced statement is marked
  out of date: its evidence item carries ``superseded_by``, or (recalled or not) a
  ``supersedes`` edge targets its node; ``stale_flagged_by_update`` a ``supersedes`` edge
  targets it from a later statement of the same attribute of the same person (not any edge);
- past questions ("Where did Ana live before?"): ``history_at_10`` the replaced statement is in
  the top 10; ``history_above_current`` it ranks above its replacement;
- stable questions: ``stable_at_1`` the statement is in the top 10 and above the look-alike
  about someone else; ``stable_wrongly_flagged`` the statement is marked out of date;
- ``by_update_kind`` (explicit / contrast / implicit wording of the update) and ``by_scope``
  (asked in the conversation; asked by user with both statements in one session; across
  sessions) for the present questions;
- ``supersedes_edges``: how many the product wrote and the fraction that link a later statement
  of a person's attribute to an earlier one (``correct``);
- ``query_ms`` p50/p95 around each question; ingest time and rate;
- ``dense``: the ranking figures of plain dense search over the same turns in the same scope
  (:data:`DENSE`), the floor.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from jevmem.bench.dense import DenseSearch
from jevmem.bench.folds import Fold, attributes_of
from jevmem.bench.locomo import percentile
from jevmem.bench.updates_data import TURNS, UPDATE_KINDS, Dataset, Question, Turn, generate
from jevmem.bench.users import SyntheticRun, user_scoped
from jevmem.bench.users_data import Wordings
from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService
from query_api import service as service_api
from topology.ports import Embedder
from topology.schemas import Scope
from topology.stages.memory_nodes import embedding_text

TOP_K = 10
"""Evidence items asked for per question (a statement must be among them to count as found)."""
TENANT = "bench-updates"
"""The one tenant of every person when recall takes ``user_id``."""
SUPERSEDES = "supersedes"
"""The edge label that marks an older memory as replaced by a newer one."""
SCOPES = ("conversation", "user_same_session", "user_cross_session")

Progress = Callable[[str, int, int], None]


def rank(ranked: Sequence[str], event_id: str | None) -> int:
    """The 0-based position of ``event_id`` in ``ranked``, or ``len(ranked)`` when absent (below all)."""
    return ranked.index(event_id) if event_id in ranked else len(ranked)


def above(ranked: Sequence[str], first: str, second: str | None, k: int = TOP_K) -> bool:
    """``first`` is in the top ``k`` and ranks above ``second`` (absent ranks below everything)."""
    return rank(ranked, first) < min(k, rank(ranked, second))


def scope_of(q: Question) -> str:
    """Where a question is asked and where its statements are (:data:`SCOPES`)."""
    if q.conversation_id is not None:
        return "conversation"
    return "user_cross_session" if q.cross_session else "user_same_session"


def statement_pairs(data: Dataset) -> set[tuple[str, str]]:
    """(later, earlier) event ids of every two statements of one person's attribute: the pairs a
    ``supersedes`` edge may rightly link."""
    said: dict[tuple[str, str], list[Turn]] = defaultdict(list)
    for t in data.turns():
        if t.kind in ("state", "update") and t.attribute is not None:
            said[(t.user_id, t.attribute)].append(t)
    out = set()
    for turns in said.values():
        ordered = sorted(turns, key=lambda t: t.observed_at)
        out |= {(b.event_id, a.event_id) for i, a in enumerate(ordered) for b in ordered[i + 1:]}
    return out


class _Run(SyntheticRun):
    """One fresh embedded service in a temporary directory, fed and asked one dataset."""

    def __init__(self, settings: Settings, embedder: Embedder, data: Dataset, progress: Progress | None) -> None:
        super().__init__(settings, embedder, data, progress, TENANT)
        self.data = data
        self.turns = {t.event_id: t for t in data.turns()}

    async def supersedes(self, service: EmbeddedService) -> set[tuple[str, str]]:
        """(newer, older) event ids of every ``supersedes`` edge in the people's conversations
        (an edge may join two conversations of one person)."""
        scopes = [Scope(tenant_id=self.tenant(c.user_id), conversation_id=c.conversation_id)
                  for c in self.data.conversations]
        events = {n.id: n.event_id for scope in scopes for n in await service.nodes(scope)}
        return {(events.get(e.source, e.source), events.get(e.target, e.target))
                for scope in scopes for e in await service.edges(scope) if e.label == SUPERSEDES}

    async def ask(self, service: EmbeddedService, q: Question) -> tuple[list[str], set[str], float]:
        """(event ids recalled best first, those recalled with ``superseded_by``, ms) for ``q``."""
        t0 = time.perf_counter()
        if q.conversation_id is not None:
            scope = Scope(tenant_id=self.tenant(q.user_id), conversation_id=q.conversation_id)
            evidence = (await service_api.retrieve(service, scope, q.text, TOP_K)).evidence
        else:
            extra: dict[str, Any] = {"user_id": q.user_id} if self.scoped else {}
            evidence = (await service_api.recall_across(service, self.tenant(q.user_id), q.text, TOP_K, None,
                                                        **extra)).evidence
        ms = (time.perf_counter() - t0) * 1000
        return [e.event_id for e in evidence], {e.event_id for e in evidence if e.superseded_by}, ms

    async def run(self) -> dict[str, Any]:
        """Ingest, read the edges, ask every question: the figures (module docstring)."""
        hits: dict[str, list[bool]] = defaultdict(list)
        dense_hits: dict[str, list[bool]] = defaultdict(list)
        latencies: list[float] = []
        async with self.fresh_service("jevmem-updates-") as service:
            ingest_s = await self.ingest(service)
            edges = await self.supersedes(service)
            flagged = {older for _, older in edges}
            right = statement_pairs(self.data)
            rightly = {older for newer, older in edges if (newer, older) in right}
            turns = list(self.turns.values())
            dense = await DenseSearch.over(self.embedder, [t.event_id for t in turns],
                                           [embedding_text(t.speaker, t.content) for t in turns])
            for j, q in enumerate(self.data.questions):
                ranked, marked, ms = await self.ask(service, q)
                latencies.append(ms)
                self.score(q, ranked, marked | flagged, hits)
                among = [t.event_id for t in turns if (t.conversation_id == q.conversation_id
                                                       if q.conversation_id is not None else t.user_id == q.user_id)]
                self.score(q, await dense.search(q.text, TOP_K, among), set(), dense_hits)
                if q.kind == "present":
                    hits["stale_flagged_by_update"].append(q.stale in rightly)
                if self.progress:
                    self.progress("questions", j + 1, len(self.data.questions))
        n = len(self.turns)
        out: dict[str, Any] = {
            "conversations": len(self.data.conversations), "people": len(self.data.users()), "observations": n,
            "questions": {k: sum(1 for q in self.data.questions if q.kind == k) for k in ("present", "past", "stable")},
            "ingest_seconds": round(ingest_s, 2), "observations_per_second": round(n / ingest_s, 1) if ingest_s else None,
        }
        out.update({k: _mean(hits[k]) for k in (
            "update_at_1", "current_in_top3", "current_first", "stale_flagged", "stale_flagged_by_update", "history_at_10",
            "history_above_current", "stable_at_1", "stable_wrongly_flagged")})
        out["by_update_kind"] = {k: {m: _mean(hits[f"{m}:{k}"]) for m in ("update_at_1", "stale_flagged")}
                                 | {"questions": len(hits[f"update_at_1:{k}"])} for k in UPDATE_KINDS}
        out["by_scope"] = {s: {m: _mean(hits[f"{m}:{s}"]) for m in ("update_at_1", "stale_flagged")}
                           | {"questions": len(hits[f"update_at_1:{s}"])} for s in SCOPES}
        out["supersedes_edges"] = {"edges": len(edges), "correct": _mean([e in right for e in edges])}
        out["query_ms"] = {"p50": round(percentile(latencies, 50), 1), "p95": round(percentile(latencies, 95), 1)}
        out["dense"] = {k: _mean(dense_hits[k]) for k in DENSE}
        return out

    @staticmethod
    def score(q: Question, ranked: list[str], flagged: set[str], hits: dict[str, list[bool]]) -> None:
        """Add ``q``'s outcomes to ``hits`` (figure name -> one bool per question)."""
        if q.kind == "present":
            tags = ("", f":{q.update_kind}", f":{scope_of(q)}")
            for tag in tags:
                hits[f"update_at_1{tag}"].append(above(ranked, q.gold, q.stale))
                hits[f"stale_flagged{tag}"].append(q.stale in flagged)
            hits["current_in_top3"].append(q.gold in ranked[:3])
            hits["current_first"].append(ranked[:1] == [q.gold])
        elif q.kind == "past":
            hits["history_at_10"].append(q.gold in ranked[:TOP_K])
            hits["history_above_current"].append(above(ranked, q.gold, q.current))
        else:
            hits["stable_at_1"].append(above(ranked, q.gold, q.lookalike))
            hits["stable_wrongly_flagged"].append(q.gold in flagged)


def _mean(values: Sequence[bool]) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0


#: The figures plain dense search (:mod:`jevmem.bench.dense`) gets over the same turns, asked in the
#: same scope (the question's conversation, or the person's turns): ``dense`` in the output.
DENSE = ("update_at_1", "current_first", "history_at_10", "history_above_current", "stable_at_1")
#: Figures that are shares of one kind of question (``questions`` counts each kind).
SHARES = {"present": ("update_at_1", "current_in_top3", "current_first", "stale_flagged", "stale_flagged_by_update"),
          "past": ("history_at_10", "history_above_current"), "stable": ("stable_at_1", "stable_wrongly_flagged")}


def pooled(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The figures of several runs (one per seed) as one: every share over all their questions
    (each run's share weighted by its count of that kind of question; ``by_update_kind`` and
    ``by_scope`` the same per group), counts and ingest time summed, ``correct`` edges over all
    edges, query p50 the mean of the runs' and p95 the largest."""
    def share(pairs: Iterable[tuple[float, int]]) -> float:
        """The mean of the values weighted by their counts (0 without any)."""
        got = list(pairs)
        n = sum(w for _, w in got)
        return round(sum(v * w for v, w in got) / n, 4) if n else 0.0

    out: dict[str, Any] = {k: sum(r[k] for r in runs) for k in ("conversations", "people", "observations")}
    out["questions"] = {k: sum(r["questions"][k] for r in runs) for k in SHARES}
    out["ingest_seconds"] = round(sum(r["ingest_seconds"] for r in runs), 2)
    out["observations_per_second"] = round(out["observations"] / out["ingest_seconds"], 1) if out["ingest_seconds"] else None
    for kind, keys in SHARES.items():
        out.update({k: share((r[k], r["questions"][kind]) for r in runs) for k in keys})
    for group in ("by_update_kind", "by_scope"):
        out[group] = {g: {m: share((r[group][g][m], r[group][g]["questions"]) for r in runs)
                          for m in ("update_at_1", "stale_flagged")}
                      | {"questions": sum(r[group][g]["questions"] for r in runs)} for g in runs[0][group]}
    edges = [r["supersedes_edges"] for r in runs]
    out["supersedes_edges"] = {"edges": sum(e["edges"] for e in edges),
                               "correct": share((e["correct"], e["edges"]) for e in edges)}
    out["query_ms"] = {"p50": round(sum(r["query_ms"]["p50"] for r in runs) / len(runs), 1),
                       "p95": max(r["query_ms"]["p95"] for r in runs)}
    kinds = {k: kind for kind, keys in SHARES.items() for k in keys}
    out["dense"] = {k: share((r["dense"][k], r["questions"][kinds[k]]) for r in runs) for k in DENSE}
    return out


async def run_updates(settings: Settings, embedder: Embedder, conversations: int = 12, wordings: Wordings = "all",
                      seed: int = 7, turns: int = TURNS, progress: Progress | None = None,
                      seeds: int = 1, attributes: Fold = "all") -> dict[str, Any]:
    """Generate, ingest and ask one dataset per seed (``seed`` .. ``seed + seeds - 1``, each in a
    fresh service); return::

        {"mode": "user_id" | "tenant_per_user", "config": {...}, "figures": {...}}

    ``figures`` as the module docstring lists them; latencies in ms (p50/p95, nearest rank). With
    several seeds, ``figures`` pools them (:func:`pooled`) and ``by_seed`` holds each run's.
    ``attributes``: people state one fold of the attributes only (:mod:`jevmem.bench.folds`)."""
    if seeds < 1:
        raise ValueError("seeds must be at least 1")
    names = attributes_of(attributes)
    runs = [await _Run(settings, embedder, generate(conversations, wordings, s, turns, names), progress).run()
            for s in range(seed, seed + seeds)]
    out: dict[str, Any] = {
        "mode": "user_id" if user_scoped() else "tenant_per_user",
        "config": {"conversations": conversations, "wordings": wordings, "seed": seed, "seeds": seeds, "turns": turns,
                   "top_k": TOP_K, "embedder": embedder.name, "attributes": attributes},
        "figures": runs[0] if seeds == 1 else pooled(runs),
    }
    if seeds > 1:
        out["by_seed"] = runs
    return out
