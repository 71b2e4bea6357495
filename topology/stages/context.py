"""One pass per turn: each turn embedded after the turn before it in its sitting.

A turn's embedding is the turn read after the end of the turn before it (the embedder's
``embed_after``: for the in-process models, the token states of the turn's own tokens averaged
over one pass of ``passage: <before> <turn>``, :mod:`topology.embedding`), so "Yes, last Friday"
is described in its place after "Did you go to the support group?". That one vector is the
node's ``embedding`` for retrieval, candidate discovery, the relation judge and consolidation.

The turn before a turn is the *latest earlier observation* of its conversation (by seq; a
forgotten turn is not there, so after a forget the turn before it takes its place), and it is
read only when both were said in one sitting (:func:`in_sitting`) and both are short
(:func:`self_contained`: a short reply to a short turn); the node records whose text it was read
after (``MemoryNode.after``). A turn that opens a sitting, a turn of :data:`SELF_CONTAINED_WORDS`
words or more, a turn after such a turn, and every derived node, is embedded alone. The text read
before a turn is the earlier turn's :func:`~topology.stages.memory_nodes.embedding_text`, at most
:data:`BEFORE_CHARS` characters of its end. Pure, but for the one embedding call of :func:`embed`.

Contracts: the vector of a turn depends only on its text and on the latest earlier observation
stored or written with it, never on batching (embedders run each text on its own); a rebuild
from the observations, and a forget that re-embeds the turn after the forgotten one
(``streams.forget``), compute it from the same two texts, so bit for bit the same vector.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Mapping, Sequence

from topology.ports import Embedder
from topology.schemas import MemoryNode, Observation
from topology.stages.memory_nodes import describe, embedding_text
from topology.stages.relations import next_probability

#: How much of the earlier turn is read before a turn (its end: what the turn answers). A turn's
#: own text is never cut for it, so the model's 512-token window holds both.
BEFORE_CHARS = 600
#: A turn of at least this many words is read alone, and so is the turn after it: the turn before
#: tells what a short turn means ("Yes, last Friday" after "Did you go to the support group?"),
#: while a long turn says what it means itself, and a short turn read after a long one drifts
#: towards that turn's topic (a user's new request after the end of an assistant's long answer).
SELF_CONTAINED_WORDS = 48


def self_contained(node: MemoryNode) -> bool:
    """Whether ``node``'s text is long enough to be read alone (:data:`SELF_CONTAINED_WORDS`)."""
    return len(node.content.split()) >= SELF_CONTAINED_WORDS


def in_sitting(before: MemoryNode, node: MemoryNode) -> bool:
    """``before``, an earlier observation of ``node``'s conversation, was said in the same
    sitting: no pause of :data:`~topology.stages.relations.NEXT_PAUSE_HOURS` or an unknown time
    between them (what makes a ``next`` edge certain)."""
    return (before.kind == "observation" and node.kind == "observation" and before.scope == node.scope
            and before.seq < node.seq and next_probability(before, node) == 1.0)


def before_text(before: MemoryNode) -> str:
    """What is read before the turn after ``before``: the end of its embedding text."""
    return embedding_text(before.speaker, before.content)[-BEFORE_CHARS:]


def latest_before(nodes: Sequence[MemoryNode]) -> dict[str, MemoryNode]:
    """For each observation of ``nodes``, by id, the latest observation of ``nodes`` earlier in
    its conversation (by seq), where there is one."""
    out: dict[str, MemoryNode] = {}
    last: dict[str, MemoryNode] = {}
    for n in sorted((n for n in nodes if n.kind == "observation"), key=lambda n: (n.scope.key, n.seq)):
        prev = last.get(n.scope.key)
        if prev is not None and prev.seq < n.seq:
            out[n.id] = prev
        last[n.scope.key] = n
    return out


class Numbered:
    """A numbered batch's observations by conversation and seq: where the turn before a turn of
    the batch is found when it is in the batch (described only when asked for)."""

    def __init__(self, numbered: Sequence[tuple[Observation, int]]) -> None:
        by: dict[str, list[tuple[int, Observation]]] = {}
        for o, seq in numbered:
            by.setdefault(o.scope.key, []).append((seq, o))
        self._seqs = {k: sorted(v, key=lambda p: p[0]) for k, v in by.items()}
        self._keys = {k: [seq for seq, _ in v] for k, v in self._seqs.items()}

    def before(self, node: MemoryNode) -> MemoryNode | None:
        """The latest observation of the batch earlier than ``node`` in its conversation, or None."""
        seqs = self._keys.get(node.scope.key, [])
        i = bisect.bisect_left(seqs, node.seq)
        if i == 0:
            return None
        seq, o = self._seqs[node.scope.key][i - 1]
        return describe(o, seq)


def needs_store(node: MemoryNode, found: MemoryNode | None) -> bool:
    """Whether the turn before ``node`` may be stored rather than ``found`` (the latest earlier
    observation written with it): an observation past seq 0 whose seq - 1 was not found."""
    return node.kind == "observation" and node.seq > 0 and (found is None or found.seq != node.seq - 1)


def later(a: MemoryNode | None, b: MemoryNode | None) -> MemoryNode | None:
    """The later (by seq) of two candidates for the turn before a turn."""
    if a is None or b is None:
        return a or b
    return a if a.seq >= b.seq else b


def pairs(nodes: Sequence[MemoryNode], before: Mapping[str, MemoryNode]) -> list[tuple[MemoryNode | None, str]]:
    """For each of ``nodes``, the turn it is read after (None: alone) and its own text."""
    out: list[tuple[MemoryNode | None, str]] = []
    for n in nodes:
        b = before.get(n.id)
        read_after = b is not None and in_sitting(b, n) and not self_contained(n) and not self_contained(b)
        out.append((b if read_after else None, embedding_text(n.speaker, n.content)))
    return out


async def embed(nodes: Sequence[MemoryNode], before: Mapping[str, MemoryNode], embedder: Embedder) -> list[MemoryNode]:
    """``nodes`` with their embeddings (one embedding call, off the event loop): each read after
    ``before[node.id]``, the latest earlier observation of its conversation, when both are of one
    sitting (``after`` names it), else alone (``after`` None)."""
    if not nodes:
        return []
    got = pairs(nodes, before)
    vectors = await asyncio.to_thread(embedder.embed_after, [(None if b is None else before_text(b), t) for b, t in got])
    return [n.model_copy(update={"embedding": v, "after": None if b is None else b.id})
            for n, (b, _), v in zip(nodes, got, vectors, strict=True)]
