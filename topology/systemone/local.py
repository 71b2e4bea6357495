"""The ``local`` System One backend: offline, deterministic, no network.

It answers the catalog's questions with small logistic models over the typed features each stage
puts in an item's ``state`` (:mod:`topology.systemone.features`; a missing feature is an error) and
over lexical cues of the texts. The turn kind (the typing task's ``kind`` Choice) is a learned
multinomial model over cue features and the role (:mod:`topology.systemone.turn_kinds`, trained by
``scripts/train_turn_kinds.py``). Candidate relevance (the ``score`` task) is a learned logistic
model whose weights ship with the package (:mod:`topology.systemone.learned`, trained by
``scripts/train_system_one.py``); the other models are hand-set priors documented next to each.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from topology.errors import SystemOneError
from topology.systemone.features import (
    AliasState,
    AssessState,
    ConsolidationState,
    RelationState,
    RouteState,
    ScoreState,
    TypingState,
    parse,
)
from topology.systemone.folded import cue, fold
from topology.systemone.learned import SHIPPED_EMBEDDER, ScoreModel
from topology.systemone.port import Answer, Item
from topology.systemone.relation_model import RelationModel, relation_features
from topology.systemone.turn_kinds import TurnKindModel
from topology.systemone.update_model import UpdateModel
from topology.text import alias_plausibility


def sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


PAST = cue(r"\b(went|did|had|was|were|got|made|took|saw|met|visited|started|finished|bought|"
           r"joined|tried|moved|ran|played|became|gave|came|found|left|won|lost|\w+ed)\b")
TIME = cue(r"\b(yesterday|today|tonight|last|ago|weekend|morning|evening|\d{4}|"
           r"monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b")
FIRST_PERSON = cue(r"\b(i|i'm|i've|we|my|our|me)\b")
COPULA = cue(r"\b(is|are|means|always|usually|every|never|generally)\b")
PROCEDURE = cue(r"\b(how to|step|steps|first,|then|next,|make sure|you can|you should|"
                r"install|run|configure|recipe|instructions?|use the)\b")
PREFERENCE = cue(r"\b(love|loves|like|likes|prefer|prefers|favorite|favourite|enjoy|enjoys|"
                 r"hate|hates|dislike|can't stand|wish|want|passion|fan of|into)\b")
CAUSE_FWD = cue(r"\b(because|since|due to|thanks to|as a result|that's why|so that|"
                r"inspired|motivated|led me|made me|reason)\b")
NEGATION = cue(r"\b(not|no|never|don't|doesn't|didn't|isn't|wasn't|won't|can't|stopped|quit)\b")
CAUSE_ANSWER = cue(r"\b(because|since|so that|so i|that's why|due to|thanks to|inspired|motivated|made me|"
                   r"wanted to|in order to|reason|after (?:he|she|they|i|my|we)|led me|decided)\b")
STATE = cue(r"\b(i live|i work|i am|i'm|my job|i have|i own|i use|i study|my (?:home|house|apartment|address))\b")
UPDATE = cue(r"\b(now|anymore|no longer|changed|switched|moved|new|instead|used to)\b")

Q_TEMPORAL = cue(r"\b(when|what (?:year|month|day|date|time)|how long|before|after|since|"
                 r"first time|last time|ago|during|date|dates|period|how often)\b")
Q_CAUSAL = cue(r"\b(why|because|reason|cause|caused|lead to|led to|result|what made|"
               r"motivat\w*|inspir\w*|due to|effect)\b")
Q_MULTI = cue(r"\b(both|in common|and .+ both|each|all|which .+ and|how many|what (?:kinds?|types?) "
              r"of|activities|things|would|likely|might|compare|difference|together)\b")
Q_RECENCY = cue(r"\b(now|currently|current|latest|recent|recently|still|these days|anymore)\b")
Q_PAST = cue(r"\b(before|used to|previous|previously|formerly|former|earlier|originally|prior|old|"
             r"at the time|back then|in the past)\b")
Q_CAPS = re.compile(r"\b[A-Z][a-z]+")


def _hit(pattern: re.Pattern[str], folded: str) -> float:
    """Whether the cue ``pattern`` is in ``folded`` (a :func:`~topology.systemone.folded.fold`-ed text)."""
    return 1.0 if pattern.search(folded) else 0.0


@functools.lru_cache(maxsize=8192)
def _cause_cue(text: str) -> float:
    """:data:`CAUSE_FWD` in ``text``; cached, as each memory's text is judged against many pairs."""
    return _hit(CAUSE_FWD, fold(text))


def typing(state: Mapping[str, Any], model: TurnKindModel | None = None) -> Answer:
    """The 4 type Nouls (hand-set cue priors) and the ``kind`` Choice (``model``'s distribution,
    default the shipped turn-kind model, :mod:`topology.systemone.turn_kinds`)."""
    return typing_many([state], model)[0]


def typing_many(states: Sequence[Mapping[str, Any]], model: TurnKindModel | None = None) -> list[Answer]:
    """:func:`typing` for a batch: one turn-kind model evaluation for all (each answer as alone)."""
    parsed = [parse(TypingState, s) for s in states]
    kinds = (model or TurnKindModel.shipped()).answer([(st.text, st.role) for st in parsed])
    return [Answer(nouls=_type_nouls(st), choices={"kind": kind}) for st, kind in zip(parsed, kinds, strict=True)]


def _type_nouls(st: TypingState) -> dict[str, float]:
    text = fold(st.text)
    past, time, first = _hit(PAST, text), _hit(TIME, text), _hit(FIRST_PERSON, text)
    return {
        "episodic": sigmoid(-1.2 + 1.4 * past + 1.0 * time + 0.6 * first),
        "semantic": sigmoid(-0.8 + 1.2 * _hit(COPULA, text) - 0.6 * past + 0.3 * (1 - first)),
        "procedural": sigmoid(-2.5 + 2.5 * _hit(PROCEDURE, text) + (1.0 if st.role == "tool" else 0.0)),
        "preference": sigmoid(-2.2 + 3.0 * _hit(PREFERENCE, text)),
    }


#: Cosine at which a pair sharing no words or entities is even odds semantic: above MiniLM's unrelated pairs (0.27 +- 0.13).
SEMANTIC_COSINE_MIDPOINT = 0.42
#: Logit per unit of cosine around the midpoint: 0.25 above it is 95% semantic on cosine alone.
SEMANTIC_COSINE_SLOPE = 12.0


def relation(state: Mapping[str, Any], model: RelationModel | None = None, updates: UpdateModel | None = None) -> Answer:
    """Pair (older -> newer) features: cosine, lexical (Dice), entity (Jaccard), turn gap, same
    speaker. ``semantic`` is ``model``'s probability when given (the learned judge,
    :mod:`topology.systemone.relation_model`), else the hand-set rule on cosine, words and
    entities; the causal answers are hand-set cues either way. ``updates`` is the learned update
    judge's probability (``updates`` given, else the shipped weights,
    :mod:`topology.systemone.update_model`)."""
    return relation_many([state], model, updates)[0]


def relation_many(states: Sequence[Mapping[str, Any]], model: RelationModel | None,
                  updates: UpdateModel | None = None) -> list[Answer]:
    """:func:`relation` for a batch (each model evaluated once for all; each answer as alone)."""
    parsed = [parse(RelationState, s) for s in states]
    learned = (model.probabilities(np.asarray([relation_features(st) for st in parsed], dtype=np.float64)).tolist()
               if model is not None and parsed else None)
    replaced = (updates or UpdateModel.shipped()).answer(parsed)
    out = []
    for i, st in enumerate(parsed):
        adjacent = 1.0 if st.gap <= 1 else 0.0
        topical = SEMANTIC_COSINE_SLOPE * (st.cosine - SEMANTIC_COSINE_MIDPOINT) + 2.5 * st.lexical + 1.0 * st.entity
        out.append(Answer(nouls={
            "semantic": learned[i] if learned is not None else sigmoid(topical),
            "caused_by": sigmoid(-3.2 + 2.2 * _cause_cue(st.newer) + 0.5 * topical / 4 + 1.0 * adjacent),
            "causes": sigmoid(-3.6 + 1.8 * (_cause_cue(st.older) if adjacent else 0.0) * adjacent + 0.5 * topical / 4),
            "updates": replaced[i],
        }))
    return out


def alias(state: Mapping[str, Any]) -> Answer:
    st = parse(AliasState, state)
    return Answer(nouls={"alias": alias_plausibility(st.a, st.b)})


def consolidation(state: Mapping[str, Any]) -> Answer:
    """Pair judgments from the typed pair features.

    A near-duplicate (cosine >= ~0.95 and high token overlap) is redundant and merges; an update
    (the newer text announces a change, same speaker, overlapping slot words) makes the older one
    obsolete; a negation mismatch on overlapping words is a contradiction. ``promote`` (an
    abstraction over the two) is likely when they are topical siblings of the same speaker."""
    st = parse(ConsolidationState, state)
    cos, ent, slot = st.cosine, st.entity, st.slot_overlap
    redundant = sigmoid(30.0 * (cos - 0.95) + 6.0 * (slot - 0.6))
    contradiction = sigmoid(-6.0 + 6.0 * st.negation_mix + 3.0 * slot + 6.0 * (cos - 0.85))
    obsolete = sigmoid(-4.0 + 2.5 * st.update_cue + 1.5 * st.older_state + 1.0 * st.same_speaker + 3.0 * slot
                       + 6.0 * (cos - 0.8))
    link_useful = sigmoid(8.0 * (cos - 0.5) + 1.0 * ent)
    raw = {
        "keep_separate": max(0.02, 1.0 - max(redundant, obsolete)) * (1.0 - 0.5 * link_useful),
        "merge": redundant * (1.0 - contradiction),
        "promote": 0.5 * obsolete * (1.0 - contradiction) * (1.0 - redundant) * st.same_speaker,
        "uncertain": 0.02,
    }
    total = sum(raw.values())
    return Answer(
        nouls={"redundant": redundant, "contradiction": contradiction, "obsolete": obsolete,
               "link_useful": link_useful},
        choices={"representation": {k: v / total for k, v in raw.items()}},
    )


def route(state: Mapping[str, Any]) -> Answer:
    q = parse(RouteState, state).question
    names = len(set(Q_CAPS.findall(q[1:])))
    lq = fold(q)
    return Answer(nouls={
        "semantic": 0.85,
        "temporal": sigmoid(-1.5 + 3.5 * _hit(Q_TEMPORAL, lq)),
        "causal": sigmoid(-2.0 + 3.5 * _hit(Q_CAUSAL, lq)),
        "entity": sigmoid(-1.0 + 1.5 * min(names, 2)),
        "multi_hop": sigmoid(-1.2 + 2.0 * _hit(Q_MULTI, lq) + 0.8 * max(0, names - 1)),
        "recency": sigmoid(-2.5 + 3.0 * _hit(Q_RECENCY, lq)),
        "past": sigmoid(-3.0 + 4.5 * _hit(Q_PAST, lq)),
    })


def assess(state: Mapping[str, Any]) -> Answer:
    """Evidence state: best relevance, count of strong items, gain of the last round, round, h,
    and the negation mix of the top evidence (contradiction)."""
    st = parse(AssessState, state)
    best, strong, gain, rnd, hop = st.best_relevance, st.strong, st.last_gain, st.round, st.multi_hop
    need = 1.0 + 2.0 * hop
    sufficient = sigmoid(10.0 * (best - 0.8)) * sigmoid(3.0 * (strong - need))
    return Answer(nouls={
        "sufficient": sufficient,
        "continue_useful": sigmoid(0.5 + 3.0 * gain + 1.5 * hop - 0.6 * rnd - 2.0 * sufficient),
        "missing": 1.0 - sufficient,
        "contradiction": sigmoid(-4.0 + 6.0 * st.negation_mix),
    })


def score(state: Mapping[str, Any], model: ScoreModel) -> Answer:
    """Candidate judgments: relevance from the learned model over :data:`SCORE_FEATURES`; the
    other Nouls are direct readings of their features (edge usefulness, novelty, support)."""
    return score_many([state], model)[0]


def score_many(states: Sequence[Mapping[str, Any]], model: ScoreModel) -> list[Answer]:
    """:func:`score` for a batch: one matrix product for every candidate's relevance."""
    parsed = [parse(ScoreState, s) for s in states]
    if not parsed:
        return []
    logits = model.logits(np.asarray([st.vector() for st in parsed], dtype=np.float64))
    return [_score_answer(st, sigmoid(float(z))) for st, z in zip(parsed, logits, strict=True)]


def score_nouls(relevance: float, edge_probability: float, expanded: float, max_evidence_cosine: float,
                support: float) -> tuple[float, float, float, float]:
    """(relevance, relation_useful, new_information, supports) of one candidate: the one place
    these formulas live (``query_api.retrieval.scoring`` evaluates rows with it directly)."""
    return (relevance, sigmoid(2.0 * (relevance - 0.5) + 1.0 * edge_probability * expanded),
            max(0.0, min(1.0, 1.0 - max_evidence_cosine)), max(0.0, min(1.0, support)))


def _score_answer(st: ScoreState, relevance: float) -> Answer:
    f = st.features()
    rel, useful, new, supports = score_nouls(relevance, f.edge_probability, f.expanded, f.max_evidence_cosine,
                                             f.support)
    return Answer(nouls={"relevance": rel, "relation_useful": useful, "new_information": new, "supports": supports})


class LocalSystemOne:
    """Offline default backend; answers a batch in-process, one call per ``ask``.

    ``score_model``: the relevance model of the score task (default: the weights shipped for
    ``embedder``, loaded on the first score item, so the write path never needs them).
    ``relation_model``: the learned relation judge (default: the weights shipped for ``embedder``,
    or the hand-set rule where it has none; ``learned_relations=False`` always uses the rule).
    ``update_model``: the learned update judge of the relation task's ``updates`` Noul (default:
    the shipped weights, loaded on the first relation item; they read no embedding)."""

    name = "local"

    def __init__(self, score_model: ScoreModel | None = None, embedder: str = SHIPPED_EMBEDDER,
                 relation_model: RelationModel | None = None, learned_relations: bool = True,
                 update_model: UpdateModel | None = None, realm_score_model: ScoreModel | None = None) -> None:
        self._score_model, self._embedder = score_model, embedder
        #: None: the shipped realm weights, or ``score_model`` when one is given (a caller's own
        #: weights answer both kinds of recall unless it gives realm weights too)
        self._realm_score_model = realm_score_model if realm_score_model is not None or score_model is None \
            else score_model
        self._relation_model = relation_model
        self._update_model = update_model
        self._relation_loaded = relation_model is not None or not learned_relations
        self._models: dict[str, Callable[[Mapping[str, Any]], Answer]] = {
            "typing": typing, "relation": lambda s: relation(s, self.relation_model, self.update_model), "alias": alias,
            "consolidation": consolidation, "route": route, "assess": assess,
            "score": lambda s: score(s, self.score_model),
        }

    @property
    def relation_model(self) -> RelationModel | None:
        if not self._relation_loaded:
            self._relation_model, self._relation_loaded = RelationModel.shipped(self._embedder), True
        return self._relation_model

    @property
    def update_model(self) -> UpdateModel:
        if self._update_model is None:
            self._update_model = UpdateModel.shipped()
        return self._update_model

    @property
    def score_model(self) -> ScoreModel:
        if self._score_model is None:
            self._score_model = ScoreModel.shipped(self._embedder)
        return self._score_model

    @property
    def realm_score_model(self) -> ScoreModel:
        """The relevance weights for a recall over many conversations (``ScoreModel.shipped``
        with ``realm``)."""
        if self._realm_score_model is None:
            self._realm_score_model = ScoreModel.shipped(self._embedder, realm=True)
        return self._realm_score_model

    @realm_score_model.setter
    def realm_score_model(self, model: ScoreModel) -> None:
        """Answer a realm's candidates with ``model`` from now on (training and evaluating them)."""
        self._realm_score_model = model

    async def ask(self, items: Sequence[Item]) -> list[Answer]:
        out: list[Answer | None] = [None] * len(items)
        scored = [i for i, item in enumerate(items) if item.task.name == "score"]
        if scored:  # the hot read-path question: one batched model evaluation
            for i, answer in zip(scored, score_many([items[i].state for i in scored], self.score_model), strict=True):
                out[i] = answer
        typed = [i for i, item in enumerate(items) if item.task.name == "typing"]
        if typed:  # every write's question: one turn-kind model evaluation for the batch
            for i, answer in zip(typed, typing_many([items[i].state for i in typed]), strict=True):
                out[i] = answer
        judged = [i for i, item in enumerate(items) if item.task.name == "relation"]
        if judged:  # the hot write-path question: likewise
            for i, answer in zip(judged, relation_many([items[i].state for i in judged], self.relation_model,
                                                       self.update_model), strict=True):
                out[i] = answer
        for i, item in enumerate(items):
            if out[i] is not None:
                continue
            model = self._models.get(item.task.name)
            if model is None:
                raise SystemOneError(f"local backend has no model for task {item.task.name!r}")
            out[i] = model(item.state)
        return [a for a in out if a is not None]

    async def aclose(self) -> None:
        return None
