"""A realm's vectors on disk (``storage.sqlite.realm_files``): searched in place, they answer as
the rows held in memory do; a process started afresh answers its first search without reading
the node table; files that disagree with the node table are rebuilt from it; a forgotten node's
vector leaves them; a realm larger than the memory budget is searched without being held."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from storage.sqlite.realm_files import realm_path
from storage.sqlite.store import SqliteNodeStore, connect
from storage.sqlite.vectors import MatrixVectorIndex
from topology import ids
from topology.schemas import MemoryNode, Realm, Scope

DIM = 8


def _nodes(n: int, seed: int = 3, users: int = 2) -> list[MemoryNode]:
    rng = np.random.default_rng(seed)
    vecs = rng.standard_normal((n, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    vecs[5] = vecs[2]  # a tie for every query
    out = []
    for k in range(n):
        conv = f"c{k % 7}"
        out.append(MemoryNode(id=ids.node_id("a", conv, str(k)), tenant_id="a", conversation_id=conv,
                              event_id=str(k), seq=k, content="x", user_id=f"u{k % users}",
                              embedding=None if k % 13 == 4 else vecs[k].astype(float).tolist()))
    return out


async def _write(conn_path: Path, folder: Path | None, *batches: list[MemoryNode]) -> MatrixVectorIndex:
    """The write path's order, a batch at a time: the vector index is told first, then the node table."""
    conn = connect(conn_path)
    index = MatrixVectorIndex(conn, DIM, realms=folder)
    for nodes in batches:
        await index.upsert(nodes)
        await SqliteNodeStore(conn).upsert(nodes)
    return index


def _queries(seed: int) -> list[tuple[Realm, list[float]]]:
    rng = np.random.default_rng(seed)
    realms = [Realm(tenant_id="a", user_id="u1"), Realm(tenant_id="a"), Realm(tenant_id="a", user_id="u0"),
              Realm(tenant_id="a", user_id="u1", conversation_ids=("c1", "c3", "nope")), Realm(tenant_id="a", user_id="zz")]
    return [(realms[k % len(realms)], rng.standard_normal(DIM).tolist()) for k in range(40)]


async def test_realm_files_answer_as_rows_held_in_memory(tmp_path: Path) -> None:
    nodes = _nodes(150)
    # rewritten nodes (a new vector for one, none for another) replace their rows
    changed = [nodes[10].model_copy(update={"embedding": nodes[11].embedding}),
               nodes[12].model_copy(update={"embedding": None})]
    held = await _write(tmp_path / "a.sqlite3", None, nodes, changed)
    filed = await _write(tmp_path / "b.sqlite3", tmp_path / "realms", nodes, changed)
    queries = _queries(5)
    for limit in (1, 5, 200):
        expect = [await held.search_realm(r, q, limit) for r, q in queries]
        assert [await filed.search_realm(r, q, limit) for r, q in queries] == expect
        assert await filed.search_realms(queries, limit) == expect
    vectorless = {n.id for n in nodes if n.embedding is None}
    for r, q in queries:
        assert not vectorless & {h.id for h in await filed.search_realm(r, q, 200)}
    assert (tmp_path / "realms").is_dir() and len(list((tmp_path / "realms").rglob("*.rows"))) == 3


async def test_a_started_process_searches_the_files_without_reading_the_node_table(tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = _nodes(120)
    first = await _write(tmp_path / "m.sqlite3", tmp_path / "realms", nodes)
    queries = _queries(8)
    before = [await first.search_realm(r, q, 10) for r, q in queries]
    await first.close()

    def no_scan(self: MatrixVectorIndex, key: object) -> None:
        raise AssertionError("the realm's rows were read from the node table")

    monkeypatch.setattr(MatrixVectorIndex, "_realm_rows", no_scan)
    monkeypatch.setattr(MatrixVectorIndex, "_load_realm", no_scan)
    again = MatrixVectorIndex(connect(tmp_path / "m.sqlite3"), DIM, realms=tmp_path / "realms")
    assert [await again.search_realm(r, q, 10) for r, q in queries] == before


@pytest.mark.parametrize("damage", ["no rows file", "torn append", "rows the table lacks", "written before"])
async def test_files_that_disagree_with_the_node_table_are_rebuilt_from_it(tmp_path: Path, damage: str) -> None:
    nodes = _nodes(90)
    folder = tmp_path / "realms"
    first = await _write(tmp_path / "m.sqlite3", folder, nodes)
    queries = _queries(9)
    before = [await first.search_realm(r, q, 10) for r, q in queries]
    await first.close()
    base = realm_path(folder, "a", "u1")
    rows, vec = base.with_name(base.name + ".rows"), base.with_name(base.name + ".vec")
    if damage == "no rows file":  # a crash inside a rebuild
        rows.unlink()
    elif damage == "torn append":  # vectors written, their records not, or in part
        with open(vec, "ab") as f:
            f.write(b"\1" * (4 * DIM * 3))
        with open(rows, "ab") as f:
            f.write(b"\1" * 30)
    elif damage == "rows the table lacks":  # a crash after the index was told, before the table
        extra = MemoryNode(id=ids.node_id("a", "c1", "x"), tenant_id="a", conversation_id="c1", event_id="x",
                           seq=999, content="x", user_id="u1", embedding=[1.0] + [0.0] * (DIM - 1))
        index = MatrixVectorIndex(connect(tmp_path / "m.sqlite3"), DIM, realms=folder)
        await index.upsert([extra])
        await index.close()
    else:  # a store written before realm files
        for p in folder.rglob("*"):
            if p.is_file():
                p.unlink()
    again = MatrixVectorIndex(connect(tmp_path / "m.sqlite3"), DIM, realms=folder)
    assert [await again.search_realm(r, q, 10) for r, q in queries] == before
    late = MemoryNode(id=ids.node_id("a", "c2", "late"), tenant_id="a", conversation_id="c2", event_id="late",
                      seq=500, content="x", user_id="u1", embedding=list(queries[0][1]))
    await again.upsert([late])  # written after the repair: found first for its own vector
    await SqliteNodeStore(again._conn).upsert([late])
    assert (await again.search_realm(Realm(tenant_id="a", user_id="u1"), late.embedding or [], 1))[0].id == late.id


async def test_a_forgotten_node_leaves_the_realm_files(tmp_path: Path) -> None:
    nodes = _nodes(60)
    folder = tmp_path / "realms"
    conn = connect(tmp_path / "m.sqlite3")
    index = MatrixVectorIndex(conn, DIM, realms=folder)
    store = SqliteNodeStore(conn)
    await index.upsert(nodes)
    await store.upsert(nodes)
    gone = nodes[9]  # user u1, conversation c2
    raw = np.asarray(gone.embedding, dtype=np.float32).tobytes()
    assert len(list(folder.rglob("*.rows"))) == 2  # the users' (the tenant's whole realm waits for a search)
    await index.search_realm(Realm(tenant_id="a"), list(gone.embedding or []), 1)
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert sum(p.read_bytes().count(raw) for p in files) == 2  # its user's realm and its tenant's
    scope = Scope(tenant_id="a", conversation_id="c2")
    await index.delete(scope, [gone.id])  # the forget's order: the index, then the node table
    await store.delete(scope, [gone.id])
    assert sum(p.read_bytes().count(raw) + p.read_bytes().count(gone.id.encode()) for p in files) == 0
    q = list(gone.embedding or [])
    for realm in (Realm(tenant_id="a"), Realm(tenant_id="a", user_id="u1")):
        assert gone.id not in [h.id for h in await index.search_realm(realm, q, 100)]
    await index.close()
    # the next process agrees with the table (no rebuild needed, nothing forgotten comes back)
    again = MatrixVectorIndex(connect(tmp_path / "m.sqlite3"), DIM, realms=folder)
    hits = await again.search_realm(Realm(tenant_id="a", user_id="u1"), q, 100)
    assert gone.id not in [h.id for h in hits] and len(hits) == len([n for n in nodes if n.user_id == "u1"
                                                                    and n.embedding and n is not gone])
    await again.delete_scope(scope)  # the whole conversation
    await SqliteNodeStore(again._conn).delete_scope(scope)
    assert all(h.conversation_id != "c2" for h in await again.search_realm(Realm(tenant_id="a"), q, 100))


async def test_a_realm_larger_than_the_memory_budget_is_searched_without_being_held(tmp_path: Path) -> None:
    nodes = _nodes(400, users=1)
    folder = tmp_path / "realms"
    index = await _write(tmp_path / "m.sqlite3", folder, nodes)
    await index.close()
    small = MatrixVectorIndex(connect(tmp_path / "m.sqlite3"), DIM, max_rows=50, realms=folder)
    whole = MatrixVectorIndex(connect(tmp_path / "m.sqlite3"), DIM)  # held in memory, no bound
    for realm, q in _queries(4):
        assert await small.search_realm(realm, q, 10) == await whole.search_realm(realm, q, 10)
    assert small._rows == 0 and small._file_rows() <= 50 + len({n.conversation_id for n in nodes})
