"""The HTTP API over real HTTP (uvicorn on loopback), with an OpenAI-compatible System Two."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService
from query_api.auth import Authenticator, mint
from query_api.http import create_app
from query_api.system_two import OpenAICompatibleSystemTwo
from storage.keys import SqliteKeyStore
from tests.conftest import chat_observations, fake_llm, serve_http
from topology.errors import SystemTwoError
from topology.ports import Embedder


@pytest.fixture
async def api(embedder: Embedder) -> Any:
    llm, seen = fake_llm()
    keys = SqliteKeyStore(":memory:")
    key, record = mint("t1", ["ingest", "query", "admin"])
    await keys.create(record)
    with serve_http(llm) as llm_url:
        settings = Settings(system_two_url=f"{llm_url}/v1", system_two_model="small")
        app = create_app(EmbeddedService(settings, embedder=embedder, data_dir=":memory:"), Authenticator(keys))
        with serve_http(app) as url:
            yield url, seen, {"Authorization": f"Bearer {key}"}


def test_ingest_query_and_read_back(api: Any) -> None:
    url, seen, auth = api
    with httpx.Client(base_url=url, timeout=60, headers=auth) as c:
        batch = [o.model_dump(mode="json") for o in chat_observations()]
        r = c.post("/v1/observations", json=batch)
        assert r.status_code == 200 and r.json() == {"accepted": len(batch), "rejected": 0, "errors": [],
                                                     "trace_id": r.headers["x-trace-id"]}
        q = c.post("/v1/query", json={"tenant_id": "t1", "conversation_id": "c1",
                                      "question": "What is the name of Ana's puppy?", "top_k": 3, "answer": True})
        assert q.status_code == 200
        body = q.json()
        assert len(body["evidence"]) == 3 and "Biscuit" in body["evidence"][0]["content"]
        assert body["answer"] == "Biscuit" and body["trace"]["controller_calls"] >= 2
        assert seen[-1]["model"] == "small" and "Biscuit" in seen[-1]["messages"][-1]["content"]
        nodes = c.get("/v1/tenants/t1/conversations/c1/nodes").json()
        edges = c.get("/v1/tenants/t1/conversations/c1/edges").json()
        assert len(nodes) == len(batch) and edges and all("embedding" in n and n["embedding"] is None for n in nodes)
        assert c.get("/v1/conversations/c1/nodes").json() == nodes
        assert c.get("/v1/tenants/other/conversations/c1/nodes").status_code == 403
        assert c.get("/healthz").json()["status"] == "ok"
        assert "/v1/query" in c.get("/openapi.json").json()["paths"]


def test_bad_items_get_422_with_reasons_and_good_items_are_kept(api: Any) -> None:
    url, _, auth = api
    good = [o.model_dump(mode="json") for o in chat_observations(n=2)]
    with httpx.Client(base_url=url, timeout=60, headers=auth) as c:
        r = c.post("/v1/observations", json=[good[0], {"tenant_id": "t1", "content": "no ids"}, good[1],
                                             {**good[0], "event_id": "x", "content": " "}])
        assert r.status_code == 422
        body = r.json()
        assert body["accepted"] == 2 and body["rejected"] == 2
        assert [e["index"] for e in body["errors"]] == [1, 3]
        assert "conversation_id: Field required" in body["errors"][0]["reason"]
        assert "content is blank" in body["errors"][1]["reason"]
        assert len(c.get("/v1/tenants/t1/conversations/c1/nodes").json()) == 2
        letters = c.get("/v1/dead-letters").json()
        assert [d["source"] for d in letters] == ["http#1", "http#3"]
        assert {d["tenant_id"] for d in letters} == {"t1"}
        assert c.post("/v1/observations", json={"not": "a list"}).status_code == 422
        assert c.get("/v1/dead-letters").json()[-1]["source"] == "http:body"
        assert c.post("/v1/query", json={"tenant_id": "t1"}).status_code == 422


async def test_system_two_errors_are_translated() -> None:
    s2 = OpenAICompatibleSystemTwo("http://127.0.0.1:9", "m", timeout=1)
    with pytest.raises(SystemTwoError):
        await s2.answer("q", ["e"])
    await s2.aclose()
