"""Context vectors: which turns get one, what is embedded, how stores keep it, how queries rank
by it, and that forgetting a turn takes it out of the next turn's vectors."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from jevmem.settings import Settings
from jevmem.wiring import Embedded, build_embedded
from storage.memory import MemoryNodeStore
from topology import ids
from topology.params import Params
from topology.ports import Embedder
from topology.schemas import MemoryNode, Observation, Scope
from topology.stages import context
from topology.vectors import half, retrieval_rows

A = Scope(tenant_id="t1", conversation_id="c1")
T0 = datetime(2024, 3, 1, 18, 0, tzinfo=UTC)
TURNS = [  # (speaker, text, minutes after T0): the last turn comes after a night's pause
    ("Ana", "Did you go to the support group on Friday?", 0),
    ("Ben", "Yes, and I met two people who also moved here last year.", 1),
    ("Ana", "That sounds lovely, will you go again?", 2),
    ("Ben", "Every week from now on.", 3),
    ("Ana", "Good morning! I finally finished the painting of the lake.", 60 * 14),
]


def turns(start: int = 0, end: int | None = None) -> list[Observation]:
    return [Observation(tenant_id=A.tenant_id, conversation_id=A.conversation_id, event_id=f"e{i}", content=text,
                        speaker=speaker, observed_at=T0 + timedelta(minutes=minutes))
            for i, (speaker, text, minutes) in enumerate(TURNS) if start <= i < (end if end is not None else len(TURNS))]


@pytest.fixture
async def mem(embedder: Embedder) -> AsyncIterator[Embedded]:
    m = build_embedded(Settings(), embedder=embedder, data_dir=":memory:")
    yield m
    await m.close()


async def nodes(mem: Embedded) -> list[MemoryNode]:
    return await mem.stores.nodes.get(A, [ids.node_id(A.tenant_id, A.conversation_id, f"e{i}") for i in range(len(TURNS))])


def test_retrieval_rows_are_the_mean_or_the_embedding_alone() -> None:
    e = np.asarray([[0.6, 0.8], [1.0, 0.0]], dtype=np.float32)
    c = np.asarray([[0.0, 1.0], [0.0, 0.0]], dtype=np.float32)  # the second node has no context vector
    rows = retrieval_rows(e, c)
    assert rows.dtype == np.float32
    assert rows.tolist() == [[np.float32(0.3), np.float32(0.9)], [1.0, 0.0]]


async def test_a_turn_gets_a_context_vector_only_after_a_turn_of_its_sitting(mem: Embedded,
                                                                              embedder: Embedder) -> None:
    await mem.pipeline.ingest(turns())
    got = await nodes(mem)
    assert [n.context is not None for n in got] == [False, True, True, True, False]
    # what is embedded: the turn before (speaker: text), then the turn
    assert context.context_text(got[0], got[1]) == f"Ana: {TURNS[0][1]} Ben: {TURNS[1][1]}"
    assert got[1].context == half(embedder.embed([context.context_text(got[0], got[1])])[0])  # kept at half precision
    assert got[1].context != embedder.embed([context.context_text(got[0], got[1])])[0]
    # the graph is built from the embeddings alone: the embedding is the turn's own
    assert got[1].embedding == embedder.embed([f"Ben: {TURNS[1][1]}"])[0]


async def test_context_vectors_do_not_depend_on_batching(embedder: Embedder) -> None:
    one = build_embedded(Settings(), embedder=embedder, data_dir=":memory:")
    many = build_embedded(Settings(), embedder=embedder, data_dir=":memory:")
    try:
        await one.pipeline.ingest(turns())
        for i in range(len(TURNS)):  # each turn alone: the turn before it is read from the store
            await many.pipeline.ingest(turns(i, i + 1))
        assert [n.context for n in await nodes(one)] == [n.context for n in await nodes(many)]
        # a re-sent event keeps its seq and so its context vector
        await many.pipeline.ingest(turns(2, 3))
        assert [n.context for n in await nodes(one)] == [n.context for n in await nodes(many)]
    finally:
        await one.close()
        await many.close()


async def test_queries_rank_turns_by_their_retrieval_vectors(mem: Embedded, embedder: Embedder) -> None:
    await mem.pipeline.ingest(turns())
    got = await nodes(mem)
    q = embedder.embed_query(["Who did Ben meet at the support group?"])[0]
    hits = await mem.stores.vectors.search(A, q, 10)
    by_id = {n.id: n for n in got}
    for h in hits:
        r = by_id[h.id].retrieval_vector()
        assert r is not None
        assert h.score == pytest.approx(float(np.dot(np.asarray(r, dtype=np.float64), q)), abs=1e-9)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # the read path's rows are the same vectors, read without building the nodes' lists
    plain, rows = await mem.stores.nodes.get_rows(A, [n.id for n in got], embedder.dim)
    assert all(n.embedding is None and n.context is None for n in plain)
    assert rows.tolist() == [np.asarray(n.retrieval_vector(), dtype=np.float32).tolist() for n in got]
    mean = (np.asarray(got[1].embedding) + np.asarray(got[1].context)) / 2
    assert np.allclose(rows[1], mean, atol=1e-7) and rows[0].tolist() == got[0].embedding


async def test_forgetting_a_turn_takes_it_out_of_the_next_turns_vectors(mem: Embedded, embedder: Embedder) -> None:
    await mem.pipeline.ingest(turns())
    await mem.pipeline.forget(A, "e1")
    got = {n.event_id: n for n in await nodes(mem)}
    assert "e1" not in got
    assert got["e2"].context is None and got["e2"].embedding is not None
    assert got["e3"].context is not None  # only the next turn carried the forgotten one's text
    q = embedder.embed_query(["will you go again"])[0]
    hits = {h.id: h.score for h in await mem.stores.vectors.search(A, q, 10)}
    assert hits[got["e2"].id] == pytest.approx(float(np.dot(got["e2"].embedding, q)), abs=1e-9)
    # a new turn after the forgotten seq pairs with nothing that is gone
    await mem.pipeline.ingest(turns(1, 2))  # the forgotten event sent again comes back at its seq
    again = {n.event_id: n for n in await nodes(mem)}
    assert again["e1"].context is not None


async def test_a_node_written_without_an_embedding_keeps_its_vectors() -> None:
    store = MemoryNodeStore()
    n = MemoryNode(id="n1", tenant_id="t1", conversation_id="c1", event_id="e1", seq=0, content="x",
                   embedding=[1.0, 0.0], context=[0.0, 1.0])
    await store.upsert([n])
    await store.upsert([n.without_embedding()])
    assert (await store.get(A, ["n1"]))[0].context == [0.0, 1.0]
    await store.upsert([n.model_copy(update={"context": None})])
    assert (await store.get(A, ["n1"]))[0].context is None


async def test_context_vectors_can_be_turned_off(embedder: Embedder) -> None:
    off = build_embedded(Settings(params=Params(context_vectors=False)), embedder=embedder, data_dir=":memory:")
    try:
        await off.pipeline.ingest(turns())
        got = await nodes(off)
        assert all(n.context is None for n in got)
        assert all(n.retrieval_vector() == n.embedding for n in got)
    finally:
        await off.close()


async def test_deleting_nodes_deletes_their_context_vectors(embedder: Embedder, tmp_path: Path) -> None:
    m = build_embedded(Settings(), embedder=embedder, data_dir=tmp_path)
    try:
        await m.pipeline.ingest(turns())
        with closing(sqlite3.connect(tmp_path / "memory.sqlite3")) as db:
            assert db.execute("SELECT COUNT(*) FROM node_contexts").fetchone()[0] == 3
            await m.pipeline.forget(A, "e3")  # e3 had one, and e4 (after a pause) none
            assert db.execute("SELECT COUNT(*) FROM node_contexts").fetchone()[0] == 2
            await m.pipeline.forget(A, None)
            assert db.execute("SELECT COUNT(*) FROM node_contexts").fetchone()[0] == 0
    finally:
        await m.close()
