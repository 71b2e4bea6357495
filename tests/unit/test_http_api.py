"""The HTTP API over real HTTP (uvicorn on loopback), with an OpenAI-compatible System Two."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService
from query_api.auth import Authenticator, mint
from query_api.http import LISTING, create_app, error_response
from query_api.retrieval.system_two import OpenAICompatibleSystemTwo
from query_api.service import TooManyItems, answer_for
from storage.keys import SqliteKeyStore
from tests.conftest import chat_observations, fake_llm, serve_http
from topology.errors import (
    BrokerUnavailable,
    Forbidden,
    InvalidRequest,
    JevMemError,
    ModelMismatch,
    StoreUnavailable,
    SystemOneError,
    SystemTwoError,
    Unauthenticated,
    UnknownConversation,
)
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


@pytest.mark.parametrize(("error", "status", "header"), [
    (Unauthenticated("no key"), 401, "www-authenticate"), (Forbidden("no scope"), 403, None),
    (UnknownConversation("c9"), 404, None), (TooManyItems("1001 items"), 413, None),
    (InvalidRequest("too many"), 422, None), (StoreUnavailable("down"), 503, "retry-after"),
    (BrokerUnavailable("down"), 503, "retry-after"), (SystemOneError("bad"), 502, "retry-after"),
    (SystemTwoError("bad"), 502, "retry-after")])
def test_one_table_answers_every_error_for_http_and_mcp(error: JevMemError, status: int, header: str | None) -> None:
    answer = answer_for(error, LISTING)
    assert answer is not None and answer.status == status and str(error) in answer.message
    assert {k.lower() for k in answer.headers} == ({header} if header else set())
    response = error_response(error)  # the HTTP rendering of the same answer
    assert response.status_code == status
    body = orjson.loads(bytes(response.body))
    assert (body["detail"][0]["msg"] if status == 422 else body["detail"]) == answer.message


def test_unknown_conversation_names_how_to_list_and_misconfiguration_is_no_answer() -> None:
    answer = answer_for(UnknownConversation("c9"), "GET /v1/conversations")
    assert answer is not None and answer.message == (
        "not found: no conversation 'c9' in this tenant's memory; list the known ones with GET /v1/conversations")
    assert answer_for(ModelMismatch("built with another model"), "x") is None  # not the caller's to fix: a 500


def test_the_openapi_document_declares_every_answer(api: Any) -> None:
    url, _, _ = api
    spec = httpx.get(f"{url}/openapi.json").json()
    ops = spec["paths"]
    assert set(ops["/v1/query"]["post"]["responses"]) == {"200", "400", "401", "403", "404", "413", "422", "502", "503"}
    assert set(ops["/v1/conversations/{conversation_id}/nodes"]["get"]["responses"]) == {
        "200", "401", "403", "404", "422", "503"}
    assert set(ops["/v1/conversations/{conversation_id}"]["delete"]["responses"]) == {
        "200", "202", "401", "403", "404", "422", "503"}
    ingest = ops["/v1/observations"]["post"]["responses"]
    assert {"400", "413", "422"} <= set(ingest)
    refs = ingest["422"]["content"]["application/json"]["schema"]["anyOf"]
    assert {r["$ref"].rsplit("/", 1)[1] for r in refs} == {"IngestResponse", "ValidationProblem"}
    field_error = spec["components"]["schemas"]["FieldError"]
    assert set(field_error["required"]) == {"loc", "msg", "type"}
    with httpx.Client(base_url=url, timeout=60) as c:  # a 422 body has the declared shape
        r = c.post("/v1/query", json={"conversation_id": "c1"}, headers=api[2])
        assert r.status_code == 422 and all(set(e) == {"loc", "msg", "type"} for e in r.json()["detail"])
        r = c.delete("/v1/conversations/c1/observations/e%01", headers=api[2])
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["path", "event_id"]
