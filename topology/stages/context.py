"""Context vectors: each turn embedded after the turn before it in its sitting.

The read path ranks a turn by the mean of its embedding and this vector (:mod:`topology.vectors`);
the graph is built from the embedding alone. A turn has a context vector when the observation
right before it (seq - 1) is in the same sitting (:func:`in_sitting`); the text embedded is the
earlier turn's :func:`~topology.stages.memory_nodes.embedding_text`, at most :data:`BEFORE_CHARS`
characters of its end, then the turn's own. Pure, but for the one embedding call of
:func:`contexts`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from topology.ports import Embedder
from topology.schemas import MemoryNode, Scope
from topology.stages.memory_nodes import embed_texts, embedding_text
from topology.stages.relations import next_probability
from topology.vectors import half

#: How much of the earlier turn goes before a turn (its end: what the turn answers). A turn's
#: own text is never cut for it, so the model's 512-token window holds both.
BEFORE_CHARS = 600


def in_sitting(before: MemoryNode, node: MemoryNode) -> bool:
    """``before`` is the observation right before ``node`` in its conversation, said in the same
    sitting: no pause of :data:`~topology.stages.relations.NEXT_PAUSE_HOURS` or an unknown time
    between them (what makes their ``next`` edge certain)."""
    return (before.kind == "observation" and node.kind == "observation" and before.scope == node.scope
            and before.seq == node.seq - 1 and next_probability(before, node) == 1.0)


def context_text(before: MemoryNode, node: MemoryNode) -> str:
    """What is embedded as ``node``'s context vector."""
    return f"{embedding_text(before.speaker, before.content)[-BEFORE_CHARS:]} {embedding_text(node.speaker, node.content)}"


def wanted(nodes: Sequence[MemoryNode]) -> dict[Scope, list[int]]:
    """Per scope, the seqs of the turns right before ``nodes``' observations that are not among
    ``nodes`` (what the caller reads from the store)."""
    have = {(n.scope, n.seq) for n in nodes}
    out: dict[Scope, list[int]] = {}
    for n in nodes:
        if n.kind == "observation" and n.seq > 0 and (n.scope, n.seq - 1) not in have:
            out.setdefault(n.scope, []).append(n.seq - 1)
    return out


async def contexts(nodes: Sequence[MemoryNode], earlier: Mapping[tuple[Scope, int], MemoryNode],
                   embedder: Embedder) -> list[list[float] | None]:
    """The context vector of each of ``nodes`` (same order; one embedding call for all of them);
    the turn before each is found among ``nodes`` or in ``earlier`` (by scope and seq). A node
    whose turn before is missing or in another sitting gets None. Vectors are kept at half
    precision (:func:`half`)."""
    by_seq = {**earlier, **{(n.scope, n.seq): n for n in nodes}}
    pairs = [(i, before) for i, n in enumerate(nodes)
             if (before := by_seq.get((n.scope, n.seq - 1))) is not None and in_sitting(before, n)]
    vectors = await embed_texts([context_text(before, nodes[i]) for i, before in pairs], embedder)
    out: list[list[float] | None] = [None] * len(nodes)
    for (i, _), vec in zip(pairs, vectors, strict=True):
        out[i] = half(vec)
    return out
