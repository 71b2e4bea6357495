"""Query-independent facts about a memory node that the read path derives again and again.

Every query scores up to ``limits.visited_nodes`` candidates, most of them the same nodes as the
previous query's: their embedding as a float64 row, their token sets, the lowercase names they
mention, whether they state a cause, ask a question or carry a negation. A node's row is its
retrieval vector (:meth:`~topology.schemas.MemoryNode.retrieval_vector`), what queries rank by. :class:`NodeInfoCache`
derives these once per version of a node and reuses them.

Contracts:

* A node comes with its vectors (``MemoryNode.embedding`` and ``context``) or without them and
  with its retrieval row given apart (``get(node, row)``: what :class:`storage.ports.NodeRows`
  reads); the row is the same either way.
* An entry is keyed by node id and valid only while the node's :func:`stamp` (every field the
  derivation reads, the retrieval row by its length and three of its values) is the one it was
  derived from: a rewritten node misses and is derived again, so a write or a forget never
  leaves a stale entry in use. Nodes are frozen, so the very object an entry was derived from
  is valid without comparing stamps (a row given apart is then the one it was derived with).
  Entries hold the node only weakly (with its embedding, a list of floats, about 12 KB).
* The row holds float32 values (:mod:`topology.vectors`); zeros when the node has no embedding.
* Memory is bounded: at most ``max_entries`` entries; the oldest are dropped first.
"""

from __future__ import annotations

import functools
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

import numpy as np

from topology import text
from topology.schemas import MemoryNode
from topology.systemone.folded import fold
from topology.systemone.local import CAUSE_ANSWER, NEGATION
from topology.systemone.turn_kinds import statement_within

#: Derived entries kept (about 3 KB each: the float32 row and the token sets).
MAX_ENTRIES = 8_192


@dataclass(frozen=True)
class NodeInfo:
    """What the read path needs of one node, whatever the question.

    ``names``: lowercase entity names, the speaker, and every raw word of the content (a question
    name matches a node when it is any of these); ``dates``: the grounded dates (temporal
    reference starts, then ends, then the event time)."""

    stamp: tuple[object, ...]
    content: str
    row: np.ndarray
    tokens: frozenset[str]
    names: frozenset[str]
    speaker: str | None
    causal: bool
    is_question: bool
    negated: bool
    has_temporal: bool
    dates: tuple[date, ...]
    length: float
    role: str = "user"
    #: ``states`` as the write path kept it (:attr:`topology.schemas.TypeScores.states`), or None
    stored_states: float | None = None

    @functools.cached_property
    def states(self) -> float:
        """The highest p(statement) of the turn's sentences and clauses read alone (0 for one part:
        :func:`~topology.systemone.turn_kinds.statement_within`): as the write path kept it for a
        memory of a user, else derived on first use, since only a recall reads it (about 1.5 ms
        for a long turn)."""
        if self.stored_states is not None:
            return self.stored_states
        return statement_within(self.content, self.role)

    @functools.cached_property
    def content_tokens(self) -> frozenset[str]:
        """The set of :func:`topology.text.tokens` of the content (the negation mix reads it for
        the few best candidates only, so it is derived on first use)."""
        return frozenset(text.tokens(self.content))


def _row(n: MemoryNode) -> np.ndarray:
    """The float32 retrieval row of a node that carries its vectors."""
    return np.array(n.retrieval_vector(), dtype=np.float32)


def stamp(n: MemoryNode, row: np.ndarray | None = None) -> tuple[object, ...]:
    """What :func:`derive` reads of ``n`` (``row``: its retrieval row when given apart): two
    nodes with equal stamps give equal infos."""
    if row is None and n.embedding:
        row = _row(n)
    emb = (len(row), float(row[0]), float(row[len(row) // 2]), float(row[-1])) if row is not None and row.any() else None
    return (n.content, n.speaker, n.role, n.event_time, tuple(n.tokens), tuple(x.id for x in n.entities),
            tuple(n.temporal_refs), emb)


def derive(n: MemoryNode, dim: int, row: np.ndarray | None = None) -> NodeInfo:
    """The :class:`NodeInfo` of ``n`` (rows of width ``dim``; ``row``: the retrieval row of a
    node read without its vectors, float32)."""
    # retrieval rows are float32-exact: matrix() gives them as float64
    if n.embedding:
        row = _row(n)
    elif row is None:
        row = np.zeros(dim, dtype=np.float32)
    names = {e.name.lower() for e in n.entities} | ({n.speaker.lower()} if n.speaker else set())
    names |= set(text.tokens_raw(n.content))
    dates = [r.start for r in n.temporal_refs] + [r.end for r in n.temporal_refs]
    if n.event_time is not None:
        dates.append(n.event_time)
    folded = fold(n.content)  # what the case-insensitive cues read
    return NodeInfo(
        stamp=stamp(n, row), content=n.content, row=row, tokens=frozenset(n.tokens), names=frozenset(names),
        speaker=n.speaker.lower() if n.speaker else None, causal=bool(CAUSE_ANSWER.search(folded)),
        is_question=n.content.rstrip().endswith("?"), negated=bool(NEGATION.search(folded)),
        has_temporal=bool(n.temporal_refs), dates=tuple(dates), length=min(1.0, len(n.tokens) / 30), role=n.role,
        stored_states=n.types.states)


class NodeInfoCache:
    """Node id -> :class:`NodeInfo`, valid for the node version it was derived from (see module)."""

    def __init__(self, dim: int, max_entries: int = MAX_ENTRIES) -> None:
        self.dim = dim
        self._max = max_entries
        self._entries: OrderedDict[str, tuple[NodeInfo, weakref.ref[MemoryNode]]] = OrderedDict()

    def get(self, n: MemoryNode, row: np.ndarray | None = None) -> NodeInfo:
        """The info of ``n`` (``row``: its float32 retrieval row when ``n`` comes without it), derived
        now unless this version of it was seen before."""
        entry = self._entries.get(n.id)
        if entry is not None:
            info, source = entry
            if source() is n or info.stamp == stamp(n, row):
                return info
        info = derive(n, self.dim, row)
        self._entries[n.id] = (info, weakref.ref(n))
        self._entries.move_to_end(n.id)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)
        return info

    def __len__(self) -> int:
        return len(self._entries)


def matrix(infos: Sequence[NodeInfo], dim: int) -> np.ndarray:
    """The infos' embedding rows as one C-ordered float64 matrix."""
    if not infos:
        return np.zeros((0, dim), dtype=np.float64)
    return np.array([i.row for i in infos], dtype=np.float64)
