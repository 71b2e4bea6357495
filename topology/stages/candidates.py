"""Candidate discovery: up to K_w earlier memories of the same conversation, no controller.

The pool is the union of four retrievals through :class:`MemoryReader` (vector, lexical overlap,
shared entities, temporal proximity), all restricted to earlier nodes; ranking is the pure
:func:`rank` so the result does not depend on batching or on store internals.
"""

from __future__ import annotations

from collections.abc import Sequence

from topology.ports import MemoryReader
from topology.schemas import Candidate, CandidateFeatures, CandidateSet, MemoryNode

#: Weights of the candidate score: meaning first, then words, entities and nearness in time.
W_COSINE, W_LEXICAL, W_ENTITY, W_TEMPORAL = 0.5, 0.2, 0.15, 0.15
#: Each retrieval contributes this many ids to the pool.
POOL_PER_SOURCE = 20
#: Temporal proximity halves after this many turns.
TURN_HALF_LIFE = 3.0
#: ... and after this many days of event-time difference.
DAY_HALF_LIFE = 7.0


def cosine(a: Sequence[float] | None, b: Sequence[float] | None) -> float:
    if not a or not b:
        return 0.0
    return float(sum(x * y for x, y in zip(a, b, strict=True)))


def dice(a: Sequence[str], b: Sequence[str]) -> float:
    sa, sb = set(a), set(b)
    if not sa or not sb:
        return 0.0
    return 2.0 * len(sa & sb) / (len(sa) + len(sb))


def jaccard(a: set[str], b: set[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def features(node: MemoryNode, other: MemoryNode) -> CandidateFeatures:
    gap = abs(node.seq - other.seq)
    temporal = 1.0 / (1.0 + max(0, gap - 1) / TURN_HALF_LIFE)
    if node.event_time and other.event_time:
        days = abs((node.event_time - other.event_time).days)
        temporal = 0.5 * temporal + 0.5 / (1.0 + days / DAY_HALF_LIFE)
    return CandidateFeatures(
        cosine=round(cosine(node.embedding, other.embedding), 6),
        lexical=round(dice(node.tokens, other.tokens), 6),
        entity=round(jaccard({e.id for e in node.entities}, {e.id for e in other.entities}), 6),
        temporal=round(temporal, 6),
    )


def rank(node: MemoryNode, pool: Sequence[MemoryNode], k: int) -> list[Candidate]:
    """Top-``k`` earlier nodes of ``pool`` by the weighted feature score (ties: later first)."""
    scored = []
    for other in pool:
        if other.id == node.id or other.seq >= node.seq or other.scope != node.scope:
            continue
        f = features(node, other)
        s = W_COSINE * f.cosine + W_LEXICAL * f.lexical + W_ENTITY * f.entity + W_TEMPORAL * f.temporal
        scored.append(Candidate(node_id=other.id, seq=other.seq, score=round(s, 6), features=f))
    scored.sort(key=lambda c: (-c.score, -c.seq))
    return scored[:k]


async def discover(node: MemoryNode, reader: MemoryReader, k: int) -> CandidateSet:
    """Gather the pool through ``reader`` (earlier nodes only) and rank it."""
    scope, before = node.scope, node.seq
    ids: dict[str, None] = {}
    if node.embedding:
        ids.update(dict.fromkeys(await reader.similar_before(scope, node.embedding, before, POOL_PER_SOURCE)))
    if node.tokens:
        ids.update(dict.fromkeys(await reader.overlapping_before(scope, node.tokens, before, POOL_PER_SOURCE)))
    if node.entities:
        ent = [e.id for e in node.entities]
        ids.update(dict.fromkeys(await reader.sharing_entities_before(scope, ent, before, POOL_PER_SOURCE)))
    ids.update(dict.fromkeys(await reader.preceding(scope, before, 3)))
    pool = await reader.get_nodes(scope, sorted(ids))
    return CandidateSet(node=node, candidates=rank(node, pool, k))
