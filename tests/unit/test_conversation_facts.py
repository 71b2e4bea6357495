"""A node without a user finds its speaker's earlier memories in its writer's in-memory
conversation (:meth:`storage.scope_cache.ScopeCache.speaker_before`, through
:class:`storage.speaker_facts.ConversationFirst`): the same memories, scores and order as the
realm search over the stores (:class:`storage.speaker_facts.RealmSpeakerFacts`) gives, for the
node's own vector and for a query moved elsewhere (scores to 12 places: an index may sum a dot
product in another order); a node with a user is still asked of its realm."""

from __future__ import annotations

from collections.abc import Sequence

from jevmem.settings import Settings
from jevmem.wiring import Embedded, build_embedded
from storage.scope_cache import ScopeCache
from storage.speaker_facts import ConversationFirst, RealmSpeakerFacts, speaker_facts
from topology.ports import Embedder
from topology.schemas import MemoryNode, Observation, Scope

SCOPE = Scope(tenant_id="t1", conversation_id="c1")
LINES = [
    "I live in Porto, close to the river.", "Porto is lovely in spring.", "My manager is Claire.",
    "Claire sounds nice to work for.", "I drive a red Toyota Corolla.", "Nice car, reliable too.",
    "I moved to Lisbon last month.", "How is Lisbon treating you?", "Jonas is my manager now, Claire left.",
    "Big change at work then.", "I sold the Toyota, I cycle now.", "Cycling in Lisbon sounds hilly.",
    "My favourite food is sushi.", "Sushi is great.", "These days I prefer ramen to sushi.",
]


def _observations(user: str | None = None) -> list[Observation]:
    return [Observation(tenant_id=SCOPE.tenant_id, conversation_id=SCOPE.conversation_id, event_id=f"e{i}",
                        user_id=user, content=text, speaker="Ana" if i % 2 == 0 else "Bo",
                        role="user")
            for i, text in enumerate(LINES)]


async def _built(embedder: Embedder, user: str | None = None) -> tuple[Embedded, list[MemoryNode]]:
    mem = build_embedded(Settings(), embedder=embedder, data_dir=":memory:")
    await mem.pipeline.ingest(_observations(user))
    nodes = sorted(await mem.stores.nodes.get(SCOPE, [n.id for n in await mem.stores.nodes.scan(SCOPE)]),
                   key=lambda n: n.seq)
    return mem, nodes


def _realm(mem: Embedded) -> RealmSpeakerFacts:
    """The realm search the write path would use over ``mem``'s stores."""
    realm = speaker_facts(mem.stores.vectors, mem.stores.nodes)
    assert isinstance(realm, RealmSpeakerFacts)
    return realm


def _ranked(rows: Sequence[Sequence[tuple[MemoryNode, float]]]) -> list[list[tuple[str, float]]]:
    """Ids and scores, the scores to 12 places (a vector index may sum a dot product in another order)."""
    return [[(n.id, round(s, 12)) for n, s in row] for row in rows]


async def test_a_node_without_a_user_gets_from_memory_what_the_realm_search_gives(embedder: Embedder) -> None:
    mem, nodes = await _built(embedder)
    try:
        memory = ScopeCache(mem.stores.nodes, dim=embedder.dim)
        realm = _realm(mem)
        first = ConversationFirst(realm, memory)
        moved = [[-x for x in n.embedding or []] for n in nodes]  # a query that is not the node's own vector
        for limit in (1, 3, 20):
            for queries in (None, moved):
                want = _ranked(await realm.earlier_by_speaker(nodes, limit, queries))
                got = _ranked(await first.earlier_by_speaker(nodes, limit, queries))
                assert got == want
        own = _ranked(await first.earlier_by_speaker(nodes, 20))
        assert own[0] == [] and own[1] == []  # nothing said before the first turn of each speaker
        assert [i for i, _ in own[14]] and all(i in {n.id for n in nodes if n.speaker == "Ana" and n.seq < 14}
                                               for i, _ in own[14])
    finally:
        await mem.close()


async def test_a_node_with_a_user_is_asked_of_its_realm(embedder: Embedder) -> None:
    mem, nodes = await _built(embedder, user="u1")
    try:
        class NoMemory(ScopeCache):
            async def speaker_before(self, nodes: Sequence[MemoryNode], limit: int,
                                     queries: Sequence[Sequence[float]]) -> list[list[tuple[MemoryNode, float]]]:
                raise AssertionError("a user's node is not answered from one conversation")

        realm = _realm(mem)
        first = ConversationFirst(realm, NoMemory(mem.stores.nodes, dim=embedder.dim))
        got = _ranked(await first.earlier_by_speaker(nodes, 3))
        assert got == _ranked(await realm.earlier_by_speaker(nodes, 3))
        assert any(got)
    finally:
        await mem.close()
