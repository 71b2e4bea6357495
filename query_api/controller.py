"""The retrieval controller: route -> anchors -> (assess -> expand -> rescore)* -> top-K evidence.

Decisions come from System One (route, assess, score); arithmetic lives in
:mod:`query_api.formulas` and :mod:`query_api.features`. Each expansion round reads the edges of
the frontier (the best unexpanded candidates), adds the neighbours with the highest
p(edge) * score, records every examined edge, and rescores the whole pool in one request: the
graph features (edges to strong pool members, the reply/next turn, propagated relevance) change
the ranking of anchors as well as bringing new candidates. With ``limits.depth = 0`` no edge is
read and the graph features stay 0 (the ``jevmem_no_graph`` ablation). Hard limits (depth, visited
nodes, examined edges, controller calls, time) are enforced here whatever the controller answers.
Gold answers and benchmark labels never enter any state sent to System One.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from pydantic import BaseModel

from query_api import features as qf
from query_api import formulas, scoring
from query_api.nodeinfo import NodeInfoCache
from storage.ports import EdgeStore, Hit, LabelledNeighbours, LexicalIndex, NodeStore, VectorIndex
from topology import text
from topology.params import Params
from topology.ports import Embedder
from topology.schemas import MemoryNode, Scope, TemporalRef
from topology.systemone.catalog import ASSESS, ROUTE, SCORE
from topology.systemone.features import AssessState, ScoreState
from topology.systemone.port import CountingSystemOne, Item, SystemOne

_NAME = re.compile(r"\b[A-Z][a-zA-Z'-]+")


class Evidence(BaseModel):
    node_id: str
    event_id: str
    content: str
    speaker: str | None
    score: float
    relevance: float
    via: str
    seq: int
    observed_at: datetime | None
    event_time: str | None
    temporal_refs: list[TemporalRef]
    provenance: dict[str, str]
    #: Newer memories that made this one out of date (consolidation ``supersedes`` edges): content.
    superseded_by: list[str] = []

    def for_prompt(self) -> str:
        """The line System Two reads: when it was recorded, the grounded event dates it speaks of
        ("yesterday" -> the date), the speaker, the text, and what superseded it, if anything.

        ``[recorded 2023-05-08; event 2023-05-07 ("yesterday")] Ana: ... (superseded by: ...)``"""
        when = [f"recorded {self.observed_at.date().isoformat()}"] if self.observed_at else []
        for r in self.temporal_refs:
            span = r.start.isoformat() if r.start == r.end else f"{r.start.isoformat()}..{r.end.isoformat()}"
            when.append(f'event {span} ("{r.text}")')
        head = f"[{'; '.join(when)}] " if when else ""
        who = f"{self.speaker}: " if self.speaker else ""
        tail = f" (superseded by: {' | '.join(self.superseded_by)})" if self.superseded_by else ""
        return f"{head}{who}{self.content}{tail}"


class RoundTrace(BaseModel):
    round: int
    assess: dict[str, float]
    expanded: list[str]
    examined_edges: int
    added: int
    stop: str | None = None


class Trace(BaseModel):
    route: dict[str, float]
    active_views: list[str]
    budgets: dict[str, int]
    depth: int
    anchors: int
    rounds: list[RoundTrace]
    stop_reason: str
    controller_calls: int
    visited: int
    examined_edges: int
    timings_ms: dict[str, float]


class Retrieval(BaseModel):
    question: str
    evidence: list[Evidence]
    trace: Trace


@dataclass
class _Cand:
    node: MemoryNode
    via: str
    p_g: float
    pi_e: float
    score: float = 0.0
    relevance: float = 0.0
    expanded: bool = False
    #: the candidate's own score features: expanded, view_probability, edge_probability
    own: tuple[float, float, float] = field(init=False)

    def __post_init__(self) -> None:
        self.own = (0.0 if self.via == "anchor" else 1.0, round(self.p_g, 6), round(self.pi_e, 6))


#: (cosine_in_pool .. causal_match in SCORE_FEATURES order, is_question, length) of a node for a query
_Static = tuple[tuple[float, ...], float, float]


@dataclass
class _QueryState:
    question: str
    qvec: list[float]
    #: the question vector as float64 (what the cosine products multiply by)
    q: np.ndarray
    qtokens: set[str]
    qnames: set[str]
    route: dict[str, float]
    anchor_strength: dict[str, float] = field(default_factory=dict)
    bm25: dict[str, float] = field(default_factory=dict)
    vec_rank: dict[str, float] = field(default_factory=dict)
    lex_rank: dict[str, float] = field(default_factory=dict)
    cos_range: tuple[float, float] = (0.0, 1.0)
    cos_in_pool: dict[str, float] = field(default_factory=dict)
    by_seq: dict[int, _Cand] = field(default_factory=dict)
    pool: dict[str, _Cand] = field(default_factory=dict)
    graph: qf.GraphView = field(default_factory=qf.GraphView)
    dates: tuple[set[int], set[int]] = field(default_factory=lambda: (set(), set()))
    #: per node, the features that depend only on the node and the question (computed once a query)
    static: dict[str, _Static] = field(default_factory=dict)
    #: per node, its reply_to_match once final (see ``RetrievalController._reply``)
    reply: dict[str, float] = field(default_factory=dict)


#: Called with the states of the final scoring of a query's pool (for training and inspection).
Recorder = Callable[[str, Sequence[MemoryNode], Sequence[ScoreState]], None]


def _settle(fut: asyncio.Future[list[list[float]]]) -> None:
    """Cancel ``fut`` if still pending, else mark its outcome retrieved (no unretrieved-error log)."""
    if not fut.done():
        fut.cancel()
    elif not fut.cancelled():
        fut.exception()


def query_names(question: str) -> set[str]:
    """Lowercased capitalised words of the question (first word included only if not a stopword)."""
    return {w.lower() for w in _NAME.findall(question) if w.lower() not in text.STOPWORDS}


class RetrievalController:
    def __init__(self, embedder: Embedder, so: SystemOne, vectors: VectorIndex, lexical: LexicalIndex,
                 nodes: NodeStore, edges: EdgeStore, params: Params) -> None:
        self.embedder, self.so = embedder, so
        self.vectors, self.lexical, self.nodes, self.edges = vectors, lexical, nodes, edges
        self.params = params
        self.recorder: Recorder | None = None
        #: query-independent facts about the nodes queries read (see :mod:`query_api.nodeinfo`)
        self.info = NodeInfoCache(embedder.dim)

    async def anchors(self, scope: Scope, question: str, qvec: Sequence[float], pool: int) -> tuple[list[Hit], list[Hit]]:
        """(vector hits, lexical hits) of the scope for the question, best first."""
        vec, lex = await asyncio.gather(self.vectors.search(scope, qvec, pool), self.lexical.search(scope, question, pool))
        return vec, lex

    def _static(self, st: _QueryState, n: MemoryNode) -> _Static:
        """The features of ``n`` that depend only on the node and the query (computed once a
        query, after its ``cos_in_pool`` is set)."""
        info = self.info.get(n)
        route, nid = st.route, n.id
        return (
            (round(st.cos_in_pool.get(nid, 0.0), 6),
             round(len(st.qtokens & info.tokens) / len(st.qtokens) if st.qtokens else 0.0, 6),
             round(len(st.qnames & info.names) / len(st.qnames) if st.qnames else 0.0, 6),
             1.0 if info.speaker is not None and info.speaker in st.qnames else 0.0,
             round(st.anchor_strength.get(nid, 0.0), 6), round(st.bm25.get(nid, 0.0), 6),
             round(st.vec_rank.get(nid, 0.0), 6), round(st.lex_rank.get(nid, 0.0), 6),
             round(route["temporal"] * (1.0 if info.has_temporal else 0.0), 6),
             qf.date_match_dates(info.dates, *st.dates),
             round(route["causal"] * (1.0 if info.causal else 0.0), 6)),
            1.0 if info.is_question else 0.0, info.length,
        )

    def _reply(self, st: _QueryState, n: MemoryNode) -> float:
        """reply_to_match: a reply to a question turn that matches the query often holds the
        answer. Final once the previous turn is in the pool (``by_seq`` entries never change)."""
        got = st.reply.get(n.id)
        if got is not None:
            return got
        prev = st.by_seq.get(n.seq - 1)
        if prev is None:
            return 0.0
        reply = 0.0
        if self.info.get(prev.node).is_question and prev.node.speaker != n.speaker:
            reply = max(st.anchor_strength.get(prev.node.id, 0.0), st.bm25.get(prev.node.id, 0.0))
        st.reply[n.id] = reply = round(reply, 6)
        return reply

    def _rows(self, st: _QueryState, cands: Sequence[_Cand]) -> list[list[float]]:
        """Every candidate's score features (a row in :data:`SCORE_FEATURES` order); cosines
        come from two matrix products: to the question, and to the (up to 5) strongest other
        evidence nodes (``max_evidence_cosine``, ``support``)."""
        ranked = sorted(st.pool.values(), key=lambda c: -c.score)[:6]
        rid = {e.node.id: j for j, e in enumerate(ranked)}
        m = self.info.rows([c.node for c in cands])
        z = (m @ st.q).tolist()
        sim = (m @ self.info.rows([e.node for e in ranked]).T).tolist()
        lo, hi = st.cos_range
        for i, c in enumerate(cands):
            st.cos_in_pool.setdefault(c.node.id, (z[i] - lo) / max(1e-6, hi - lo))
        pool = qf.pool_view({i: st.anchor_strength.get(i, 0.0) for i in st.pool}, st.cos_in_pool,
                            {i: x.relevance for i, x in st.pool.items()})
        route, adj = st.route, st.graph.adj
        fixed = (round(route["temporal"], 6), round(route["causal"], 6), round(route["multi_hop"], 6))
        out = []
        for i, c in enumerate(cands):
            n = c.node
            nid = n.id
            stat = st.static.get(nid)
            if stat is None:
                stat = st.static[nid] = self._static(st, n)
            head, question, length = stat
            sims = sim[i]
            j = rid.get(nid)
            if j is not None:
                sims = sims[:j] + sims[j + 1:]
            sims = sims[:5]
            out.append([
                round(z[i], 6), *head, self._reply(st, n), question, *fixed, *c.own,
                round(max(sims, default=0.0), 6), round(sum(sims) / len(sims), 6) if sims else 0.0,
                *(qf.graph_row(nid, st.graph, pool) if nid in adj else qf.NO_GRAPH), length])
        return out

    async def _score(self, so: CountingSystemOne, st: _QueryState, cands: Sequence[_Cand],
                     t_star: datetime | None) -> None:
        rows = self._rows(st, cands)

        def texts() -> list[scoring.Texts]:
            return [scoring.Texts(c.node.content, c.node.speaker or "", c.via) for c in cands]

        judged = await scoring.judge(so, st.question, rows, texts)
        w, r = self.params.weights, st.route["recency"]
        for c, row, (relevance, useful, novelty, supports) in zip(cands, rows, judged, strict=True):
            s = formulas.combined_score(
                z=row[0], a=relevance, p_g=c.p_g, l=useful, n=novelty, pi_e=c.pi_e, c=supports, w=w)
            rho = formulas.recency_rho(t_star, c.node.observed_at)
            c.score = formulas.recency_adjust(s, r, rho, self.params.recency_weight)
            c.relevance = relevance
        if self.recorder is not None and len(cands) == len(st.pool):
            self.recorder(st.question, [c.node for c in cands],
                          [scoring.state(st.question, t, row) for t, row in zip(texts(), rows, strict=True)])

    async def _superseding(self, scope: Scope, ids: Sequence[str]) -> dict[str, list[str]]:
        """For each of ``ids`` made obsolete by a newer memory: the newer memories' contents."""
        wanted, limit = set(ids), 100 * len(ids) + 100
        if isinstance(self.edges, LabelledNeighbours):
            found = await self.edges.labelled(scope, ids, ["temporal"], limit, "supersedes")
        else:
            found = [e for e in await self.edges.neighbours(scope, ids, ["temporal"], limit) if e.label == "supersedes"]
        edges = [e for e in found if e.target in wanted]
        if not edges:
            return {}
        by_id = {n.id: n.content for n in await self.nodes.get(scope, sorted({e.source for e in edges}))}
        out: dict[str, list[str]] = {}
        for e in edges:
            if e.source in by_id:
                out.setdefault(e.target, []).append(by_id[e.source])
        return out

    async def retrieve(self, scope: Scope, question: str, top_k: int | None = None) -> Retrieval:
        p, lim = self.params, self.params.limits
        k = top_k or p.top_k
        t0 = time.perf_counter()
        so = CountingSystemOne(self.so)
        timings: dict[str, float] = {}
        # the question's embedding runs in a worker thread while the route and the BM25 search
        # (which need no vector) run here
        embedding = asyncio.ensure_future(asyncio.to_thread(self.embedder.embed_query, [question]))
        try:
            route_ans = (await so.ask([Item(ROUTE, {"question": question})]))[0]
            lex_hits = await self.lexical.search(scope, question, p.anchor_pool)
            qvec = (await embedding)[0]
        finally:
            _settle(embedding)
        timings["embed"] = (time.perf_counter() - t0) * 1000
        route = {q.key: route_ans.p(q.key) for q in ROUTE.nouls()}
        views = formulas.active_views(route, p.theta_act)
        budgets = formulas.allocate_budget({v: route[v] for v in views}, p.budget_total, p.budget_min, p.budget_gamma)
        d = formulas.depth(route["multi_hop"], p.depth_max, lim.depth)
        st = _QueryState(question, qvec, np.asarray(qvec, dtype=np.float64), set(text.tokens(question)),
                         query_names(question), route, dates=qf.question_dates(question))

        t1 = time.perf_counter()
        vec_hits = await self.vectors.search(scope, qvec, p.anchor_pool)
        fused = formulas.rrf([[h.id for h in vec_hits], [h.id for h in lex_hits]], p.rrf_kappa)
        top_bm25 = max((h.score for h in lex_hits), default=0.0)
        st.bm25 = {h.id: h.score / top_bm25 for h in lex_hits} if top_bm25 > 0 else {}
        st.vec_rank, st.lex_rank = qf.rank_scores([h.id for h in vec_hits]), qf.rank_scores([h.id for h in lex_hits])
        anchor_ids = formulas.fused_order(fused)[: min(p.anchors, lim.visited_nodes)]
        best = 2.0 / (p.rrf_kappa + 1)
        st.anchor_strength = {i: fused[i] / best for i in anchor_ids}
        nodes = await self.nodes.get(scope, anchor_ids)
        cosines = self.info.rows(nodes) @ st.q
        if len(cosines):
            st.cos_range = (float(cosines.min()), float(cosines.max()))
        t_star = max((n.observed_at for n in nodes if n.observed_at), default=None)
        for n in nodes:
            st.pool[n.id] = _Cand(n, "anchor", 1.0, st.anchor_strength[n.id])
            st.by_seq[n.seq] = st.pool[n.id]
        timings["anchors"] = (time.perf_counter() - t1) * 1000
        await self._score(so, st, list(st.pool.values()), t_star)

        rounds: list[RoundTrace] = []
        examined, stop = 0, "depth"
        remaining = dict(budgets)
        for rnd in range(1, d + 1):
            if time.perf_counter() - t0 > lim.seconds:
                stop = "time_limit"
                break
            # a round is one assess request and one score request over at most the node limit
            need = 1 + so.requests_for([len(SCORE.questions)] * lim.visited_nodes)
            if so.calls + need > lim.controller_calls:
                stop = "controller_call_limit"
                break
            ranked = sorted(st.pool.values(), key=lambda c: -c.score)
            strong = sum(1 for c in ranked if c.relevance >= 0.7)
            gain = rounds[-1].added / max(1, p.beam_width) if rounds else 1.0
            top_info = [self.info.get(c.node) for c in ranked[:5]]
            top = [i.node.content for i in top_info]
            a = (await so.ask([Item(ASSESS, AssessState(
                question=question, round=rnd - 1, best_relevance=round(max((c.relevance for c in ranked), default=0.0), 6),
                strong=strong, last_gain=round(gain, 6), multi_hop=round(route["multi_hop"], 6),
                negation_mix=round(qf.negation_mix_sets([i.content_tokens for i in top_info],
                                                        [i.negated for i in top_info]), 6),
                evidence=top).model_dump())]))[0]
            assessed = {q.key: a.p(q.key) for q in ASSESS.nouls()}
            reason = formulas.stop_reason(assessed, p)
            if reason is not None:
                rounds.append(RoundTrace(round=rnd, assess=assessed, expanded=[], examined_edges=0, added=0, stop=reason))
                stop = reason
                break
            frontier = [c for c in ranked if not c.expanded][: p.beam_width]
            for c in frontier:
                c.expanded = True
            added: list[_Cand] = []
            seen_edges = 0
            strength = {c.node.id: max(0.0, c.score) for c in frontier}
            for view in views:
                room = lim.visited_nodes - len(st.pool) - len(added)
                if remaining.get(view, 0) <= 0 or examined + seen_edges >= lim.examined_edges:
                    continue
                edges = await self.edges.neighbours(scope, list(strength), [view],
                                                    min(lim.examined_edges - examined - seen_edges, 4 * remaining[view] + 40))
                seen_edges += len(edges)
                st.graph.add(edges)
                if room <= 0:
                    continue
                # a neighbour is worth what its best edge from the frontier carries: p(edge) * score
                want: dict[str, float] = {}
                prob: dict[str, float] = {}
                taken = {x.node.id for x in added}
                for e in edges:
                    src, other = (e.source, e.target) if e.source in strength else (e.target, e.source)
                    if other in st.pool or other in taken:
                        continue
                    v = e.probability * strength.get(src, 0.0)
                    if v > want.get(other, -1.0):
                        want[other], prob[other] = v, e.probability
                chosen = sorted(want, key=lambda i: (-want[i], i))[: min(remaining[view], room)]
                for n in await self.nodes.get(scope, chosen):
                    added.append(_Cand(n, view, route[view], prob[n.id]))
                remaining[view] -= len(chosen)
            examined += seen_edges
            for c in added:
                st.pool[c.node.id] = c
                st.by_seq.setdefault(c.node.seq, c)
            if seen_edges:
                # new edges change every pool member's graph features: rescore the pool (one request)
                await self._score(so, st, list(st.pool.values()), t_star)
            rounds.append(RoundTrace(round=rnd, assess=assessed, expanded=[c.node.id for c in frontier],
                                     examined_edges=seen_edges, added=len(added)))
            if not added:
                stop = "exhausted"
                break
        timings["total"] = (time.perf_counter() - t0) * 1000
        final = sorted(st.pool.values(), key=lambda c: (-c.score, c.node.seq))[:k]
        newer = await self._superseding(scope, [c.node.id for c in final])
        return Retrieval(
            question=question,
            evidence=[Evidence(
                node_id=c.node.id, event_id=c.node.event_id, content=c.node.content, speaker=c.node.speaker,
                score=round(c.score, 6), relevance=round(c.relevance, 6), via=c.via, seq=c.node.seq,
                observed_at=c.node.observed_at, event_time=c.node.event_time.isoformat() if c.node.event_time else None,
                temporal_refs=c.node.temporal_refs, provenance=c.node.provenance,
                superseded_by=newer.get(c.node.id, [])) for c in final],
            trace=Trace(route={k_: round(v, 6) for k_, v in route.items()}, active_views=list(views),
                        budgets={str(k_): v for k_, v in budgets.items()}, depth=d, anchors=len(anchor_ids),
                        rounds=rounds, stop_reason=stop, controller_calls=so.calls, visited=len(st.pool),
                        examined_edges=examined, timings_ms={k_: round(v, 3) for k_, v in timings.items()}),
        )

