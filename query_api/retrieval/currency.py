"""What is still true: which memories of a pool a newer one superseded, as of a time.

A ``supersedes`` edge (temporal view, newer -> older) says that the newer memory replaced what the
older one stated (judged by System One when the newer one was written, and revised by
consolidation). For a question about the present, a superseded memory ranks below its
replacement; for a question about the past (the route's ``past``), it keeps its score. A query
``as_of`` a time sees only memories observed by then, and a memory superseded only later is
current as of then. Pure functions; the controller reads the edges and nodes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from topology.schemas import EdgeEvent, MemoryNode

SUPERSEDES = "supersedes"
"""The label of the edge from a newer memory to the one it supersedes."""


@dataclass(frozen=True)
class Superseded:
    """How a memory was superseded (as of the query's time): by which newer memories (their
    contents, oldest first), since when (the earliest of their observation times), and the
    strongest edge's probability."""

    by: tuple[str, ...]
    since: datetime | None
    probability: float
    #: the ids of the newer memories (same order as ``by``)
    by_ids: tuple[str, ...] = ()


def visible(node: MemoryNode, as_of: datetime | None) -> bool:
    """Whether ``node`` was observed by ``as_of`` (every node when None; a node without a time is
    always visible)."""
    return as_of is None or node.observed_at is None or node.observed_at <= as_of


def recallable(node: MemoryNode, as_of: datetime | None) -> bool:
    """Whether ``node`` may be a recall candidate: a memory (``MemoryNode.recall``), visible as of
    ``as_of``."""
    return node.recall and visible(node, as_of)


def superseded(edges: Iterable[EdgeEvent], newer: Mapping[str, MemoryNode],
               as_of: datetime | None) -> dict[str, Superseded]:
    """Per superseded memory id: what superseded it, from ``edges`` (those labelled
    :data:`SUPERSEDES` whose newer memory is in ``newer`` and visible as of ``as_of``)."""
    found: dict[str, list[tuple[MemoryNode, float]]] = {}
    for e in edges:
        n = newer.get(e.source)
        if e.label != SUPERSEDES or n is None or not visible(n, as_of):
            continue
        found.setdefault(e.target, []).append((n, e.probability))
    out = {}
    for old, items in found.items():
        items.sort(key=lambda np_: (np_[0].observed_at is None, np_[0].observed_at or datetime.min, np_[0].id))
        times = [n.observed_at for n, _ in items if n.observed_at is not None]
        out[old] = Superseded(by=tuple(dict.fromkeys(n.content for n, _ in items)), since=min(times, default=None),
                              probability=max(p for _, p in items), by_ids=tuple(dict.fromkeys(n.id for n, _ in items)))
    return out


#: A question is about the present when the route's ``recency`` is at least this ("now",
#: "currently", "these days", "still") and its ``past`` below :data:`PAST_BELOW`.
PRESENT_CUE = 0.5
PAST_BELOW = 0.5
#: How far below its lowest replacement a superseded memory is put (a fraction of that score).
BELOW_MARGIN = 1e-3


#: A question in the present tense ("Where does Ana work?", "Who is her manager?", a wh-word before
#: a verb in -s: "Who manages Ana?", "Which company employs her?") ...
PRESENT_TENSE = re.compile(r"\b(?:is|are|am|does|do|has|have|'s|'re)\b"
                           r"|^\W*(?:who|what|which|whose)\s+(?:\w+\s+)?(?!was\b)\w+[^\Ws]s\b", re.IGNORECASE)
#: ... and not in the past ("Where did she work?", "Who was her manager?").
PAST_TENSE = re.compile(r"\b(?:did|was|were|had|used to)\b", re.IGNORECASE)


#: A question that asks for a value ("Who is Ana's manager?", "Where does she live now?",
#: "Remind me, which car ...?"): it opens with who, whom, whose, what, which or where, after at
#: most a few words of address. "How often does ...", "Why did ..." and "When ..." ask something else.
ASKS_VALUE = re.compile(r"^\W*(?:[\w']+[ ,]+){0,3}?(?:who|whom|whose|what|what's|which|where)\b", re.IGNORECASE)


def asks_value(question: str) -> bool:
    """Whether ``question`` asks for the value of something (:data:`ASKS_VALUE`)."""
    return bool(ASKS_VALUE.match(question))


def about_the_present(route: Mapping[str, float], question: str) -> bool:
    """Whether ``question``, routed ``route``, asks what is true now: the route's ``past`` is
    under :data:`PAST_BELOW`, and its ``recency`` is at least :data:`PRESENT_CUE` ("now",
    "these days") or the question is in the present tense and not in the past. Otherwise a
    superseded memory only loses :func:`stale_factor`."""
    if route.get("past", 0.0) >= PAST_BELOW:
        return False
    return route.get("recency", 0.0) >= PRESENT_CUE or (bool(PRESENT_TENSE.search(question))
                                                        and not PAST_TENSE.search(question))


def own_updates(stale: Mapping[str, Superseded], nodes: Mapping[str, MemoryNode]) -> dict[str, Superseded]:
    """Those of ``stale`` whose replacements in ``nodes`` were all said by the replaced memory's
    own (named) speaker, keeping only those replacements: a person restating their own fact is
    what :func:`current_first` reorders; someone else's word only lowers a memory by
    :func:`stale_factor`."""
    out = {}
    for i, s in stale.items():
        speaker = nodes[i].speaker if i in nodes else None
        mine = tuple(j for j in s.by_ids if speaker and j in nodes and nodes[j].speaker == speaker)
        if mine:
            out[i] = Superseded(by=s.by, since=s.since, probability=s.probability, by_ids=mine)
    return out


def current_first(scores: Mapping[str, float], stale: Mapping[str, Superseded]) -> dict[str, float]:
    """``scores`` with each of ``stale``'s memories in ``scores`` put just below its replacements
    there, for a question about the present (:func:`about_the_present`): a replacement takes the
    score of what it replaced when that is higher (what answered the question then is answered by
    its replacement now), and the replaced memory goes :data:`BELOW_MARGIN` below its lowest
    replacement. A chain (a replacement replaced in turn) ranks newest first."""
    out = dict(scores)
    order = [i for i in sorted(stale) if i in out and any(j in out for j in stale[i].by_ids)]
    for _ in range(len(order) + 1):  # each pass settles one more link of the longest chain
        before = dict(out)
        for i in order:
            for j in stale[i].by_ids:
                if j in out:
                    out[j] = max(out[j], out[i])
        for i in order:
            low = min(out[j] for j in stale[i].by_ids if j in out)
            out[i] = min(out[i], low * (1.0 - BELOW_MARGIN))
        if out == before:
            break
    return out


def stale_factor(probability: float, past: float, weight: float) -> float:
    """The score multiplier of a superseded memory: ``1 - weight * probability * (1 - past)``
    (``past``: the route's probability that the question asks what was true before)."""
    return 1.0 - max(0.0, min(1.0, weight * probability * (1.0 - past)))


@dataclass(frozen=True)
class Statement:
    """A pool member as :func:`latest_first` reads it: its score, whether it is a statement of
    the asked person's own fact (said by them, about them), and when it was said (observation
    time, then its seq in its conversation)."""

    score: float
    own: bool
    said: tuple[datetime, int]


def latest_first(pool: Mapping[str, Statement], band: float) -> dict[str, float]:
    """For a question about the present naming a person: among that person's own statements
    (``own``), those scoring at least ``band`` times the best of them answer it about as well,
    and the latest of them says what is true now (a fact stated again, changed or not, is
    current as last said). Returns the scores of ``pool`` with that latest statement lifted
    to the best one's score and the best one put :data:`BELOW_MARGIN` below it; unchanged when
    the best is already the latest, when no statement is own, or when ``band`` is above 1."""
    found = said_after_best(pool, band)
    return judged_latest(pool, *found) if found is not None else {i: s.score for i, s in pool.items()}


def said_after_best(pool: Mapping[str, Statement], band: float) -> tuple[str, list[str]] | None:
    """The best of ``pool``'s own statements (highest score, then id) and those own statements
    said after it (by time, then id) scoring at least ``band`` times its score (in ``pool``
    order); None when no statement is own or none was said after the best in the band (always
    with ``band`` above 1)."""
    own = [i for i, s in pool.items() if s.own and s.score > 0.0]
    if not own:
        return None
    best = max(own, key=lambda i: (pool[i].score, i))
    top = pool[best]
    later = [i for i in own if (pool[i].said, i) > (top.said, best) and pool[i].score >= band * top.score]
    return (best, later) if later else None


def judged_latest(pool: Mapping[str, Statement], best: str, replacing: Iterable[str]) -> dict[str, float]:
    """The scores of ``pool`` with the latest of ``replacing`` (own statements judged to replace
    ``best``, said after it) lifted to ``best``'s score and ``best`` put :data:`BELOW_MARGIN`
    below it; unchanged when ``replacing`` is empty."""
    out = {i: s.score for i, s in pool.items()}
    found = [i for i in replacing if i in pool]
    if not found or best not in pool:
        return out
    latest = max(found, key=lambda i: (pool[i].said, i))
    top = pool[best].score
    out[latest] = max(top, out[latest])
    out[best] = top * (1.0 - BELOW_MARGIN)
    return out


def latest_about(pool: Mapping[str, Statement], about: Iterable[str], alone: bool = False) -> dict[str, float] | None:
    """For a question about the present that asks about one attribute of a person: ``about`` are
    the ids of the person's own statements (``own`` in ``pool``) read as about that attribute.
    The latest of them says what is true now, however its words score: it takes the best score
    of the person's own statements, and every other own statement scoring as high goes
    :data:`BELOW_MARGIN` below it. With ``alone``, it answers first of the whole pool instead
    (the best score of the pool; every other memory as high goes just below it: a look-alike
    about someone else, a reply naming the value), and one such statement is enough. Returns
    the scores of ``pool`` so changed, or None when fewer than two own statements (one with
    ``alone``) are about the attribute."""
    same = [i for i in dict.fromkeys(about) if i in pool and pool[i].own]
    if len(same) < (1 if alone else 2):
        return None
    out = {i: s.score for i, s in pool.items()}
    top = max(s.score for s in pool.values() if s.own or alone)
    latest = max(same, key=lambda i: (pool[i].said, i))
    below = top * (1.0 - BELOW_MARGIN)
    out[latest] = top
    for i, s in pool.items():
        if i != latest and s.score >= below and (s.own or alone):
            out[i] = below
    return out
