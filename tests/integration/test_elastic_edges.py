"""The Elasticsearch edge store against a real node: edges in groups (one document per
conversation per write, the last write winning), their body's table format and the earlier
releases' formats it still reads, the batched reads of a realm's step and one retrieval's edge
session; each answer compared with the SQLite edge store.

Needs ``JEVMEM_TEST_ES_URL`` (e.g. ``http://127.0.0.1:9200`` after ``scripts/elasticsearch/es.sh start``).
"""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.integration

if not os.environ.get("JEVMEM_TEST_ES_URL"):
    pytest.skip("JEVMEM_TEST_ES_URL is not set", allow_module_level=True)

import elastic_transport  # noqa: E402
import orjson  # noqa: E402
from elasticsearch import AsyncElasticsearch  # noqa: E402

from storage.elastic import store as elastic  # noqa: E402
from storage.elastic.edges import ElasticEdgeStore  # noqa: E402
from storage.sqlite.store import SqliteEdgeStore, connect  # noqa: E402
from tests.integration.elastic_data import (  # noqa: E402
    A2,
    CHAT,
    A,
    B,
    Stores,
    make_decisions,
    make_edges,
    make_nodes,
    write_all,
)
from topology.errors import StoreUnavailable  # noqa: E402
from topology.schemas import VIEWS, View  # noqa: E402


async def test_many_reads_in_one_request_answer_as_each_read_alone(stores: Stores,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A realm's step reads many conversations: ``read_many`` answers every read with one search
    and ``get_many`` with one mget a tenant, each read as its own call would answer it (ids of
    another conversation, unknown ids and a conversation asked twice included)."""
    written = {scope: make_nodes(scope, CHAT if scope != A2 else CHAT[::-1]) for scope in (A, B, A2)}
    for nodes in written.values():
        await write_all(stores, nodes, make_edges(nodes), make_decisions(nodes))
    a, b, a2 = (written[s] for s in (A, B, A2))
    reads = [(A, [a[5].id, a[9].id, a2[0].id]), (A2, [a2[1].id, a2[7].id, "missing"]), (B, [b[3].id]),
             (A, [a[0].id]), (A2, [])]
    label = make_edges(a2)[0].label
    counted = {"search": 0, "mget": 0}
    client = stores.edges._client

    def counting(name: str) -> None:
        call = getattr(client, name)

        async def wrapped(*args: object, **kwargs: object) -> object:
            counted[name] += 1
            return await call(*args, **kwargs)
        monkeypatch.setattr(client, name, wrapped)

    view_sets: list[list[View]] = [["semantic"], list(VIEWS)]
    for views in view_sets:
        alone = [await stores.edges.neighbours(scope, ids_, views, 3) for scope, ids_ in reads]
        tagged = [await stores.edges.labelled(scope, ids_, views, 50, label) for scope, ids_ in reads]
        nodes_alone = [await stores.nodes.get(scope, ids_) for scope, ids_ in reads]
        counting("search")
        counting("mget")
        assert await stores.edges.read_many(reads, views, 3, None) == alone
        assert await stores.edges.read_many(reads, views, 50, label) == tagged
        assert counted["search"] == 2
        got = await stores.nodes.get_many(reads)
        assert counted["mget"] == 2  # one a tenant
        assert got == nodes_alone and any(got[0]) and got[4] == []
        assert [n.id for n in got[0]] == [a[5].id, a[9].id]  # another conversation's id is not this one's
        heads = await stores.nodes.get_many(reads, vectors=False)
        assert heads == [[n.without_embedding() for n in part] for part in nodes_alone]
        assert await stores.nodes.get_heads(A, [a[2].id, "missing"]) == [a[2].without_embedding()]
        monkeypatch.undo()
        counted.update(search=0, mget=0)


async def test_an_edge_session_fetches_each_document_once_and_answers_as_the_store(
        stores: Stores, monkeypatch: pytest.MonkeyPatch) -> None:
    """One retrieval's edge reads (``EdgeSession``): what ``ahead`` fetched answers later reads
    without a request; a read asks once for what it lacks, in one search for all its
    conversations; every answer is the store's; a failed fetch fails the reads after it."""
    written = {scope: make_nodes(scope, CHAT if scope != A2 else CHAT[::-1]) for scope in (A, B, A2)}
    for nodes in written.values():
        await write_all(stores, nodes, make_edges(nodes), make_decisions(nodes))
    a, b, a2 = (written[s] for s in (A, B, A2))
    label = make_edges(a2)[0].label
    views: list[View] = list(VIEWS)
    reads = [(A, [a[5].id, a[9].id, a2[0].id]), (A2, [a2[1].id, a2[7].id]), (B, [b[3].id])]
    alone = [await stores.edges.neighbours(scope, ids_, views, 3) for scope, ids_ in reads]
    tagged = await stores.edges.labelled(A2, [a2[1].id], views, 50, label)
    wider = await stores.edges.neighbours(A, [a[5].id, a[6].id], views, 10)
    searches = 0
    search = stores.edges._client.search

    async def counting(*args: object, **kwargs: object) -> object:
        nonlocal searches
        searches += 1
        return await search(*args, **kwargs)
    monkeypatch.setattr(stores.edges._client, "search", counting)

    session = stores.edges.session()
    session.ahead(reads[:2])
    assert searches == 0  # started, not yet sent
    assert [await session.neighbours(scope, ids_, views, 3) for scope, ids_ in reads[:2]] == alone[:2]
    assert await session.labelled(A2, [a2[1].id], views, 50, label) == tagged
    assert searches == 1  # the one fetch ahead answered all three
    assert await session.read_many(reads, views, 3, None) == alone
    assert await session.neighbours(A, [a[5].id, a[6].id], views, 10) == wider
    assert searches == 3  # B's documents, then A's at a[6]: what each read lacked

    failing = stores.edges.session()

    async def down(*args: object, **kwargs: object) -> object:
        raise elastic_transport.ConnectionError("down")
    monkeypatch.setattr(stores.edges._client, "search", down)
    failing.ahead(reads)
    for _ in range(2):  # the failure is raised by the read that waits for it, and by every later one
        with pytest.raises(StoreUnavailable):
            await failing.neighbours(*reads[0], views, 3)


async def test_sessions_decode_an_unchanged_group_once_and_a_rewritten_one_again(stores: Stores) -> None:
    """Group documents are decoded, and their edges validated, once while unchanged: a later
    session answers with the same edge objects; a group rewritten since (a forgotten edge) is
    read anew, so no session answers an edge that is gone."""
    nodes = make_nodes(A)
    await write_all(stores, nodes, make_edges(nodes), make_decisions(nodes))
    views: list[View] = list(VIEWS)
    at = [nodes[5].id]
    first = await stores.edges.session().neighbours(A, at, views, 10)
    again = await stores.edges.session().neighbours(A, at, views, 10)
    assert first and again == first and all(x is y for x, y in zip(again, first, strict=True))
    gone = first[0]
    assert await stores.edges.delete_edges(A, nodes[5].id, [gone.id]) == 1
    after = await stores.edges.session().neighbours(A, at, views, 10)
    assert gone.id not in {e.id for e in after}
    assert after == await stores.edges.neighbours(A, at, views, 10)  # the store's answer


async def test_edges_are_one_document_per_conversation_per_write_and_the_last_write_wins(
        es: tuple[AsyncElasticsearch, str]) -> None:
    """Edge groups answer as one document per edge would (the SQLite store here): a write is one
    document per conversation, an edge written again takes its latest version, and a delete
    counts each edge once however many groups held it."""
    from storage.elastic.edges import GROUPS

    client, prefix = es
    groups = ElasticEdgeStore(client, prefix)
    sq = SqliteEdgeStore(connect(":memory:"))
    a, b = make_nodes(A), make_nodes(B)
    ea, eb = make_edges(a), make_edges(b)
    for store in (groups, sq):
        await store.upsert(ea + eb)
    assert (await client.count(index=prefix + GROUPS))["count"] == 2
    again = [e.model_copy(update={"probability": round(1.0 - e.probability, 3)}) for e in ea[:4]]
    for store in (groups, sq):
        await store.upsert(again)
    assert (await client.count(index=prefix + GROUPS))["count"] == 3
    ids = [n.id for n in a]
    for views in (["semantic"], ["temporal", "entity"], list(VIEWS)):
        for limit in (1, 3, 1000):
            assert await groups.neighbours(A, ids[:3], views, limit) == await sq.neighbours(A, ids[:3], views, limit)
    assert await groups.scan(A) == await sq.scan(A) and await groups.scan(B) == await sq.scan(B)
    assert {e.id: e.probability for e in await groups.scan(A)}[again[0].id] == again[0].probability
    doomed = [again[0].source]
    both = [ids[0], b[0].id, "nowhere"]
    for tenant, probe in ((A.tenant_id, both), (A.tenant_id, doomed), (A.tenant_id, []), ("other", both)):
        assert await groups.conversations_touching(tenant, probe) == await sq.conversations_touching(tenant, probe)
    assert await groups.conversations_touching(A.tenant_id, both) == [A.conversation_id]  # B is another tenant
    assert await groups.conversations_touching(B.tenant_id, [ids[0]]) == []
    assert await groups.delete(A, doomed) == await sq.delete(A, doomed) > 0
    assert await groups.scan(A) == await sq.scan(A)
    assert await groups.delete_scope(A) == await sq.delete_scope(A) > 0
    assert await groups.scan(A) == [] and await groups.scan(B) == await sq.scan(B)


async def test_a_legacy_edge_index_is_moved_into_groups(es: tuple[AsyncElasticsearch, str]) -> None:
    """A generation of one document per edge (an earlier release) is moved into groups by
    ``prepare``: the same edges read back, later writes win over them, the old index goes."""
    client, prefix = es
    nodes = make_nodes(A)
    edges = make_edges(nodes)
    ops: list[dict[str, object]] = []
    for e in edges:
        ops += [{"index": {"_id": e.id}}, {"tenant_id": e.tenant_id, "conversation_id": e.conversation_id, "id": e.id,
                                           "body": orjson.dumps(e.model_dump(mode="json")).decode()}]
    await client.indices.create(index=prefix + "edges", settings=elastic._SETTINGS, mappings={"properties": {
        "tenant_id": {"type": "keyword"}, "conversation_id": {"type": "keyword"}, "id": {"type": "keyword"},
        "body": {"type": "keyword", "index": False, "doc_values": False}}})
    await client.bulk(index=prefix + "edges", operations=ops, refresh=True)
    store = ElasticEdgeStore(client, prefix)
    await store.prepare()
    assert not await client.indices.exists(index=prefix + "edges")
    assert await store.scan(A) == sorted(edges, key=lambda e: e.id)
    newer = edges[0].model_copy(update={"probability": 0.01})
    await store.upsert([newer])
    assert {e.id: e.probability for e in await store.scan(A)}[newer.id] == 0.01


async def test_a_group_of_an_earlier_release_reads_as_before_and_a_delete_rewrites_it_as_a_table(
        es: tuple[AsyncElasticsearch, str]) -> None:
    """A group document whose body is a JSON array of edge objects (as earlier releases wrote it)
    answers every read as the SQLite store does, beside groups written now; rewriting it (a
    forget) writes the table format."""
    from storage.elastic.edges import GROUPS

    client, prefix = es
    groups = ElasticEdgeStore(client, prefix)
    sq = SqliteEdgeStore(connect(":memory:"))
    nodes = make_nodes(A)
    edges = make_edges(nodes)
    old, new = edges[: len(edges) // 2], edges[len(edges) // 2:]
    await groups.prepare()
    legacy = {"tenant_id": A.tenant_id, "conversation_id": A.conversation_id, "gid": "legacy", "written": 1,
              "nodes": sorted({e.source for e in old} | {e.target for e in old}), "views": sorted({e.view for e in old}),
              "body": orjson.dumps([e.model_dump(mode="json") for e in old]).decode()}
    await client.index(index=prefix + GROUPS, id="legacy", document=legacy, refresh=True)
    await groups.upsert(new)
    await sq.upsert(edges)
    ids_ = [n.id for n in nodes]
    for views in (["semantic"], list(VIEWS)):
        assert await groups.neighbours(A, ids_[:4], views, 5) == await sq.neighbours(A, ids_[:4], views, 5)
        reads = [(A, ids_[2:6])]
        assert await groups.read_many(reads, views, 1000, None) == await sq.read_many(reads, views, 1000, None)
    assert await groups.scan(A) == await sq.scan(A)
    doomed = [old[0].source]
    assert await groups.delete(A, doomed) == await sq.delete(A, doomed) > 0
    assert await groups.scan(A) == await sq.scan(A)
    body = (await client.get(index=prefix + GROUPS, id="legacy"))["_source"]["body"]
    assert orjson.loads(body)["v"] == 2
