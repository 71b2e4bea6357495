"""The embedded store's layout: edges clustered by conversation with every field a column, node
bodies compressed, and stores of the earlier layout read as they were (migrated on open)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np
import orjson
import pytest

from storage.scope_cache import ScopeCache
from storage.sqlite.edges import key, unkey
from storage.sqlite.store import PAGE_SIZE, WAL_BYTES, SqliteEdgeStore, SqliteNodeStore, connect
from tests.conftest import chat_observations
from topology.fakes import HashingEmbedder
from topology.ids import stable_uuid
from topology.schemas import EdgeEvent, MemoryNode, Scope, View

SCOPE = Scope(tenant_id="t1", conversation_id="c1")


def _edges(ids: Callable[[str], str] = str) -> list[EdgeEvent]:
    return [EdgeEvent(id=ids(f"e{i}"), tenant_id="t1", conversation_id="c1", view=view, source=ids(f"n{i}"),
                      target=ids(f"n{i + 1}"),
                      direction=direction, probability=0.25 + i / 100, label=label, created_by=by)
            for i, (view, direction, label, by) in enumerate([
                ("semantic", "undirected", "related", "system_one"), ("temporal", "directed", "next", "rule"),
                ("entity", "undirected", "shares:ana,lima", "rule"), ("causal", "directed", "causes", "system_one")])]


def _old_store(db: Path, table: str, rows: list[tuple[object, ...]]) -> None:
    """A database whose edge table is ``table`` (an earlier layout, with its two endpoint indexes)."""
    old = sqlite3.connect(db)
    old.executescript(table + """;
        CREATE INDEX edges_source ON edges(tenant, conv, source, view);
        CREATE INDEX edges_target ON edges(tenant, conv, target, view);""")
    old.executemany(f"INSERT INTO edges VALUES ({','.join('?' * len(rows[0]))})", rows)
    old.commit()
    old.close()


async def test_edges_of_the_earlier_layout_are_migrated_on_open_and_read_the_same(tmp_path: Path) -> None:
    db = tmp_path / "memory.sqlite3"
    _old_store(db, """
        CREATE TABLE edges (tenant TEXT NOT NULL, conv TEXT NOT NULL, id TEXT NOT NULL, view TEXT NOT NULL,
          source TEXT NOT NULL, target TEXT NOT NULL, probability REAL NOT NULL, body BLOB NOT NULL,
          PRIMARY KEY (tenant, conv, id))""", [
        (e.tenant_id, e.conversation_id, e.id, e.view, e.source, e.target, e.probability,
         orjson.dumps(e.model_dump(mode="json"))) for e in _edges()])
    conn = connect(db)
    store = SqliteEdgeStore(conn)
    assert await store.scan(SCOPE) == sorted(_edges(), key=lambda e: e.id)
    assert "body" not in {r[1] for r in conn.execute("PRAGMA table_info(edges)")}
    assert "WITHOUT ROWID" in conn.execute("SELECT sql FROM sqlite_master WHERE name='edges'").fetchone()[0]
    assert {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE tbl_name='edges' AND type='index'")} == {
        "edges_to"}
    got = await store.neighbours(SCOPE, ["n1"], ["semantic", "temporal"], 10)
    assert [e.id for e in got] == ["e1", "e0"]
    conn.close()
    assert await SqliteEdgeStore(connect(db)).scan(SCOPE) == sorted(_edges(), key=lambda e: e.id)  # opened again


async def test_edges_of_the_text_id_layout_are_rewritten_with_binary_ids(tmp_path: Path) -> None:
    db = tmp_path / "memory.sqlite3"
    edges = _edges(stable_uuid)
    _old_store(db, """
        CREATE TABLE edges (tenant TEXT NOT NULL, conv TEXT NOT NULL, id TEXT NOT NULL, view TEXT NOT NULL,
          source TEXT NOT NULL, target TEXT NOT NULL, probability REAL NOT NULL, label TEXT NOT NULL,
          directed INTEGER NOT NULL, by_rule INTEGER NOT NULL, version INTEGER NOT NULL,
          PRIMARY KEY (tenant, conv, id)) WITHOUT ROWID""", [
        (e.tenant_id, e.conversation_id, e.id, e.view, e.source, e.target, e.probability, e.label,
         int(e.direction == "directed"), int(e.created_by == "rule"), e.schema_version) for e in edges])
    conn = connect(db)
    store = SqliteEdgeStore(conn)
    assert await store.scan(SCOPE) == sorted(edges, key=lambda e: e.id)
    assert conn.execute("SELECT DISTINCT typeof(id), length(id), typeof(source), typeof(target) FROM edges").fetchall() == [
        ("blob", 16, "blob", "blob")]
    got = await store.neighbours(SCOPE, [edges[1].source], ["semantic", "temporal"], 10)
    assert got == sorted(edges[:2], key=lambda e: -e.probability)
    conn.close()


async def test_a_store_that_named_the_conversation_in_every_edge_is_rewritten_with_scope_numbers(
        tmp_path: Path) -> None:
    db = tmp_path / "memory.sqlite3"
    edges = _edges(stable_uuid)
    other = EdgeEvent(id=stable_uuid("x0"), tenant_id="t1", conversation_id="c2", view="semantic",
                      source=stable_uuid("n0"), target=stable_uuid("n9"), direction="undirected", probability=0.9,
                      label="related", created_by="system_one")
    old = sqlite3.connect(db)
    old.executescript("""
        CREATE TABLE edges (tenant TEXT NOT NULL, conv TEXT NOT NULL, source BLOB NOT NULL, view TEXT NOT NULL,
          id BLOB NOT NULL, target BLOB NOT NULL, probability REAL NOT NULL, label TEXT NOT NULL,
          directed INTEGER NOT NULL, by_rule INTEGER NOT NULL, version INTEGER NOT NULL,
          PRIMARY KEY (tenant, conv, source, view, id)) WITHOUT ROWID;
        CREATE INDEX edges_by_target ON edges(tenant, conv, target, view);""")
    old.executemany("INSERT INTO edges VALUES (?,?,?,?,?,?,?,?,?,?,?)", [
        (e.tenant_id, e.conversation_id, key(e.source), e.view, key(e.id), key(e.target), e.probability, e.label,
         int(e.direction == "directed"), int(e.created_by == "rule"), e.schema_version) for e in [*edges, other]])
    old.commit()
    old.close()
    conn = connect(db)
    store = SqliteEdgeStore(conn)
    assert "tenant" not in {r[1] for r in conn.execute("PRAGMA table_info(edges)")}
    assert sorted(conn.execute("SELECT tenant, conv FROM edge_scopes")) == [("t1", "c1"), ("t1", "c2")]
    assert {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE tbl_name='edges' AND type='index'")} == {
        "edges_to"}
    plan = " ".join(str(r) for r in conn.execute(
        "EXPLAIN QUERY PLAN SELECT source, view, id, target, probability, label, directed, by_rule, version "
        "FROM edges WHERE scope=? AND target IN (?) AND view IN (?)", (1, b"x", 0)))
    assert "COVERING INDEX edges_to" in plan
    assert await store.scan(SCOPE) == sorted(edges, key=lambda e: e.id)
    target = edges[0].target
    got = await store.neighbours(SCOPE, [target], ["semantic", "temporal", "entity", "causal"], 10)
    assert got == sorted([e for e in edges if target in (e.source, e.target)], key=lambda e: (-e.probability, e.id))
    assert await store.conversations_touching("t1", [stable_uuid("n0")]) == ["c1", "c2"]
    conn.close()


async def test_a_conversations_number_goes_with_its_edges_and_a_new_one_is_given_when_it_has_edges_again(
        tmp_path: Path) -> None:
    conn = connect(tmp_path / "memory.sqlite3")
    store = SqliteEdgeStore(conn)
    await store.upsert(_edges(stable_uuid))
    assert conn.execute("SELECT tenant, conv FROM edge_scopes").fetchall() == [("t1", "c1")]
    assert await store.delete_scope(SCOPE) == 4
    assert conn.execute("SELECT COUNT(*) FROM edge_scopes").fetchone() == (0,)
    assert await store.scan(SCOPE) == []
    assert await store.neighbours(SCOPE, [stable_uuid("n1")], ["semantic", "temporal"], 10) == []
    await store.upsert(_edges(stable_uuid)[:1])
    assert await store.scan(SCOPE) == _edges(stable_uuid)[:1]
    conn.close()
    assert await SqliteEdgeStore(connect(tmp_path / "memory.sqlite3")).scan(SCOPE) == _edges(stable_uuid)[:1]


def test_uuid_ids_are_stored_as_their_bytes_in_the_same_order_and_other_ids_as_text() -> None:
    uuids = sorted(stable_uuid(str(i)) for i in range(200))
    assert all(isinstance(key(u), bytes) and len(key(u)) == 16 and unkey(key(u)) == u for u in uuids)
    assert sorted(uuids, key=key) == uuids  # byte order is the string order
    for other in ("e1", "n1", uuids[0].upper(), uuids[0].replace("-", ""), "g" + uuids[0][1:]):
        assert key(other) == other and unkey(other) == other


async def test_node_bodies_are_compressed_and_bodies_written_before_are_read(tmp_path: Path) -> None:
    conn = connect(tmp_path / "memory.sqlite3")
    nodes = SqliteNodeStore(conn)
    [vec] = HashingEmbedder().embed(["hello"])
    a = MemoryNode(id="a", tenant_id="t1", conversation_id="c1", event_id="e1", seq=0, content="hello " * 50,
                   tokens=["hello"], embedding=vec)
    await nodes.upsert([a])
    body = conn.execute("SELECT body FROM nodes WHERE id='a'").fetchone()[0]
    assert body[:1] != b"{" and len(body) < len(orjson.dumps(a.without_embedding().model_dump(mode="json"))) / 2
    b = a.model_copy(update={"id": "b", "event_id": "e2", "seq": 1, "embedding": None})
    conn.execute("INSERT INTO nodes (tenant, conv, id, event_id, seq, kind, body, embedding) VALUES (?,?,?,?,?,?,?,?)",
                 ("t1", "c1", "b", "e2", 1, "observation", orjson.dumps(b.model_dump(mode="json")), None))
    fresh = SqliteNodeStore(conn)
    assert await fresh.get(SCOPE, ["a", "b"]) == [a, b]
    assert await fresh.scan(SCOPE) == [a.without_embedding(), b]  # a scan reads bodies only
    nodes, rows = await fresh.scan_rows(SCOPE, len(vec))
    assert nodes == [a.without_embedding(), b] and rows[0].tolist() == vec and not rows[1].any()


@pytest.mark.parametrize("dim", [None, HashingEmbedder().dim])
async def test_the_write_path_cache_keeps_each_embedding_once_and_gives_it_back_exactly(dim: int | None) -> None:
    """With ``dim``, a conversation is reloaded in one scan with its embeddings as rows; without,
    by a scan and a get of its nodes: the same nodes and vectors either way."""
    from jevmem.wiring import embedded_stores

    stores = embedded_stores(":memory:", HashingEmbedder().dim)
    cache = ScopeCache(stores.nodes, max_nodes=100, dim=dim)
    obs = chat_observations(n=6)
    emb = HashingEmbedder().embed([o.content for o in obs])
    written = [MemoryNode(id=f"n{i}", tenant_id="t1", conversation_id="c1", event_id=o.event_id, seq=i,
                          content=o.content, embedding=emb[i]) for i, o in enumerate(obs)]
    await stores.nodes.upsert(written)
    await cache.add(written)
    held = await cache.get_nodes(SCOPE, [n.id for n in written])
    assert [n.embedding for n in held] == [None] * 6  # nodes are held without their vectors
    rows = await cache.embeddings(SCOPE, [n.id for n in written] + ["unknown"], HashingEmbedder().dim)
    assert rows[:6].tolist() == emb and not rows[6].any()
    await cache.drop(SCOPE)  # reloaded from the store: the same vectors
    assert (await cache.embeddings(SCOPE, [n.id for n in written], HashingEmbedder().dim)).tolist() == emb
    assert await cache.get_nodes(SCOPE, [n.id for n in written]) == [n.without_embedding() for n in written]
    await stores.close()


def _node(conv: str, seq: int) -> MemoryNode:
    return MemoryNode(id=f"{conv}-n{seq}", tenant_id="t1", conversation_id=conv, event_id=f"e{seq}", seq=seq,
                      content=f"turn {seq} of {conv}", embedding=[0.5, 0.5])


def _rows_by_conversation(conn: sqlite3.Connection) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for conv, n in conn.execute("SELECT conv, n FROM nodes ORDER BY n"):
        out.setdefault(conv, []).append(n)
    return out


async def test_interleaved_conversations_get_contiguous_node_rows(tmp_path: Path) -> None:
    conn = connect(tmp_path / "memory.sqlite3")
    store = SqliteNodeStore(conn)
    for seq in range(5):  # conversations arriving interleaved, a batch mixing both
        await store.upsert([_node("a", seq), _node("b", seq)])
    await store.upsert([_node("a", 2).model_copy(update={"content": "rewritten"})])  # keeps its row
    rows = _rows_by_conversation(conn)
    assert [conv for conv, _ in conn.execute("SELECT conv, n FROM nodes ORDER BY n")] == ["a"] * 5 + ["b"] * 5
    assert all(ns == list(range(ns[0], ns[0] + 5)) for ns in rows.values())
    assert {ns[0] >> 32 for ns in rows.values()} == {0, 1}  # one block each
    reopened = SqliteNodeStore(connect(tmp_path / "memory.sqlite3"))  # a new process continues the block
    await reopened.upsert([_node("a", 5)])
    assert _rows_by_conversation(conn)["a"] == list(range(rows["a"][0], rows["a"][0] + 6))
    assert (await store.get(Scope(tenant_id="t1", conversation_id="a"), ["a-n2"]))[0].content == "rewritten"


async def test_nodes_of_the_insertion_ordered_layout_are_rewritten_by_conversation(tmp_path: Path) -> None:
    db = tmp_path / "memory.sqlite3"
    old = sqlite3.connect(db)
    old.executescript("""
        CREATE TABLE nodes (tenant TEXT NOT NULL, conv TEXT NOT NULL, id TEXT NOT NULL, event_id TEXT NOT NULL,
          seq INTEGER NOT NULL, kind TEXT NOT NULL, body BLOB NOT NULL, embedding BLOB, PRIMARY KEY (tenant, conv, id));
        CREATE UNIQUE INDEX nodes_event ON nodes(tenant, conv, event_id);
        CREATE INDEX nodes_seq ON nodes(tenant, conv, seq);""")
    written = [_node(conv, seq) for seq in range(4) for conv in ("b", "a")]
    old.executemany("INSERT INTO nodes VALUES (?,?,?,?,?,?,?,?)", [
        (n.tenant_id, n.conversation_id, n.id, n.event_id, n.seq, n.kind, orjson.dumps(n.without_embedding().model_dump(
            mode="json")), np.asarray(n.embedding, dtype=np.float32).tobytes()) for n in written])
    old.commit()
    old.close()
    conn = connect(db)
    store = SqliteNodeStore(conn)
    for conv in ("a", "b"):
        scope = Scope(tenant_id="t1", conversation_id=conv)
        mine = [n for n in written if n.conversation_id == conv]
        assert await store.get(scope, [n.id for n in mine]) == mine
    rows = _rows_by_conversation(conn)
    assert rows == {"a": [0, 1, 2, 3], "b": [1 << 32, (1 << 32) + 1, (1 << 32) + 2, (1 << 32) + 3]}
    assert [r[0] for r in conn.execute("SELECT seq FROM nodes WHERE conv='b' ORDER BY n")] == [0, 1, 2, 3]
    assert {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE tbl_name='nodes' AND type='index'")} >= {
        "nodes_event", "nodes_seq"}
    assert conn.execute("SELECT value FROM meta WHERE key='nodes'").fetchone()[0] == "conversation-blocks-v1"
    await store.upsert([_node("c", 0), _node("a", 4)])  # a new conversation gets the next block
    assert _rows_by_conversation(conn)["c"] == [2 << 32] and _rows_by_conversation(conn)["a"][-1] == 4
    conn.close()
    assert len(_rows_by_conversation(connect(db))) == 3  # opened again: nothing to migrate


async def test_a_store_made_before_nodes_carried_their_user_gains_the_column(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite3"
    old = sqlite3.connect(db)
    old.execute("CREATE TABLE nodes (n INTEGER PRIMARY KEY, tenant TEXT NOT NULL, conv TEXT NOT NULL, id TEXT NOT NULL, "
                "event_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, body BLOB NOT NULL, embedding BLOB, "
                "UNIQUE (tenant, conv, id))")
    old.commit()
    old.close()
    conn = connect(db)
    assert "user" in {r[1] for r in conn.execute("PRAGMA table_info(nodes)")}
    node = MemoryNode(id="n1", tenant_id="t1", conversation_id="c1", event_id="e1", user_id="ana", seq=0, content="hi")
    await SqliteNodeStore(conn).upsert([node])
    assert conn.execute("SELECT user FROM nodes WHERE id='n1'").fetchone()[0] == "ana"
    assert conn.execute("SELECT COUNT(*) FROM sqlite_master WHERE name='nodes_user'").fetchone()[0] == 1
    conn.close()
    connect(db).close()  # opening it again changes nothing


async def test_a_new_store_holds_several_turns_with_their_embeddings_a_page_and_an_older_one_keeps_its_pages(
        tmp_path: Path) -> None:
    conn = connect(tmp_path / "memory.sqlite3")
    assert conn.execute("PRAGMA page_size").fetchone()[0] == PAGE_SIZE
    store = SqliteNodeStore(conn)
    vec = [0.05] * 384  # a 384-wide float32 embedding (1,536 bytes) and a turn's body: over 2 KB a row
    await store.upsert([MemoryNode(id=f"n{i}", tenant_id="t1", conversation_id="c1", event_id=f"e{i}", seq=i,
                                   content=f"turn {i}: " + "a sentence of a chat turn with some words " * 8,
                                   tokens=["sentence", "chat", "turn"], embedding=vec) for i in range(200)])
    leaf_pages = conn.execute("SELECT count(*) FROM dbstat WHERE name='nodes' AND pagetype='leaf'").fetchone()[0]
    assert 200 / leaf_pages >= 5  # 4 KiB pages held one such row each
    old = tmp_path / "old.sqlite3"
    sqlite3.connect(old).execute("CREATE TABLE t (x)").connection.commit()  # made with SQLite's default pages
    assert connect(old).execute("PRAGMA page_size").fetchone()[0] == 4096


def test_the_write_ahead_log_is_checkpointed_and_cut_back_by_bytes_not_pages(tmp_path: Path) -> None:
    conn = connect(tmp_path / "memory.sqlite3")
    db = tmp_path / "memory.sqlite3"
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] * PAGE_SIZE == WAL_BYTES
    assert conn.execute("PRAGMA journal_size_limit").fetchone()[0] == WAL_BYTES
    conn.execute("CREATE TABLE filler (b BLOB)")
    for _ in range(3):  # 3 x 6 MiB committed, each more than the threshold
        conn.executemany("INSERT INTO filler VALUES (?)", [(np.random.default_rng(0).bytes(8192),)] * 768)
    conn.execute("INSERT INTO filler VALUES (x'00')")  # a small commit after a checkpoint
    assert (tmp_path / "memory.sqlite3-wal").stat().st_size <= WAL_BYTES + 2 * PAGE_SIZE
    assert db.stat().st_size > 3 * 6 << 20
    conn.close()


async def test_labelled_reads_skip_conversations_without_such_an_edge_and_see_new_and_deleted_ones(
        tmp_path: Path) -> None:
    store = SqliteEdgeStore(connect(tmp_path / "memory.sqlite3"))
    other = Scope(tenant_id="t1", conversation_id="c2")
    await store.upsert(_edges(stable_uuid))
    ids = [stable_uuid(f"n{i}") for i in range(5)]
    views: list[View] = ["semantic", "temporal", "entity", "causal"]
    assert await store.labelled(SCOPE, ids, views, 10, "supersedes") == []  # the scope has none so labelled
    assert await store.labelled(other, ids, views, 10, "next") == []  # a scope without edges
    # a supersedes edge written after the scope's labelled ends were read is found
    newer = EdgeEvent(id=stable_uuid("e9"), tenant_id="t1", conversation_id="c1", view="semantic",
                      source=stable_uuid("n4"), target=stable_uuid("n0"), direction="directed", probability=0.9,
                      label="supersedes", created_by="system_one")
    await store.upsert([newer])
    assert await store.labelled(SCOPE, [stable_uuid("n0")], views, 10, "supersedes") == [newer]
    assert await store.labelled(SCOPE, [stable_uuid("n2")], views, 10, "supersedes") == []
    # many reads in one call answer as the reads one by one
    reads = [(SCOPE, ids), (other, ids), (SCOPE, ids[:2])]
    for label in (None, "supersedes", "next"):
        one = [await (store.neighbours(s, got, views, 3) if label is None else store.labelled(s, got, views, 3, label))
               for s, got in reads]
        assert await store.read_many(reads, views, 3, label) == one
    assert await store.delete(SCOPE, [stable_uuid("n4")]) == 2
    assert await store.labelled(SCOPE, [stable_uuid("n0")], views, 10, "supersedes") == []
