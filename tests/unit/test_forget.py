"""Forgetting in the embedded store, the seq rule around forgotten events, forget records in an
input batch, per-tenant BM25 in SQLite (and the migration of the old shared FTS table), and
unambiguous record keys."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jevmem.cli import partition_key
from jevmem.settings import Settings
from jevmem.wiring import Embedded, EmbeddedService, build_embedded
from storage.sqlite.store import SqliteLexicalIndex, connect, lexical_table, scope_token
from streams.forget import derived_closure, split_at_forgets
from streams.replay import graph_of
from streams.write_path import decode_batch
from tests.conftest import CHAT, chat_observations
from topology import ids
from topology.params import Params
from topology.pipeline import SeqState, assign_seqs
from topology.ports import Embedder
from topology.schemas import Forget, Forgotten, MemoryNode, Observation, Scope, decode_input, decode_logged, encode

A = Scope(tenant_id="t1", conversation_id="c1")
NOW = datetime(2024, 1, 1, tzinfo=UTC)


class Summariser:
    """A System Two stand-in: derived nodes carry their sources' content."""

    async def summarise(self, texts: Sequence[str]) -> str:
        return " / ".join(texts)


@pytest.fixture
async def mem(embedder: Embedder) -> AsyncIterator[Embedded]:
    params = Params(consolidate_every=4, theta_summary=0.0)
    m = build_embedded(Settings(params=params), embedder=embedder, data_dir=":memory:")
    m.pipeline.write_path.summariser = Summariser()
    yield m
    await m.close()


def obs(scope: Scope, *events: str) -> list[Observation]:
    return [Observation(tenant_id=scope.tenant_id, conversation_id=scope.conversation_id, event_id=e,
                        content=f"text {e}") for e in events]


# -- the store ------------------------------------------------------------------------------


async def test_forgetting_an_observation_removes_it_everywhere(mem: Embedded) -> None:
    await mem.pipeline.ingest(chat_observations())
    s = mem.stores
    nodes = await s.nodes.scan(A)
    derived = [n for n in nodes if n.kind == "derived"]
    assert derived, "the fixture should produce derived nodes"
    victim = next(n for n in nodes if n.kind == "observation" and n.id in derived[0].derived_from)
    doomed = set(derived_closure(victim.id, nodes))
    assert len(doomed) >= 2
    decisions_before = await s.edges.decisions(A)
    assert any({d.left, d.right, d.derived_node_id} & doomed for d in decisions_before)

    out = await mem.pipeline.forget(A, victim.event_id)
    assert out.as_dict()["status"] == "deleted" and out.nodes == len(doomed) and out.edges > 0 and out.decisions > 0

    left = await s.nodes.scan(A)
    assert not doomed & {n.id for n in left}
    assert len(left) == len(nodes) - len(doomed)
    assert all(e.source not in doomed and e.target not in doomed for e in await s.edges.scan(A))
    assert not any({d.left, d.right, d.derived_node_id} & doomed for d in await s.edges.decisions(A))
    assert await s.nodes.get(A, sorted(doomed)) == []
    probe = mem.embedder.embed([victim.content])[0]
    assert not doomed & {h.id for h in await s.vectors.search(A, probe, 100)}
    assert not doomed & {h.id for h in await s.lexical.search(A, victim.content, 100)}
    assert not doomed & set(await s.lexical.overlapping(A, victim.tokens, 10**6, 100))
    res = await mem.controller.retrieve(A, victim.content, top_k=20)
    assert res.evidence and not doomed & {e.node_id for e in res.evidence}
    # the write path's in-memory view forgot it too: new events never link to it
    rep = await mem.pipeline.ingest([Observation(tenant_id="t1", conversation_id="c1", event_id="late",
                                                 content=victim.content)])
    assert rep.results[0].node.seq == len(CHAT)
    assert all(e.source not in doomed for e in rep.results[0].edges)
    # idempotent
    again = await mem.pipeline.forget(A, victim.event_id)
    assert again.as_dict()["status"] == "not_found" and again.seq == victim.seq


async def test_seqs_are_never_reused_and_a_resent_event_gets_its_old_seq(mem: Embedded) -> None:
    events = chat_observations()
    await mem.pipeline.ingest(events[:6])
    await mem.pipeline.forget(A, "e5")  # the latest: next_seq alone would hand 5 out again
    await mem.pipeline.forget(A, "e2")
    assert await mem.stores.nodes.forgotten(A) == {"e5": 5, "e2": 2}
    rep = await mem.pipeline.ingest(events[6:8])
    assert [r.node.seq for r in rep.results] == [6, 7]
    rep = await mem.pipeline.ingest([events[2]])  # re-sent after being forgotten: re-added at its old seq
    assert [r.node.seq for r in rep.results] == [2]
    seqs = sorted(n.seq for n in await mem.stores.nodes.scan(A) if n.kind == "observation")
    assert seqs == [0, 1, 2, 3, 4, 6, 7]
    assert (await mem.stores.nodes.forgotten(A))["e5"] == 5


async def test_forgetting_a_conversation_removes_everything_and_it_restarts_at_zero(mem: Embedded) -> None:
    other = Scope(tenant_id="t1", conversation_id="c2")
    await mem.pipeline.ingest(chat_observations())
    await mem.pipeline.ingest(chat_observations(conversation="c2"))
    await mem.pipeline.forget(A, "e3")
    kept = await graph_of(mem.stores, other)
    out = await mem.pipeline.forget(A, None)
    assert out.nodes > len(CHAT) - 1 and out.edges > 0 and out.decisions > 0
    assert await graph_of(mem.stores, A) == graph_of_empty()
    assert await mem.stores.edges.decisions(A) == []
    assert await mem.stores.lexical.search(A, "Biscuit puppy", 10) == []
    probe = mem.embedder.embed(["Biscuit"])[0]
    assert await mem.stores.vectors.search(A, probe, 10) == []
    assert await graph_of(mem.stores, other) == kept
    rep = await mem.pipeline.ingest(chat_observations(start=3, n=2))
    assert [r.node.seq for r in rep.results] == [0, 1]


def graph_of_empty() -> object:
    from streams.replay import Graph

    return Graph((), (), ())


async def test_the_service_reports_counts(embedder: Embedder, tmp_path: object) -> None:
    service = EmbeddedService(Settings(), embedder=embedder, data_dir=":memory:")
    await service.start()
    try:
        await service.submit(chat_observations(n=4))
        out = await service.forget(A, "e1")
        assert out.status == "deleted" and out.nodes == 1 and out.seq == 1
        assert (await service.forget(A, "never-sent")).status == "not_found"
        assert (await service.forget(A, None)).nodes == 3
        assert await service.nodes(A) == []
    finally:
        await service.stop()


# -- the seq rule (pure) --------------------------------------------------------------------


def test_forgotten_seqs_are_reserved() -> None:
    state = SeqState.of(count=3, next_seq=5, used=[0, 1, 3], reserved=[4, 2])
    assert state == SeqState(5, ())
    assert SeqState.of(count=2, next_seq=2, used=[0, 1], reserved=[2]) == SeqState(3, ())
    got = assign_seqs(obs(A, "x", "gone"), {("t1", "c1", "gone"): 4}, {A: state})
    assert [s for _, s in got] == [5, 4]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "forget", "resend", "crash"]), st.integers(0, 30)),
                min_size=1, max_size=40))
def test_seq_model_with_forgets(ops: list[tuple[str, int]]) -> None:
    """A model store under random adds, forgets, re-sends of forgotten events and batches cut
    short: a seq is never shared by two events, a forgotten event's seq is never given to another
    one, and a re-sent forgotten event gets its old seq back."""
    stored: dict[str, int] = {}      # event -> seq (stored observations)
    forgotten: dict[str, int] = {}   # event -> seq (forgotten records)
    ever: dict[str, int] = {}        # every seq ever handed out
    n = 0

    def number(batch: list[Observation]) -> list[tuple[Observation, int]]:
        used = set(stored.values())
        nxt = max(used, default=-1) + 1
        state = SeqState.of(len(used), nxt, used, forgotten.values())
        known = {("t1", "c1", e): s for e, s in {**forgotten, **stored}.items()}
        return assign_seqs(batch, known, {A: state})

    for op, k in ops:
        if op in ("add", "crash"):
            batch = obs(A, *(f"n{n + i}" for i in range(k % 4 + 1)))
            n += len(batch)
            numbered = number(batch)
            if op == "crash":  # only every other event written, then the batch is redelivered
                for o, s in numbered[::2]:
                    stored[o.event_id] = s
                numbered = number(batch)
            for o, s in numbered:
                stored[o.event_id] = s
        elif op == "forget" and stored:
            e = sorted(stored)[k % len(stored)]
            forgotten[e] = stored.pop(e)
        elif op == "resend" and forgotten:
            e = sorted(forgotten)[k % len(forgotten)]
            (o, s), = number(obs(A, e))
            assert s == forgotten[e]
            stored[e] = s
        for e, s in stored.items():
            assert ever.setdefault(e, s) == s
        assert len(set(stored.values())) == len(stored)
        assert not {s for e, s in forgotten.items() if e not in stored} & set(stored.values())


# -- forget records on the observations topic -----------------------------------------------


def test_forget_records_are_told_apart_and_split_a_batch_in_order() -> None:
    f = Forget(tenant_id="t1", conversation_id="c1", event_id="e1", requested_at=NOW)
    raw = encode(f)
    assert isinstance(decode_input(raw), Forget) and orjson.loads(raw)["op"] == "forget"
    assert isinstance(decode_input(obs(A, "e1")[0].model_dump_json()), Observation)
    marker = Forgotten(tenant_id="t1", conversation_id="c1", event_id="e1", seq=1, node_ids=["n"], requested_at=NOW)
    assert decode_logged(MemoryNode, encode(marker)) == marker
    whole = Forget(tenant_id="t1", conversation_id="c1", requested_at=NOW)
    e1, e2 = obs(A, "e1", "e2")
    values = [(e1.model_dump_json().encode(), "t:0:1"), (e1.model_dump_json().encode(), "t:0:2"), (raw, "t:0:3"),
              (e1.model_dump_json().encode(), "t:0:4"), (e2.model_dump_json().encode(), "t:0:5"),
              (encode(whole), "t:0:6"), (b"{}", "t:0:7")]
    items, letters = decode_batch(values)
    # duplicates collapse only between forgets: e1 after the forget is a new request
    assert items == [e1, f, e1, e2, whole]
    assert [d.source for d in letters] == ["t:0:7"]
    assert split_at_forgets(items) == [[e1], f, [e1, e2], whole]


def test_derived_closure_is_transitive() -> None:
    def node(nid: str, kind: str = "observation", sources: tuple[str, ...] = ()) -> MemoryNode:
        return MemoryNode(id=nid, tenant_id="t", conversation_id="c", event_id=nid, seq=0, content="x",
                          kind=kind, derived_from=list(sources))  # type: ignore[arg-type]

    nodes = [node("a"), node("b"), node("d1", "derived", ("a", "b")), node("d2", "derived", ("d1", "b")),
             node("d3", "derived", ("b",))]
    assert derived_closure("a", nodes) == ["a", "d1", "d2"]


# -- per-tenant BM25 (SQLite) -----------------------------------------------------------------


async def test_sqlite_bm25_and_retrieval_are_per_tenant(embedder: Embedder) -> None:
    """Tenant A's lexical ranking and full retrieval (ids, scores, order) are identical before
    and after tenant B ingests lots of overlapping text."""
    m = build_embedded(Settings(), embedder=embedder, data_dir=":memory:")
    try:
        await m.pipeline.ingest(chat_observations())
        questions = ["What is the name of Ana's puppy?", "When is the Berlin marathon?", "knee running training"]

        async def snapshot() -> list[object]:
            out: list[object] = []
            for q in questions:
                out.append(await m.stores.lexical.search(A, q, 10))
                r = await m.controller.retrieve(A, q, top_k=8)
                out.append([(e.node_id, e.score, e.via) for e in r.evidence])
            return out

        before = await snapshot()
        words = [w for _, text in CHAT for w in text.split()]
        noisy = [Observation(tenant_id="t2", conversation_id="c1", event_id=f"b{i}",
                             content=" ".join(words[(i * 7) % len(words):][:15]) or "Biscuit")
                 for i in range(60)]
        await m.pipeline.ingest(noisy)
        assert await m.stores.lexical.search(Scope(tenant_id="t2", conversation_id="c1"), "Biscuit", 5)
        assert await snapshot() == before
        assert await m.stores.lexical.search(Scope(tenant_id="nobody", conversation_id="c1"), "Biscuit", 5) == []
    finally:
        await m.close()


async def test_an_old_shared_fts_table_is_migrated_on_open(tmp_path: object) -> None:
    from pathlib import Path

    db = Path(str(tmp_path)) / "old.sqlite3"
    raw = sqlite3.connect(db)
    raw.executescript("""
        CREATE TABLE lexical_rows (tenant TEXT NOT NULL, conv TEXT NOT NULL, node TEXT NOT NULL, rid INTEGER NOT NULL,
          PRIMARY KEY (tenant, conv, node));
        CREATE VIRTUAL TABLE lexical_v2 USING fts5(content, scope, tenant UNINDEXED, conv UNINDEXED, node UNINDEXED,
          seq UNINDEXED, tokenize = 'porter unicode61');""")
    rows = [("a puppy named Biscuit", A, "n1", 0), ("Berlin marathon", A, "n2", 1),
            ("another puppy", Scope(tenant_id="t2", conversation_id="c1"), "n3", 0)]
    for content, scope, node, seq in rows:
        cur = raw.execute("INSERT INTO lexical_v2 VALUES (?,?,?,?,?,?)",
                          (content, scope_token(scope), scope.tenant_id, scope.conversation_id, node, seq))
        raw.execute("INSERT INTO lexical_rows VALUES (?,?,?,?)", (scope.tenant_id, scope.conversation_id, node, cur.lastrowid))
    raw.commit()
    raw.close()
    conn = connect(db)
    assert conn.execute("SELECT 1 FROM sqlite_master WHERE name='lexical_v2'").fetchone() is None
    assert conn.execute("SELECT value FROM meta WHERE key='lexical'").fetchone()[0] == "per-tenant-v3"
    assert conn.execute(f"SELECT COUNT(*) FROM {lexical_table('t1')}").fetchone()[0] == 2
    lex = SqliteLexicalIndex(conn)
    assert [h.id for h in await lex.search(A, "puppy", 5)] == ["n1"]
    await lex.delete(A, ["n1"])
    assert await lex.search(A, "puppy", 5) == []
    assert [h.id for h in await lex.search(Scope(tenant_id="t2", conversation_id="c1"), "puppy", 5)] == ["n3"]
    conn.close()
    assert connect(db).execute(f"SELECT COUNT(*) FROM {lexical_table('t1')}").fetchone()[0] == 1  # reopen: no-op


# -- record keys ------------------------------------------------------------------------------


def test_record_keys_are_unambiguous() -> None:
    left = orjson.dumps({"tenant_id": "a/b", "conversation_id": "c"})
    right = orjson.dumps({"tenant_id": "a", "conversation_id": "b/c"})
    assert partition_key(left) != partition_key(right)
    assert partition_key(left) == Scope(tenant_id="a/b", conversation_id="c").key
    assert partition_key(b'{"tenant_id": "a"}') == "invalid"
    assert scope_token(Scope(tenant_id="a/b", conversation_id="c")) != scope_token(Scope(tenant_id="a", conversation_id="b/c"))
    assert ids.node_id("a/b", "c", "e") != ids.node_id("a", "b/c", "e")
    assert lexical_table("a") != lexical_table("A")


async def test_ingest_raw_applies_forget_records_in_order(mem: Embedded) -> None:
    events = [o.model_dump_json().encode() for o in chat_observations(n=5)]
    forget = encode(Forget(tenant_id="t1", conversation_id="c1", event_id="e1", requested_at=NOW))
    rep = await mem.pipeline.ingest_raw([*events[:3], forget, *events[3:], b"[1]"])
    assert rep.forgets == 1 and rep.accepted == 5 and len(rep.dead_letters) == 1
    assert [n.event_id for n in await mem.stores.nodes.scan(A) if n.kind == "observation"] == ["e0", "e2", "e3", "e4"]
    assert await mem.stores.nodes.forgotten(A) == {"e1": 1}
