"""Which attribute of a person a memory is about (:mod:`topology.systemone.attributes`): two
statements of one attribute overlap, two of different attributes hardly do; steering moves a
search towards the statement's attribute; the write path sends the feature only under the
embedder the update judge was fitted with, and says "unknown" where it has no vector."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import numpy as np
import pytest

from jevmem.wiring import Embedded
from tests.conftest import CountingEmbedder
from topology import ids
from topology.params import Params
from topology.pipeline import WritePath
from topology.ports import Embedder
from topology.schemas import CandidateFeatures, CandidateSet, MemoryNode, Observation, Scope, TypeScores
from topology.stages import relations, updates
from topology.stages.relations import Attributes
from topology.systemone.attributes import PROTOTYPES, AttributeSpace
from topology.systemone.port import Answer, Item
from topology.systemone.update_model import attributes_embedder

T0 = datetime(2024, 5, 1, tzinfo=UTC)


def _vectors(embedder: Embedder, *texts: str) -> np.ndarray:
    return np.asarray(embedder.embed(list(texts)), dtype=np.float32)


def test_one_attribute_overlaps_and_two_hardly_do(model_embedder: Embedder) -> None:
    space = AttributeSpace.of(model_embedder)
    porto, lisbon, galaxy, iphone = _vectors(model_embedder, "I live in Porto, near the river.",
                                             "I moved to Lisbon last month.", "I've had a Galaxy S23 for a couple of years.",
                                             "I switched to an iPhone 15 last week.")
    profiles = space.profiles(np.stack([porto, lisbon, galaxy]))
    assert profiles.shape[0] == 3 and np.allclose(profiles.sum(axis=1), 1.0)
    questions = space.question_profiles(np.stack([porto, lisbon, galaxy]))
    assert questions.shape == (3, len(PROTOTYPES)) and np.allclose(questions.sum(axis=1), 1.0)
    home, phone = space.similarity(porto, lisbon), space.similarity(galaxy, iphone)
    assert min(home, phone) > 0.3
    assert max(space.similarity(lisbon, galaxy), space.similarity(porto, iphone)) < min(home, phone) / 5


def test_the_learned_model_ties_an_activity_to_the_attribute_it_implies(model_embedder: Embedder) -> None:
    """Under the default model the memories' distributions come from the learned attribute model:
    an activity that implies who someone's manager is ("approved my leave") overlaps with a
    statement of the manager far more than under the generic prototypes alone, while statements
    of different attributes still hardly overlap. The wordings are in none of our generators."""
    space = AttributeSpace.of(model_embedder)
    assert space.learned is not None and space.learned.meta["embedder"] == model_embedder.name
    boss, leave, flat = _vectors(model_embedder, "I report to Marco, he runs the team.",
                                 "Dana approved my leave request today.", "My flat is in Ghent, near the station.")
    generic = space.question_profiles(np.stack([boss, leave]))
    learned = space.profiles(np.stack([boss, leave]))
    assert float(learned[0] @ learned[1]) > 3 * float(generic[0] @ generic[1])
    assert space.similarity(boss, flat) < 0.05


def test_a_question_is_read_as_about_an_attribute_and_moved_towards_it(model_embedder: Embedder) -> None:
    """The learned model reads "Who is Ana's manager?" as about the manager, and the question moved
    towards that attribute is nearer a statement of it worded as an activity than before, and
    than a statement of another attribute; without a learned model there is nothing to move towards."""
    space = AttributeSpace.of(model_embedder)
    assert space.learned is not None
    q = np.asarray(model_embedder.embed_query(["Who is Ana's manager?"]), dtype=np.float32)
    known = space.known(q)
    assert known is not None
    manager = [label for label in space.learned.labels if label != "none"].index("manager")
    assert int(known[0].argmax()) == manager and float(known[0, manager]) >= 0.5
    leave, car = _vectors(model_embedder, "Dana approved my leave request today.", "I drive a blue Skoda to work.")
    moved = space.towards(q, manager)[0]
    assert abs(float(np.linalg.norm(moved)) - 1.0) < 1e-5
    assert float(moved @ leave) - float(q[0] @ leave) > float(moved @ car) - float(q[0] @ car)
    generic = AttributeSpace(space.prototypes)
    assert generic.known(q) is None
    with pytest.raises(ValueError, match="learned attribute model"):
        generic.towards(q, 0)


def test_steering_moves_a_statement_towards_its_attribute(model_embedder: Embedder) -> None:
    space = AttributeSpace.of(model_embedder)
    new, same, chat = _vectors(model_embedder, "I'm based in Bologna at the moment, it suits me.",
                               "I live in Porto, in a small flat near the river.", "The weather suits me at the moment.")
    steered = space.steer(new[None, :], 1.0)[0]
    assert abs(float(np.linalg.norm(steered)) - 1.0) < 1e-5
    assert float(steered @ same) - float(steered @ chat) > float(new @ same) - float(new @ chat)
    assert np.allclose(space.steer(new[None, :], 0.0)[0], new, atol=1e-6)


def test_the_prototypes_are_embedded_once_per_embedder(embedder: Embedder) -> None:
    counting = CountingEmbedder(embedder)
    assert AttributeSpace.of(counting) is AttributeSpace.of(counting)
    assert counting.calls == 1


def test_a_node_without_a_vector_has_an_unknown_attribute(embedder: Embedder) -> None:
    space = AttributeSpace.of(embedder)
    v = embedder.embed(["I live in Porto."])[0]
    got = Attributes(space, {"a": v, "b": v, "zero": [0.0] * len(v), "empty": []})
    assert got.similarity("a", "b") is not None and got.similarity("a", "b") > 0.0
    assert got.similarity("a", "zero") is None and got.similarity("a", "empty") is None and got.similarity("a", "x") is None
    assert Attributes().similarity("a", "b") is None


async def test_only_the_judges_own_embedder_gets_a_space(embedder: Embedder, model_embedder: Embedder) -> None:
    none = cast(Any, None)
    assert model_embedder.name == attributes_embedder()
    assert await WritePath(model_embedder, none, none, Params()).attribute_space() is not None
    assert await WritePath(embedder, none, none, Params()).attribute_space() is None


async def test_a_statement_of_another_attribute_does_not_supersede(model_memory: Embedded) -> None:
    """With the real model, a new statement of another attribute by the same person (with a
    change cue: "at the moment") is no update, and a statement of the same attribute is."""
    turns = [("Ana", "I answer to Marisol, who heads our team."), ("Ben", "Sounds like a good boss."),
             ("Ana", "I live in Porto, in a small flat near the river."), ("Ben", "Porto is lovely in spring."),
             ("Ana", "I'm based in Bologna at the moment, it suits me.")]
    await model_memory.pipeline.ingest([Observation(tenant_id="t1", conversation_id="c1", event_id=f"u{i}", content=t,
                                                    speaker=s, observed_at=T0 + timedelta(days=i))
                                        for i, (s, t) in enumerate(turns)])
    node = {i: ids.node_id("t1", "c1", f"u{i}") for i in range(len(turns))}
    edges = [(e.source, e.target) for e in await model_memory.stores.edges.scan(Scope(tenant_id="t1", conversation_id="c1"))
             if e.label == "supersedes"]
    assert edges == [(node[4], node[2])]


def test_without_a_space_every_attribute_is_unknown(embedder: Embedder) -> None:
    v = embedder.embed(["I live in Porto."])[0]
    assert Attributes(None, {"a": v, "b": v}).similarity("a", "b") is None


class _Fixed(Attributes):
    """Attribute similarities by the older node's id (None: unknown)."""

    def __init__(self, by_older: dict[str, float | None], about: dict[str, float] | None = None) -> None:
        super().__init__()
        self.by_older, self.read = by_older, about or {}

    def similarity(self, a: str, b: str) -> float | None:
        return self.by_older.get(a)

    def about(self, node: str) -> float | None:
        return self.read.get(node)


class _Updates:
    """A System One whose ``updates`` answer is fixed by the older text."""

    def __init__(self, p: dict[str, float]) -> None:
        self.p = p

    async def ask(self, items: Sequence[Item]) -> list[Answer]:
        return [Answer({"semantic": 0.1, "caused_by": 0.0, "causes": 0.0, "updates": self.p[str(i.state["older"])]})
                for i in items]

    async def aclose(self) -> None:
        return None


async def test_a_new_statement_supersedes_the_judged_update_most_about_its_attribute() -> None:
    """Of the earlier statements judged replaced (at or above ``theta_update``), the new one
    supersedes the one most about the same attribute, not merely the most probable; with the
    attribute unknown, the most probable."""
    def node(seq: int, text: str) -> MemoryNode:
        return MemoryNode(id=f"n{seq}", tenant_id="t1", conversation_id="c1", event_id=f"e{seq}", seq=seq,
                          content=text, speaker="Ana", role="user")

    job, home, new = node(1, "I answer to Claire."), node(2, "I live in Porto."), node(3, "I moved to Lisbon.")
    f = CandidateFeatures(cosine=0.9, lexical=0.0, entity=0.0, temporal=0.5)
    csets = [CandidateSet(node=new, candidates=[])]
    only = {new.id: [(job, f), (home, f)]}
    so = _Updates({job.content: 0.99, home.content: 0.9})

    async def replaced(attributes: Attributes) -> list[str]:
        _, edges = await relations.judge(csets, {}, cast(Any, so), Params(), only, attributes)
        return [e.target for e in edges if e.label == "supersedes"]

    assert await replaced(_Fixed({job.id: 0.1, home.id: 0.8})) == [home.id]
    assert await replaced(Attributes()) == [job.id]
    so.p[home.content] = Params().theta_update - 0.01  # judged no update: the attribute alone decides nothing
    assert await replaced(_Fixed({job.id: 0.1, home.id: 0.8})) == [job.id]
    # a question replaces no fact, whatever the pair's answer
    asking = node(4, "Did I move to Lisbon?").model_copy(update={"types": TypeScores(
        kind={"statement": 0.05, "question": 0.9, "tool": 0.01, "advice": 0.02, "chatter": 0.02})})
    csets[0], only = CandidateSet(node=asking, candidates=[]), {asking.id: [(job, f), (home, f)]}
    assert await replaced(_Fixed({job.id: 0.1, home.id: 0.8})) == []
    # nor is chatter replaced: it stated no fact, whatever its vector (read after a fact) is about
    chat = home.model_copy(update={"types": TypeScores(
        kind={"statement": 0.1, "question": 0.02, "tool": 0.01, "advice": 0.02, "chatter": 0.85})})
    so.p[chat.content] = 0.99
    csets[0], only = CandidateSet(node=new, candidates=[]), {new.id: [(job, f), (chat, f)]}
    assert await replaced(_Fixed({job.id: 0.1, home.id: 0.8})) == [job.id]
    # unless the attribute model reads it as about one attribute: a fact worded as chatter
    assert await replaced(_Fixed({job.id: 0.1, home.id: 0.8}, {home.id: updates.MIN_ABOUT})) == [home.id]
    assert await replaced(_Fixed({job.id: 0.1, home.id: 0.8}, {home.id: updates.MIN_ABOUT - 0.01})) == [job.id]


async def test_a_question_about_an_attribute_is_moved_towards_it(model_embedder: Embedder) -> None:
    """The read path moves a question that asks about one attribute of a person towards it
    (``Params.query_steer``) and leaves one about no attribute, or with steering off, as it is."""
    from jevmem.settings import Settings
    from jevmem.wiring import build_embedded

    space = AttributeSpace.of(model_embedder)
    car, food = _vectors(model_embedder, "I drive a red Toyota Corolla to work.", "My favourite food is ramen.")
    for params, moved in ((Params(), True), (Params(query_steer=0.0), False), (Params(query_steer_gate=1.0), False)):
        mem = build_embedded(Settings(params=params), embedder=model_embedder, data_dir=":memory:")
        try:
            asked = model_embedder.embed_query(["What car does Ana drive?"])[0]
            steered = mem.controller._steered(asked)
            assert (steered != asked) == moved
            if moved:
                q = np.asarray(steered, dtype=np.float32)
                assert abs(float(np.linalg.norm(q)) - 1.0) < 1e-5
                assert float(q @ car) - float(q @ food) > float(np.asarray(asked) @ car) - float(np.asarray(asked) @ food)
            other = model_embedder.embed_query(["What happened after the meeting?"])[0]
            assert float(space.question_profiles(np.asarray([other], dtype=np.float32)).max()) < 0.8
            assert mem.controller._steered(other) == other
        finally:
            await mem.close()


class _Embeddings:
    """A reader that only reads vectors (by node id), recording what it was asked."""

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self.vectors, self.asked = vectors, list[str]()

    async def embeddings(self, scope: Scope, ids: Sequence[str], dim: int) -> np.ndarray:
        self.asked += list(ids)
        return np.asarray([self.vectors[i] for i in ids], dtype=np.float32)


async def test_the_write_path_reads_the_vector_of_the_turn_each_memory_was_read_after(embedder: Embedder) -> None:
    """What the learned attribute model discounts: for each memory read after another turn
    (``MemoryNode.after``), that turn's vector, from the batch when there, else from the store;
    a memory read alone has none."""
    def node(seq: int, after: str | None) -> MemoryNode:
        return MemoryNode(id=f"n{seq}", tenant_id="t1", conversation_id="c1", event_id=f"e{seq}", seq=seq,
                          content=f"turn {seq}", speaker="Ana", role="user", after=after)

    reader = _Embeddings({"n1": [1.0, 0.0], "n2": [0.0, 1.0]})
    wp = WritePath(embedder, cast(Any, None), cast(Any, reader), Params())
    got = await wp._before([node(1, None), node(2, "n1"), node(3, "n2")], {"n2": [0.5, 0.5]})
    assert {k: [float(x) for x in v] for k, v in got.items()} == {"n2": [1.0, 0.0], "n3": [0.5, 0.5]}
    assert reader.asked == ["n1"]


def test_update_candidates_take_turns_by_attribute_and_by_similarity() -> None:
    def node(i: str) -> MemoryNode:
        return MemoryNode(id=i, tenant_id="t1", conversation_id="c1", event_id=i, seq=1, content=i)

    a, b, c, d = node("a"), node("b"), node("c"), node("d")
    # most about the attribute (ties by similarity), then the most similar not taken, and so on
    got = updates.by_attribute([(a, 0.95), (b, 0.90), (c, 0.80)], [0.1, 0.7, 0.7])
    assert [(n.id, s) for n, s in got] == [("b", 0.90), ("a", 0.95), ("c", 0.80)]
    # the statement of an attribute the model reads poorly (d) is asked as the most similar
    got = updates.by_attribute([(d, 0.93), (a, 0.90), (b, 0.88), (c, 0.80)], [0.05, 0.5, 0.4, 0.3])
    assert [n.id for n, _ in got][:2] == ["a", "d"]
    assert updates.by_attribute([], []) == []


class _Facts:
    """A speaker's earlier statements, most similar first, whatever the query; records the limit."""

    def __init__(self, found: list[tuple[MemoryNode, float]]) -> None:
        self.found = found
        self.limits: list[int] = []

    async def earlier_by_speaker(self, nodes: Sequence[MemoryNode], limit: int,
                                 queries: Sequence[Sequence[float]] | None = None) -> list[list[tuple[MemoryNode, float]]]:
        self.limits.append(limit)
        return [self.found[:limit] for _ in nodes]


async def test_the_update_question_asks_the_earlier_statement_of_the_attribute_not_the_most_similar(
        model_embedder: Embedder, embedder: Embedder) -> None:
    """Under a learned attribute model the write path searches ``update_pool`` earlier statements
    and asks the update question of the ``k_update`` most about the new statement's attribute:
    the earlier manager, not the small talk that is more similar; without the model, the
    ``k_update + k_write`` most similar are searched and the most similar is asked."""
    texts = ["I need a holiday, honestly.", "I finally cleaned out the fridge.", "My manager is Claire, very organised.",
             "Devan gave me really useful feedback on my report."]
    params = Params(k_update=1, update_steer=0.0)

    async def asked(model: Embedder) -> tuple[list[str], list[int]]:
        vec = model.embed(texts)

        def node(seq: int) -> MemoryNode:
            return MemoryNode(id=f"n{seq}", tenant_id="t1", conversation_id="c1", event_id=f"e{seq}", seq=seq,
                              content=texts[seq], speaker="Ana", role="user", embedding=[float(x) for x in vec[seq]])

        new, facts = node(3), _Facts([(node(0), 0.93), (node(1), 0.92), (node(2), 0.85)])
        write = WritePath(model, cast(Any, None), cast(Any, None), params, facts=facts)
        got = await write._update_pairs([CandidateSet(node=new, candidates=[])], None)
        return [n.content for n, _ in got[new.id]], facts.limits

    assert await asked(model_embedder) == ([texts[2]], [params.update_pool])
    assert await asked(embedder) == ([texts[0]], [params.k_update + params.k_write])
