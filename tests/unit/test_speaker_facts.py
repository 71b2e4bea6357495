"""The write path's update candidates (:class:`storage.speaker_facts.RealmSpeakerFacts`) do not
depend on what else the stores hold: later turns of the same batch, or a redelivered batch's
turns already written, that outrank a speaker's earlier memories in the realm search change
neither which earlier memories are found nor their order; of those found, the pairs asked
(:func:`topology.stages.updates.pairs`) are distinct earlier statements."""

from __future__ import annotations

from collections.abc import Sequence

from storage.ports import Hit
from storage.speaker_facts import HITS_PER_LIMIT, RealmSpeakerFacts
from topology.schemas import CandidateSet, MemoryNode, Realm, Scope, TypeScores
from topology.stages.updates import pairs

SCOPE = Scope(tenant_id="t1", conversation_id="c1")


def _node(seq: int, speaker: str, score: float) -> MemoryNode:
    return MemoryNode(id=f"n{seq}", tenant_id="t1", conversation_id="c1", event_id=f"e{seq}", seq=seq,
                      content=f"turn {seq}", speaker=speaker, embedding=[1.0], metadata={"score": score})


class Realm1:
    """A realm search over fixed nodes, best ``metadata['score']`` first, and their node reads."""

    def __init__(self, nodes: Sequence[MemoryNode]) -> None:
        self.by_id = {n.id: n for n in nodes}
        self.searched: list[int] = []

    async def search_realm(self, realm: Realm, query: Sequence[float] | str, limit: int) -> list[Hit]:
        self.searched.append(limit)
        ranked = sorted(self.by_id.values(), key=lambda n: (-float(n.metadata["score"]), n.seq))
        return [Hit(n.id, float(n.metadata["score"]), n.conversation_id) for n in ranked[:limit]]

    async def get(self, scope: Scope, ids: Sequence[str]) -> list[MemoryNode]:
        return [self.by_id[i] for i in ids if i in self.by_id]

    async def scan(self, scope: Scope) -> list[MemoryNode]:
        return sorted(self.by_id.values(), key=lambda n: n.seq)


async def test_later_turns_in_the_store_do_not_change_the_update_candidates() -> None:
    limit = 2
    asking = _node(100, "Ana", 0.0)
    # Ana's earlier turns (seq < 100) score low; Bo's turns and Ana's own later turns score high
    earlier = [_node(s, "Ana", 0.1 + s / 1000) for s in range(10)] + [_node(10 + s, "Bo", 0.5) for s in range(10)]
    later = [_node(101 + s, "Ana", 0.9) for s in range(limit * HITS_PER_LIMIT * 3)]
    alone = Realm1([*earlier, asking])
    crowded = Realm1([*earlier, asking, *later])
    want = (await RealmSpeakerFacts(alone, alone).earlier_by_speaker([asking], limit))[0]
    got = (await RealmSpeakerFacts(crowded, crowded).earlier_by_speaker([asking], limit))[0]
    assert [n.id for n, _ in want] == ["n9", "n8"]
    assert [(n.id, s) for n, s in got] == [(n.id, s) for n, s in want]
    assert len(crowded.searched) > 1 and crowded.searched[1] > crowded.searched[0]  # searched again, wider
    assert len(alone.searched) == 1


async def test_a_realm_with_fewer_of_the_speakers_memories_is_searched_once() -> None:
    asking = _node(5, "Ana", 0.0)
    realm = Realm1([_node(0, "Ana", 0.3), _node(1, "Bo", 0.4), asking])
    got = (await RealmSpeakerFacts(realm, realm).earlier_by_speaker([asking], 4))[0]
    assert [n.id for n, _ in got] == ["n0"]
    assert realm.searched == [4 * HITS_PER_LIMIT]


class Realms1(Realm1):
    """:class:`Realm1` that also answers many realm searches in one request."""

    def __init__(self, nodes: Sequence[MemoryNode]) -> None:
        super().__init__(nodes)
        self.batches: list[int] = []

    async def search_realms(self, queries: Sequence[tuple[Realm, Sequence[float]]], limit: int) -> list[list[Hit]]:
        self.batches.append(len(queries))
        return [await self.search_realm(realm, vector, limit) for realm, vector in queries]


async def test_an_index_that_takes_many_searches_gets_the_batch_in_one_request() -> None:
    asking = [_node(100 + i, "Ana", 0.0) for i in range(3)]
    nodes = [*(_node(s, "Ana", 0.1 + s / 1000) for s in range(10)), *asking]
    one, many = Realm1(nodes), Realms1(nodes)
    want = await RealmSpeakerFacts(one, one).earlier_by_speaker(asking, 2)
    got = await RealmSpeakerFacts(many, many).earlier_by_speaker(asking, 2)
    assert [[n.id for n, _ in row] for row in got] == [[n.id for n, _ in row] for row in want] == [["n9", "n8"]] * 3
    assert many.batches == [3]


class ByVector(Realm1):
    """A realm search that ranks by the dot product with the query vector."""

    async def search_realm(self, realm: Realm, query: Sequence[float] | str, limit: int) -> list[Hit]:
        assert not isinstance(query, str)
        scored = sorted(((sum(a * b for a, b in zip(n.embedding or [], query, strict=True)), n) for n in self.by_id.values()),
                        key=lambda sn: (-sn[0], sn[1].seq))
        return [Hit(n.id, s, n.conversation_id) for s, n in scored[:limit]]


async def test_the_search_goes_by_the_query_vectors_when_given() -> None:
    def node(seq: int, vector: list[float]) -> MemoryNode:
        return MemoryNode(id=f"n{seq}", tenant_id="t1", conversation_id="c1", event_id=f"e{seq}", seq=seq,
                          content=f"turn {seq}", speaker="Ana", embedding=vector)

    asking = node(9, [1.0, 0.0])
    realm = ByVector([node(0, [1.0, 0.0]), node(1, [0.0, 1.0]), asking])
    by_own = (await RealmSpeakerFacts(realm, realm).earlier_by_speaker([asking], 1))[0]
    by_query = (await RealmSpeakerFacts(realm, realm).earlier_by_speaker([asking], 1, [[0.0, 1.0]]))[0]
    assert [(n.id, s) for n, s in by_own] == [("n0", 1.0)]
    assert [(n.id, s) for n, s in by_query] == [("n1", 1.0)]


class Heads1(Realm1):
    """:class:`Realm1` that also reads nodes without their vectors (:class:`storage.ports.NodeHeads`),
    recording which ids each kind of read was asked for."""

    def __init__(self, nodes: Sequence[MemoryNode]) -> None:
        super().__init__(nodes)
        self.with_vectors: list[str] = []
        self.heads: list[str] = []

    async def get(self, scope: Scope, ids: Sequence[str]) -> list[MemoryNode]:
        self.with_vectors += ids
        return await super().get(scope, ids)

    async def get_heads(self, scope: Scope, ids: Sequence[str]) -> list[MemoryNode]:
        self.heads += ids
        return [self.by_id[i].without_embedding() for i in ids if i in self.by_id]


async def test_a_store_that_reads_nodes_without_vectors_gives_the_same_candidates_with_theirs() -> None:
    """The realm's hits are filtered on nodes read without their vectors; only the memories kept
    are read with them, and the answer is the plain store's."""
    asking = [_node(100 + i, "Ana", 0.0) for i in range(2)]
    nodes = [*(_node(s, "Ana" if s % 2 else "Bo", 0.1 + s / 1000) for s in range(20)), *asking]
    plain, heads = Realm1(nodes), Heads1(nodes)
    want = await RealmSpeakerFacts(plain, plain).earlier_by_speaker(asking, 3)
    got = await RealmSpeakerFacts(heads, heads).earlier_by_speaker(asking, 3)
    assert got == want
    assert [[n.id for n, _ in row] for row in got] == [["n19", "n17", "n15"]] * 2
    assert all(n.embedding == [1.0] for row in got for n, _ in row)
    assert set(heads.with_vectors) == {"n19", "n17", "n15"} and len(set(heads.heads)) > 3


def test_update_pairs_skip_questions_and_repeated_lines_and_keep_the_limit() -> None:
    """A question or chatter states no fact to replace, and a line said again is one candidate:
    the ``limit`` is spent on distinct earlier statements, most similar first."""
    def said(seq: int, text: str, kind: str = "statement") -> MemoryNode:
        kinds = {k: (0.96 if k == kind else 0.01) for k in ("statement", "question", "tool", "advice", "chatter")}
        return MemoryNode(id=f"n{seq}", tenant_id="t1", conversation_id="c1", event_id=f"e{seq}", seq=seq,
                          content=text, speaker="Ana", embedding=[1.0], types=TypeScores(kind=kinds))

    new = said(20, "I upgraded to a Moto Edge at the weekend.")
    found = [(said(1, "I need a holiday, honestly."), 0.91), (said(5, "I need a holiday, honestly."), 0.91),
             (said(2, "Did you see the sunset? Unreal.", "question"), 0.90), (said(3, "Fair enough!", "chatter"), 0.9),
             (said(4, "I've had a Pixel 8 for a couple of years."), 0.88), (said(6, "I live in Porto."), 0.87),
             (said(7, "My manager is Claire."), 0.86)]
    got = pairs([CandidateSet(node=new, candidates=[])], {new.id: found}, 3)[new.id]
    assert [n.content for n, _ in got] == ["I need a holiday, honestly.", "I've had a Pixel 8 for a couple of years.",
                                           "I live in Porto."]
    assert [f.cosine for _, f in got] == [0.91, 0.88, 0.87]
