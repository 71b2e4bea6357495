"""In-memory node store, edge store and dead-letter sink: fakes for tests, with no database.

Each implements its port (:class:`~storage.ports.NodeStore`, :class:`~storage.ports.EdgeStore`,
:class:`~storage.ports.DeadLetterSink`) with the embedded SQLite stores' answers, orders included
(a unit test writes the same graph through both and compares every read): nodes by ``(seq, id)``,
edges by probability descending then id, decisions by id, embeddings kept as float32 as every
store keeps them. One process, no persistence, no locking beyond the event loop.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from topology.schemas import ConsolidationDecision, DeadLetter, EdgeEvent, MemoryNode, Scope, View
from topology.vectors import half

__all__ = ["MemoryDeadLetters", "MemoryEdgeStore", "MemoryNodeStore"]


def _float32(v: list[float]) -> list[float]:
    out: list[float] = np.asarray(v, dtype=np.float32).astype(float).tolist()
    return out


def _limited(items: list[str], limit: int) -> list[str]:
    """SQL's ``LIMIT``: a negative limit keeps everything."""
    return items[:limit] if limit >= 0 else items


class MemoryNodeStore:
    """:class:`~storage.ports.NodeStore` in a dict per scope."""

    def __init__(self) -> None:
        self._nodes: dict[Scope, dict[str, MemoryNode]] = {}
        self._forgotten: dict[Scope, dict[str, int]] = {}

    def _scope(self, scope: Scope) -> dict[str, MemoryNode]:
        return self._nodes.get(scope, {})

    def _observations(self, scope: Scope) -> list[MemoryNode]:
        return [n for n in self._scope(scope).values() if n.kind == "observation"]

    async def upsert(self, nodes: Sequence[MemoryNode]) -> None:
        """Insert or replace; a node upserted without an embedding keeps its stored vectors (its
        embedding and context vector), one upserted with an embedding replaces both."""
        for n in nodes:
            held = self._nodes.setdefault(n.scope, {})
            old = held.get(n.id)
            if n.embedding is not None:
                vectors = {"embedding": _float32(n.embedding),
                           "context": half(n.context) if n.context is not None else None}
            else:
                vectors = {"embedding": old.embedding if old else None, "context": old.context if old else None}
            held[n.id] = n.model_copy(update=vectors)

    async def get(self, scope: Scope, ids: Sequence[str]) -> list[MemoryNode]:
        held = self._scope(scope)
        return [held[i] for i in ids if i in held]

    async def seqs(self, scope: Scope, event_ids: Sequence[str]) -> dict[str, int]:
        wanted = set(event_ids)
        return {n.event_id: n.seq for n in self._scope(scope).values() if n.event_id in wanted}

    async def next_seq(self, scope: Scope) -> int:
        return max((n.seq for n in self._observations(scope)), default=-1) + 1

    async def observation_count(self, scope: Scope) -> int:
        return len(self._observations(scope))

    async def used_seqs(self, scope: Scope) -> list[int]:
        return sorted(n.seq for n in self._observations(scope))

    async def scan(self, scope: Scope) -> list[MemoryNode]:
        return [n.without_embedding() for n in sorted(self._scope(scope).values(), key=lambda n: (n.seq, n.id))]

    async def conversations(self, tenant_id: str, users: Collection[str] | None = None) -> list[tuple[str, int]]:
        counted = ((s.conversation_id, sum(1 for n in held.values() if users is None or n.user_id in users))
                   for s, held in self._nodes.items() if s.tenant_id == tenant_id)
        return sorted((c, n) for c, n in counted if n)

    async def sharing_entities_before(self, scope: Scope, entity_ids: Sequence[str], before_seq: int,
                                      limit: int) -> list[str]:
        """Most shared entity ids first, then the latest seq (then id)."""
        wanted = set(entity_ids)
        shared = [(len(wanted & {e.id for e in n.entities}), n.seq, n.id) for n in self._scope(scope).values()
                  if n.seq < before_seq]
        ranked = sorted((t for t in shared if t[0]), key=lambda t: (-t[0], -t[1], t[2]))
        return _limited([nid for _, _, nid in ranked], limit)

    async def preceding(self, scope: Scope, before_seq: int, limit: int) -> list[str]:
        earlier = sorted((n for n in self._observations(scope) if n.seq < before_seq), key=lambda n: -n.seq)
        return _limited([n.id for n in earlier], limit)

    async def delete(self, scope: Scope, ids: Sequence[str]) -> int:
        held = self._scope(scope)
        return sum(1 for i in set(ids) if held.pop(i, None) is not None)

    async def delete_scope(self, scope: Scope) -> int:
        self._forgotten.pop(scope, None)
        return len(self._nodes.pop(scope, {}))

    async def record_forgotten(self, scope: Scope, event_id: str, seq: int) -> None:
        self._forgotten.setdefault(scope, {})[event_id] = seq

    async def forgotten(self, scope: Scope) -> dict[str, int]:
        return dict(self._forgotten.get(scope, {}))

    async def close(self) -> None:
        return None


class MemoryEdgeStore:
    """:class:`~storage.ports.EdgeStore` in dicts per scope."""

    def __init__(self) -> None:
        self._edges: dict[Scope, dict[str, EdgeEvent]] = {}
        self._decisions: dict[Scope, dict[str, ConsolidationDecision]] = {}

    @staticmethod
    def _scope_of(x: EdgeEvent | ConsolidationDecision) -> Scope:
        return Scope(tenant_id=x.tenant_id, conversation_id=x.conversation_id)

    async def upsert(self, edges: Sequence[EdgeEvent]) -> None:
        for e in edges:
            self._edges.setdefault(self._scope_of(e), {})[e.id] = e

    async def neighbours(self, scope: Scope, node_ids: Sequence[str], views: Sequence[View], limit: int) -> list[EdgeEvent]:
        ids, vs = set(node_ids), set(views)
        found = [e for e in self._edges.get(scope, {}).values() if e.view in vs and (e.source in ids or e.target in ids)]
        found.sort(key=lambda e: (-e.probability, e.id))
        return found[:limit] if limit >= 0 else found

    async def labelled(self, scope: Scope, node_ids: Sequence[str], views: Sequence[View], limit: int,
                       label: str) -> list[EdgeEvent]:
        return [e for e in await self.neighbours(scope, node_ids, views, limit) if e.label == label]

    async def scan(self, scope: Scope) -> list[EdgeEvent]:
        return sorted(self._edges.get(scope, {}).values(), key=lambda e: e.id)

    async def upsert_decisions(self, decisions: Sequence[ConsolidationDecision]) -> None:
        for d in decisions:
            self._decisions.setdefault(self._scope_of(d), {})[d.id] = d

    async def decisions(self, scope: Scope) -> list[ConsolidationDecision]:
        return sorted(self._decisions.get(scope, {}).values(), key=lambda d: d.id)

    async def delete(self, scope: Scope, node_ids: Sequence[str]) -> int:
        ids, held = set(node_ids), self._edges.get(scope, {})
        doomed = [k for k, e in held.items() if e.source in ids or e.target in ids]
        for k in doomed:
            del held[k]
        return len(doomed)

    async def delete_scope(self, scope: Scope) -> int:
        return len(self._edges.pop(scope, {}))

    async def delete_edges(self, scope: Scope, node_id: str, edge_ids: Sequence[str]) -> int:
        ids, held = set(edge_ids), self._edges.get(scope, {})
        doomed = [k for k, e in held.items() if e.id in ids and node_id in (e.source, e.target)]
        for k in doomed:
            del held[k]
        return len(doomed)

    async def conversations_touching(self, tenant_id: str, node_ids: Sequence[str]) -> list[str]:
        ids = set(node_ids)
        return sorted({scope.conversation_id for scope, held in self._edges.items() if scope.tenant_id == tenant_id
                       and any(e.source in ids or e.target in ids for e in held.values())})

    async def delete_decisions(self, scope: Scope, node_ids: Sequence[str]) -> int:
        gone, held = set(node_ids), self._decisions.get(scope, {})
        doomed = [k for k, d in held.items() if {d.left, d.right, d.derived_node_id} & gone]
        for k in doomed:
            del held[k]
        return len(doomed)

    async def delete_scope_decisions(self, scope: Scope) -> int:
        return len(self._decisions.pop(scope, {}))

    async def close(self) -> None:
        return None


class MemoryDeadLetters:
    """:class:`~storage.ports.DeadLetterSink` as a list, oldest first."""

    def __init__(self) -> None:
        self.letters: list[DeadLetter] = []

    async def put(self, letters: Sequence[DeadLetter]) -> None:
        self.letters += letters

    async def forget(self, scope: Scope, event_id: str | None) -> int:
        keep = [d for d in self.letters if d.scope != scope or (event_id is not None and d.event_id != event_id)]
        n, self.letters = len(self.letters) - len(keep), keep
        return n

    async def recent(self, limit: int = 100, tenant_id: str | None = None) -> list[DeadLetter]:
        mine = [d for d in self.letters if tenant_id is None or d.tenant_id == tenant_id]
        return mine[-limit:] if limit > 0 else ([] if limit == 0 else mine)
