"""Pure feature arithmetic of the read path: what the controller tells System One about a candidate.

Nothing here reads a store or a label: inputs are the question, the candidate node, the query's
retrieval state (anchor strengths, BM25, ranks, cosines) and the edges the controller examined.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import date

import numpy as np

from topology import text
from topology.schemas import EdgeEvent, MemoryNode
from topology.systemone.features import SCORE_FEATURES, ScoreFeatures

_YEAR = re.compile(r"\b(19\d{2}|20\d{2}|21\d{2})\b")
_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}


@dataclass
class GraphView:
    """Edges examined so far in a query, by node: ``(other id, view, probability, label)``."""

    adj: dict[str, list[tuple[str, str, float, str]]] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)

    def add(self, edges: Sequence[EdgeEvent]) -> None:
        """Record edges (each once, whatever its direction)."""
        seen, adj = self.seen, self.adj
        for e in edges:
            eid = e.id
            if eid in seen:
                continue
            seen.add(eid)
            source, target, view, p, label = e.source, e.target, e.view, e.probability, e.label
            got = adj.get(source)
            if got is None:
                got = adj[source] = []
            got.append((target, view, p, label))
            got = adj.get(target)
            if got is None:
                got = adj[target] = []
            got.append((source, view, p, label))


def question_dates(question: str) -> tuple[set[int], set[int]]:
    """(years, months) the question names explicitly ("in May 2023" -> ({2023}, {5}))."""
    years = {int(y) for y in _YEAR.findall(question)}
    months = {_MONTHS[w] for w in re.findall(r"[a-z]+", question.lower()) if w in _MONTHS and w != "may"}
    if re.search(r"\bMay\b", question):  # "may" is a verb unless capitalised mid-sentence
        months.add(5)
    return years, months


def date_match(node: MemoryNode, years: set[int], months: set[int]) -> float:
    """1 when a grounded event date of the node (its temporal references, else its event time)
    falls in a year/month the question names; 0 when the question names none."""
    dates = [r.start for r in node.temporal_refs] + [r.end for r in node.temporal_refs]
    if node.event_time is not None:
        dates.append(node.event_time)
    return date_match_dates(dates, years, months)


def date_match_dates(dates: Iterable[date], years: set[int], months: set[int]) -> float:
    """:func:`date_match` over a node's grounded dates (reference starts, ends, event time)."""
    if not years and not months:
        return 0.0
    for d in dates:
        if (not years or d.year in years) and (not months or d.month in months):
            return 1.0
    return 0.0


#: The graph features of a node without examined edges to the pool (:data:`GRAPH_FEATURES` order).
NO_GRAPH: tuple[float, ...] = (0.0,) * 7
GRAPH_FEATURES = ("graph_degree", "graph_anchor", "graph_cosine", "graph_relevance", "adjacent_anchor",
                  "entity_neighbours", "semantic_neighbours")


def graph_features(node_id: str, graph: GraphView, pool: Mapping[str, float],
                   cos_in_pool: Mapping[str, float], relevance: Mapping[str, float]) -> dict[str, float]:
    """Features of a pool node from the examined edges to other pool nodes.

    ``pool`` maps pool node ids to their anchor strength (0 for expanded nodes), ``cos_in_pool``
    to their question cosine placed in the anchor range and ``relevance`` to the relevance System
    One gave them in the previous scoring (propagated along edges). All 0 without edges."""
    return dict(zip(GRAPH_FEATURES, graph_row(node_id, graph, pool_view(pool, cos_in_pool, relevance)), strict=True))


def pool_view(pool: Mapping[str, float], cos_in_pool: Mapping[str, float],
              relevance: Mapping[str, float]) -> dict[str, tuple[float, float, float]]:
    """Per pool node, what :func:`graph_row` reads of it: (anchor strength, question cosine in
    the anchor range clipped to [0, 1], last relevance); built once per scoring round."""
    return {i: (strength, max(0.0, min(1.0, cos_in_pool.get(i, 0.0))), relevance.get(i, 0.0))
            for i, strength in pool.items()}


def graph_row(node_id: str, graph: GraphView, pool: Mapping[str, tuple[float, float, float]]) -> tuple[float, ...]:
    """:func:`graph_features` as a tuple in :data:`GRAPH_FEATURES` order, over :func:`pool_view`
    (not rounded: :meth:`ScoreRow.of` rounds)."""
    degree = 0
    g_anchor = g_cos = adjacent = g_rel = 0.0
    entity = semantic = 0
    for other, view, p, label in graph.adj.get(node_id, ()):
        got = pool.get(other)
        if got is None or other == node_id:
            continue
        strength, cos, rel = got
        degree += 1
        # running maxima (comparisons rather than max(): the hot loop of every scoring round)
        if p * strength > g_anchor:
            g_anchor = p * strength
        if p * cos > g_cos:
            g_cos = p * cos
        if p * rel > g_rel:
            g_rel = p * rel
        if label == "next" and strength > adjacent:
            adjacent = strength
        if strength > 0.5:
            if view == "entity":
                entity += 1
            elif view == "semantic":
                semantic += 1
    return (min(1.0, degree / 10), g_anchor, g_cos, g_rel, adjacent, min(1.0, entity / 5), min(1.0, semantic / 5))


def rank_scores(ids: Sequence[str]) -> dict[str, float]:
    """Rank-based strength of a result list: 10 / (10 + rank), ranks from 0."""
    return {i: 10.0 / (10.0 + r) for r, i in enumerate(ids)}


def negation_mix(texts: Sequence[str], negated: Sequence[bool]) -> float:
    """Fraction of pairs of ``texts`` that share a content word while exactly one is negated."""
    return negation_mix_sets([set(text.tokens(t)) for t in texts], negated)


def negation_mix_sets(toks: Sequence[AbstractSet[str]], negated: Sequence[bool]) -> float:
    """:func:`negation_mix` over the texts' content-token sets (:func:`topology.text.tokens`)."""
    pairs = mixed = 0
    for i in range(len(toks)):
        for j in range(i + 1, len(toks)):
            if toks[i] & toks[j]:
                pairs += 1
                mixed += negated[i] != negated[j]
    return mixed / pairs if pairs else 0.0


#: Decimals of a rounded score feature: what a state's JSON carries, so the in-process matrix and a
#: remote backend see the same numbers.
DECIMALS = 6
#: Score features passed on exactly: flags (0/1), counts scaled to [0, 1] and the length fraction
#: (rounding them would change the learned model's inputs).
EXACT = frozenset({"speaker_match", "date_match", "is_question", "expanded", "graph_degree", "entity_neighbours",
                   "semantic_neighbours", "length"})


class ScoreRow(ScoreFeatures):
    """One retrieval candidate's numeric score features: a
    :class:`~topology.systemone.features.ScoreFeatures` (its fields, in its order: what the
    learned scorer reads) holding rounded values. Build one with :meth:`of`, or many from
    columns with :meth:`rows`; both round every feature but the :data:`EXACT` ones (values
    given positionally, e.g. to ``_make``, must be rounded the same way: :func:`rounded`)."""

    __slots__ = ()

    @classmethod
    def of(cls, features: Mapping[str, float]) -> ScoreRow:
        """The row of ``features`` (every field by name, no other), rounded to :data:`DECIMALS`
        but for :data:`EXACT`."""
        _same_names(features)
        return cls._make(rounded(k, features[k]) for k in SCORE_FEATURES)

    @classmethod
    def rows(cls, columns: Mapping[str, Sequence[float]]) -> list[ScoreRow]:
        """One row per position of ``columns`` (every field by name, no other, each a column of
        the same length), the values taken as given: already rounded as :meth:`of` rounds."""
        _same_names(columns)
        return [cls._make(r) for r in zip(*(columns[k] for k in SCORE_FEATURES), strict=True)]

    def values(self) -> list[float]:
        """The features in :data:`SCORE_FEATURES` order."""
        return list(self)

    def as_dict(self) -> dict[str, float]:
        """Feature name -> value (the numeric fields of a ``ScoreState``)."""
        return dict(zip(SCORE_FEATURES, self, strict=True))


def _same_names(features: Mapping[str, object]) -> None:
    if features.keys() != _FEATURE_SET:
        raise ValueError(f"score features differ: {sorted(features.keys() ^ _FEATURE_SET)}")


_FEATURE_SET = frozenset(SCORE_FEATURES)


def rounded(name: str, value: float) -> float:
    """``value`` as the score feature ``name`` carries it: rounded to :data:`DECIMALS` unless
    ``name`` is :data:`EXACT`."""
    return value if name in EXACT else round(value, DECIMALS)


#: Beyond this magnitude a scaled value's product may be off by more than the tie margin.
_EXACT_LIMIT = 1e9


def round_exact(a: np.ndarray, decimals: int = DECIMALS) -> np.ndarray:
    """Python's ``round(x, decimals)`` of every element of a float64 array, bit for bit.

    ``rint(x * 10**decimals) / 10**decimals``: the product errs by at most half an ulp (under
    1e-7 below :data:`_EXACT_LIMIT`), so away from a tie (a fractional part within 1e-6 of 0.5)
    it rounds to the integer ``k`` that the exact value rounds to, and the division by the exact
    power of ten is the double nearest ``k / 10**decimals``: what ``round`` returns. Elements near
    a tie, large or not finite are rounded by ``round`` itself."""
    scale = 10.0 ** decimals
    p = a * scale
    out: np.ndarray = np.rint(p) / scale
    with np.errstate(invalid="ignore"):
        risky = ~(np.abs(p) < _EXACT_LIMIT) | (np.abs(np.abs(p - np.trunc(p)) - 0.5) < 1e-6)
    if risky.any():
        flat_in, flat_out = a.reshape(-1), out.reshape(-1)
        for i in np.flatnonzero(risky.reshape(-1)).tolist():
            flat_out[i] = round(float(flat_in[i]), decimals)
    return out
