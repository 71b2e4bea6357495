"""Earlier memories of a speaker across a user's conversations, for the write path's update
question (:class:`topology.stages.updates.SpeakerFacts`), over any vector index that searches a
realm and any node store: one realm search per node (concurrently), one node read per
conversation the hits name."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from storage.ports import NodeReader, RealmSearch, searches_realm
from topology.schemas import MemoryNode, Realm, Scope
from topology.stages.updates import earlier

#: Realm hits read per node: the speaker's own turns are about half of a two-person
#: conversation's, so this leaves room for the ``limit`` asked after filtering by speaker.
HITS_PER_LIMIT = 6


def realm_of(node: MemoryNode) -> Realm:
    """Where ``node``'s earlier facts are: its user's conversations, else its own."""
    if node.user_id is not None:
        return Realm(tenant_id=node.tenant_id, user_id=node.user_id)
    return Realm(tenant_id=node.tenant_id, conversation_ids=(node.conversation_id,))


def speaker_facts(vectors: object, nodes: NodeReader) -> RealmSpeakerFacts | None:
    """:class:`RealmSpeakerFacts` over ``vectors`` when it searches a realm (None otherwise: the
    write path then asks the update question of a turn's candidates alone)."""
    return RealmSpeakerFacts(vectors, nodes) if searches_realm(vectors) else None


class RealmSpeakerFacts:
    """:class:`~topology.stages.updates.SpeakerFacts` over ``vectors`` (realm search by each
    node's embedding) and ``nodes`` (the hits' nodes, to keep the speaker's earlier ones)."""

    def __init__(self, vectors: RealmSearch, nodes: NodeReader) -> None:
        self.vectors, self.nodes = vectors, nodes

    async def earlier_by_speaker(self, nodes: Sequence[MemoryNode], limit: int) -> list[list[tuple[MemoryNode, float]]]:
        if limit <= 0 or not nodes:
            return [[] for _ in nodes]
        searches = await asyncio.gather(*(self.vectors.search_realm(realm_of(n), n.embedding or [], limit * HITS_PER_LIMIT)
                                          for n in nodes))
        wanted: dict[Scope, set[str]] = {}
        for n, hits in zip(nodes, searches, strict=True):
            for h in hits:
                wanted.setdefault(Scope(tenant_id=n.tenant_id, conversation_id=h.conversation_id or n.conversation_id),
                                  set()).add(h.id)
        scopes = list(wanted)
        read = await asyncio.gather(*(self.nodes.get(s, sorted(wanted[s])) for s in scopes))
        known = {m.id: m for got in read for m in got}
        out = []
        for n, hits in zip(nodes, searches, strict=True):
            mine = [(known[h.id], h.score) for h in hits
                    if h.id in known and known[h.id].kind == "observation" and known[h.id].speaker == n.speaker
                    and earlier(known[h.id], n)]
            mine.sort(key=lambda ms: (-ms[1], ms[0].id))
            out.append(mine[:limit])
        return out
