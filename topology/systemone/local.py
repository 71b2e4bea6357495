"""The ``local`` System One backend: offline, deterministic, no network.

It answers the catalog's questions with small logistic models over the features each stage puts
in an item's ``state`` (cosines, overlaps, entity matches, grounded dates) and over lexical cues of
the texts. The weights below are hand-set priors, documented next to each model; nothing here is
fitted to benchmark answers or evidence labels.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from topology.errors import SystemOneError
from topology.systemone.port import Answer, Item
from topology.text import alias_plausibility


def sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def _cue(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


PAST = _cue(r"\b(went|did|had|was|were|got|made|took|saw|met|visited|started|finished|bought|"
            r"joined|tried|moved|ran|played|became|gave|came|found|left|won|lost|\w+ed)\b")
TIME = _cue(r"\b(yesterday|today|tonight|last|ago|weekend|morning|evening|\d{4}|"
            r"monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b")
FIRST_PERSON = _cue(r"\b(i|i'm|i've|we|my|our|me)\b")
COPULA = _cue(r"\b(is|are|means|always|usually|every|never|generally)\b")
PROCEDURE = _cue(r"\b(how to|step|steps|first,|then|next,|make sure|you can|you should|"
                 r"install|run|configure|recipe|instructions?|use the)\b")
PREFERENCE = _cue(r"\b(love|loves|like|likes|prefer|prefers|favorite|favourite|enjoy|enjoys|"
                  r"hate|hates|dislike|can't stand|wish|want|passion|fan of|into)\b")
CAUSE_FWD = _cue(r"\b(because|since|due to|thanks to|as a result|that's why|so that|"
                 r"inspired|motivated|led me|made me|reason)\b")
NEGATION = _cue(r"\b(not|no|never|don't|doesn't|didn't|isn't|wasn't|won't|can't|stopped|quit)\b")
CAUSE_ANSWER = _cue(r"\b(because|since|so that|so i|that's why|due to|thanks to|inspired|motivated|made me|"
                    r"wanted to|in order to|reason|after (?:he|she|they|i|my|we)|led me|decided)\b")
UPDATE = _cue(r"\b(now|anymore|no longer|changed|switched|moved|new|instead|used to)\b")

Q_TEMPORAL = _cue(r"\b(when|what (?:year|month|day|date|time)|how long|before|after|since|"
                  r"first time|last time|ago|during|date|dates|period|how often)\b")
Q_CAUSAL = _cue(r"\b(why|because|reason|cause|caused|lead to|led to|result|what made|"
                r"motivat\w*|inspir\w*|due to|effect)\b")
Q_MULTI = _cue(r"\b(both|in common|and .+ both|each|all|which .+ and|how many|what (?:kinds?|types?) "
               r"of|activities|things|would|likely|might|compare|difference|together)\b")
Q_RECENCY = _cue(r"\b(now|currently|current|latest|recent|recently|still|these days|anymore)\b")
Q_CAPS = re.compile(r"\b[A-Z][a-z]+")


def _f(state: Mapping[str, Any], key: str, default: float = 0.0) -> float:
    v = state.get(key, default)
    return float(v) if isinstance(v, int | float) else default


def _s(state: Mapping[str, Any], key: str) -> str:
    v = state.get(key, "")
    return v if isinstance(v, str) else ""


def _hit(pattern: re.Pattern[str], text: str) -> float:
    return 1.0 if pattern.search(text) else 0.0


def typing(state: Mapping[str, Any]) -> Answer:
    text = _s(state, "text")
    past, time, first = _hit(PAST, text), _hit(TIME, text), _hit(FIRST_PERSON, text)
    return Answer(nouls={
        "episodic": sigmoid(-1.2 + 1.4 * past + 1.0 * time + 0.6 * first),
        "semantic": sigmoid(-0.8 + 1.2 * _hit(COPULA, text) - 0.6 * past + 0.3 * (1 - first)),
        "procedural": sigmoid(-2.5 + 2.5 * _hit(PROCEDURE, text) + (1.0 if state.get("role") == "tool" else 0.0)),
        "preference": sigmoid(-2.2 + 3.0 * _hit(PREFERENCE, text)),
    })


def relation(state: Mapping[str, Any]) -> Answer:
    """Pair (older -> newer) features: cosine, lexical (Dice), entity (Jaccard), turn gap."""
    cos, lex, ent = _f(state, "cosine"), _f(state, "lexical"), _f(state, "entity")
    adjacent = 1.0 if _f(state, "gap", 99) <= 1 else 0.0
    new_text, old_text = _s(state, "newer"), _s(state, "older")
    topical = 12.0 * (cos - 0.42) + 2.5 * lex + 1.0 * ent
    return Answer(nouls={
        "semantic": sigmoid(topical),
        "caused_by": sigmoid(-3.2 + 2.2 * _hit(CAUSE_FWD, new_text) + 0.5 * topical / 4 + 1.0 * adjacent),
        "causes": sigmoid(-3.6 + 1.8 * _hit(CAUSE_FWD, old_text) * adjacent + 0.5 * topical / 4),
    })


def alias(state: Mapping[str, Any]) -> Answer:
    return Answer(nouls={"alias": alias_plausibility(_s(state, "a"), _s(state, "b"))})


def consolidation(state: Mapping[str, Any]) -> Answer:
    cos, ent = _f(state, "cosine"), _f(state, "entity")
    newer, older = _s(state, "newer"), _s(state, "older")
    neg_mismatch = abs(_hit(NEGATION, newer) - _hit(NEGATION, older))
    redundant = sigmoid(25.0 * (cos - 0.92))
    contradiction = sigmoid(-3.0 + 2.5 * neg_mismatch + 6.0 * (cos - 0.6))
    obsolete = sigmoid(-3.0 + 2.0 * _hit(UPDATE, newer) + 6.0 * (cos - 0.7))
    link_useful = sigmoid(8.0 * (cos - 0.5) + 1.0 * ent)
    raw = {
        "keep_separate": 1.0 - max(redundant, link_useful * 0.5),
        "merge": redundant * (1.0 - contradiction),
        "promote": link_useful * 0.4 * (1.0 - redundant),
        "uncertain": 0.15,
    }
    total = sum(raw.values())
    return Answer(
        nouls={"redundant": redundant, "contradiction": contradiction, "obsolete": obsolete,
               "link_useful": link_useful},
        choices={"representation": {k: v / total for k, v in raw.items()}},
    )


def route(state: Mapping[str, Any]) -> Answer:
    q = _s(state, "question")
    names = len(set(Q_CAPS.findall(q[1:])))
    return Answer(nouls={
        "semantic": 0.85,
        "temporal": sigmoid(-1.5 + 3.5 * _hit(Q_TEMPORAL, q)),
        "causal": sigmoid(-2.0 + 3.5 * _hit(Q_CAUSAL, q)),
        "entity": sigmoid(-1.0 + 1.5 * min(names, 2)),
        "multi_hop": sigmoid(-1.2 + 2.0 * _hit(Q_MULTI, q) + 0.8 * max(0, names - 1)),
        "recency": sigmoid(-2.5 + 3.0 * _hit(Q_RECENCY, q)),
    })


def assess(state: Mapping[str, Any]) -> Answer:
    """Evidence state: best relevance, count of strong items, gain of the last round, round, h."""
    best, strong = _f(state, "best_relevance"), _f(state, "strong")
    gain, rnd, hop = _f(state, "last_gain"), _f(state, "round"), _f(state, "multi_hop")
    need = 1.0 + 2.0 * hop
    sufficient = sigmoid(10.0 * (best - 0.8)) * sigmoid(3.0 * (strong - need))
    return Answer(nouls={
        "sufficient": sufficient,
        "continue_useful": sigmoid(0.5 + 3.0 * gain + 1.5 * hop - 0.6 * rnd - 2.0 * sufficient),
        "missing": 1.0 - sufficient,
        "contradiction": sigmoid(-4.0 + 2.0 * _f(state, "negation_mix")),
    })


#: Relevance logit: bias, cosine placed within the anchor pool, query-token coverage, entity match,
#: fused-rank strength, BM25 (normalised by the best hit), temporal and causal answer cues, and
#: being the reply to a question turn that itself matches the query.
#: Hand-set, then checked on the dev conversations' overall recall only (never per question).
W_REL = (-3.5, 2.5, 1.6, 1.0, 1.5, 2.5, 0.6, 0.8, 1.5)


def score(state: Mapping[str, Any]) -> Answer:
    """Candidate features for a query: cosine, lexical (0..1), entity match, temporal match,
    anchor strength, the view and its route probability, novelty and support."""
    cos, lex, ent = _f(state, "cosine"), _f(state, "lexical"), _f(state, "entity")
    anchor, tmatch, bm25 = _f(state, "anchor"), _f(state, "temporal_match"), _f(state, "bm25")
    cmatch = _f(state, "route_causal") * _hit(CAUSE_ANSWER, _s(state, "memory"))
    rel_cos = _f(state, "cosine_in_pool", cos)
    relevance = sigmoid(W_REL[0] + W_REL[1] * rel_cos + W_REL[2] * lex + W_REL[3] * ent + W_REL[4] * anchor
                        + W_REL[5] * bm25 + W_REL[6] * tmatch + W_REL[7] * cmatch
                        + W_REL[8] * _f(state, "reply_to_match"))
    view = _s(state, "view")
    view_prior = {"anchor": 0.9, "temporal": 0.55, "semantic": 0.6, "entity": 0.5, "causal": 0.6}.get(view, 0.5)
    useful = sigmoid(math.log(view_prior / (1 - view_prior)) + 2.0 * (relevance - 0.5)
                     + 1.0 * _f(state, "neighbour_of_strong"))
    return Answer(nouls={
        "relevance": relevance,
        "relation_useful": useful,
        "new_information": max(0.0, min(1.0, 1.0 - _f(state, "max_evidence_cosine"))),
        "supports": max(0.0, min(1.0, _f(state, "support"))),
    })


_MODELS: dict[str, Callable[[Mapping[str, Any]], Answer]] = {
    "typing": typing, "relation": relation, "alias": alias, "consolidation": consolidation,
    "route": route, "assess": assess, "score": score,
}


class LocalSystemOne:
    """Offline default backend; answers a batch in-process, one call per ``ask``."""

    name = "local"

    async def ask(self, items: Sequence[Item]) -> list[Answer]:
        out = []
        for item in items:
            model = _MODELS.get(item.task.name)
            if model is None:
                raise SystemOneError(f"local backend has no model for task {item.task.name!r}")
            out.append(model(item.state))
        return out

    async def aclose(self) -> None:
        return None
