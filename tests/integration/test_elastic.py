"""Elasticsearch adapters against a real node: each method, parity with the SQLite adapters,
idempotency, tenant isolation, realm searches (one ranking over a tenant's or a user's
conversations) and error translation.

Needs ``JEVMEM_TEST_ES_URL`` (e.g. ``http://127.0.0.1:9200`` after ``scripts/elasticsearch/es.sh start``).
"""

from __future__ import annotations

import os
import random
from collections.abc import Awaitable, Callable

import numpy as np
import pytest

pytestmark = pytest.mark.integration

ES_URL = os.environ.get("JEVMEM_TEST_ES_URL")
if not ES_URL:
    pytest.skip("JEVMEM_TEST_ES_URL is not set", allow_module_level=True)

from elasticsearch import AsyncElasticsearch  # noqa: E402

from storage.elastic import store as elastic  # noqa: E402
from storage.elastic.edges import ElasticEdgeStore  # noqa: E402
from storage.elastic.store import ElasticLexicalIndex, ElasticNodeStore  # noqa: E402
from storage.ports import Hit  # noqa: E402
from storage.sqlite.store import SqliteEdgeStore, SqliteLexicalIndex, SqliteNodeStore, connect  # noqa: E402
from tests.integration.elastic_data import (  # noqa: E402
    A2,
    CHAT,
    A,
    B,
    Stores,
    make_decisions,
    make_edges,
    make_nodes,
    snapshot,
    write_all,
)
from topology.errors import StoreUnavailable  # noqa: E402
from topology.schemas import VIEWS, MemoryNode, Observation, Realm, Scope  # noqa: E402
from topology.stages.memory_nodes import describe  # noqa: E402


async def test_each_method(stores: Stores) -> None:
    nodes = make_nodes(A)
    assert await stores.nodes.next_seq(A) == 0
    assert await stores.nodes.scan(A) == [] and await stores.edges.scan(A) == []
    await write_all(stores, nodes, make_edges(nodes), make_decisions(nodes))

    got = await stores.nodes.get(A, [nodes[3].id, "nope", nodes[1].id])
    assert [n.id for n in got] == [nodes[3].id, nodes[1].id]
    assert got[0].embedding is not None and got[0].embedding == pytest.approx(nodes[3].embedding, abs=1e-6)
    assert got[0].without_embedding() == nodes[3].without_embedding()
    listed = await stores.nodes.scan(A)
    assert [n.id for n in listed] == [n.id for n in nodes] and all(n.embedding is None for n in listed)
    assert await stores.nodes.seqs(A, ["ev-2", "ev-5", "nope"]) == {"ev-2": 2, "ev-5": 5}
    assert await stores.nodes.next_seq(A) == len(CHAT)  # the derived node does not count
    assert await stores.nodes.observation_count(A) == len(CHAT)
    assert await stores.nodes.used_seqs(A) == list(range(len(CHAT)))
    assert await stores.nodes.preceding(A, 5, 3) == [nodes[4].id, nodes[3].id, nodes[2].id]
    assert await stores.nodes.preceding(A, 100, 1) == [nodes[-2].id]  # observations only
    biscuit = await stores.nodes.sharing_entities_before(A, ["ent:biscuit", "ent:clara"], 11, 10)
    assert biscuit[0] == nodes[10].id and set(biscuit) == {nodes[i].id for i in (0, 1, 6, 8, 10)}

    hits = await stores.lex.search(A, "ramen on Sunday", 3)
    assert hits and hits[0].id == nodes[7].id and hits[0].score > 0
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert await stores.lex.search(A, "the and of", 3) == []  # English stopwords only
    over = await stores.lex.overlapping(A, nodes[11].tokens, 11, 3)
    shared = {n.id: (len(set(n.tokens) & set(nodes[11].tokens)), n.seq) for n in nodes[:11]}
    assert over == sorted((i for i in shared if shared[i][0]), key=lambda i: shared[i], reverse=True)[:3]
    assert nodes[11].id not in await stores.lex.overlapping(A, nodes[11].tokens, 11, 50)

    near = await stores.edges.neighbours(A, [nodes[5].id], list(VIEWS), 100)
    assert near and all(nodes[5].id in (e.source, e.target) for e in near)
    assert [(-e.probability, e.id) for e in near] == sorted((-e.probability, e.id) for e in near)
    assert all(e.view == "semantic" for e in await stores.edges.neighbours(A, [nodes[5].id], ["semantic"], 100))
    assert [d.id for d in await stores.edges.decisions(A)] == sorted(d.id for d in make_decisions(nodes))


async def test_parity_with_sqlite(stores: Stores) -> None:
    conn = connect(":memory:")
    sqlite = (SqliteLexicalIndex(conn), SqliteNodeStore(conn), SqliteEdgeStore(conn))
    try:
        for scope in (A, B, A2):
            nodes = make_nodes(scope, CHAT if scope != A2 else CHAT[::-1])
            for target in (sqlite, stores):
                await write_all(target, nodes, make_edges(nodes), make_decisions(nodes))
        for scope in (A, B, A2):
            nodes = make_nodes(scope, CHAT if scope != A2 else CHAT[::-1])
            want = await snapshot(*sqlite, scope, nodes)
            got = await snapshot(stores.lex, stores.nodes, stores.edges, scope, nodes)
            assert got.keys() == want.keys()
            for key in want:
                assert got[key] == want[key], key
    finally:
        conn.close()


async def test_row_reads_are_the_embedded_stores_and_never_an_older_version(stores: Stores) -> None:
    # a realm's reads take the nodes without their vectors, with their retrieval rows, as the
    # embedded store gives them, for many conversations at once; an unchanged node read again is
    # the same object, a rewritten one is read anew
    conn = connect(":memory:")
    sqlite = SqliteNodeStore(conn)
    try:
        nodes = make_nodes(A)
        await write_all(stores, nodes, [], [])
        await sqlite.upsert(nodes)
        wanted = [nodes[3].id, "nope", nodes[-1].id, nodes[1].id]  # the last: a derived node without vectors
        (got, rows), (other, none) = await stores.nodes.get_rows_many([(A, wanted), (B, wanted)], 8)
        want, want_rows = await sqlite.get_rows(A, wanted, 8)
        assert got == want and rows.dtype == np.float32 and np.array_equal(rows, want_rows)
        assert other == [] and none.shape == (0, 8)
        again, _ = (await stores.nodes.get_rows_many([(A, wanted)], 8))[0]
        assert all(a is b for a, b in zip(again, got, strict=True))
        changed = nodes[3].model_copy(update={"content": "Biscuit learned to roll over."})
        await stores.nodes.upsert([changed])
        (fresh, _), = await stores.nodes.get_rows_many([(A, [nodes[3].id])], 8)
        assert fresh == [changed.without_embedding()]
    finally:
        conn.close()


async def test_idempotent_and_order_independent(stores: Stores) -> None:
    nodes, other = make_nodes(A), make_nodes(B)
    edges, decisions = make_edges(nodes), make_decisions(nodes)
    await write_all(stores, nodes, edges, decisions)
    await write_all(stores, other, make_edges(other), make_decisions(other), lexical_first=False)
    before = await snapshot(stores.lex, stores.nodes, stores.edges, A, nodes)
    search = await stores.lex.search(A, "Biscuit puppy", 5)
    # Again, in the other order, and a node store re-upsert without embeddings keeps them.
    await write_all(stores, nodes, edges, decisions, lexical_first=False)
    await stores.nodes.upsert([n.without_embedding() for n in nodes])
    assert await snapshot(stores.lex, stores.nodes, stores.edges, A, nodes) == before
    assert await stores.lex.search(A, "Biscuit puppy", 5) == search


async def test_tenant_isolation(stores: Stores) -> None:
    a, b = make_nodes(A), make_nodes(B, [(s, c.replace("Biscuit", "Rex")) for s, c in CHAT])
    await write_all(stores, a, make_edges(a), make_decisions(a))
    await write_all(stores, b, make_edges(b), make_decisions(b))
    a_ids, b_ids = {n.id for n in a}, {n.id for n in b}
    assert a_ids.isdisjoint(b_ids)
    assert await stores.nodes.get(A, [n.id for n in b]) == []
    assert {n.id for n in await stores.nodes.scan(A)} == a_ids
    assert {n.id for n in await stores.nodes.scan(A2)} == set()
    assert set(await stores.lex.overlapping(A, sorted({t for n in b for t in n.tokens}), 100, 100)) <= a_ids
    assert await stores.lex.search(A, "Rex", 5) == []
    assert {h.id for h in await stores.lex.search(B, "Rex", 5)} <= b_ids
    assert set(await stores.nodes.sharing_entities_before(B, ["ent:biscuit"], 100, 10)) == set()
    assert set(await stores.nodes.preceding(B, 100, 100)) <= b_ids
    assert {e.id for e in await stores.edges.neighbours(A, [n.id for n in b], list(VIEWS), 100)} == set()
    assert {e.tenant_id for e in await stores.edges.scan(B)} == {"tenant-b"}
    assert {d.tenant_id for d in await stores.edges.decisions(B)} == {"tenant-b"}


async def test_paging_beyond_one_page(stores: Stores, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(elastic, "_PAGE", 4)  # search_after across several pages
    nodes = make_nodes(A)
    await write_all(stores, nodes, make_edges(nodes), make_decisions(nodes))
    assert [n.id for n in await stores.nodes.scan(A)] == [n.id for n in nodes]
    assert len(await stores.nodes.preceding(A, 100, 10)) == 10
    assert [e.id for e in await stores.edges.scan(A)] == sorted(e.id for e in make_edges(nodes))
    assert len(await stores.nodes.seqs(A, [n.event_id for n in nodes])) == len(nodes)


async def test_an_index_made_by_another_process_is_found_by_a_strict_reader_at_once_by_an_owner_after_invalidate(
        es: tuple[AsyncElasticsearch, str]) -> None:
    """Index lookups are remembered per process: an index seen to exist stays found; one seen
    absent is looked up again at every read of a strict reader, and by an owner after
    :meth:`Visibility.invalidate` (a partition assignment, a service's request)."""
    client, prefix = es
    strict, owner = elastic.Visibility(client), elastic.Visibility(client, strict_reads=False)
    readers = {v: ElasticNodeStore(client, prefix, v) for v in (strict, owner)}
    for reader in readers.values():
        assert await reader.observation_count(A) == 0 and await reader.scan(A) == []
    writer = ElasticNodeStore(client, prefix)  # another process: its own client state
    nodes = make_nodes(A)
    await writer.upsert(nodes)
    assert await readers[strict].observation_count(A) == len(CHAT)
    assert await readers[owner].observation_count(A) == 0  # remembered absent until an invalidate
    owner.invalidate()
    assert await readers[owner].observation_count(A) == len(CHAT)
    assert prefix + elastic.memories_index(A.tenant_id) in owner.found


async def test_deferred_writes_are_one_request_merged_per_document_and_read_back(
        es: tuple[AsyncElasticsearch, str]) -> None:
    client, prefix = es
    seen = elastic.Visibility(client)
    lex, ns, edges = (ElasticLexicalIndex(client, prefix, seen), ElasticNodeStore(client, prefix, seen),
                      ElasticEdgeStore(client, prefix, seen))
    nodes = make_nodes(A)
    await lex.upsert(nodes)
    await ns.upsert(nodes)
    await edges.upsert(make_edges(nodes))
    index = prefix + elastic.memories_index(A.tenant_id)
    assert (await client.count(index=index))["count"] == 0  # buffered: nothing sent yet
    # one update per node (lexical and canonical fields merged), one edge group for the conversation
    assert len(seen._ops) == 2 * (len(nodes) + 1)
    got = await ns.get(A, [nodes[2].id])  # a get sends the buffer first (realtime get)
    assert [n.id for n in got] == [nodes[2].id] and seen._ops == []
    assert (await client.count(index=index))["count"] == 0  # sent, not yet refreshed
    assert await ns.observation_count(A) == len(CHAT)  # a count refreshes what this process wrote first
    doc = (await client.get(index=index, id=nodes[2].id))["_source"]
    assert doc["content"] == nodes[2].content and doc["event_id"] == nodes[2].event_id and "embedding_f32" in doc

    # a failed flush raises from the call that sent it and drops the buffer (the batch is retried)
    await client.indices.create(index=prefix + elastic.memories_index(B.tenant_id), settings={"number_of_replicas": 0},
                                mappings={"dynamic": "strict", "properties": {"tenant_id": {"type": "keyword"}}})
    await ns.upsert(make_nodes(B)[:2])
    with pytest.raises(StoreUnavailable):
        await seen.flush()
    assert seen._ops == []
    await seen.flush()  # nothing left to send


async def test_an_owner_refreshes_for_its_own_writes_and_after_invalidate_only(
        es: tuple[AsyncElasticsearch, str]) -> None:
    """The write path's reads: what this process wrote is searchable without a refresh per
    batch; another process's writes become searchable for it after ``invalidate`` (a partition
    assignment), and a strict reader sees every acknowledged write at once."""
    client, prefix = es
    owner = elastic.Visibility(client, strict_reads=False)
    other = elastic.Visibility(client, strict_reads=False)
    strict = elastic.Visibility(client)
    mine, theirs, reader = (ElasticNodeStore(client, prefix, v) for v in (owner, other, strict))
    index = prefix + elastic.memories_index(A.tenant_id)
    nodes = make_nodes(A)
    await mine.upsert(nodes[:4])
    await owner.flush()  # the end of a batch: sent, durable, nothing refreshed
    assert owner.refreshes == 0 and (await client.count(index=index))["count"] == 0
    assert await mine.observation_count(A) == 4  # its own writes: one refresh of the index it reads
    assert await mine.observation_count(A) == 4 and owner.refreshes == 1  # nothing new: no second one

    await theirs.upsert(nodes[4:8])
    await other.flush()  # acknowledged by another process
    assert await mine.observation_count(A) == 4  # not refreshed for: an owner reads its own writes
    owner.invalidate()  # e.g. a partition assignment
    assert await mine.observation_count(A) == 8 and owner.refreshes == 2
    await theirs.upsert(nodes[8:10])
    await other.flush()
    assert await reader.observation_count(A) == 10  # a strict reader refreshes before each read
    assert await reader.observation_count(A) == 10 and strict.refreshes == 2

    # writes between a refresh's start and the next read are refreshed for again
    await mine.upsert(nodes[10:])
    await owner.flush()
    assert await mine.observation_count(A) == len(CHAT) and owner.refreshes == 3
    assert len(await mine.scan(A)) == len(nodes)


async def test_a_refresh_started_ahead_serves_the_reads_of_its_epoch(es: tuple[AsyncElasticsearch, str]) -> None:
    """A service's request starts refreshing the indices it reads at once, in one request
    (``Visibility.ahead``): its reads then wait for that refresh instead of sending their own,
    and see what another process acknowledged before; an index that does not exist yet is no
    error; a strict reader starts none."""
    client, prefix = es
    owner, other = elastic.Visibility(client, strict_reads=False), elastic.Visibility(client, strict_reads=False)
    mine, theirs = ElasticNodeStore(client, prefix, owner), ElasticNodeStore(client, prefix, other)
    lex = ElasticLexicalIndex(client, prefix, owner)
    index = prefix + elastic.memories_index(A.tenant_id)
    nodes = make_nodes(A)
    await ElasticLexicalIndex(client, prefix, other).upsert(nodes)
    await theirs.upsert(nodes)
    await other.flush()
    owner.invalidate()
    owner.ahead([index, prefix + "not-made-yet"])
    assert owner.refreshes == 1
    assert await mine.observation_count(A) == len(CHAT)
    assert (await lex.search(A, "Biscuit", 3))[0].id in {n.id for n in nodes}
    assert owner.refreshes == 1  # both reads waited for the one refresh
    owner.ahead([index])  # the same epoch: already refreshed
    assert owner.refreshes == 1
    strict = elastic.Visibility(client)
    strict.ahead([index])
    assert strict.refreshes == 0


async def test_indices_read_by_every_recall_use_the_fast_codec_the_rest_the_compact_one(stores: Stores) -> None:
    """A tenant's memories index (BM25 hits and node mgets on every recall) and the edge groups
    (searched on every recall) are made with the default codec; the decisions keep ``best_compression``."""
    nodes = make_nodes(A)
    await write_all(stores, nodes, make_edges(nodes), make_decisions(nodes))
    client, prefix = stores.nodes._client, stores.nodes._prefix
    codec = {name: body["settings"]["index"].get("codec", "default")
             for name, body in (await client.indices.get_settings(index=prefix + "*")).items()}
    assert codec == {prefix + elastic.memories_index(A.tenant_id): "default", prefix + "edges-grouped": "default",
                     prefix + "decisions": "best_compression"}, codec


async def test_errors_become_store_unavailable(es: tuple[AsyncElasticsearch, str]) -> None:
    client, prefix = es
    # An index that exists with an incompatible mapping: creation is tolerated, bulk items fail.
    await client.indices.create(index=prefix + elastic.memories_index(A.tenant_id), settings={"number_of_replicas": 0},
                                mappings={"dynamic": "strict", "properties": {"tenant_id": {"type": "keyword"}}})
    with pytest.raises(StoreUnavailable):
        await ElasticNodeStore(client, prefix).upsert(make_nodes(A)[:2])
    dead = ElasticEdgeStore(AsyncElasticsearch("http://127.0.0.1:1", max_retries=0, request_timeout=2), prefix)
    try:
        with pytest.raises(StoreUnavailable):
            await dead.scan(A)
    finally:
        await dead.close()


async def test_vector_index_is_exact_and_matches_the_embedded_engine(es: tuple[AsyncElasticsearch, str]) -> None:
    """The flat dense_vector index returns exactly the embedded store's (exact) ranking, seq
    filter included."""
    from storage.elastic.vectors import ElasticVectorIndex
    from tests.conftest import reference_vectors

    client, prefix = es
    rng = random.Random(7)

    def unit(v: list[float]) -> list[float]:
        norm = sum(x * x for x in v) ** 0.5
        return [round(x / norm, 6) for x in v]

    nodes = [n.model_copy(update={"embedding": unit([rng.uniform(-1, 1) for _ in range(8)])})
             for n in make_nodes(A)[:-1] + make_nodes(B)[:-1]]
    ev, qd = ElasticVectorIndex(client, prefix, dim=8), await reference_vectors(nodes, 8)
    await ev.upsert(nodes)
    await ev.upsert(nodes[:3])  # idempotent
    for probe in nodes[:6]:
        for before in (None, 5, 11):
            got = await ev.search(A, probe.embedding or [], 4, before_seq=before)
            want = await qd.search(A, probe.embedding or [], 4, before_seq=before)
            assert [h.id for h in got] == [h.id for h in want]
            assert all(abs(g.score - w.score) < 1e-4 for g, w in zip(got, want, strict=True))
    assert {h.id for h in await ev.search(B, nodes[0].embedding or [], 50)} == {n.id for n in nodes if n.tenant_id == "tenant-b"}
    await qd.close()


def other_text(n: int) -> list[tuple[str, str]]:
    """Lots of text overlapping CHAT's words (puppy, Biscuit, marathon, knee...)."""
    words = ["puppy", "Biscuit", "marathon", "Berlin", "knee", "running", "ramen", "Lisbon", "Clara", "training"]
    rng = random.Random(3)
    return [("Zed", " ".join(rng.choice(words) for _ in range(12)) + f" note {i}") for i in range(n)]


async def test_bm25_statistics_are_per_tenant(stores: Stores) -> None:
    """Tenant A's lexical ranking (ids, scores, order) is identical before and after tenant B
    ingests lots of overlapping text, in Elasticsearch and in SQLite."""
    sqlite_conn = connect(":memory:")
    sq_lex, sq_nodes = SqliteLexicalIndex(sqlite_conn), SqliteNodeStore(sqlite_conn)
    a = make_nodes(A)
    await write_all(stores, a, [], [])
    await sq_lex.upsert(a)
    await sq_nodes.upsert(a)
    queries = ["Biscuit puppy", "Berlin marathon training", "knee running", "Clara Lisbon trip", "ramen"]
    before = {q: await stores.lex.search(A, q, 10) for q in queries}
    sq_before = {q: await sq_lex.search(A, q, 10) for q in queries}
    assert all(before.values()) and all(sq_before.values())
    b = make_nodes(B, other_text(150))
    await write_all(stores, b, [], [])
    await sq_lex.upsert(b)
    assert {q: await stores.lex.search(A, q, 10) for q in queries} == before
    assert {q: await sq_lex.search(A, q, 10) for q in queries} == sq_before
    assert await stores.lex.search(Scope(tenant_id="nobody", conversation_id="c"), "Biscuit", 5) == []
    assert await stores.nodes.scan(Scope(tenant_id="nobody", conversation_id="c")) == []
    assert await stores.nodes.next_seq(Scope(tenant_id="nobody", conversation_id="c")) == 0


async def test_deletes_remove_exactly_the_scope_records(es: tuple[AsyncElasticsearch, str]) -> None:
    """Node, edge, decision, vector and forgotten-record deletes (no _delete_by_query here: scoped
    searches + bulk deletes), equal to the SQLite adapters' answers afterwards."""
    from storage.elastic.vectors import ElasticVectorIndex
    from storage.sqlite.store import SqliteEdgeStore

    client, prefix = es
    s = Stores(ElasticLexicalIndex(client, prefix), ElasticNodeStore(client, prefix), ElasticEdgeStore(client, prefix))
    vec = ElasticVectorIndex(client, prefix, dim=8)
    conn = connect(":memory:")
    sq = (SqliteLexicalIndex(conn), SqliteNodeStore(conn), SqliteEdgeStore(conn))
    rng = random.Random(5)
    per_scope = {}
    for scope in (A, B, A2):
        nodes = [n.model_copy(update={"embedding": [rng.uniform(-1, 1) for _ in range(8)]}) for n in make_nodes(scope)]
        per_scope[scope] = nodes
        for target in (s, sq):
            await write_all(target, nodes, make_edges(nodes), make_decisions(nodes))
        await vec.upsert(nodes)
    a = per_scope[A]
    doomed = [a[3].id, a[-1].id]
    for lex, ns, edges in ((s.lex, s.nodes, s.edges), sq):
        assert await edges.delete(A, doomed) > 0
        assert await edges.delete_decisions(A, doomed) > 0
        await lex.delete(A, doomed)
        assert await ns.delete(A, doomed) == (0 if lex is s.lex else 2)  # ES: the lexical delete took the docs
        await ns.record_forgotten(A, a[3].event_id, a[3].seq)
        await ns.record_forgotten(A, a[3].event_id, a[3].seq)  # idempotent
        assert await ns.forgotten(A) == {a[3].event_id: a[3].seq}
        assert await ns.forgotten(B) == {}
    await vec.delete(A, [*doomed, per_scope[B][0].id])  # another scope's id is not touched
    left = [n for n in a if n.id not in doomed]
    assert await snapshot(s.lex, s.nodes, s.edges, A, left) == await snapshot(*sq, A, left)
    assert {h.id for h in await vec.search(A, a[0].embedding or [], 50)} == {n.id for n in left if n.embedding}
    assert len(await vec.search(B, a[0].embedding or [], 50)) == len(per_scope[B])
    assert all(e.source not in doomed and e.target not in doomed for e in await s.edges.scan(A))
    # whole conversation: everything of A goes, B and A2 stay
    assert await s.nodes.delete_scope(A) == len(left)
    await s.lex.delete_scope(A)
    assert await s.edges.delete_scope(A) > 0 and await s.edges.delete_scope_decisions(A) > 0
    await vec.delete_scope(A)
    assert (await s.nodes.scan(A), await s.edges.scan(A), await s.edges.decisions(A)) == ([], [], [])
    assert await s.nodes.forgotten(A) == {} and await s.lex.search(A, "Biscuit", 5) == []
    assert await vec.search(A, a[0].embedding or [], 50) == []
    assert len(await s.nodes.scan(B)) == len(per_scope[B]) and len(await s.nodes.scan(A2)) == len(per_scope[A2])


async def test_a_shared_memories_index_is_split_per_tenant(es: tuple[AsyncElasticsearch, str]) -> None:
    """An older generation (one memories index for all tenants) migrates to per-tenant indices."""
    client, prefix = es
    old = ElasticNodeStore(client, prefix)
    await client.indices.create(index=prefix + "memories", settings=elastic._SETTINGS, mappings=elastic._MEMORIES)
    nodes = make_nodes(A) + make_nodes(B)
    ops: list[dict[str, object]] = []
    for n in nodes:
        ops += [{"index": {"_id": n.id}}, {"tenant_id": n.tenant_id, "conversation_id": n.conversation_id,
                                           "node_id": n.id, "seq": n.seq, "event_id": n.event_id, "kind": n.kind,
                                           "content": n.content, "tokens": sorted(set(n.tokens)), "entity_ids": [],
                                           "body": n.without_embedding().model_dump_json()}]
    await client.bulk(index=prefix + "memories", operations=ops, refresh=True)
    newer = nodes[0].model_copy(update={"content": "written after the upgrade"})
    await old.upsert([newer])  # a document this build already wrote is never overwritten
    assert await old.migrate_shared() == len(nodes)
    assert (await old.get(A, [newer.id]))[0].content == "written after the upgrade"
    assert await old.migrate_shared() == 0
    assert not await client.indices.exists(index=prefix + "memories")
    assert [n.id for n in await old.scan(A)] == [n.id for n in make_nodes(A)]
    b_hits = await ElasticLexicalIndex(client, prefix).search(B, "Biscuit", 20)
    assert b_hits and {h.id for h in b_hits} <= {n.id for n in nodes if n.tenant_id == B.tenant_id}


async def test_retrieval_of_a_tenant_ignores_other_tenants_writes(es: tuple[AsyncElasticsearch, str]) -> None:
    """``RetrievalController.retrieve`` for tenant A over the Elasticsearch stores gives the same
    evidence (ids, scores, order) before and after tenant B ingests lots of overlapping text."""
    from jevmem import assembly
    from jevmem.settings import Settings
    from query_api.retrieval.controller import RetrievalController
    from storage.elastic.vectors import ElasticVectorIndex
    from streams.in_process import InProcessWriter
    from streams.write_path import Stores as AllStores
    from topology.embedding import default_embedder
    from topology.systemone.local import LocalSystemOne
    from topology.systemone.port import CountingSystemOne

    client, prefix = es
    emb = default_embedder()
    settings = Settings()

    class NoLetters:
        async def put(self, letters: object) -> None:
            raise AssertionError("no dead letters expected")

        async def recent(self, limit: int = 100) -> list[object]:
            return []

    stores = AllStores(nodes=ElasticNodeStore(client, prefix), edges=ElasticEdgeStore(client, prefix),
                       vectors=ElasticVectorIndex(client, prefix, emb.dim), lexical=ElasticLexicalIndex(client, prefix),
                       dead_letters=NoLetters())  # type: ignore[arg-type]
    wp = assembly.paths(settings, stores, emb, embedded=False).writer()
    assert isinstance(wp.so, CountingSystemOne)
    pipeline = InProcessWriter(stores, wp, wp.so)
    controller = RetrievalController(emb, LocalSystemOne(), stores.vectors, stores.lexical, stores.nodes, stores.edges,
                                     settings.params)

    def chat_obs(scope: Scope, chat: list[tuple[str, str]]) -> list[Observation]:
        return [Observation(tenant_id=scope.tenant_id, conversation_id=scope.conversation_id, event_id=f"e{i}",
                            content=text, speaker=who) for i, (who, text) in enumerate(chat)]

    await pipeline.ingest(chat_obs(A, CHAT))
    questions = ["What is the name of Ana's puppy?", "When is the Berlin marathon?", "knee running training"]

    async def snapshot() -> list[object]:
        out: list[object] = []
        for q in questions:
            out.append(await stores.lexical.search(A, q, 10))
            r = await controller.retrieve(A, q, top_k=8)
            out.append([(e.node_id, e.score, e.via) for e in r.evidence])
        return out

    before = await snapshot()
    assert all(before)
    await pipeline.ingest(chat_obs(B, other_text(80)))
    assert await snapshot() == before


REALM_WORDS = ["puppy", "Biscuit", "marathon", "Berlin", "knee", "running", "ramen", "Lisbon", "Clara", "training",
               "garden", "violin", "tuna", "sister"]
#: Where the same sentence is said (conversation, seq): tied BM25 and vector scores across conversations.
REALM_TIED = (("c03", 3), ("c05", 1), ("c09", 1), ("c11", 0), ("c13", 2), ("c21", 1), ("c25", 0))
REALM_TIED_TEXT = "My violin teacher Clara plays in Lisbon"
#: The one turn that answers "Pepper tuna" best (c17: user u2's).
REALM_BEST = ("c17", 2, "My cat Pepper only eats tuna, Pepper loves tuna")


def realm_nodes(tenant: str) -> list[MemoryNode]:
    """30 conversations of 4 turns: even ones user u1's, odd ones u2's, c28 and c29 without a
    user; every tenant says the same (same words, same vectors, other node ids)."""
    rng = random.Random(11)
    out = []
    for c in range(30):
        conv, user = f"c{c:02d}", None if c >= 28 else ("u1", "u2")[c % 2]
        for seq in range(4):
            text = " ".join(rng.choice(REALM_WORDS) for _ in range(rng.randint(4, 12))) + f" note {c} {seq}"
            if (conv, seq) in REALM_TIED:
                text = REALM_TIED_TEXT
            if (conv, seq) == REALM_BEST[:2]:
                text = REALM_BEST[2]
            obs = Observation(tenant_id=tenant, conversation_id=conv, event_id=f"ev-{seq}", content=text, user_id=user)
            vec = [rng.uniform(-1, 1) for _ in range(8)]
            norm = sum(x * x for x in vec) ** 0.5
            out.append(describe(obs, seq).model_copy(update={"embedding": [round(x / norm, 6) for x in vec]}))
    tied_vector = out[0].embedding
    return [n.model_copy(update={"embedding": tied_vector}) if (n.conversation_id, n.seq) in REALM_TIED else n
            for n in out]


REALMS = [Realm(tenant_id="tenant-a"), Realm(tenant_id="tenant-a", user_id="u1"), Realm(tenant_id="tenant-a", user_id="u2"),
          Realm(tenant_id="tenant-a", conversation_ids=("c03", "c17", "c28", "c29", "nowhere")),
          Realm(tenant_id="tenant-a", user_id="u1", conversation_ids=("c02", "c03", "c28")),
          Realm(tenant_id="tenant-b", user_id="u1")]


async def merged(search: Callable[[Scope, str, int], Awaitable[list[Hit]]], nodes: list[MemoryNode], realm: Realm,
                 query: str, limit: int) -> list[tuple[str, float]]:
    """The realm's ranking built from per-conversation searches (the same index, so the same
    scores): every conversation's hits of the realm's nodes, by score, then seq, then id."""
    by_id = {n.id: n for n in nodes}
    hits = []
    for conv in sorted({n.conversation_id for n in nodes if realm.holds(n)}):
        found = await search(Scope(tenant_id=realm.tenant_id, conversation_id=conv), query, 1000)
        hits += [h for h in found if realm.holds(by_id[h.id])]
    ranked = sorted(hits, key=lambda h: (-h.score, by_id[h.id].seq, h.id))[:limit]
    return [(h.id, h.score) for h in ranked]


async def test_lexical_realm_search_is_one_ranking_over_the_realm(stores: Stores) -> None:
    """BM25 over a user spread over 30 conversations (two users, turns without a user, a second
    tenant saying the same): the realm's nodes only, in one ranking equal to the merge of the
    per-conversation searches (the tenant's statistics), ties by earlier seq then id."""
    a, b = realm_nodes("tenant-a"), realm_nodes("tenant-b")
    await write_all(stores, a + b, [], [])
    by_id = {n.id: n for n in a + b}
    for realm in REALMS:
        for text in ("Pepper tuna", "violin Clara Lisbon", "Berlin marathon training", "note 7"):
            for limit in (1, 3, 8, 500):
                got = await stores.lex.search_realm(realm, text, limit)
                assert [(h.id, h.score) for h in got] == await merged(stores.lex.search, a + b, realm, text, limit)
                assert all(realm.holds(by_id[h.id]) and h.conversation_id == by_id[h.id].conversation_id for h in got)
    best = await stores.lex.search_realm(Realm(tenant_id="tenant-a"), "Pepper tuna", 5)
    assert (by_id[best[0].id].conversation_id, by_id[best[0].id].seq, best[0].conversation_id) == ("c17", 2, "c17")
    assert (await stores.lex.search_realm(Realm(tenant_id="tenant-a", user_id="u2"), "Pepper tuna", 5))[0] == best[0]
    assert all(h.conversation_id != "c17" for h in await stores.lex.search_realm(
        Realm(tenant_id="tenant-a", user_id="u1"), "Pepper tuna", 500))
    tied = sorted((n for n in a if (n.conversation_id, n.seq) in REALM_TIED), key=lambda n: (n.seq, n.id))
    got = await stores.lex.search_realm(Realm(tenant_id="tenant-a", user_id="u2"), REALM_TIED_TEXT, 3)
    assert [h.id for h in got] == [n.id for n in tied[:3]]
    # turns without a user: found tenant-wide, never for a user
    whole = {h.id for h in await stores.lex.search_realm(Realm(tenant_id="tenant-a"), "note", 500)}
    noted = [n for n in a if "note" in n.content]
    no_user = {n.id for n in noted if n.user_id is None}
    assert whole == {n.id for n in noted} and len(no_user) == 8
    for user in ("u1", "u2"):
        mine = {h.id for h in await stores.lex.search_realm(Realm(tenant_id="tenant-a", user_id=user), "note", 500)}
        assert mine == {n.id for n in noted if n.user_id == user}
    assert await stores.lex.search_realm(Realm(tenant_id="tenant-a", conversation_ids=()), "note", 5) == []
    assert await stores.lex.search_realm(Realm(tenant_id="nobody"), "note", 5) == []
    assert await stores.lex.search_realm(Realm(tenant_id="tenant-a"), "the and of", 5) == []
    with pytest.raises(TypeError):
        await stores.lex.search_realm(Realm(tenant_id="tenant-a"), [1.0] * 8, 5)
    # the node store keeps the user in the body: what a realm's fetch reads back
    assert {n.user_id for n in await stores.nodes.scan(Scope(tenant_id="tenant-a", conversation_id="c17"))} == {"u2"}


@pytest.mark.parametrize("deferred", [False, True])
async def test_vector_realm_search_is_exact_over_the_realm(es: tuple[AsyncElasticsearch, str], deferred: bool) -> None:
    """The flat dense_vector index: each realm's exact ranking (brute force over the realm's
    nodes, ties by earlier seq then id), hits naming their conversations; a shared Visibility's
    buffered writes are sent and refreshed by the realm search."""
    import numpy as np

    from storage.elastic.vectors import ElasticVectorIndex

    client, prefix = es
    ev = ElasticVectorIndex(client, prefix, dim=8, visibility=elastic.Visibility(client) if deferred else None)
    a, b = realm_nodes("tenant-a"), realm_nodes("tenant-b")
    await ev.upsert(a + b)
    by_id = {n.id: n for n in a + b}
    probes = [a[0].embedding or [], a[17 * 4 + 2].embedding or [], a[5].embedding or [], [0.3] * 8]
    for realm in REALMS:
        for probe in probes:
            for limit in (1, 3, 8, 500):
                got = await ev.search_realm(realm, probe, limit)
                mine = [n for n in a + b if realm.holds(n)]
                want = sorted(mine, key=lambda n: (-float(np.dot(n.embedding or [], probe)), n.seq, n.id))[:limit]
                assert [h.id for h in got] == [n.id for n in want], (realm, limit)
                assert all(abs(h.score - float(np.dot(by_id[h.id].embedding or [], probe))) < 1e-4 for h in got)
                assert all(h.conversation_id == by_id[h.id].conversation_id for h in got)
    best = await ev.search_realm(Realm(tenant_id="tenant-a"), a[17 * 4 + 2].embedding or [], 3)
    assert (best[0].id, best[0].conversation_id) == (a[17 * 4 + 2].id, "c17")
    no_user = {n.id for n in a if n.user_id is None}
    assert no_user <= {h.id for h in await ev.search_realm(Realm(tenant_id="tenant-a"), probes[3], 500)}
    assert not no_user & {h.id for h in await ev.search_realm(Realm(tenant_id="tenant-a", user_id="u1"), probes[3], 500)}
    assert await ev.search_realm(Realm(tenant_id="tenant-a", conversation_ids=()), probes[0], 5) == []
    assert await ev.search_realm(Realm(tenant_id="nobody"), probes[0], 5) == []
    with pytest.raises(TypeError):
        await ev.search_realm(Realm(tenant_id="tenant-a"), "a text", 5)


async def test_indexes_of_an_older_release_take_the_user_field(es: tuple[AsyncElasticsearch, str]) -> None:
    """A memories index and a vectors index made without ``user_id`` get the field on this
    release's first write, even after a read of them by the same adapter; a user's realm then
    finds the nodes written with it."""
    from storage.elastic.vectors import ElasticVectorIndex

    client, prefix = es
    old_memories = {**elastic._MEMORIES, "properties": {k: v for k, v in elastic._MEMORIES["properties"].items()
                                                        if k != "user_id"}}
    await client.indices.create(index=prefix + elastic.memories_index("tenant-a"), settings=elastic._SETTINGS,
                                mappings=old_memories)
    ev = ElasticVectorIndex(client, prefix, dim=8)
    old_vectors = {**ev._mappings, "properties": {k: v for k, v in ev._mappings["properties"].items() if k != "user_id"}}
    await client.indices.create(index=prefix + "vectors", settings=elastic._SETTINGS, mappings=old_vectors)
    lex, ns = ElasticLexicalIndex(client, prefix), ElasticNodeStore(client, prefix)
    assert await lex.search_realm(Realm(tenant_id="tenant-a", user_id="u1"), "note", 5) == []  # a read first
    assert await ns.scan(Scope(tenant_id="tenant-a", conversation_id="c00")) == []
    await ev.delete_scope(Scope(tenant_id="tenant-a", conversation_id="c00"))
    a = realm_nodes("tenant-a")
    await lex.upsert(a)
    await ns.upsert(a)
    await ev.upsert(a)
    u1 = {n.id for n in a if n.user_id == "u1"}
    assert {h.id for h in await ev.search_realm(Realm(tenant_id="tenant-a", user_id="u1"), [0.3] * 8, 500)} == u1
    u1_noted = {n.id for n in a if n.user_id == "u1" and "note" in n.content}
    assert {h.id for h in await lex.search_realm(Realm(tenant_id="tenant-a", user_id="u1"), "note", 500)} == u1_noted


async def test_a_users_conversations_are_those_holding_their_nodes_counted_as_theirs(stores: Stores) -> None:
    """``conversations(tenant, users)``: every conversation holding a node of one of ``users``,
    with the count of those nodes, as the embedded store answers."""
    conn = connect(":memory:")
    sqlite = SqliteNodeStore(conn)
    owners = {A: ["ana", "ben", None], A2: ["ana"], B: ["ana"]}
    try:
        for scope, users in owners.items():
            nodes = [n.model_copy(update={"user_id": users[i % len(users)]}) for i, n in enumerate(make_nodes(scope))]
            for target in (sqlite, stores.nodes):
                await target.upsert(nodes)
        for users in (["ana"], ["ben"], ["ana", "ben"], ["cleo"], None):
            want = await sqlite.conversations("tenant-a", users)
            assert await stores.nodes.conversations("tenant-a", users) == want, users
        assert dict(await sqlite.conversations("tenant-a", ["ben"])) == {"conv-1": sum(
            1 for i in range(len(make_nodes(A))) if i % 3 == 1)}
    finally:
        conn.close()
