"""The embedding-service backend against a local server that speaks OpenAI's ``/v1/embeddings``
wire format over real HTTP: batching, order, normalisation, retries, refusals, and the embedded
pipeline running on it."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from jevmem import assembly
from jevmem.settings import Settings
from jevmem.wiring import build_embedded
from tests.conftest import chat_observations, serve_http
from topology.embedding_service import EmbeddingRefused, EmbeddingUnavailable, ServiceEmbedder

DIM = 16


def vector(text: str) -> list[float]:
    """A deterministic, unnormalised vector per text (words share coordinates, so related texts are close)."""
    v = [0.0] * DIM
    for word in text.lower().split():
        v[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIM] += 1.0
    return v


@dataclass
class Fake:
    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    fail: list[int] = field(default_factory=list)  # statuses to answer before succeeding


@pytest.fixture
def service() -> Iterator[Fake]:
    app = FastAPI()
    state = Fake("")

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Any:
        body = await request.json()
        state.requests.append(body)
        state.headers.append(dict(request.headers))
        if state.fail:
            status = state.fail.pop(0)
            return JSONResponse({"error": {"message": f"status {status}"}}, status_code=status,
                                headers={"Retry-After": "0"} if status == 429 else {})
        data = [{"object": "embedding", "index": i, "embedding": vector(t)} for i, t in enumerate(body["input"])]
        random.Random(len(state.requests)).shuffle(data)  # the index fields, not the order, place them
        return {"object": "list", "model": body["model"], "data": data, "usage": {"prompt_tokens": 1, "total_tokens": 1}}

    with serve_http(app) as url:
        state.url = f"{url}/v1"
        yield state


def test_vectors_are_normalised_ordered_and_batched(service: Fake) -> None:
    emb = ServiceEmbedder(service.url, "fake-embed", api_key="sk-test", batch=3, passage_prefix="passage: ")
    assert (emb.name, emb.dim) == ("openai:fake-embed", DIM)  # the dimension learned from one call
    texts = [f"text number {i} about dogs" for i in range(7)]
    got = emb.embed(texts)
    assert [len(r["input"]) for r in service.requests[1:]] == [3, 3, 1]
    assert service.requests[1]["input"][0] == "passage: text number 0 about dogs"
    assert service.headers[1]["authorization"] == "Bearer sk-test"
    for t, v in zip(texts, got, strict=True):
        raw = vector("passage: " + t)
        norm = sum(x * x for x in raw) ** 0.5
        assert v == pytest.approx([x / norm for x in raw], abs=1e-6)
        assert abs(sum(x * x for x in v) - 1.0) < 1e-5
    assert emb.embed_query(["dogs"]) != emb.embed(["dogs"])  # memories carry the passage prefix, questions none
    assert service.requests[-2]["input"] == ["dogs"] and service.requests[-1]["input"] == ["passage: dogs"]
    emb.close()


def test_transient_failures_are_retried_and_refusals_are_not(service: Fake) -> None:
    emb = ServiceEmbedder(service.url, "fake-embed", dimensions=DIM, backoff_s=0.01)
    assert emb.name == "openai:fake-embed:16" and not service.requests  # no probe: the dimension was given
    service.fail[:] = [503, 429, 500]
    assert len(emb.embed(["a b"])) == 1 and len(service.requests) == 4
    assert service.requests[0]["dimensions"] == DIM
    service.fail[:] = [503] * 5
    with pytest.raises(EmbeddingUnavailable, match="failed 5 times; last: HTTP 503"):
        emb.embed(["a"])
    service.requests.clear()
    service.fail[:] = [400]
    with pytest.raises(EmbeddingRefused, match="refused 1 texts: HTTP 400"):  # the input: permanent, not an outage
        emb.embed(["a"])
    assert len(service.requests) == 1
    emb.close()


def test_an_unreachable_service_fails_with_what_it_tried() -> None:
    with pytest.raises(EmbeddingUnavailable, match="ConnectError"):
        ServiceEmbedder("http://127.0.0.1:9/v1", "m", attempts=2, backoff_s=0.01, timeout_s=2)


async def test_the_embedded_pipeline_runs_on_the_service(service: Fake) -> None:
    emb = ServiceEmbedder(service.url, "fake-embed")
    mem = build_embedded(Settings(), embedder=emb, data_dir=":memory:")
    try:
        obs = chat_observations()
        report = await mem.pipeline.ingest(obs)
        assert report.accepted == len(obs)
        res = await mem.controller.retrieve(obs[0].scope, obs[0].content, 3)
        assert res.evidence[0].content == obs[0].content
    finally:
        await mem.close()
        emb.close()


def test_settings_select_the_service_by_name(service: Fake) -> None:
    emb = assembly.load_embedder(Settings(embedder="openai:fake-embed:16", embedding_url=service.url,
                                          embedding_api_key="sk-x", embedding_query_prefix="query: "))
    assert isinstance(emb, ServiceEmbedder) and (emb.name, emb.dim, emb.query_prefix) == ("openai:fake-embed:16", 16, "query: ")
    emb.embed_query(["dogs"])
    assert service.requests[-1]["input"] == ["query: dogs"] and service.headers[-1]["authorization"] == "Bearer sk-x"
    emb.close()
    with pytest.raises(ValueError, match="JEVMEM_EMBEDDING_URL"):
        assembly.load_embedder(Settings(embedder="openai:m"))


def test_a_service_embeds_a_turn_alone_or_joined_to_the_turn_before(service: Fake) -> None:
    alone = assembly.load_embedder(Settings(embedder="openai:fake-embed", embedding_url=service.url,
                                            embedding_passage_prefix="passage: ", embedding_max_tokens=40))
    joined = assembly.load_embedder(Settings(embedder="openai:fake-embed+joined", embedding_url=service.url,
                                             embedding_passage_prefix="passage: ", embedding_max_tokens=40))
    assert isinstance(alone, ServiceEmbedder) and isinstance(joined, ServiceEmbedder)
    # the choice is in the name a store records, so a store never mixes the two
    assert (alone.name, joined.name) == ("openai:fake-embed", "openai:fake-embed+joined")
    pairs: list[tuple[str | None, str]] = [("Ana: did you go to the group?", "Ben: yes"), (None, "Ana: hello")]
    assert alone.embed_after(pairs) == alone.embed(["Ben: yes", "Ana: hello"])
    joined.embed_after(pairs)
    # the end of the turn before, then the turn, cut at the start so that the turn fits whole
    assert service.requests[-1]["input"] == ["passage: d you go to the group? Ben: yes", "passage: Ana: hello"]
    assert all(len(t.encode()) <= 40 for t in service.requests[-1]["input"])
    alone.close()
    joined.close()
