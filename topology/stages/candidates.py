"""Candidate discovery: up to K_w earlier memories of the same conversation, no controller.

The pool is the union of four retrievals through :class:`MemoryReader` (vector, lexical overlap,
shared entities, temporal proximity), all restricted to earlier nodes; ranking is the pure
:func:`rank` so the result does not depend on batching or on store internals.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from collections.abc import Set as AbstractSet

import numpy as np

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
    return float(np.dot(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)))


def matrix(vectors: Sequence[Sequence[float] | None], dim: int) -> np.ndarray:
    """Rows of ``vectors`` as a float64 matrix; a missing vector is a zero row (cosine 0)."""
    out = np.zeros((len(vectors), dim), dtype=np.float64)
    for i, v in enumerate(vectors):
        if v:
            out[i] = v
    return out


def dice(a: AbstractSet[str], b: AbstractSet[str]) -> float:
    """Dice coefficient of the sets ``a`` and ``b`` (0 when either is empty)."""
    if not a or not b:
        return 0.0
    return 2.0 * len(a & b) / (len(a) + len(b))


def jaccard(a: AbstractSet[str], b: AbstractSet[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


#: A node's (token set, entity id set), by node id, shared by the pairs of one discovery call.
SetCache = dict[str, tuple[frozenset[str], frozenset[str]]]


def _sets(n: MemoryNode, cache: SetCache | None) -> tuple[frozenset[str], frozenset[str]]:
    if cache is not None and (hit := cache.get(n.id)) is not None:
        return hit
    out = (frozenset(n.tokens), frozenset(e.id for e in n.entities))
    if cache is not None:
        cache[n.id] = out
    return out


def _feature_values(node: MemoryNode, other: MemoryNode, cos: float,
                    cache: SetCache | None = None) -> tuple[float, float, float, float]:
    """(cosine, lexical, entity, temporal), each rounded to 6 decimals. ``cache`` keeps each
    node's token and entity sets across the pairs of one call (a pool node meets many new nodes)."""
    gap = abs(node.seq - other.seq)
    temporal = 1.0 / (1.0 + max(0, gap - 1) / TURN_HALF_LIFE)
    if node.event_time and other.event_time:
        days = abs((node.event_time - other.event_time).days)
        temporal = 0.5 * temporal + 0.5 / (1.0 + days / DAY_HALF_LIFE)
    (tok_a, ent_a), (tok_b, ent_b) = _sets(node, cache), _sets(other, cache)
    return round(cos, 6), round(dice(tok_a, tok_b), 6), round(jaccard(ent_a, ent_b), 6), round(temporal, 6)


def features(node: MemoryNode, other: MemoryNode, cos: float | None = None) -> CandidateFeatures:
    """Pair features; ``cos`` is the precomputed cosine of the two embeddings, when known."""
    c, lex, ent, tmp = _feature_values(node, other, cosine(node.embedding, other.embedding) if cos is None else cos)
    return CandidateFeatures(cosine=c, lexical=lex, entity=ent, temporal=tmp)


def rank(node: MemoryNode, pool: Sequence[MemoryNode], k: int,
         cosines: dict[str, float] | None = None, cache: SetCache | None = None) -> list[Candidate]:
    """Top-``k`` earlier nodes of ``pool`` by the weighted feature score (ties: later first); the
    immediately preceding node (seq - 1), when in ``pool``, is always among them (last place).
    ``cosines`` (pool node id -> cosine to ``node``) saves recomputing them when given; ``cache``
    shares token and entity sets between calls (see :func:`_feature_values`)."""
    earlier = [o for o in pool if o.id != node.id and o.seq < node.seq
               and o.tenant_id == node.tenant_id and o.conversation_id == node.conversation_id]
    if not earlier:
        return []
    if cosines is not None:
        cos = [cosines.get(o.id, 0.0) for o in earlier]
    elif node.embedding:
        cos = (matrix([o.embedding for o in earlier], len(node.embedding)) @ np.asarray(node.embedding)).tolist()
    else:
        cos = [0.0] * len(earlier)
    scored = []
    for other, c in zip(earlier, cos, strict=True):
        f = _feature_values(node, other, c, cache)
        s = W_COSINE * f[0] + W_LEXICAL * f[1] + W_ENTITY * f[2] + W_TEMPORAL * f[3]
        scored.append((-round(s, 6), -other.seq, other, f))
    scored.sort(key=lambda t: (t[0], t[1]))
    top = scored[:k]
    # the immediately preceding turn always takes part (it becomes the "next" temporal edge)
    prev = next((t for t in scored[k:] if t[2].seq == node.seq - 1), None)
    if prev is not None and k > 0:
        top = [*top[: k - 1], prev]
    return [Candidate(node_id=o.id, seq=o.seq, score=-neg, features=CandidateFeatures(
        cosine=f[0], lexical=f[1], entity=f[2], temporal=f[3])) for neg, _, o, f in top]


async def _non_vector_pool(n: MemoryNode, reader: MemoryReader) -> list[str]:
    """The node's lexical, entity and temporal pool sources (earlier nodes only), in this order."""
    scope, out = n.scope, []
    if n.tokens:
        out += await reader.overlapping_before(scope, n.tokens, n.seq, POOL_PER_SOURCE)
    if n.entities:
        out += await reader.sharing_entities_before(scope, [e.id for e in n.entities], n.seq, POOL_PER_SOURCE)
    return out + await reader.preceding(scope, n.seq, 3)


async def discover(node: MemoryNode, reader: MemoryReader, k: int) -> CandidateSet:
    """Gather the pool through ``reader`` (earlier nodes only) and rank it."""
    scope = node.scope
    ids: dict[str, None] = {}
    if node.embedding:
        ids.update(dict.fromkeys(await reader.similar_before(scope, node.embedding, node.seq, POOL_PER_SOURCE)))
    ids.update(dict.fromkeys(await _non_vector_pool(node, reader)))
    pool = await reader.get_nodes(scope, sorted(ids))
    cos = None
    if node.embedding and pool:
        rows = await reader.embeddings(scope, [m.id for m in pool], len(node.embedding))
        cos = dict(zip([m.id for m in pool], (rows @ np.asarray(node.embedding)).tolist(), strict=True))
    return CandidateSet(node=node, candidates=rank(node, pool, k, cos))


async def discover_many(nodes: Sequence[MemoryNode], reader: MemoryReader, k: int) -> list[CandidateSet]:
    """:func:`discover` for a batch, with the same result for each node, in fewer store calls:
    one batched vector search for the whole batch and one node fetch per scope. Nodes are
    returned in input order."""
    by_scope: dict[tuple[str, str], list[MemoryNode]] = {}
    for n in nodes:
        by_scope.setdefault((n.tenant_id, n.conversation_id), []).append(n)
    with_vec = [n for n in nodes if n.embedding]
    similar = await reader.similar_before_many([(n.scope, n.embedding or [], n.seq) for n in with_vec], POOL_PER_SOURCE)
    pools: dict[str, dict[str, None]] = {n.id: {} for n in nodes}
    for n, hits in zip(with_vec, similar, strict=True):
        pools[n.id].update(dict.fromkeys(hits))
    # independent reads, issued together (a networked store answers them concurrently)
    for n, ids in zip(nodes, await asyncio.gather(*(_non_vector_pool(n, reader) for n in nodes)), strict=True):
        pools[n.id].update(dict.fromkeys(ids))
    groups = list(by_scope.values())
    fetched_by_group = await asyncio.gather(*(
        reader.get_nodes(g[0].scope, sorted({i for n in g for i in pools[n.id]})) for g in groups))
    found: dict[str, CandidateSet] = {}
    sets: SetCache = {}
    for group, got in zip(groups, fetched_by_group, strict=True):
        fetched = {m.id: m for m in got}
        members = list(fetched.values())
        dim = next((len(n.embedding) for n in group if n.embedding), 0)
        # every (new node, pool node) cosine of the scope in one matrix product
        sims = (matrix([n.embedding for n in group], dim) @ (await reader.embeddings(
            group[0].scope, [m.id for m in members], dim)).T if dim and members else None)
        col = {m.id: j for j, m in enumerate(members)}
        for row, n in enumerate(group):
            pool = [fetched[i] for i in sorted(pools[n.id]) if i in fetched]
            cos = {m.id: (float(sims[row, col[m.id]]) if sims is not None else 0.0) for m in pool}
            found[n.id] = CandidateSet(node=n, candidates=rank(n, pool, k, cos, sets))
    return [found[n.id] for n in nodes]
