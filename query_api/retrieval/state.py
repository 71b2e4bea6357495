"""The state of one query in progress (:class:`Run`): its plan, its pool of candidates
(:class:`Cand`) and what they were scored on (:class:`QueryState`), shared by the retrieval
controller's steps (:mod:`query_api.retrieval.controller`, :mod:`query_api.retrieval.present`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from pydantic import BaseModel

from query_api.retrieval import currency
from query_api.retrieval import features as qf
from query_api.retrieval.nodeinfo import NodeInfo
from storage.ports import Hit
from topology.schemas import MemoryNode, View
from topology.systemone.port import CountingSystemOne


class RoundTrace(BaseModel):
    round: int
    assess: dict[str, float]
    expanded: list[str]
    examined_edges: int
    added: int
    stop: str | None = None


@dataclass
class Cand:
    node: MemoryNode
    #: the node's query-independent facts (its embedding row among them)
    info: NodeInfo
    via: str
    p_g: float
    pi_e: float
    score: float = 0.0
    relevance: float = 0.0
    expanded: bool = False


@dataclass(frozen=True)
class Static:
    """The score features of a candidate that depend only on it and the query (its node, how it
    was reached), as a :class:`ScoreRow` carries them (rounded where it rounds): ``head`` is
    ``cosine_in_pool`` .. ``statement`` in :data:`STATIC_HEAD` order; ``reached`` is
    ``expanded``, ``view_probability``, ``edge_probability``."""

    head: tuple[float, ...]
    is_question: float
    reached: tuple[float, float, float]
    length: float


@dataclass
class QueryState:
    question: str
    qvec: list[float]
    #: the question vector as float64 (what the cosine products multiply by)
    q: np.ndarray
    qtokens: set[str]
    qnames: set[str]
    route: dict[str, float]
    #: the roles whose words the question asks about (:func:`~query_api.retrieval.subjects.asked_roles`)
    roles: frozenset[str] = frozenset()
    #: the question's own vector, before any steering (what the attribute model reads)
    asked: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    #: per node, the attribute model's reading of it (:meth:`RetrievalController._known`, once a query)
    attribute_reads: dict[str, np.ndarray] = field(default_factory=dict)
    anchor_strength: dict[str, float] = field(default_factory=dict)
    bm25: dict[str, float] = field(default_factory=dict)
    vec_rank: dict[str, float] = field(default_factory=dict)
    lex_rank: dict[str, float] = field(default_factory=dict)
    cos_range: tuple[float, float] = (0.0, 1.0)
    cos_in_pool: dict[str, float] = field(default_factory=dict)
    #: (conversation, seq) -> the pool member at that place
    by_seq: dict[tuple[str, int], Cand] = field(default_factory=dict)
    pool: dict[str, Cand] = field(default_factory=dict)
    graph: qf.GraphView = field(default_factory=qf.GraphView)
    dates: tuple[set[int], set[int]] = field(default_factory=lambda: (set(), set()))
    #: per node, the features that depend only on the node and the question (computed once a query)
    static: dict[str, Static] = field(default_factory=dict)
    #: per node, its reply_to_match once final (see ``RetrievalController._reply``)
    reply: dict[str, float] = field(default_factory=dict)
    #: a recall over many conversations: the ``statement`` feature is whether the turn holds a
    #: statement (its kind, or its best sentence or clause read alone), which the realm weights
    #: learned from; a conversation's query keeps the turn's kind alone (the LoCoMo weights')
    realm: bool = False


@dataclass
class Run:
    """One query in progress: the plan the route gave, the pool, and what the trace reports."""

    so: CountingSystemOne
    st: QueryState
    views: list[View]
    budgets: dict[View, int]
    depth: int
    t0: float
    lex_hits: list[Hit]
    #: the anchors' vector search, started as soon as the question's vector was known
    vec_hits: asyncio.Future[list[Hit]]
    timings: dict[str, float] = field(default_factory=dict)
    anchors: int = 0
    #: the latest observation time of the anchors (the recency reference t*)
    t_star: datetime | None = None
    rounds: list[RoundTrace] = field(default_factory=list)
    #: expansion budget left per view
    remaining: dict[View, int] = field(default_factory=dict)
    examined: int = 0
    stop: str = "depth"
    #: a recall over many conversations (scored by ``Params.realm``)
    realm: bool = False
    #: only memories observed by then count, and what superseded them later does not
    as_of: datetime | None = None
    #: the pool's superseded memories, as of ``as_of`` (:mod:`query_api.retrieval.currency`)
    stale: dict[str, currency.Superseded] = field(default_factory=dict)
    #: the pool's memories that superseded another: when they became current
    current: dict[str, datetime] = field(default_factory=dict)
    #: the people of the pool the question names (lowercased speakers)
    asked: frozenset[str] = frozenset()
    #: whom a question in the first person that names nobody asks about, in a realm (``RealmRanking.first_person``)
    asker: frozenset[str] = frozenset()
    #: fewer anchors than asked for: the realm holds fewer memories (``RealmRanking.min_spread``)
    anchors_short: bool = False
