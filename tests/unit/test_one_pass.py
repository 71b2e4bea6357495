"""One pass per turn: each turn embedded after the turn before it in its sitting; which turn
that is, that batching changes nothing, and that a forget re-embeds the next turn exactly as
writing the conversation without the forgotten turn does (bit for bit), in every store, in the
write path's in-memory conversation and in a rebuild from the observations or from the log."""

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
from streams import forget as forgetting
from streams.replay import rebuild_from_log, recompute
from topology import ids
from topology.fakes import HashingEmbedder
from topology.ports import Embedder
from topology.schemas import EdgeEvent, Forget, MemoryNode, Observation, Scope, encode
from topology.stages import context

A = Scope(tenant_id="t1", conversation_id="c1")
T0 = datetime(2024, 3, 1, 18, 0, tzinfo=UTC)
TURNS = [  # (speaker, text, minutes after T0): the last turn comes after a night's pause
    ("Ana", "Did you go to the support group on Friday?", 0),
    ("Ben", "Yes, and I met two people who also moved here last year.", 1),
    ("Ana", "That sounds lovely, will you go again?", 2),
    ("Ben", "Every week from now on.", 3),
    ("Ana", "Good morning! I finally finished the painting of the lake.", 60 * 14),
]
#: a hashing embedder whose vector of a turn changes with the turn it is read after
AFTER = HashingEmbedder(after=True)


def turns(*which: int) -> list[Observation]:
    keep = which or tuple(range(len(TURNS)))
    return [Observation(tenant_id=A.tenant_id, conversation_id=A.conversation_id, event_id=f"e{i}", content=text,
                        speaker=speaker, observed_at=T0 + timedelta(minutes=minutes))
            for i, (speaker, text, minutes) in enumerate(TURNS) if i in keep]


def stack(data_dir: Path | str = ":memory:", chunk: int | None = None) -> Embedded:
    m = build_embedded(Settings(), embedder=AFTER, data_dir=data_dir)
    if chunk is not None:
        m.pipeline.chunk = chunk
    return m


@pytest.fixture
async def mem() -> AsyncIterator[Embedded]:
    m = stack()
    yield m
    await m.close()


def nid(i: int) -> str:
    return ids.node_id(A.tenant_id, A.conversation_id, f"e{i}")


async def nodes(mem: Embedded) -> dict[str, MemoryNode]:
    return {n.event_id: n for n in await mem.stores.nodes.get(A, [nid(i) for i in range(len(TURNS))])}


async def test_a_turn_is_read_after_the_turn_before_it_in_its_sitting(mem: Embedded) -> None:
    await mem.pipeline.ingest(turns())
    got = await nodes(mem)
    # e4 opens a sitting (a night's pause): embedded alone, as is the conversation's first turn
    assert [got[f"e{i}"].after for i in range(5)] == [None, nid(0), nid(1), nid(2), None]
    # what is embedded: the end of the turn before (speaker: text), then the turn, in one pass
    assert context.before_text(got["e0"]) == f"Ana: {TURNS[0][1]}"
    assert got["e1"].embedding == AFTER.embed_after([(f"Ana: {TURNS[0][1]}", f"Ben: {TURNS[1][1]}")])[0]
    assert got["e0"].embedding == AFTER.embed([f"Ana: {TURNS[0][1]}"])[0]
    assert got["e4"].embedding == AFTER.embed([f"Ana: {TURNS[4][1]}"])[0]
    assert all(n.context is None for n in got.values())  # one vector a turn
    # the node's embedding is what queries rank by
    q = AFTER.embed_query(["Who did Ben meet at the support group?"])[0]
    for h in await mem.stores.vectors.search(A, q, 10):
        by_id = {n.id: n for n in got.values()}
        assert h.score == pytest.approx(float(np.dot(by_id[h.id].embedding or [], q)), abs=1e-9)


def test_a_short_turn_is_read_after_a_short_turn_only() -> None:
    """A long turn says what it means itself, and a short turn read after a long one drifts towards
    that turn's topic: both are read alone; a short reply to a short turn is read after it."""
    def turn(seq: int, words: int, speaker: str) -> MemoryNode:
        return MemoryNode(id=f"n{seq}", tenant_id="t", conversation_id="c", event_id=f"e{seq}", seq=seq,
                          content=" ".join(["word"] * words), speaker=speaker,
                          observed_at=T0 + timedelta(minutes=seq))

    short_q, short_a = turn(0, 8, "user"), turn(1, 6, "assistant")
    long_answer, short_after_long = turn(2, context.SELF_CONTAINED_WORDS, "assistant"), turn(3, 10, "user")
    nodes = [short_q, short_a, long_answer, short_after_long]
    before = {short_a.id: short_q, long_answer.id: short_a, short_after_long.id: long_answer}
    read_after = [b.id if b is not None else None for b, _ in context.pairs(nodes, before)]
    assert read_after == [None, short_q.id, None, None]


def test_the_text_before_is_cut_at_its_start() -> None:
    before = MemoryNode(id="a", tenant_id="t", conversation_id="c", event_id="a", seq=0, content="x" * 2000,
                        speaker="Ana")
    assert context.before_text(before) == "x" * context.BEFORE_CHARS


@pytest.mark.parametrize("chunk", [1, 2, 64])
async def test_vectors_do_not_depend_on_batching(chunk: int) -> None:
    one, many = stack(), stack(chunk=chunk)
    try:
        await one.pipeline.ingest(turns())
        for i in range(0, len(TURNS), 2):  # two turns a batch: the turn before is read from the store
            await many.pipeline.ingest(turns(i, i + 1))
        want = {k: (n.embedding, n.after) for k, n in (await nodes(one)).items()}
        assert {k: (n.embedding, n.after) for k, n in (await nodes(many)).items()} == want
        await many.pipeline.ingest(turns(2, 3))  # re-sent events keep their seqs and so their vectors
        assert {k: (n.embedding, n.after) for k, n in (await nodes(many)).items()} == want
    finally:
        await one.close()
        await many.close()


async def without(*skip: int) -> dict[str, MemoryNode]:
    """The nodes of the conversation written without the turns ``skip``."""
    fresh = stack()
    try:
        await fresh.pipeline.ingest([o for i, o in enumerate(turns()) if i not in skip])
        return await nodes(fresh)
    finally:
        await fresh.close()


async def test_forgetting_a_turn_re_embeds_the_next_as_if_never_written(mem: Embedded) -> None:
    await mem.pipeline.ingest(turns())
    before = await nodes(mem)
    rep = await mem.pipeline.forget(A, "e1")
    got = await nodes(mem)
    assert "e1" not in got
    assert [n.event_id for n in rep.rewritten] == ["e2"]
    want = (await without(1))["e2"]
    assert got["e2"].after == nid(0) and want.after == nid(0)
    assert got["e2"].embedding == want.embedding  # bit for bit
    assert got["e2"].embedding != before["e2"].embedding
    assert got["e3"].embedding == before["e3"].embedding  # only the next turn read the forgotten one
    # the vector index ranks by the new vector, and the write path's in-memory conversation holds it
    q = AFTER.embed_query(["will you go again"])[0]
    hits = {h.id: h.score for h in await mem.stores.vectors.search(A, q, 10)}
    assert hits[nid(2)] == pytest.approx(float(np.dot(want.embedding or [], q)), abs=1e-9)
    held = await mem.pipeline.write_path.reader.embeddings(A, [nid(2)], AFTER.dim)
    assert held[0].tolist() == want.embedding
    # forgetting the turn before it too: read after the one before both (the forgotten seqs skipped)
    await mem.pipeline.forget(A, "e2")
    assert (await nodes(mem))["e3"].embedding == (await without(1, 2))["e3"].embedding
    # sending a forgotten event again brings it back at its seq; the turn after it is not re-read
    await mem.pipeline.ingest(turns(2))
    assert (await nodes(mem))["e2"].after == nid(0)


async def test_forgetting_the_turn_before_a_new_sitting_leaves_it_alone(mem: Embedded) -> None:
    await mem.pipeline.ingest(turns())
    first = (await nodes(mem))["e4"]
    rep = await mem.pipeline.forget(A, "e3")
    assert [n.event_id for n in rep.rewritten] == ["e4"]  # computed again, the same: still alone
    assert (await nodes(mem))["e4"].embedding == first.embedding
    assert (await mem.pipeline.forget(A, "e4")).rewritten == []  # the last turn: nothing after it


async def test_rebuilds_after_a_forget_give_the_same_vectors(mem: Embedded) -> None:
    await mem.pipeline.ingest(turns())
    logged = [encode(n) for n in (await nodes(mem)).values()]
    forget = Forget(tenant_id=A.tenant_id, conversation_id=A.conversation_id, event_id="e1",
                    requested_at=datetime.now(UTC))
    marker = await forgetting.plan(mem.stores, forget)
    rep = await forgetting.apply(mem.stores, marker, embedder=AFTER)
    # the derived log as the worker writes it: the nodes, the marker, then the re-embedded turn
    logged += [encode(marker), *(encode(n) for n in rep.rewritten)]
    live = {k: (n.embedding, n.after, n.seq) for k, n in (await nodes(mem)).items()}
    from_log, from_observations = stack(), stack()
    try:
        await rebuild_from_log(from_log.stores, logged, [], [])
        assert {k: (n.embedding, n.after, n.seq) for k, n in (await nodes(from_log)).items()} == live
        await recompute(from_observations.pipeline, [o.model_dump_json().encode() for o in turns()] +
                        [forget.model_dump_json().encode()])
        assert {k: (n.embedding, n.after, n.seq) for k, n in (await nodes(from_observations)).items()} == live
    finally:
        await from_log.close()
        await from_observations.close()


def _graph(edges: list[EdgeEvent]) -> list[tuple[str, str, str, str, float, str]]:
    return sorted((e.view, e.label, e.source, e.target, e.probability, e.created_by) for e in edges)


async def _answers(mem: Embedded, question: str) -> list[tuple[str, float]]:
    return [(e.event_id, e.score) for e in (await mem.controller.retrieve(A, question, 10)).evidence]


async def test_forgetting_a_turn_links_the_next_again_as_if_never_written(mem: Embedded) -> None:
    """After forgetting turn n of (n-1, n, n+1), turn n+1 has the edges, and queries the ranks
    and scores, of writing n-1 and n, forgetting n, then writing n+1 (the same seq gap)."""
    await mem.pipeline.ingest(turns(0, 1, 2))
    written = [e for e in await mem.stores.edges.scan(A) if nid(2) in (e.source, e.target)]
    rep = await mem.pipeline.forget(A, "e1")
    assert rep.relinked and all(nid(2) in (e.source, e.target) for e in rep.relinked)
    never = stack()
    try:
        await never.pipeline.ingest(turns(0, 1))
        await never.pipeline.forget(A, "e1")
        await never.pipeline.ingest(turns(2))
        want = _graph(await never.stores.edges.scan(A))
        assert _graph(await mem.stores.edges.scan(A)) == want and want
        assert _graph(written) != _graph([e for e in await mem.stores.edges.scan(A) if nid(2) in (e.source, e.target)])
        for q in ("will you go again", "who moved here last year"):
            assert await _answers(mem, q) == await _answers(never, q)
    finally:
        await never.close()


async def test_a_rebuild_from_the_edges_topic_after_a_forget_gives_the_live_edges(mem: Embedded) -> None:
    await mem.pipeline.ingest(turns())
    logged_nodes = [encode(n) for n in (await nodes(mem)).values()]
    logged_edges = [encode(e) for e in await mem.stores.edges.scan(A)]
    forget = Forget(tenant_id=A.tenant_id, conversation_id=A.conversation_id, event_id="e1",
                    requested_at=datetime.now(UTC))
    marker = await forgetting.plan(mem.stores, forget)
    assert marker.relinked == nid(2) and marker.replaced_edges
    rep = await forgetting.apply(mem.stores, marker, embedder=AFTER, relink=mem.stores.relink)
    # the log as the worker writes it: the marker on both topics, then the re-embedded turn and its new edges
    logged_nodes += [encode(marker), *(encode(n) for n in rep.rewritten)]
    logged_edges += [encode(marker), *(encode(e) for e in rep.relinked)]
    from_log, from_observations = stack(), stack()
    try:
        report = await rebuild_from_log(from_log.stores, logged_nodes, logged_edges, [])
        live = _graph(await mem.stores.edges.scan(A))
        assert _graph(await from_log.stores.edges.scan(A)) == live
        # what the rebuild stored: e2 logged twice (written, then re-embedded) counts once, e1 not at all
        stored = await from_log.stores.nodes.get(A, [nid(i) for i in range(len(TURNS))])
        assert report.nodes == len(stored) == len(TURNS) - 1 and report.edges == len(live)
        await recompute(from_observations.pipeline, [o.model_dump_json().encode() for o in turns()] +
                        [forget.model_dump_json().encode()])
        assert _graph(await from_observations.stores.edges.scan(A)) == live
        assert await _answers(from_log, "will you go again") == await _answers(mem, "will you go again")
    finally:
        await from_log.close()
        await from_observations.close()


async def test_a_store_of_the_earlier_layout_drops_its_context_vectors(tmp_path: Path) -> None:
    m = stack(tmp_path)
    await m.pipeline.ingest(turns())
    await m.close()
    with closing(sqlite3.connect(tmp_path / "memory.sqlite3")) as db:
        db.execute("CREATE TABLE node_contexts (n INTEGER PRIMARY KEY, context BLOB NOT NULL)")
        db.commit()
    again = stack(tmp_path)
    try:
        assert len(await nodes(again)) == len(TURNS)
        with closing(sqlite3.connect(tmp_path / "memory.sqlite3")) as db:
            assert db.execute("SELECT COUNT(*) FROM sqlite_master WHERE name='node_contexts'").fetchone()[0] == 0
    finally:
        await again.close()


def test_the_model_reads_a_turn_after_another_in_one_pass(model_embedder: Embedder) -> None:
    turn, before = "Ben: Yes, last Friday.", "Ana: Did you go to the support group?"
    alone = model_embedder.embed([turn])[0]
    assert model_embedder.embed_after([(None, turn)])[0] == alone
    after = model_embedder.embed_after([(before, turn)])[0]
    assert after != alone and abs(float(np.linalg.norm(after)) - 1.0) < 1e-5
    # each text on its own: the same vectors in any batch
    batch = model_embedder.embed_after([(before, turn), (None, "Ana: hello"), ("x " * 900, turn)])
    assert batch[0] == after and batch[1] == model_embedder.embed(["Ana: hello"])[0]
    assert batch[2] == model_embedder.embed_after([("x " * 900, turn)])[0]  # a long turn before is cut, not the turn
