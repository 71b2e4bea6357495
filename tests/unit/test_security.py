"""Keys, scopes, tenant isolation and hostile input, over real HTTP against the embedded service."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService
from query_api.auth import Authenticator, mint
from query_api.http import create_app
from storage.keys import SqliteKeyStore
from tests.conftest import chat_observations, fake_llm, serve_http
from topology import limits
from topology.errors import StoreUnavailable
from topology.ports import Embedder
from topology.schemas import Scope


@dataclass
class Api:
    url: str
    keys: dict[str, str]  # name -> key
    store: SqliteKeyStore
    service: EmbeddedService
    llm_seen: list[dict[str, Any]]

    def client(self, who: str | None) -> httpx.Client:
        headers = {} if who is None else {"Authorization": f"Bearer {self.keys[who]}"}
        return httpx.Client(base_url=self.url, timeout=60, headers=headers)


@pytest.fixture
async def api(embedder: Embedder) -> AsyncIterator[Api]:
    store = SqliteKeyStore(":memory:")
    keys = {}
    for name, tenant, scopes in [("a", "acme", ["ingest", "query", "admin"]), ("b", "globex", ["ingest", "query", "admin"]),
                                 ("a_ingest", "acme", ["ingest"]), ("a_query", "acme", ["query"])]:
        keys[name], record = mint(tenant, scopes)
        await store.create(record)
    llm, seen = fake_llm()
    with serve_http(llm) as llm_url:
        service = EmbeddedService(Settings(system_two_url=f"{llm_url}/v1"), embedder=embedder, data_dir=":memory:")
        with serve_http(create_app(service, Authenticator(store, cache_seconds=0))) as url:
            yield Api(url, keys, store, service, seen)


def _items(tenant: str | None, n: int | None = None, conversation: str = "c1") -> list[dict[str, Any]]:
    out = []
    for o in chat_observations(tenant="x", conversation=conversation, n=n):
        item = o.model_dump(mode="json", exclude={"tenant_id"})
        if tenant is not None:
            item["tenant_id"] = tenant
        out.append(item)
    return out


def test_every_endpoint_but_healthz_needs_a_valid_key(api: Api) -> None:
    with api.client(None) as c:
        paths = c.get("/openapi.json").json()["paths"]
        assert c.get("/healthz").status_code == 200
        checked = 0
        for path, methods in paths.items():
            if path == "/healthz":
                continue
            concrete = path.replace("{tenant_id}", "acme").replace("{conversation_id}", "c1").replace("{event_id}", "e0")
            for method in methods:
                for header in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"},
                               {"Authorization": "Bearer jm_0123456789abcdef_notarealsecret"}):
                    r = c.request(method.upper(), concrete, headers=header, json=[])
                    assert r.status_code == 401, (method, path, header, r.text)
                    assert r.headers["www-authenticate"] == "Bearer"
                checked += 1
        assert checked >= 8


def test_scopes_and_revocation(api: Api) -> None:
    with api.client("a_ingest") as c:
        assert c.post("/v1/observations", json=_items(None, n=1)).status_code == 200
        assert c.post("/v1/query", json={"conversation_id": "c1", "question": "puppy?"}).status_code == 403
        assert c.get("/v1/dead-letters").status_code == 403
        assert c.delete("/v1/conversations/c1").status_code == 403
    with api.client("a_query") as c:
        assert c.post("/v1/observations", json=_items(None, n=1)).status_code == 403
        assert c.post("/v1/query", json={"conversation_id": "c1", "question": "puppy?"}).status_code == 200
        key_id = api.keys["a_query"].split("_")[1]
    import asyncio

    assert asyncio.run(api.store.revoke(key_id))
    with api.client("a_query") as c:
        assert c.post("/v1/query", json={"conversation_id": "c1", "question": "puppy?"}).status_code == 401


def _evidence(c: httpx.Client, question: str) -> list[tuple[str, float]]:
    r = c.post("/v1/query", json={"conversation_id": "c1", "question": question, "top_k": 10})
    assert r.status_code == 200, r.text
    return [(e["node_id"], e["score"]) for e in r.json()["evidence"]]


def test_tenants_never_see_each_other(api: Api) -> None:
    """Same conversation ids, event ids and entity names in two tenants: no read path crosses."""
    a_items = _items(None)
    b_items = [{**item, "content": item["content"].replace("puppy", "parrot").replace("marathon", "regatta")
                + " Globex-only."} for item in a_items]
    with api.client("a") as a, api.client("b") as b:
        assert a.post("/v1/observations", json=a_items).status_code == 200
        questions = ["What is the name of Ana's puppy?", "Why did Ben start training?", "Who is Clara?"]
        before = {q: _evidence(a, q) for q in questions}
        assert b.post("/v1/observations", json=b_items).status_code == 200
        # B's data is in the same stores, with overlapping words: A's rankings do not move
        assert {q: _evidence(a, q) for q in questions} == before

        a_nodes = a.get("/v1/conversations/c1/nodes").json()
        b_nodes = b.get("/v1/conversations/c1/nodes").json()
        assert {n["tenant_id"] for n in a_nodes} == {"acme"} and {n["tenant_id"] for n in b_nodes} == {"globex"}
        assert not {n["id"] for n in a_nodes} & {n["id"] for n in b_nodes}
        assert all("Globex-only" not in n["content"] for n in a_nodes)
        a_ids = {n["id"] for n in a_nodes}
        assert a.get("/v1/conversations").json() == [{"conversation_id": "c1", "nodes": len(a_nodes)}]
        assert all(d["tenant_id"] == "acme" for d in a.get("/v1/conversations/c1/decisions").json())
        for e in a.get("/v1/conversations/c1/edges").json():
            assert e["tenant_id"] == "acme" and e["source"] in a_ids and e["target"] in a_ids
        for q in questions:
            r = a.post("/v1/query", json={"conversation_id": "c1", "question": q, "top_k": 10, "answer": True})
            body = r.json()
            assert {e["node_id"] for e in body["evidence"]} <= a_ids
            assert all("Globex-only" not in e["content"] for e in body["evidence"])
            assert "Globex-only" not in api.llm_seen[-1]["messages"][-1]["content"]

        # naming the other tenant, in a body or a path, is refused and writes nothing
        assert a.post("/v1/observations", json=[{**a_items[0], "event_id": "new"},
                                                {**a_items[1], "event_id": "sneaky", "tenant_id": "globex"}]).status_code == 403
        assert len(b.get("/v1/conversations/c1/nodes").json()) == len(b_items)
        assert len(a.get("/v1/conversations/c1/nodes").json()) == len(a_items)
        assert a.post("/v1/query", json={"tenant_id": "globex", "conversation_id": "c1",
                                         "question": "parrot?"}).status_code == 403
        assert a.get("/v1/tenants/globex/conversations/c1/nodes").status_code == 403
        assert a.get("/v1/tenants/acme/conversations/c1/nodes").json() == a_nodes

        # dead letters are listed per tenant
        assert a.post("/v1/observations", json=[{"conversation_id": "c1", "content": "acme bad"}]).status_code == 422
        assert b.post("/v1/observations", json=[{"conversation_id": "c1", "content": "globex bad"}]).status_code == 422
        a_letters, b_letters = a.get("/v1/dead-letters").json(), b.get("/v1/dead-letters").json()
        assert [d["tenant_id"] for d in a_letters] == ["acme"] and "acme bad" in a_letters[0]["original"]
        assert [d["tenant_id"] for d in b_letters] == ["globex"] and "globex bad" in b_letters[0]["original"]


BASE = {"conversation_id": "c1", "event_id": "ok", "content": "A valid observation."}
DEEP: dict[str, Any] = {}
_cur = DEEP
for _ in range(limits.MAX_METADATA_DEPTH + 2):
    _cur["k"] = {}
    _cur = _cur["k"]

BAD_ITEMS: list[tuple[str, str]] = [  # (name, JSON text of one item), each must be refused alone
    ("not an object", '"just a string"'),
    ("wrong type id", json.dumps({**BASE, "event_id": 42})),
    ("wrong type tenant", json.dumps({**BASE, "tenant_id": ["acme"]})),
    ("wrong type content", json.dumps({**BASE, "content": ["a"]})),
    ("wrong type entities", json.dumps({**BASE, "entities": "Ana"})),
    ("lone surrogate content", json.dumps({**BASE, "content": "a\ud800b"})),
    ("lone surrogate id", json.dumps({**BASE, "event_id": "\udfff"})),
    ("lone surrogate metadata key", json.dumps({**BASE, "metadata": {"\ud800": 1}})),
    ("NUL content", json.dumps({**BASE, "content": "a\u0000b"})),
    ("NUL conversation", json.dumps({**BASE, "conversation_id": "c\u00001"})),
    ("control char in id", json.dumps({**BASE, "event_id": "e\u0007"})),
    ("long conversation", json.dumps({**BASE, "conversation_id": "c" * (limits.MAX_ID + 1)})),
    ("long event id", json.dumps({**BASE, "event_id": "e" * (limits.MAX_ID + 1)})),
    ("long content", json.dumps({**BASE, "content": "x" * (limits.MAX_CONTENT + 1)})),
    ("long speaker", json.dumps({**BASE, "speaker": "s" * (limits.MAX_SPEAKER + 1)})),
    ("long role", json.dumps({**BASE, "role": "r" * (limits.MAX_ROLE + 1)})),
    ("long entity", json.dumps({**BASE, "entities": ["n" * (limits.MAX_ID + 1)]})),
    ("many entities", json.dumps({**BASE, "entities": [f"n{i}" for i in range(limits.MAX_ENTITIES + 1)]})),
    ("long provenance", json.dumps({**BASE, "provenance": {"k": "v" * (limits.MAX_PROVENANCE_VALUE + 1)}})),
    ("many provenance", json.dumps({**BASE, "provenance": {f"k{i}": "v" for i in range(limits.MAX_PROVENANCE + 1)}})),
    ("big metadata", json.dumps({**BASE, "metadata": {"blob": "x" * limits.MAX_METADATA_BYTES}})),
    ("deep metadata", json.dumps({**BASE, "metadata": DEEP})),
    ("NaN metadata", json.dumps({**BASE, "metadata": {"x": float("nan")}})),
    ("year 1", json.dumps({**BASE, "observed_at": "0001-01-01T00:00:00Z"})),
    ("year 9999", json.dumps({**BASE, "observed_at": "9999-12-31T23:59:59Z"})),
    ("not a date", json.dumps({**BASE, "observed_at": "yesterday"})),
    ("unknown schema", json.dumps({**BASE, "schema_version": 99})),
    ("unknown field", json.dumps({**BASE, "mood": "happy"})),
    ("blank content", json.dumps({**BASE, "content": "   "})),
]


def test_every_bad_item_is_a_4xx_dead_letter_and_valid_neighbours_are_kept(api: Api) -> None:
    with api.client("a") as c:
        for n, (name, raw) in enumerate(BAD_ITEMS):
            good = json.dumps({**BASE, "event_id": f"good-{n}"})
            body = f"[{good}, {raw}]".encode()
            r = c.post("/v1/observations", content=body, headers={"content-type": "application/json"})
            assert r.status_code == 422, (name, r.status_code, r.text)
            out = r.json()
            assert out["accepted"] == 1 and out["rejected"] == 1 and out["errors"][0]["index"] == 1, name
            assert out["errors"][0]["reason"], name
        letters = c.get("/v1/dead-letters", params={"limit": 1000}).json()
        assert len(letters) == len(BAD_ITEMS)
        assert all(d["tenant_id"] == "acme" and d["reason"] for d in letters)
        long_letter = next(d for d in letters if '"xxxx' in d["original"] and d["truncated"])
        assert len(long_letter["original"].encode()) <= limits.DEAD_LETTER_ORIGINAL_BYTES
        assert long_letter["original_bytes"] > limits.MAX_CONTENT
        nodes = c.get("/v1/conversations/c1/nodes").json()
        # (the identical good items are near-duplicates: consolidation may add derived summaries)
        assert sorted(n["event_id"] for n in nodes if n["kind"] == "observation") == sorted(
            f"good-{n}" for n in range(len(BAD_ITEMS)))


def _chunks(total: int) -> Iterator[bytes]:
    yield b"["
    chunk = json.dumps({**BASE, "content": "y" * 60_000}).encode() + b","
    sent = 1
    while sent < total:
        yield chunk
        sent += len(chunk)
    yield json.dumps(BASE).encode() + b"]"


def test_whole_body_problems_get_clear_4xx(api: Api) -> None:
    with api.client("a") as c:
        def post(content: bytes | Iterator[bytes]) -> httpx.Response:
            return c.post("/v1/observations", content=content, headers={"content-type": "application/json"})

        assert post(b"{not json").status_code == 400
        assert post(b'[{"content": "\xff\xfe"}]').status_code == 400  # not UTF-8
        assert post(b'{"an": "object"}').status_code == 422
        assert post(b"").status_code == 400
        many = json.dumps([{**BASE, "event_id": f"e{i}"} for i in range(limits.MAX_BATCH_ITEMS + 1)]).encode()
        r = post(many)
        assert r.status_code == 413 and str(limits.MAX_BATCH_ITEMS) in r.json()["detail"]
        big = b"[" + json.dumps({**BASE, "content": "z" * (limits.MAX_BODY_BYTES + 10)}).encode() + b"]"
        assert post(big).status_code == 413  # declared length
        assert post(_chunks(limits.MAX_BODY_BYTES + 100_000)).status_code == 413  # chunked, no length
        assert c.post("/v1/query", json={"conversation_id": "c1", "question": "q" * (limits.MAX_QUESTION + 1)}).status_code == 422
        assert c.post("/v1/query", content=b'{"conversation_id": "\\ud800", "question": "q"}',
                      headers={"content-type": "application/json"}).status_code == 422
        assert c.get("/v1/conversations/" + "c" * (limits.MAX_ID + 1) + "/nodes").status_code == 422
        assert c.get("/v1/conversations/c%00/nodes").status_code == 422
        assert c.get("/v1/dead-letters", params={"limit": 0}).status_code == 422
        assert c.get("/v1/conversations/c1/nodes").status_code == 404  # nothing above was written
        sources = [d["source"] for d in c.get("/v1/dead-letters", params={"limit": 1000}).json()]
        assert sources.count("http:body") == 5  # two not JSON, one not an array, empty, too many items


async def test_store_outage_is_503_with_retry_after(api: Api) -> None:
    with api.client("a") as c:
        assert c.post("/v1/observations", json=_items(None, n=2)).status_code == 200
        for store in (api.service.mem.stores.nodes, api.service.mem.stores.edges,
                      api.service.mem.stores.lexical, api.service.mem.stores.dead_letters):
            store._conn.close()  # type: ignore[attr-defined]  # a real failure: the database is gone
        for r in (c.post("/v1/query", json={"conversation_id": "c1", "question": "puppy?"}),
                  c.post("/v1/observations", json=_items(None, n=1, conversation="c2")),
                  c.get("/v1/conversations/c1/nodes"), c.get("/v1/dead-letters")):
            assert r.status_code == 503, r.text
            assert r.headers["retry-after"] == "5"
    # the stores themselves translate: reads too raise StoreUnavailable, never sqlite3.Error
    stores, scope = api.service.mem.stores, Scope(tenant_id="acme", conversation_id="c1")
    for read in (stores.nodes.get(scope, ["n"]), stores.nodes.scan(scope), stores.nodes.conversations("acme"),
                 stores.edges.neighbours(scope, ["n"], ["semantic"], 5), stores.edges.decisions(scope),
                 stores.lexical.search(scope, "puppy", 5), stores.dead_letters.recent(5, "acme")):
        with pytest.raises(StoreUnavailable, match=r"^sqlite "):
            await read


def test_unknown_conversations_are_404_and_name_the_listing(api: Api) -> None:
    """Reading or querying a conversation the key's tenant has no memory of answers 404 naming
    ``GET /v1/conversations``; another tenant's conversation of that id is just as unknown, and
    the answer never names any other conversation."""
    with api.client("a") as a, api.client("b") as b:
        assert b.post("/v1/observations", json=_items(None, conversation="globex-only")).status_code == 200
        assert a.post("/v1/observations", json=_items(None, n=3, conversation="c1")).status_code == 200
        for r in (a.post("/v1/query", json={"conversation_id": "globex-only", "question": "puppy?"}),
                  a.get("/v1/conversations/globex-only/nodes"), a.get("/v1/conversations/globex-only/edges"),
                  a.get("/v1/conversations/globex-only/decisions"),
                  a.get("/v1/tenants/acme/conversations/globex-only/nodes")):
            assert r.status_code == 404, r.text
            detail = r.json()["detail"]
            assert "no conversation 'globex-only'" in detail and "GET /v1/conversations" in detail
            assert "c1" not in detail
        assert b.get("/v1/conversations/globex-only/decisions").status_code == 200  # known there, even if empty
        assert a.get("/v1/conversations/c1/decisions").json() == []  # known: empty, not unknown
        assert a.post("/v1/query", json={"conversation_id": "c1", "question": "puppy?"}).status_code == 200


def test_forgetting_over_http_is_per_tenant(api: Api) -> None:
    items = _items(None)
    with api.client("a") as a, api.client("b") as b:
        assert a.post("/v1/observations", json=items).status_code == 200
        assert b.post("/v1/observations", json=items).status_code == 200
        b_before = b.get("/v1/conversations/c1/nodes").json()
        gone = next(n["id"] for n in a.get("/v1/conversations/c1/nodes").json() if n["event_id"] == "e0")
        r = a.delete("/v1/conversations/c1/observations/e0")
        assert r.status_code == 200 and r.json()["status"] == "deleted" and r.json()["nodes"] >= 1
        assert a.delete("/v1/conversations/c1/observations/e0").status_code == 404  # nothing left to forget
        assert a.delete("/v1/conversations/c1/observations/never-sent").status_code == 404
        nodes = a.get("/v1/conversations/c1/nodes").json()
        assert gone not in {n["id"] for n in nodes} and len(nodes) == len(items) - 1
        assert all(gone not in (e["source"], e["target"]) for e in a.get("/v1/conversations/c1/edges").json())
        evidence = a.post("/v1/query", json={"conversation_id": "c1", "question": items[0]["content"]}).json()["evidence"]
        assert gone not in {e["node_id"] for e in evidence}
        assert b.get("/v1/conversations/c1/nodes").json() == b_before  # the other tenant's same ids are untouched
        with api.client("a_ingest") as weak:
            assert weak.delete("/v1/conversations/c1").status_code == 403
        assert a.delete("/v1/conversations/c1").status_code == 200
        assert a.get("/v1/conversations/c1/nodes").status_code == 404
        assert a.delete("/v1/conversations/c1").status_code == 404
        assert b.get("/v1/conversations/c1/nodes").json() == b_before
