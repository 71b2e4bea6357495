"""The paper's parameters as named defaults, grouped in one immutable, configurable object.

Every threshold carries a one-line why. ``Params`` is what stages and the controller take;
settings at the edge may override any field.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: Edges judged by System One exist only at or above this probability (paper: theta_rel).
THETA_REL = 0.60
#: At most this many earlier memories are judged per write (paper: K_w); bounds the relation batch.
K_WRITE = 10
#: A new memory's semantic edges: its this many most probably related candidates (of K_w) ...
SEMANTIC_PER_TURN = 6
#: ... that the judge finds at least this likely related (below it, 9 to 1 against).
THETA_SEMANTIC = 0.10
#: Consolidation runs after this many successful writes in a conversation.
CONSOLIDATE_EVERY = 20
#: System Two may write a derived node only when merge/promote is this likely ...
THETA_SUMMARY = 0.85
#: ... and contradiction stays below this.
THETA_CONTRADICTION = 0.85
#: An older memory is shown as superseded when an update makes it obsolete this likely.
THETA_OBSOLETE = 0.70
#: The write path links a new memory to an earlier one it updates (a ``supersedes`` edge) at this
#: p(updates): on the write path's own candidate pairs (held-out wordings) 0.8 keeps 14 of 16 caught
#: updates and cuts false edges from 164 to 16 of 11,319 pairs; consolidation may still catch a miss.
THETA_UPDATE = 0.8
#: The update question's own candidates per new statement (:mod:`topology.stages.updates`): the
#: speaker's most similar earlier memories across the user's conversations, beyond the candidates.
K_UPDATE = 4
#: Earlier statements of the speaker searched per new statement, of which the ``K_UPDATE`` most
#: about its attribute are asked the update question (under a learned attribute model; without
#: one, the ``K_UPDATE`` most similar).
UPDATE_POOL = 32
#: The update question's own candidates are searched by the new statement's vector moved towards
#: the attributes it is about (:meth:`topology.systemone.attributes.AttributeSpace.steer`) by this
#: much: the same person's statement of the same attribute, not their small talk (0: unmoved).
UPDATE_STEER = 1.0
#: A question that asks about one attribute of a person (its distribution over the attribute
#: prototypes peaks at QUERY_STEER_GATE or more: "What car does Ana drive?") is searched and
#: scored by its vector moved towards that attribute by QUERY_STEER (0: unmoved), so that the
#: person's statement of it outranks their small talk that the question's words happen to match.
QUERY_STEER = 0.5
QUERY_STEER_GATE = 0.8
#: A relation view takes part in a query when its route probability reaches this.
THETA_ACT = 0.10
#: Total graph-expansion budget per query, shared among active views.
BUDGET_TOTAL = 80
#: Every active view gets at least this much budget.
BUDGET_MIN = 1
#: Exponent on route probabilities when sharing the budget (1.0 = proportional).
BUDGET_GAMMA = 1.0
#: Reciprocal-rank-fusion constant (standard value from Cormack et al.).
RRF_KAPPA = 60
#: Beam width: nodes expanded per round.
BEAM_WIDTH = 10
#: Stop when evidence_sufficient reaches this ...
STOP_SUFFICIENT = 0.95
#: ... and missing_evidence and contradiction both stay below this.
STOP_MISSING = 0.15
#: Or stop when continuing is judged useless below this.
STOP_CONTINUE = 0.15
#: Weight of the recency adjustment on the combined score.
RECENCY_WEIGHT = 0.1
#: A superseded memory keeps 1 - STALE_WEIGHT * p(supersedes) * (1 - p(past)) of its score
#: (``query_api.retrieval.currency.stale_factor``); for a question about the present it also ranks
#: just below its replacement. A wrong edge costs the memory this share whatever the question.
STALE_WEIGHT = 0.25
#: A memory stating someone else's fact, for a question about people of the conversation
#: (``query_api.retrieval.subjects``), keeps 1 - OTHER_SUBJECT_PENALTY of its score.
OTHER_SUBJECT_PENALTY = 0.5
#: A fact that the asked person tells of someone else ("My mum has Marisol as a manager", "my
#: friend Lucinda lives in Lyon") keeps 1 - HEARSAY_PENALTY of its score: never an answer about
#: the asked person, whose own words it is. Another speaker's own fact keeps the milder
#: OTHER_SUBJECT_PENALTY (a question may name the wrong one of two speakers).
HEARSAY_PENALTY = 0.99
#: For a question about the present naming a person, that person's own statements scoring at
#: least LATEST_BAND times the best of them answer it about as well, and the latest of them
#: ranks first (``query_api.retrieval.currency.latest_first``); above 1: off.
LATEST_BAND = 0.6
#: Under an embedder with a learned attribute model, a question about the present that the model
#: reads as about one attribute with at least this probability ("Who is Priya's manager?") is
#: answered by the latest of the asked person's own statements the model reads as about that
#: attribute with at least this probability, however its words score ("Dana approved my leave
#: request today"): ``query_api.retrieval.currency.latest_about``; above 1: off.
LATEST_ATTRIBUTE = 0.5
#: The person's latest statement about the asked attribute is searched by the question's vector
#: plus this many times the attribute's learned direction (normalised again): a statement that
#: shows the attribute only through what it tells ("Dana approved my leave request today") shares
#: little of the question's wording, and at 1 is often not among the hits.
LATEST_STEER = 3.0
#: With LATEST_ALONE, for a question that asks for a value (who, what, which, where:
#: ``query_api.retrieval.currency.asks_value``), that latest statement answers first of the whole
#: pool, also when it is the person's only statement about the attribute: a look-alike about
#: someone else, a reply naming the value or small talk no longer ranks above it.
LATEST_ALONE = True


class ScoreWeights(BaseModel):
    """lambda_1..lambda_5 of the combined candidate score (cosine, relevance, view*usefulness,
    novelty, edge/support). The ``local`` backend's relevance is a learned probability that already
    weighs cosine, BM25, ranks, entity, date and graph features, so it is the whole score by
    default: on the dev conversations, mixing in the other terms (the earlier 0.5/2/1/0.5/0.5)
    cost recall@10 0.80 -> 0.69 with the learned model. Remote backends may want the mix back."""

    model_config = ConfigDict(frozen=True)

    cosine: float = 0.0
    relevance: float = 1.0
    relation: float = 0.0
    novelty: float = 0.0
    support: float = 0.0


class KindPenalties(BaseModel):
    """How much a candidate's score falls with the probability that its turn is of each kind
    (System One's typing ``kind``): ``s' = s * (1 - sum_k penalty_k * p(kind_k))``. A question about
    a fact is answered by a statement of it, not by another question (the user asking it again), a
    tool call or result, or advice about it; a statement keeps its score. Small talk is not
    penalised: a fact said in passing inside chatter is typed partly chatter."""

    model_config = ConfigDict(frozen=True)

    question: float = 0.9
    tool: float = 0.9
    advice: float = 0.6
    chatter: float = 0.0


class RealmRanking(BaseModel):
    """How a recall over many conversations (a user's sessions) scores its one pool:
    ``s = (relevance_weight * relevance + (1 - relevance_weight) * cosine_in_pool)``, recency-adjusted,
    then :class:`KindPenalties`. The learned relevance was trained on single conversations, where
    the turns around an answer tell it apart; across sessions its values are small and flat, and
    the question's cosine (normalised in the pool) carries the ranking. Chosen on
    ``jevmem bench users``'s training wordings with ``scripts/tune_kind_penalty.py`` and checked on
    held-out wordings (docs/experiments/benchmarks-history.md, "User memory across sessions")."""

    model_config = ConfigDict(frozen=True)

    relevance_weight: float = 0.5
    kind_penalty: KindPenalties = KindPenalties()
    #: The least cosine span the pool's cosines are spread over (``formulas.spread_cosine``) when
    #: the realm holds fewer memories than ``Params.anchors``: a handful of memories a few
    #: hundredths apart stay close instead of becoming best and worst. A larger realm's anchors
    #: set the span themselves.
    min_spread: float = Field(default=0.1, ge=0.0)
    #: A person's turn gains this share of the score of the assistant's reply to it (the next turn
    #: of its conversation, in the pool), after scoring (``formulas.exchange_lift``): the user's
    #: own words are the memory, and the reply that elaborates them often matches the question
    #: better than they do. 0 ranks turns alone.
    exchange_weight: float = Field(default=0.5, ge=0.0, le=1.0)
    #: A question in the first person ("Where does my sister live?", "What language am I
    #: learning?") that names nobody asks about the realm's user, when one person speaks in the
    #: pool: the subject step reads that person's reports of someone else's fact as not theirs
    #: (assistant and tool turns are left alone). The latest-statement step still takes only
    #: people a question names. False: only the people a question names are asked.
    first_person: bool = True
    #: For such a question about the present, the asker's later statements answering it about as
    #: well as the best one (``Params.latest_band``) and sharing a content word with it may be put
    #: to the update judge as possible replacements of it, and the latest judged at least this
    #: likely to replace it ranks first (docs/benchmarks.md, "Updates of facts no table names").
    #: 0.35 is the threshold chosen on half of the update judge's wide pool
    #: (``scripts/choose_judged_update.py``); None: off.
    judged_update: float | None = Field(default=0.35, ge=0.0, le=1.0)


class HardLimits(BaseModel):
    """Per-query ceilings that no controller answer can lift."""

    model_config = ConfigDict(frozen=True)

    depth: int = 8
    visited_nodes: int = 60
    examined_edges: int = 2400
    controller_calls: int = 16
    seconds: float = 15.0


class Params(BaseModel):
    """All tunables of the write and read paths; defaults are the paper's values."""

    model_config = ConfigDict(frozen=True)

    theta_rel: float = THETA_REL
    k_write: int = K_WRITE
    semantic_per_turn: int = SEMANTIC_PER_TURN
    theta_semantic: float = THETA_SEMANTIC
    consolidate_every: int = CONSOLIDATE_EVERY
    consolidation_pairs: int = Field(default=20, description="pairs judged per consolidation run")
    theta_summary: float = THETA_SUMMARY
    theta_contradiction: float = THETA_CONTRADICTION
    theta_obsolete: float = THETA_OBSOLETE
    theta_update: float = THETA_UPDATE
    k_update: int = Field(default=K_UPDATE, ge=0, description="earlier memories of the same speaker (across the "
                          "user's conversations) asked the update question per new statement; 0: candidates only")
    update_pool: int = Field(default=UPDATE_POOL, ge=0, description="earlier statements of the speaker searched "
                             "per new statement, of which the k_update most about its attribute are asked")
    update_steer: float = Field(default=UPDATE_STEER, ge=0.0, description="how far the search for those earlier "
                                "memories moves towards the statement's attribute; 0: by its vector alone")
    query_steer: float = Field(default=QUERY_STEER, ge=0.0, description="how far a question about one attribute "
                               "of a person moves towards it before it is searched and scored; 0: unmoved")
    query_steer_gate: float = Field(default=QUERY_STEER_GATE, ge=0.0, le=1.0, description="the share of its "
                                    "attribute distribution a question's top attribute needs to be moved")
    admission_enabled: bool = False
    theta_act: float = THETA_ACT
    budget_total: int = BUDGET_TOTAL
    budget_min: int = BUDGET_MIN
    budget_gamma: float = BUDGET_GAMMA
    depth_max: int = Field(default=3, description="D_max in D(q); capped by limits.depth")
    rrf_kappa: int = RRF_KAPPA
    anchors: int = Field(default=30, description="fused anchors kept as the starting evidence")
    anchor_pool: int = Field(default=50, description="hits fetched from each index before fusion")
    beam_width: int = BEAM_WIDTH
    stop_sufficient: float = STOP_SUFFICIENT
    stop_missing: float = STOP_MISSING
    stop_continue: float = STOP_CONTINUE
    recency_weight: float = RECENCY_WEIGHT
    stale_weight: float = STALE_WEIGHT
    other_subject_penalty: float = Field(default=OTHER_SUBJECT_PENALTY, ge=0.0, le=1.0)
    hearsay_penalty: float = Field(default=HEARSAY_PENALTY, ge=0.0, le=1.0)
    latest_band: float = Field(default=LATEST_BAND, ge=0.0)
    latest_attribute: float = Field(default=LATEST_ATTRIBUTE, ge=0.0, description="the probability at which the "
                                    "learned attribute model reads a question, and a person's statement, as about one "
                                    "attribute, so that the latest such statement answers it; above 1: off")
    latest_steer: float = Field(default=LATEST_STEER, ge=0.0, description="how far the search for the asked "
                                "person's latest statement about the asked attribute moves from the question "
                                "towards that attribute's learned direction")
    latest_alone: bool = Field(default=LATEST_ALONE, description="for a question that asks for a value, that latest "
                               "statement answers first of the whole pool, also when it is the person's only "
                               "statement about the attribute")
    top_k: int = 10
    weights: ScoreWeights = ScoreWeights()
    realm: RealmRanking = RealmRanking()
    limits: HardLimits = HardLimits()
