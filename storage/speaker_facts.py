"""Earlier memories of a speaker across a user's conversations, for the write path's update
question (:class:`topology.stages.updates.SpeakerFacts`), over any vector index that searches a
realm and any node store: the batch's realm searches in one request where the index takes many
(:class:`~storage.ports.RealmSearches`), else one per node (concurrently), and one node read per
conversation the hits name. :class:`ConversationFirst` answers a node without a user, whose
realm is its own conversation, from the writer's in-memory conversation instead."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from storage.ports import NodeHeads, NodeReader, NodeReads, RealmSearch, searches_realm, searches_realms
from storage.scope_cache import ScopeCache
from topology.schemas import MemoryNode, Realm, Scope
from topology.stages.updates import earlier

#: Realm hits read per node: the speaker's own turns are about half of a two-person
#: conversation's, so this leaves room for the ``limit`` asked after filtering by speaker.
HITS_PER_LIMIT = 6
#: A node short of its speaker's earlier memories is searched again with this many times the hits,
WIDEN = 4
#: up to this many (beyond it, the answer is the best of these hits).
MAX_HITS = 1536


def realm_of(node: MemoryNode) -> Realm:
    """Where ``node``'s earlier facts are: its user's conversations, else its own."""
    if node.user_id is not None:
        return Realm(tenant_id=node.tenant_id, user_id=node.user_id)
    return Realm(tenant_id=node.tenant_id, conversation_ids=(node.conversation_id,))


def speaker_facts(vectors: object, nodes: NodeReader, memory: ScopeCache | None = None
                  ) -> RealmSpeakerFacts | ConversationFirst | None:
    """:class:`RealmSpeakerFacts` over ``vectors`` when it searches a realm (None otherwise: the
    write path then asks the update question of a turn's candidates alone); with ``memory``, the
    writer's in-memory conversations, wrapped in :class:`ConversationFirst`."""
    if not searches_realm(vectors):
        return None
    realm = RealmSpeakerFacts(vectors, nodes)
    return realm if memory is None else ConversationFirst(realm, memory)


class ConversationFirst:
    """:class:`~topology.stages.updates.SpeakerFacts` that answers a node without a user (its
    realm is its own conversation, which its writer holds in memory) from ``memory``
    (:meth:`storage.scope_cache.ScopeCache.speaker_before`: the same memories, scores and order
    as ``realm`` gives, without a vector search and a node read through the stores), and a
    node with a user from ``realm`` (its user's other conversations may have other writers)."""

    def __init__(self, realm: RealmSpeakerFacts, memory: ScopeCache) -> None:
        self.realm, self.memory = realm, memory

    async def earlier_by_speaker(self, nodes: Sequence[MemoryNode], limit: int,
                                 queries: Sequence[Sequence[float]] | None = None) -> list[list[tuple[MemoryNode, float]]]:
        """As the protocol says."""
        vectors = [n.embedding or [] for n in nodes] if queries is None else list(queries)
        out: list[list[tuple[MemoryNode, float]]] = [[] for _ in nodes]
        for has_user, answer in ((False, self.memory.speaker_before), (True, self.realm.earlier_by_speaker)):
            picked = [i for i, n in enumerate(nodes) if (n.user_id is not None) == has_user]
            if picked:
                got = await answer([nodes[i] for i in picked], limit, [vectors[i] for i in picked])
                for i, row in zip(picked, got, strict=True):
                    out[i] = row
        return out


class RealmSpeakerFacts:
    """:class:`~topology.stages.updates.SpeakerFacts` over ``vectors`` (realm search by each
    node's embedding) and ``nodes`` (the hits' nodes, to keep the speaker's earlier ones)."""

    def __init__(self, vectors: RealmSearch, nodes: NodeReader) -> None:
        self.vectors, self.nodes = vectors, nodes

    async def earlier_by_speaker(self, nodes: Sequence[MemoryNode], limit: int,
                                 queries: Sequence[Sequence[float]] | None = None) -> list[list[tuple[MemoryNode, float]]]:
        """As the protocol says, and independent of what else the stores hold: a node whose hits
        leave fewer than ``limit`` of its speaker's earlier memories while the realm may hold more
        (later turns of the same batch, another speaker's turns) is searched again with
        :data:`WIDEN` times the hits, up to :data:`MAX_HITS`, so batch boundaries and redelivery
        never change the answer below that bound. A store that reads nodes without their
        vectors (:class:`~storage.ports.NodeHeads`) is read that way for the hits, and with them
        for the memories returned only."""
        out: list[list[tuple[MemoryNode, float]]] = [[] for _ in nodes]
        if limit <= 0 or not nodes:
            return out
        vectors = [n.embedding or [] for n in nodes] if queries is None else list(queries)
        todo, k = list(range(len(nodes))), limit * HITS_PER_LIMIT
        while todo:
            found = await self._search([nodes[i] for i in todo], [vectors[i] for i in todo], k)
            again = []
            for i, (mine, full) in zip(todo, found, strict=True):
                out[i] = sorted(mine, key=lambda ms: (-ms[1], ms[0].id))[:limit]
                if len(mine) < limit and full and k < MAX_HITS:
                    again.append(i)
            todo, k = again, min(k * WIDEN, MAX_HITS)
        if isinstance(self.nodes, NodeHeads):  # read without their vectors so far: now those kept
            kept: dict[tuple[str, str], set[str]] = {}
            for row in out:
                for m, _ in row:
                    kept.setdefault((m.tenant_id, m.conversation_id), set()).add(m.id)
            full_nodes = await self._read(kept, vectors=True)
            out = [[(full_nodes.get(m.id, m), s) for m, s in row] for row in out]
        return out

    async def _search(self, nodes: Sequence[MemoryNode], vectors: Sequence[Sequence[float]],
                      k: int) -> list[tuple[list[tuple[MemoryNode, float]], bool]]:
        """Per node: (its speaker's earlier memories among its realm's best ``k`` hits by its
        query vector, read as :meth:`_read` reads them; whether the search returned all ``k``,
        i.e. the realm may hold more)."""
        if searches_realms(self.vectors):  # one request for the batch
            searches = await self.vectors.search_realms([(realm_of(n), v) for n, v in zip(nodes, vectors, strict=True)], k)
        else:
            searches = await asyncio.gather(*(self.vectors.search_realm(realm_of(n), v, k)
                                              for n, v in zip(nodes, vectors, strict=True)))
        wanted: dict[tuple[str, str], set[str]] = {}
        for n, hits in zip(nodes, searches, strict=True):
            for h in hits:
                wanted.setdefault((n.tenant_id, h.conversation_id or n.conversation_id), set()).add(h.id)
        known = await self._read(wanted)
        return [([(known[h.id], h.score) for h in hits
                  if h.id in known and known[h.id].kind == "observation" and known[h.id].speaker == n.speaker
                  and earlier(known[h.id], n)], len(hits) >= k)
                for n, hits in zip(nodes, searches, strict=True)]

    async def _read(self, wanted: dict[tuple[str, str], set[str]], vectors: bool = False) -> dict[str, MemoryNode]:
        """The nodes ``wanted`` (by (tenant, conversation)), by id: without their vectors when
        the store reads nodes that way (:class:`~storage.ports.NodeHeads`) and ``vectors`` is
        False, else with them; in one call where the store reads many conversations at once
        (:class:`~storage.ports.NodeReads`), else one read per conversation."""
        nodes = self.nodes
        scopes = [(Scope(tenant_id=t, conversation_id=c), sorted(ids)) for (t, c), ids in wanted.items()]
        if isinstance(nodes, NodeReads):
            read = await nodes.get_many(scopes, vectors=vectors or not isinstance(nodes, NodeHeads))
        elif not vectors and isinstance(nodes, NodeHeads):
            read = await asyncio.gather(*(nodes.get_heads(s, ids) for s, ids in scopes))
        else:
            read = await asyncio.gather(*(nodes.get(s, ids) for s, ids in scopes))
        return {m.id: m for got in read for m in got}
