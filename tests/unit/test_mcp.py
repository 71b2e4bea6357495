"""The MCP server through the official SDK's own client, over both transports: streamable HTTP
(``/mcp`` of the API served over real HTTP) and stdio (``jevmem mcp`` spawned as a subprocess on
its own data directory). Plus tenant-wide recall over ``POST /v1/recall`` and the Python client."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2  # the MCP SDK's HTTP client (a dependency of mcp)
import orjson
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from jevmem.client import MemoryApiError, MemoryClient
from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService
from query_api.auth import Authenticator, mint
from query_api.http import create_app
from storage.keys import SqliteKeyStore
from tests.conftest import chat_observations, serve_http
from topology.ports import Embedder

ROOT = Path(__file__).resolve().parents[2]
PUPPY = "What is the name of Ana's puppy?"
TRIP = "Where are Ana and Clara planning a trip?"


@dataclass
class Api:
    url: str
    keys: dict[str, str]


@pytest.fixture
async def api(embedder: Embedder) -> AsyncIterator[Api]:
    store = SqliteKeyStore(":memory:")
    keys = {}
    for name, tenant, scopes in [("a", "acme", ["ingest", "query", "admin"]), ("b", "globex", ["ingest", "query", "admin"]),
                                 ("a_query", "acme", ["query"]), ("a_ingest", "acme", ["ingest"])]:
        keys[name], record = mint(tenant, scopes)
        await store.create(record)
    for name, users in [("ana", ["ana"]), ("ana_ben", ["ana", "ben"])]:  # keys limited to users of acme
        keys[name], record = mint("acme", ["ingest", "query", "admin"], users=users)
        await store.create(record)
    service = EmbeddedService(Settings(), embedder=embedder, data_dir=":memory:")
    with serve_http(create_app(service, Authenticator(store, cache_seconds=0))) as url:
        yield Api(url, keys)


@asynccontextmanager
async def mcp_http(api: Api, who: str) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {api.keys[who]}"}, timeout=120) as http, \
            Client(streamable_http_client(f"{api.url}/mcp", http_client=http)) as client:
        yield client


def items(start: int = 0, n: int | None = None) -> list[dict[str, Any]]:
    return [o.model_dump(mode="json", exclude={"tenant_id", "conversation_id"})
            for o in chat_observations(start=start, n=n)]


async def call(client: Client, tool: str, **args: Any) -> Any:
    res = await client.call_tool(tool, args)
    assert not res.is_error, res.content
    return res.structured_content


async def refused(client: Client, tool: str, **args: Any) -> str:
    res = await client.call_tool(tool, args)
    assert res.is_error
    text: str = res.content[0].text  # type: ignore[union-attr]
    return text


async def test_http_tools_remember_recall_graph_forget(api: Api) -> None:
    async with mcp_http(api, "a") as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert names == {"remember", "recall", "forget", "graph", "conversations"}
        bad = [{"content": ""}, 7, {"content": "ok", "event_id": "x" * 300}]
        out = await call(c, "remember", observations=[*items(), *bad], conversation_id="c1")
        assert out["accepted"] == 12 and out["rejected"] == 3
        assert [e["index"] for e in out["errors"]] == [12, 13, 14]
        assert "content" in out["errors"][0]["reason"] and "JSON object" in out["errors"][1]["reason"]
        assert out["event_ids"][:2] == ["e0", "e1"]
        auto = await call(c, "remember", observations=[{"content": "Ana's sister Clara lives in Porto."}], conversation_id="c1")
        assert auto["accepted"] == 1 and auto["event_ids"][0].startswith("mcp-")

        rec = await call(c, "recall", question=PUPPY, conversation_ids=["c1"], top_k=3)
        # the hashing embedder is no judge of meaning: the turn that names the puppy is among the three
        found = {e["event_id"]: e for e in rec["evidence"]}
        assert "e0" in found and "Biscuit" in found["e0"]["content"] and found["e0"]["conversation_id"] == "c1"
        assert rec["conversations"] == [{"conversation_id": "c1", "evidence": 3}]
        trace = rec["trace"]
        assert trace["controller_calls"] >= 1 and trace["stop_reason"] and {"route", "depth"} <= set(trace)

        g = await call(c, "graph", conversation_id="c1")
        assert g["total_nodes"] == 13 and len(g["nodes"]) == 13 and g["edges"]
        ids = {n["id"] for n in g["nodes"]}
        assert all(e["source"] in ids and e["target"] in ids for e in g["edges"])
        small = await call(c, "graph", conversation_id="c1", limit=2)
        assert len(small["nodes"]) == 2 and small["truncated"]
        assert (await call(c, "conversations"))["conversations"] == [{"conversation_id": "c1", "nodes": 13}]

        gone = await call(c, "forget", conversation_id="c1", event_id="e0")
        assert gone["status"] == "deleted" and gone["nodes"] == 1
        rec = await call(c, "recall", question=PUPPY, conversation_ids=["c1"])
        assert "e0" not in {e["event_id"] for e in rec["evidence"]}
        assert (await call(c, "forget", conversation_id="c1"))["status"] == "deleted"
        assert (await call(c, "conversations"))["conversations"] == []
        assert (await call(c, "forget", conversation_id="c1"))["status"] == "not_found"
    # the refused items are in the tenant's dead letters, as over POST /v1/observations
    with httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {api.keys['a']}"}) as h:
        sources = {d["source"] for d in h.get("/v1/dead-letters").json()}
    assert {"mcp#12", "mcp#13", "mcp#14"} <= sources


async def test_http_refuses_a_missing_or_wrong_key(api: Api) -> None:
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    with httpx.Client(base_url=api.url) as h:
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"},
                        {"Authorization": "Bearer jm_0123456789abcdef_notarealsecret"}):
            r = h.post("/mcp", json=init, headers={**headers, "Accept": "application/json, text/event-stream"})
            assert r.status_code == 401, (headers, r.text)
            assert r.headers["www-authenticate"] == "Bearer"
    api.keys["wrong"] = api.keys["a"][:-4] + "xxxx"
    with pytest.raises(Exception):  # noqa: B017 - the SDK's transport error for a 401
        async with mcp_http(api, "wrong") as c:
            await c.list_tools()


async def test_http_scopes_are_enforced_per_tool(api: Api) -> None:
    async with mcp_http(api, "a_query") as c:
        assert "ingest" in await refused(c, "remember", observations=items(n=1), conversation_id="c1")
        assert "admin" in await refused(c, "forget", conversation_id="c1")
        assert (await call(c, "recall", question=PUPPY))["evidence"] == []
    async with mcp_http(api, "a_ingest") as c:
        assert (await call(c, "remember", observations=items(n=1), conversation_id="c1"))["accepted"] == 1
        assert "query" in await refused(c, "recall", question=PUPPY)
        assert "query" in await refused(c, "graph", conversation_id="c1")


async def test_http_tenants_are_isolated(api: Api) -> None:
    async with mcp_http(api, "a") as a, mcp_http(api, "b") as b:
        await call(a, "remember", observations=items(), conversation_id="c1")
        assert "another tenant" in await refused(b, "remember", observations=[{**items(n=1)[0], "tenant_id": "acme"}],
                                                 conversation_id="c1")
        assert (await call(b, "recall", question=PUPPY))["evidence"] == []
        assert (await call(b, "recall", question=PUPPY, conversation_ids=["c1"]))["evidence"] == []
        unknown = await refused(b, "graph", conversation_id="c1")  # acme's c1 is not globex's
        assert "no conversation 'c1'" in unknown and "`conversations` tool" in unknown
        assert (await call(b, "conversations"))["conversations"] == []
        assert (await call(b, "forget", conversation_id="c1"))["status"] == "not_found"
        assert "e0" in [e["event_id"] for e in (await call(a, "recall", question=PUPPY))["evidence"][:2]]


async def test_tenant_wide_recall_over_mcp_http_api_and_client(api: Api) -> None:
    async with mcp_http(api, "a") as c:
        await call(c, "remember", observations=items(0, 6), conversation_id="pets")
        await call(c, "remember", observations=items(6, 6), conversation_id="travel")
        everywhere = await call(c, "recall", question=TRIP, top_k=5)
        assert everywhere["searched"] == 2  # one search; both conversations gave candidates
        assert {t["conversation_id"] for t in everywhere["conversations"]} == {"pets", "travel"}
        top = everywhere["evidence"][0]
        assert (top["conversation_id"], top["event_id"]) == ("travel", "e10")
        scores = [e["score"] for e in everywhere["evidence"]]
        assert scores == sorted(scores, reverse=True)
        pets = await call(c, "recall", question=PUPPY, top_k=5)
        assert (pets["evidence"][0]["conversation_id"], pets["evidence"][0]["event_id"]) == ("pets", "e0")
        only = await call(c, "recall", question=TRIP, conversation_ids=["pets"])
        assert {e["conversation_id"] for e in only["evidence"]} == {"pets"}

    with httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {api.keys['a']}"}) as h:
        r = h.post("/v1/recall", json={"question": TRIP, "top_k": 3})
        assert r.status_code == 200 and r.json()["evidence"][0]["conversation_id"] == "travel"
        assert h.post("/v1/recall", json={"question": TRIP, "conversation_ids": [f"c{i}" for i in range(1001)]}).status_code == 422
        # a user's memory: items without user_id belong to no user
        assert h.post("/v1/recall", json={"question": TRIP, "user_id": "ana"}).json()["evidence"] == []
    with httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {api.keys['b']}"}) as h:
        assert h.post("/v1/recall", json={"question": TRIP}).json()["evidence"] == []
    assert httpx.post(f"{api.url}/v1/recall", json={"question": TRIP}).status_code == 401

    with MemoryClient(api.url, api.keys["a"]) as m:
        assert m.recall(TRIP, top_k=2)["evidence"][0]["event_id"] == "e10"
        assert m.remember([{"event_id": "n1", "content": "Ben adopted a cat called Miso."}, {"content": ""}],
                          conversation_id="pets")["rejected"] == 1
        assert m.query("pets", "What is Ben's cat called?")["evidence"][0]["event_id"] == "n1"
        assert {c["conversation_id"] for c in m.conversations()} == {"pets", "travel"}
        assert m.forget("pets", "n1")["status"] == "deleted"
        assert m.forget("pets", "n1")["status"] == "not_found"
    with MemoryClient(api.url, api.keys["a_query"]) as m, pytest.raises(MemoryApiError) as err:
        m.forget("pets")
    assert err.value.status == 403


def _subprocess_env(data_dir: Path, key: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.startswith("JEVMEM_") or k in ("HOME", "PATH", "XDG_CACHE_HOME")}
    env.update(JEVMEM_DATA_DIR=str(data_dir), JEVMEM_API_KEY=key, PYTHONPATH=str(ROOT))
    return env


async def _make_key(data_dir: Path, tenant: str, scopes: list[str]) -> str:
    key, record = mint(tenant, scopes)
    store = SqliteKeyStore(data_dir / "keys.sqlite3")
    await store.create(record)
    await store.close()
    return key


MCP_CMD = [sys.executable, "-c", "from jevmem.cli import main; main()", "mcp"]


@pytest.mark.model  # the subprocess loads the real model
async def test_stdio_server_over_a_subprocess(tmp_path: Path) -> None:
    key = await _make_key(tmp_path, "acme", ["ingest", "query", "admin"])
    params = StdioServerParameters(command=MCP_CMD[0], args=MCP_CMD[1:], env=_subprocess_env(tmp_path, key), cwd=str(ROOT))
    async with Client(params, read_timeout_seconds=120) as c:
        out = await call(c, "remember", observations=[*items(), {"content": " "}], conversation_id="c1")
        assert out["accepted"] == 12 and out["rejected"] == 1 and "blank" in out["errors"][0]["reason"]
        await call(c, "remember", observations=items(6, 6), conversation_id="c2")
        rec = await call(c, "recall", question=PUPPY, top_k=3)
        assert (rec["evidence"][0]["conversation_id"], rec["evidence"][0]["event_id"]) == ("c1", "e0")
        assert rec["searched"] == 2
        g = await call(c, "graph", conversation_id="c1")
        assert g["total_nodes"] == 12 and g["edges"]
        assert (await call(c, "forget", conversation_id="c1", event_id="e0"))["status"] == "deleted"
        rec = await call(c, "recall", question=PUPPY, conversation_ids=["c1"])
        assert "e0" not in {e["event_id"] for e in rec["evidence"]}
        assert (await call(c, "conversations"))["conversations"] == [{"conversation_id": "c1", "nodes": 11},
                                                                     {"conversation_id": "c2", "nodes": 6}]
        # the store is this server's: a second one on the same directory stops with a clear error
        second = await asyncio.to_thread(subprocess.run, MCP_CMD, env=params.env, cwd=ROOT, capture_output=True,
                                         text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert second.returncode == 1 and "in use" in " ".join(second.stderr.split()), second.stderr
    assert (tmp_path / "memory.sqlite3").exists()


def test_stdio_refuses_a_bad_key_before_starting(tmp_path: Path) -> None:
    asyncio.run(_make_key(tmp_path, "acme", ["query"]))
    for key in ("", "jm_0123456789abcdef_notarealsecret"):
        env = _subprocess_env(tmp_path, key)
        done = subprocess.run(MCP_CMD, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert done.returncode == 2, done.stderr
        assert "key" in done.stderr.lower()
    assert not (tmp_path / "memory.sqlite3").exists()


async def test_prompt_format_answers_the_compact_lines_over_http_and_mcp(api: Api) -> None:
    auth = {"Authorization": f"Bearer {api.keys['a']}"}
    async with httpx.AsyncClient(base_url=api.url, headers=auth, timeout=60) as http:
        assert (await http.post("/v1/observations", json=[{**i, "conversation_id": "fmt"} for i in items(n=6)])).status_code == 200
        full = (await http.post("/v1/query", json={"conversation_id": "fmt", "question": "the puppy", "top_k": 3})).json()
        short = (await http.post("/v1/query", json={"conversation_id": "fmt", "question": "the puppy", "top_k": 3,
                                                    "format": "prompt"})).json()
        assert set(short) >= {"question", "lines", "text"} and "evidence" not in short
        assert len(short["lines"]) == len(full["evidence"]) == 3 and short["text"] == "\n".join(short["lines"])
        pairs = zip(short["lines"], full["evidence"], strict=True)
        assert all(line.endswith(e["content"]) and e["speaker"] in line for line, e in pairs)
        assert short["lines"][0].startswith("[recorded ")
        recall = (await http.post("/v1/recall", json={"question": "the puppy", "top_k": 2, "format": "prompt"})).json()
        assert len(recall["lines"]) == 2 and len(recall["text"]) < len(str(full))
    async with mcp_http(api, "a") as c:
        res = await c.call_tool("recall", {"question": "the puppy", "conversation_ids": ["fmt"], "top_k": 3,
                                           "format": "prompt"})
        # what the model reads: the prompt lines alone, one text block (as POST /v1/recall's text)
        async with httpx.AsyncClient(base_url=api.url, headers=auth, timeout=60) as http:
            same = (await http.post("/v1/recall", json={"question": "the puppy", "conversation_ids": ["fmt"],
                                                        "top_k": 3, "format": "prompt"})).json()["text"]
        assert not res.is_error and [b.text for b in res.content] == [same]  # type: ignore[union-attr]
        assert res.structured_content == {"text": same} and same.count("\n") == 2
        js = await c.call_tool("recall", {"question": "the puppy", "conversation_ids": ["fmt"], "top_k": 3})
        assert orjson.loads(js.content[0].text) == js.structured_content  # type: ignore[union-attr]
        assert "\n" not in js.content[0].text  # type: ignore[union-attr]  # compact JSON


async def test_a_key_limited_to_users_remembers_and_recalls_only_theirs(api: Api) -> None:
    def client(who: str) -> httpx.Client:
        return httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {api.keys[who]}"})

    with client("a") as whole:
        assert whole.post("/v1/observations", json=[
            {"conversation_id": "s1", "event_id": "b1", "user_id": "ben", "content": "Ben's locker code is 9921."},
            {"conversation_id": "s2", "event_id": "c1", "user_id": "cleo", "content": "Cleo's locker code is 1234."},
        ]).status_code == 200
    with client("ana") as ana:
        # a key of one user: its items are that user's (named or not); another user's are refused whole
        assert ana.post("/v1/observations", json=[
            {"conversation_id": "s3", "event_id": "a1", "content": "My locker code is 4417."}]).status_code == 200
        refused = ana.post("/v1/observations", json=[
            {"conversation_id": "s3", "event_id": "a2", "user_id": "ben", "content": "x"}])
        assert refused.status_code == 403 and "ben" in refused.json()["detail"]
        mine = ana.post("/v1/recall", json={"question": "What is my locker code?"}).json()
        assert {e["conversation_id"] for e in mine["evidence"]} == {"s3"} and mine["user_id"] == "ana"
        assert ana.post("/v1/recall", json={"question": "locker code", "user_id": "ben"}).status_code == 403
        # her own conversations read as any key's; in anyone else's (or one that does not exist) she sees
        # nothing, and cannot tell which; dead letters are the whole tenant's
        assert ana.get("/v1/conversations").json() == [{"conversation_id": "s3", "nodes": 1}]
        assert ana.get("/v1/conversations/s3/nodes").json()[0]["user_id"] == "ana"
        assert ana.post("/v1/query", json={"conversation_id": "s3", "question": "code"}).json()["evidence"]
        for path in ("/v1/conversations/s1/nodes", "/v1/conversations/nope/nodes", "/v1/conversations/s1/edges",
                     "/v1/conversations/nope/edges", "/v1/conversations/s1/decisions"):
            res = ana.get(path)
            assert res.status_code == 200 and res.json() == [], path
        for conv in ("s1", "nope"):
            asked = ana.post("/v1/query", json={"conversation_id": conv, "question": "locker code"})
            assert asked.status_code == 200 and asked.json()["evidence"] == [], conv
            gone = ana.delete(f"/v1/conversations/{conv}")
            assert gone.status_code == 404 and gone.json()["status"] == "not_found", conv
        assert ana.delete("/v1/conversations/s1/observations/b1").status_code == 404  # Ben's: not hers to forget
        res = ana.get("/v1/dead-letters")
        assert res.status_code == 403 and "limited to users ana" in res.json()["detail"]
    with client("a") as whole:  # a turn of another user joins her conversation: she still sees hers only
        whole.post("/v1/observations", json=[{"conversation_id": "s3", "event_id": "b2", "user_id": "ben",
                                              "content": "Ben joined the chat."}])
    with client("ana") as ana:
        assert ana.get("/v1/conversations").json() == [{"conversation_id": "s3", "nodes": 1}]
        assert [n["event_id"] for n in ana.get("/v1/conversations/s3/nodes").json()] == ["a1"]
        asked = ana.post("/v1/query", json={"conversation_id": "s3", "question": "Who joined the chat?"}).json()
        assert [e["content"] for e in asked["evidence"]] == ["My locker code is 4417."]
        assert ana.delete("/v1/conversations/s3").status_code == 403  # Ben's turn is not hers to forget
    with client("ana_ben") as both:
        assert both.post("/v1/recall", json={"question": "locker code"}).status_code == 403  # which user?
        ben = both.post("/v1/recall", json={"question": "locker code", "user_id": "ben"}).json()
        assert {e["content"] for e in ben["evidence"]} == {"Ben's locker code is 9921.", "Ben joined the chat."}
        unnamed = both.post("/v1/observations", json=[{"conversation_id": "s4", "event_id": "x", "content": "hi"}])
        assert unnamed.status_code == 403


async def test_recall_says_what_is_still_true_and_what_was_true_then(api: Api) -> None:
    said = [{"content": "I live in Porto, near the old bridge.", "speaker": "Ana", "event_id": "h0",
             "observed_at": "2024-03-01T10:00:00"},
            {"content": "I moved to Lisbon last month, I live there now.", "speaker": "Ana", "event_id": "h1",
             "observed_at": "2024-06-01T10:00:00"}]
    async with mcp_http(api, "a") as c:
        assert (await call(c, "remember", observations=said, conversation_id="home"))["accepted"] == 2
        now = await call(c, "recall", question="Where does Ana live?", conversation_ids=["home"])
        at = {e["event_id"]: (i, e) for i, e in enumerate(now["evidence"])}
        assert at["h1"][0] < at["h0"][0] and at["h0"][1]["superseded_by"] == [said[1]["content"]]
        assert at["h0"][1]["valid_until"].startswith("2024-06-01") and at["h1"][1]["valid_from"].startswith("2024-06-01")
        lines = (await c.call_tool("recall", {"question": "Where does Ana live?", "conversation_ids": ["home"],
                                              "format": "prompt"})).content[0].text
        assert "(superseded on 2024-06-01 by: I moved to Lisbon" in lines
        then = await call(c, "recall", question="Where does Ana live?", conversation_ids=["home"],
                          as_of="2024-04-01T00:00:00")
        assert [e["event_id"] for e in then["evidence"]] == ["h0"] and then["evidence"][0]["superseded_by"] == []

