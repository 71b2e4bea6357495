"""Pure feature arithmetic of the read path: what the controller tells System One about a candidate.

Nothing here reads a store or a label: inputs are the question, the candidate node, the query's
retrieval state (anchor strengths, BM25, ranks, cosines) and the edges the controller examined.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from topology import text
from topology.schemas import EdgeEvent, MemoryNode

_YEAR = re.compile(r"\b(19\d{2}|20\d{2}|21\d{2})\b")
_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}


@dataclass
class GraphView:
    """Edges examined so far in a query, by node: ``(other id, view, probability, label)``."""

    adj: dict[str, list[tuple[str, str, float, str]]] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)

    def add(self, edges: Sequence[EdgeEvent]) -> None:
        """Record edges (each once, whatever its direction)."""
        for e in edges:
            if e.id in self.seen:
                continue
            self.seen.add(e.id)
            self.adj.setdefault(e.source, []).append((e.target, e.view, e.probability, e.label))
            self.adj.setdefault(e.target, []).append((e.source, e.view, e.probability, e.label))


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
    if not years and not months:
        return 0.0
    dates = [r.start for r in node.temporal_refs] + [r.end for r in node.temporal_refs]
    if node.event_time is not None:
        dates.append(node.event_time)
    for d in dates:
        if (not years or d.year in years) and (not months or d.month in months):
            return 1.0
    return 0.0


def graph_features(node_id: str, graph: GraphView, pool: Mapping[str, float],
                   cos_in_pool: Mapping[str, float], relevance: Mapping[str, float]) -> dict[str, float]:
    """Features of a pool node from the examined edges to other pool nodes.

    ``pool`` maps pool node ids to their anchor strength (0 for expanded nodes), ``cos_in_pool``
    to their question cosine placed in the anchor range and ``relevance`` to the relevance System
    One gave them in the previous scoring (propagated along edges). All 0 without edges."""
    degree = 0
    g_anchor = g_cos = adjacent = g_rel = 0.0
    entity = semantic = 0
    for other, view, p, label in graph.adj.get(node_id, ()):
        if other not in pool or other == node_id:
            continue
        degree += 1
        strength = pool[other]
        g_anchor = max(g_anchor, p * strength)
        g_cos = max(g_cos, p * max(0.0, min(1.0, cos_in_pool.get(other, 0.0))))
        g_rel = max(g_rel, p * relevance.get(other, 0.0))
        if label == "next":
            adjacent = max(adjacent, strength)
        if view == "entity" and strength > 0.5:
            entity += 1
        if view == "semantic" and strength > 0.5:
            semantic += 1
    return {"graph_degree": min(1.0, degree / 10), "graph_anchor": round(g_anchor, 6), "graph_cosine": round(g_cos, 6),
            "graph_relevance": round(g_rel, 6),
            "adjacent_anchor": round(adjacent, 6), "entity_neighbours": min(1.0, entity / 5),
            "semantic_neighbours": min(1.0, semantic / 5)}


def rank_scores(ids: Sequence[str]) -> dict[str, float]:
    """Rank-based strength of a result list: 10 / (10 + rank), ranks from 0."""
    return {i: 10.0 / (10.0 + r) for r, i in enumerate(ids)}


def negation_mix(texts: Sequence[str], negated: Sequence[bool]) -> float:
    """Fraction of pairs of ``texts`` that share a content word while exactly one is negated."""
    toks = [set(text.tokens(t)) for t in texts]
    pairs = mixed = 0
    for i in range(len(texts)):
        for j in range(i + 1, len(texts)):
            if toks[i] & toks[j]:
                pairs += 1
                mixed += negated[i] != negated[j]
    return mixed / pairs if pairs else 0.0
