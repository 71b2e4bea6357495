"""The retrieval controller: route -> anchors -> (assess -> expand -> rescore)* -> top-K evidence.

Decisions come from System One (route, assess, score); arithmetic lives in
:mod:`query_api.retrieval.formulas` and :mod:`query_api.retrieval.features`. Each expansion round reads the edges of
the frontier (the best unexpanded candidates), adds the neighbours with the highest
p(edge) * score, records every examined edge, and rescores the whole pool in one request: the
graph features (edges to strong pool members, the reply/next turn, propagated relevance) change
the ranking of anchors as well as bringing new candidates. With ``limits.depth = 0`` no edge is
read and the graph features stay 0 (the ``jevmem_no_graph`` ablation). Hard limits (depth, visited
nodes, examined edges, controller calls, time) are enforced here whatever the controller answers.
Gold answers and benchmark labels never enter any state sent to System One.

The controller reads through small ports (vector and lexical search, node lookup, edge
neighbours) and scores through a :class:`~query_api.retrieval.scoring.Scorer` chosen where the deployment
is built (default: through ``ask``).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Any

import numpy as np
from pydantic import BaseModel

from query_api.retrieval import currency, formulas, scoring, subjects
from query_api.retrieval import features as qf
from query_api.retrieval.features import DECIMALS, ScoreRow
from query_api.retrieval.nodeinfo import NodeInfo, NodeInfoCache, matrix
from query_api.retrieval.present import PresentSteps
from query_api.retrieval.reach import ConversationReach, Reach, RealmReach
from query_api.retrieval.state import Cand, QueryState, RoundTrace, Run, Static
from storage.ports import EdgeReader, Hit, LexicalIndex, NodeReader, NodeRows, VectorSearch
from topology import text
from topology.params import Params
from topology.ports import Embedder
from topology.schemas import MemoryNode, Realm, Scope, TemporalRef, View
from topology.systemone.attribute_model import AttributeModel
from topology.systemone.attributes import AttributeSpace
from topology.systemone.catalog import ASSESS, ROUTE, SCORE
from topology.systemone.features import AssessState, ScoreState
from topology.systemone.port import CountingSystemOne, Item, SystemOne
from topology.systemone.turn_kinds import turn_kind

_NAME = re.compile(r"\b[A-Z][a-zA-Z'-]+")


class Evidence(BaseModel):
    node_id: str
    conversation_id: str
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
    #: Newer memories that made this one out of date (``supersedes`` edges), as of the query: content.
    superseded_by: list[str] = []
    #: When this memory stopped being current (the earliest observation of what superseded it).
    valid_until: datetime | None = None
    #: For a memory that superseded another: when it became current (its observation time).
    valid_from: datetime | None = None

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
        until = f" on {self.valid_until.date().isoformat()}" if self.valid_until else ""
        tail = f" (superseded{until} by: {' | '.join(self.superseded_by)})" if self.superseded_by else ""
        return f"{head}{who}{self.content}{tail}"


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
    #: the conversations whose memories made the pool (a realm's: which sessions contributed), first seen first
    conversations: list[str] = []


class Retrieval(BaseModel):
    question: str
    evidence: list[Evidence]
    trace: Trace


#: The features :attr:`Static.head` holds, in order.
STATIC_HEAD = ("cosine_in_pool", "lexical", "entity", "speaker_match", "anchor", "bm25", "vector_rank",
               "lexical_rank", "temporal_match", "date_match", "causal_match", "statement")
#: Which of :data:`STATIC_HEAD` are passed on unrounded (:data:`query_api.retrieval.features.EXACT`).
_HEAD_EXACT = np.asarray([name in qf.EXACT for name in STATIC_HEAD])
#: How many other strong pool members ``max_evidence_cosine`` and ``support`` read.
_OTHERS = 5


#: Called with the states of the final scoring of a query's pool (for training and inspection).
Recorder = Callable[[str, Sequence[MemoryNode], Sequence[ScoreState]], None]


def _settle(fut: asyncio.Future[Any]) -> None:
    """Cancel ``fut`` if still pending, else mark its outcome retrieved (no unretrieved-error log)."""
    if not fut.done():
        fut.cancel()
    elif not fut.cancelled():
        fut.exception()


def query_names(question: str) -> set[str]:
    """Lowercased capitalised words of the question (first word included only if not a stopword)."""
    return {w.lower() for w in _NAME.findall(question) if w.lower() not in text.STOPWORDS}


def _holds(c: Cand, st: QueryState) -> float:
    """The ``statement`` feature: p(statement) of the turn's kind; in a realm, at least that of
    its best sentence or clause; and for a turn whose role the question asks about ("the list
    you provided"), its advice counts as what it states."""
    return max(_kind(c, st)["statement"], c.info.states if st.realm and c.node.types.kind else 0.0)


def _kind(c: Cand, st: QueryState) -> dict[str, float]:
    """p(kind) of the turn, read for the question (:func:`~query_api.retrieval.subjects.kind_for`)."""
    return subjects.kind_for(turn_kind(c.node.types), c.info.role, st.roles)


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000


class RetrievalController(PresentSteps):
    def __init__(self, embedder: Embedder, so: SystemOne, vectors: VectorSearch, lexical: LexicalIndex,
                 nodes: NodeReader, edges: EdgeReader, params: Params, scorer: scoring.Scorer | None = None,
                 attribute_model: AttributeModel | None = None) -> None:
        self.embedder, self.so = embedder, so
        #: the learned attribute model questions are read with (None: the one shipped for the embedder)
        self.attribute_model = attribute_model
        self.vectors, self.lexical, self.nodes, self.edges = vectors, lexical, nodes, edges
        self.params = params
        #: how candidates are scored (:class:`scoring.LocalScorer` for the in-process backend)
        self.scorer: scoring.Scorer = scorer or scoring.AskScorer()
        self.recorder: Recorder | None = None
        #: query-independent facts about the nodes queries read (see :mod:`query_api.retrieval.nodeinfo`)
        self.info = NodeInfoCache(embedder.dim)
        #: whether the node store has matrix-row reads (nodes then come without embeddings)
        self.reads_rows = isinstance(nodes, NodeRows)
        self._space: AttributeSpace | None = None

    async def warm(self) -> None:
        """Build, off the event loop, what a first query would otherwise build on its way: the
        attribute space (its prototype questions embedded) when the question steering or the
        latest-statement rule reads it, and one question embedded on a worker thread; so the
        first recall after a start costs what later ones do."""
        if self._reads_attributes():
            await asyncio.to_thread(self.attributes)
        await asyncio.to_thread(self.embedder.embed_query, ["What did I say?"])

    def _reads_attributes(self) -> bool:
        """Whether a query reads the attribute space (the question steering or the
        latest-statement rule is on)."""
        return self.params.query_steer > 0.0 or self.params.latest_attribute <= 1.0

    def attributes(self) -> AttributeSpace:
        """The attribute prototypes under this controller's embedder (embedded on first use)."""
        if self._space is None:
            self._space = AttributeSpace.of(self.embedder, self.attribute_model)
        return self._space

    def reach(self, where: Scope | Realm) -> Reach:
        """The reads of a retrieval of one conversation (a :class:`Scope`) or of a realm."""
        if isinstance(where, Realm):
            return RealmReach(where, self.vectors, self.lexical, self.nodes, self.edges)
        return ConversationReach(where, self.vectors, self.lexical, self.nodes, self.edges)

    async def _fetch(self, reach: Reach, ids: Sequence[str], edges_next: bool = False) -> list[tuple[MemoryNode, NodeInfo]]:
        """The nodes ``ids`` the reach holds (unknown ids skipped), each with its info;
        ``edges_next``: edges at them will be read (:meth:`Reach.rows`)."""
        nodes, rows = await reach.rows(ids, self.info.dim, edges_next)
        if rows is None:
            return [(n, self.info.get(n)) for n in nodes]
        return [(n, self.info.get(n, rows[j])) for j, n in enumerate(nodes)]

    async def retrieve_realm(self, realm: Realm, question: str, top_k: int | None = None,
                             as_of: datetime | None = None) -> Retrieval:
        """:meth:`retrieve` over a realm (a tenant's conversations, one user's, or a list of
        them): one pool, anchors from one vector and one lexical search over the whole realm,
        expansion inside each candidate's conversation (:class:`~query_api.retrieval.reach.RealmReach`).
        Every evidence item names its conversation; the trace lists the conversations that
        contributed to the pool."""
        return await self.retrieve(realm, question, top_k, as_of)

    async def retrieve(self, where: Scope | Realm, question: str, top_k: int | None = None,
                       as_of: datetime | None = None) -> Retrieval:
        """The best ``top_k`` (default ``Params.top_k``) memories of ``where`` (a conversation,
        or a realm: :meth:`retrieve_realm`) for ``question``, with the trace of how they were
        found. The steps, each a method:

        1. :meth:`_route`: one route request while the question is embedded and BM25-searched;
           the route gives the active views, their expansion budgets and the depth; a question
           about one attribute of a person is moved towards it (:meth:`_steered`).
        2. :meth:`_anchor`: vector and lexical hits fused by RRF start the pool, scored (one request).
        3. :meth:`_round`, at most ``depth`` times: one assess request, then stop, or expand the
           frontier along each active view and rescore the pool (one request).
        4. :meth:`_currency`: superseded memories rank below what replaced them (unless the
           question asks about the past), and a replacement missing from the pool joins it.
        5. :meth:`_evidence`: the pool's best ``top_k``, each with its validity, and the trace.

        With ``as_of``, only memories observed by then are candidates, and a memory superseded
        only later is current.

        The hard limits (time, controller calls, visited nodes, examined edges) hold whatever
        System One answers. Store and System One errors propagate."""
        reach = self.reach(where)
        run = await self._route(reach, question)
        run.realm, run.as_of = isinstance(where, Realm), as_of
        run.st.realm = run.realm
        await self._anchor(reach, run)
        for rnd in range(1, run.depth + 1):
            if not await self._round(reach, run, rnd):
                break
        self._subjects(run, question)
        self._exchanges(run)
        await self._currency(reach, run)
        await self._latest(reach, run)
        run.timings["total"] = _ms(run.t0)
        return await self._evidence(reach, run, top_k or self.params.top_k)

    async def _route(self, reach: Reach, question: str) -> Run:
        """Step 1: the route and the query state; the BM25 hits are kept for the anchors."""
        p, t0 = self.params, time.perf_counter()
        so = CountingSystemOne(self.so)
        # the question's embedding runs in a worker thread while the route and the BM25 search
        # (which need no vector) run here
        embedding = asyncio.ensure_future(asyncio.to_thread(self.embedder.embed_query, [question]))
        lexical: asyncio.Future[list[Hit]] | None = None
        vectors: asyncio.Future[list[Hit]] | None = None
        try:
            route_ans = (await so.ask([Item(ROUTE, {"question": question})]))[0]
            lexical = asyncio.ensure_future(reach.lexical(question, p.anchor_pool))
            raw = (await embedding)[0]
            if self._space is None and self._reads_attributes():  # embedded once, off the loop
                await asyncio.to_thread(self.attributes)
            qvec = self._steered(raw)
            # the vector search starts as soon as its vector is known, while the lexical one may run on
            vectors = asyncio.ensure_future(reach.vectors(qvec, p.anchor_pool))
            lex_hits = await lexical
        except BaseException:
            for pending in (lexical, vectors):
                if pending is not None:
                    _settle(pending)
            raise
        finally:
            _settle(embedding)
        embed_ms = _ms(t0)
        asked = np.asarray(raw, dtype=np.float32)
        route = {q.key: route_ans.p(q.key) for q in ROUTE.nouls()}
        views = formulas.active_views(route, p.theta_act)
        budgets = formulas.allocate_budget({v: route[v] for v in views}, p.budget_total, p.budget_min, p.budget_gamma)
        st = QueryState(question, qvec, np.asarray(qvec, dtype=np.float64), set(text.tokens(question)),
                         query_names(question), route, subjects.asked_roles(question), asked=asked,
                         dates=qf.question_dates(question))
        return Run(so, st, views, budgets, formulas.depth(route["multi_hop"], p.depth_max, p.limits.depth), t0,
                    lex_hits, vectors, timings={"embed": embed_ms}, remaining=dict(budgets))

    def _steered(self, qvec: list[float]) -> list[float]:
        """``qvec`` moved towards the attribute of a person it asks about
        (:meth:`~topology.systemone.attributes.AttributeSpace.steer` by ``params.query_steer``)
        when its distribution over the attribute prototypes peaks at ``params.query_steer_gate``
        or more; else unchanged."""
        p = self.params
        if p.query_steer <= 0.0 or not any(qvec):
            return qvec
        space = self.attributes()
        row = np.asarray([qvec], dtype=np.float32)
        profile = space.question_profiles(row)
        if float(profile.max()) < p.query_steer_gate:
            return qvec
        return [float(x) for x in space.steer(row, p.query_steer, profile)[0]]

    async def _anchor(self, reach: Reach, run: Run) -> None:
        """Step 2: the anchors (RRF of the vector and BM25 rankings) as the first pool, scored."""
        p, st, t1 = self.params, run.st, time.perf_counter()
        vec_hits = await run.vec_hits
        lex_hits = run.lex_hits
        fused = formulas.rrf([[h.id for h in vec_hits], [h.id for h in lex_hits]], p.rrf_kappa)
        top_bm25 = max((h.score for h in lex_hits), default=0.0)
        st.bm25 = {h.id: h.score / top_bm25 for h in lex_hits} if top_bm25 > 0 else {}
        st.vec_rank, st.lex_rank = qf.rank_scores([h.id for h in vec_hits]), qf.rank_scores([h.id for h in lex_hits])
        # the vector search's first top_k always start the pool (the floor: plain dense search's
        # answers are candidates whatever BM25 says), then the fused order fills it
        cap = min(p.anchors, p.limits.visited_nodes)
        anchor_ids = list(dict.fromkeys([h.id for h in vec_hits[: min(p.top_k, cap)]] + formulas.fused_order(fused)))[:cap]
        best = 2.0 / (p.rrf_kappa + 1)  # the fused score of an id first in both rankings
        st.anchor_strength = {i: fused[i] / best for i in anchor_ids}
        fetched = [(n, i) for n, i in await self._fetch(reach, anchor_ids, edges_next=True) if currency.recallable(n, run.as_of)]
        cosines = matrix([info for _, info in fetched], self.info.dim) @ st.q
        if len(cosines):
            st.cos_range = (float(cosines.min()), float(cosines.max()))
        run.t_star = max((n.observed_at for n, _ in fetched if n.observed_at), default=None)
        for n, info in fetched:
            st.pool[n.id] = Cand(n, info, "anchor", 1.0, st.anchor_strength[n.id])
            st.by_seq[(n.conversation_id, n.seq)] = st.pool[n.id]
        run.anchors = len(anchor_ids)
        run.anchors_short = len(anchor_ids) < min(p.anchors, p.limits.visited_nodes)
        run.timings["anchors"] = _ms(t1)
        await self._score(run, list(st.pool.values()))

    def _out_of_budget(self, run: Run) -> str | None:
        """Why no further round may start (time, controller calls), or None."""
        lim = self.params.limits
        if time.perf_counter() - run.t0 > lim.seconds:
            return "time_limit"
        # a round is one assess request and one score request over at most the node limit
        need = 1 + run.so.requests_for([len(SCORE.questions)] * lim.visited_nodes)
        if run.so.calls + need > lim.controller_calls:
            return "controller_call_limit"
        return None

    async def _round(self, reach: Reach, run: Run, rnd: int) -> bool:
        """Step 3, round ``rnd``: assess the pool, then expand and rescore it; whether another
        round may follow (``run.stop`` says why not)."""
        limited = self._out_of_budget(run)
        if limited is not None:
            run.stop = limited
            return False
        ranked = sorted(run.st.pool.values(), key=lambda c: -c.score)
        assessed = await self._assess(run, rnd, ranked)
        reason = formulas.stop_reason(assessed, self.params)
        if reason is not None:
            run.rounds.append(RoundTrace(round=rnd, assess=assessed, expanded=[], examined_edges=0, added=0, stop=reason))
            run.stop = reason
            return False
        frontier = [c for c in ranked if not c.expanded][: self.params.beam_width]
        for c in frontier:
            c.expanded = True
        added, seen_edges = await self._expand(reach, run, frontier)
        run.examined += seen_edges
        for c in added:
            run.st.pool[c.node.id] = c
            run.st.by_seq.setdefault((c.node.conversation_id, c.node.seq), c)
        if seen_edges:
            # new edges change every pool member's graph features: rescore the pool (one request)
            await self._score(run, list(run.st.pool.values()))
        run.rounds.append(RoundTrace(round=rnd, assess=assessed, expanded=[c.node.id for c in frontier],
                                     examined_edges=seen_edges, added=len(added)))
        if not added:
            run.stop = "exhausted"
            return False
        return True

    async def _assess(self, run: Run, rnd: int, ranked: Sequence[Cand]) -> dict[str, float]:
        """One assess request about the evidence so far (``ranked``: the pool, best first)."""
        p = self.params
        strong = sum(1 for c in ranked if c.relevance >= 0.7)
        gain = run.rounds[-1].added / max(1, p.beam_width) if run.rounds else 1.0
        top_info = [c.info for c in ranked[:5]]
        state = AssessState(
            question=run.st.question, round=rnd - 1,
            best_relevance=round(max((c.relevance for c in ranked), default=0.0), 6),
            strong=strong, last_gain=round(gain, 6), multi_hop=round(run.st.route["multi_hop"], 6),
            negation_mix=round(qf.negation_mix_sets([i.content_tokens for i in top_info], [i.negated for i in top_info]), 6),
            evidence=[i.content for i in top_info])
        a = (await run.so.ask([Item(ASSESS, state.model_dump())]))[0]
        return {q.key: a.p(q.key) for q in ASSESS.nouls()}

    async def _expand(self, reach: Reach, run: Run, frontier: Sequence[Cand]) -> tuple[list[Cand], int]:
        """The new candidates along each active view's edges from ``frontier`` (within its
        budget, the visited-node and examined-edge limits), and the number of edges read.

        Each view in turn takes its best neighbours not yet in the pool nor taken by a view
        before it (a neighbour is worth what its best edge from the frontier carries: p(edge) *
        score). The nodes are read together: every view's edges first, then, in one read, the
        picks as they fall if every pick is found and recallable; a view whose picks move on
        because one before was not reads the rest then (the same picks as one read a view)."""
        lim, st = self.params.limits, run.st
        strength = {c.node.id: max(0.0, c.score) for c in frontier}
        seen_edges = 0
        #: per view: its neighbours best first, and the p(edge) each is reached by
        ranked: list[tuple[View, list[str], dict[str, float]]] = []
        for view in run.views:
            if run.remaining.get(view, 0) <= 0 or run.examined + seen_edges >= lim.examined_edges:
                continue
            limit = min(lim.examined_edges - run.examined - seen_edges, 4 * run.remaining[view] + 40)
            edges = await reach.neighbours(list(strength), [view], limit)
            seen_edges += len(edges)
            st.graph.add(edges)
            want: dict[str, float] = {}
            prob: dict[str, float] = {}
            for e in edges:
                src, other = (e.source, e.target) if e.source in strength else (e.target, e.source)
                if other in st.pool:
                    continue
                v = e.probability * strength.get(src, 0.0)
                if v > want.get(other, -1.0):
                    want[other], prob[other] = v, e.probability
            ranked.append((view, sorted(want, key=lambda i: (-want[i], i)), prob))

        def pick(view: View, best: list[str], taken: Collection[str]) -> list[str]:
            """The view's best not ``taken``, within its budget and the pool's room after ``taken``."""
            room = lim.visited_nodes - len(st.pool) - len(taken)
            return [i for i in best if i not in taken][: min(run.remaining[view], room)] if room > 0 else []

        # the picks as they fall if every one is read and recallable: read together
        picks: list[str] = []
        for view, best, _ in ranked:
            picks += pick(view, best, set(picks))
        got = {n.id: (n, info) for n, info in await self._fetch(reach, picks, edges_next=True)} if picks else {}
        read = set(picks)
        added: list[Cand] = []
        for view, best, prob in ranked:
            chosen = pick(view, best, {x.node.id for x in added})
            unread = [i for i in chosen if i not in read]
            if unread:  # a pick before was missing or not recallable, so this view picks further
                got.update((n.id, (n, info)) for n, info in await self._fetch(reach, unread, edges_next=True))
                read.update(unread)
            for i in chosen:
                if i in got and currency.recallable(got[i][0], run.as_of):
                    n, info = got[i]
                    added.append(Cand(n, info, view, st.route[view], prob[i]))
            run.remaining[view] -= len(chosen)
        return added, seen_edges

    async def _evidence(self, reach: Reach, run: Run, k: int) -> Retrieval:
        """Step 4: the pool's best ``k`` (score, then earlier seq first) and the trace."""
        st = run.st
        final = sorted(st.pool.values(), key=lambda c: (-c.score, c.node.seq))[:k]
        return Retrieval(
            question=st.question,
            evidence=[Evidence(
                node_id=c.node.id, conversation_id=c.node.conversation_id, event_id=c.node.event_id,
                content=c.node.content, speaker=c.node.speaker,
                score=round(c.score, 6), relevance=round(c.relevance, 6), via=c.via, seq=c.node.seq,
                observed_at=c.node.observed_at, event_time=c.node.event_time.isoformat() if c.node.event_time else None,
                temporal_refs=c.node.temporal_refs, provenance=c.node.provenance,
                superseded_by=list(run.stale[c.node.id].by) if c.node.id in run.stale else [],
                valid_until=run.stale[c.node.id].since if c.node.id in run.stale else None,
                valid_from=run.current.get(c.node.id)) for c in final],
            trace=Trace(route={k_: round(v, 6) for k_, v in st.route.items()}, active_views=list(run.views),
                        budgets={str(k_): v for k_, v in run.budgets.items()}, depth=run.depth, anchors=run.anchors,
                        rounds=run.rounds, stop_reason=run.stop, controller_calls=run.so.calls, visited=len(st.pool),
                        examined_edges=run.examined, timings_ms={k_: round(v, 3) for k_, v in run.timings.items()},
                        conversations=list(dict.fromkeys(c.node.conversation_id for c in st.pool.values()))),
        )

    @staticmethod
    def _statics(st: QueryState, cands: Sequence[Cand]) -> None:
        """Set ``st.static`` of ``cands`` (the features that depend only on the node and the
        query; computed once a query, after its ``cos_in_pool`` is set), rounded as
        :meth:`ScoreRow.of` rounds, the rounding of all of them in one array operation."""
        route = st.route
        heads = []
        for c in cands:
            info, nid = c.info, c.node.id
            heads.append((
                st.cos_in_pool.get(nid, 0.0),
                len(st.qtokens & info.tokens) / len(st.qtokens) if st.qtokens else 0.0,
                len(st.qnames & info.names) / len(st.qnames) if st.qnames else 0.0,
                1.0 if info.speaker is not None and info.speaker in st.qnames else 0.0,
                st.anchor_strength.get(nid, 0.0), st.bm25.get(nid, 0.0),
                st.vec_rank.get(nid, 0.0), st.lex_rank.get(nid, 0.0),
                route["temporal"] * (1.0 if info.has_temporal else 0.0),
                qf.date_match_dates(info.dates, *st.dates),
                route["causal"] * (1.0 if info.causal else 0.0),
                _holds(c, st)))
        raw = np.asarray(heads, dtype=np.float64).reshape(len(heads), len(STATIC_HEAD))
        done = np.where(_HEAD_EXACT, raw, qf.round_exact(raw)).tolist()
        for c, head in zip(cands, done, strict=True):
            st.static[c.node.id] = Static(
                head=tuple(head), is_question=1.0 if c.info.is_question else 0.0,
                reached=(0.0 if c.via == "anchor" else 1.0, round(c.p_g, DECIMALS), round(c.pi_e, DECIMALS)),
                length=c.info.length)

    @staticmethod
    def _reply(st: QueryState, n: MemoryNode) -> float:
        """reply_to_match: a reply to a question turn that matches the query often holds the
        answer. Final once the previous turn is in the pool (``by_seq`` entries never change)."""
        got = st.reply.get(n.id)
        if got is not None:
            return got
        prev = st.by_seq.get((n.conversation_id, n.seq - 1))
        if prev is None:
            return 0.0
        reply = 0.0
        if prev.info.is_question and prev.node.speaker != n.speaker:
            reply = max(st.anchor_strength.get(prev.node.id, 0.0), st.bm25.get(prev.node.id, 0.0))
        st.reply[n.id] = reply = round(reply, 6)
        return reply

    def _rows(self, st: QueryState, cands: Sequence[Cand]) -> list[ScoreRow]:
        """Every candidate's score features; cosines come from two matrix products: to the
        question, and to the (up to 5) strongest other evidence nodes (``max_evidence_cosine``,
        ``support``). Per-candidate arithmetic is done on whole columns; the values are those of
        the per-candidate formulas (:meth:`ScoreRow.of`), bit for bit: the same products, sums
        in the same order, and :func:`~query_api.retrieval.features.round_exact` for ``round``."""
        if not cands:
            return []
        ranked = sorted(st.pool.values(), key=lambda c: -c.score)[:6]
        rid = {e.node.id: j for j, e in enumerate(ranked)}
        dim = self.info.dim
        m = matrix([c.info for c in cands], dim)
        zv = m @ st.q
        z = zv.tolist()
        sim = m @ matrix([e.info for e in ranked], dim).T
        lo, hi = st.cos_range
        for i, c in enumerate(cands):
            st.cos_in_pool.setdefault(c.node.id, (z[i] - lo) / max(1e-6, hi - lo))
        new = [c for c in cands if c.node.id not in st.static]
        if new:
            self._statics(st, new)
        # the (up to) 5 strongest other pool members: ranked columns but the candidate's own
        n, r = sim.shape
        own = np.asarray([rid.get(c.node.id, -1) for c in cands])
        k = np.arange(_OTHERS)[None, :]
        cols = k + ((own[:, None] >= 0) & (k >= own[:, None]))
        valid = cols < r
        got = np.take_along_axis(sim, np.minimum(cols, max(r - 1, 0)), axis=1) if r else np.zeros((n, _OTHERS))
        count = valid.sum(axis=1)
        total = np.zeros(n)
        for j in range(_OTHERS):  # left to right, as sum() adds
            total = total + np.where(valid[:, j], got[:, j], 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(count > 0, total / np.maximum(count, 1), 0.0)
        best = np.where(count > 0, np.where(valid, got, -np.inf).max(axis=1, initial=-np.inf), 0.0)
        pool = qf.pool_view({i: st.anchor_strength.get(i, 0.0) for i in st.pool}, st.cos_in_pool,
                            {i: x.relevance for i, x in st.pool.items()})
        adj = st.graph.adj
        graph = [qf.graph_row(c.node.id, st.graph, pool) if c.node.id in adj else qf.NO_GRAPH for c in cands]
        g = np.asarray(graph, dtype=np.float64).reshape(n, len(qf.GRAPH_FEATURES))
        # the rounded columns: cosine, max_evidence_cosine, support, graph_anchor .. adjacent_anchor
        cos, mx, sup, g1, g2, g3, g4 = qf.round_exact(np.column_stack([zv, best, mean, g[:, 1:5]])).T.tolist()
        d = DECIMALS
        stats = [st.static[c.node.id] for c in cands]
        reached = list(zip(*(x.reached for x in stats), strict=True))
        gcols = list(zip(*graph, strict=True))
        # every feature by name, rounded as ScoreRow.of rounds (EXACT kept)
        columns: dict[str, Sequence[float]] = {
            "cosine": cos, **dict(zip(STATIC_HEAD, zip(*(x.head for x in stats), strict=True), strict=True)),
            "reply_to_match": [self._reply(st, c.node) for c in cands],
            "is_question": [x.is_question for x in stats],
            **{f"route_{k}": [round(st.route[k], d)] * n for k in ("temporal", "causal", "multi_hop")},
            "expanded": reached[0], "view_probability": reached[1], "edge_probability": reached[2],
            "max_evidence_cosine": mx, "support": sup, **dict(zip(qf.GRAPH_FEATURES, gcols, strict=True)),
            **dict(zip(qf.GRAPH_FEATURES[1:5], (g1, g2, g3, g4), strict=True)),  # the rounded ones
            "length": [x.length for x in stats]}
        return ScoreRow.rows(columns)

    async def _score(self, run: Run, cands: Sequence[Cand]) -> None:
        """Score ``cands`` (one request) and set their combined, recency-adjusted scores."""
        st = run.st
        rows = self._rows(st, cands)

        def texts() -> list[scoring.Texts]:
            return [scoring.Texts(c.node.content, c.node.speaker or "", c.via) for c in cands]

        judged = await self.scorer.judge(run.so, st.question, rows, texts, realm=run.realm)
        w, r = self.params.weights, st.route["recency"]
        realm = self.params.realm if run.realm else None
        for c, row, (relevance, useful, novelty, supports) in zip(cands, rows, judged, strict=True):
            s = formulas.combined_score(
                z=row.cosine, a=relevance, p_g=c.p_g, l=useful, n=novelty, pi_e=c.pi_e, c=supports, w=w)
            if realm is not None:  # one pool over many conversations (RealmRanking)
                # a realm with fewer memories than anchors has no spread of its own to measure
                z = formulas.spread_cosine(row.cosine, st.cos_range, realm.min_spread if run.anchors_short else 0.0)
                s = realm.relevance_weight * relevance + (1.0 - realm.relevance_weight) * z
            rho = formulas.recency_rho(run.t_star, c.node.observed_at)
            c.score = formulas.recency_adjust(s, r, rho, self.params.recency_weight)
            if realm is not None and c.node.types.kind:  # an untyped node keeps its score
                c.score = formulas.kind_adjust(c.score, _kind(c, st), realm.kind_penalty, c.info.states)
            c.relevance = relevance
        if self.recorder is not None and len(cands) == len(st.pool):
            self.recorder(st.question, [c.node for c in cands],
                          [scoring.state(st.question, t, row) for t, row in zip(texts(), rows, strict=True)])
