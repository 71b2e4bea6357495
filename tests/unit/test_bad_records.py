"""One bad record costs one dead letter (issue: permanent versus transient failures).

The error tree decides once which failures a retry can fix; the embedding client cuts each text
to the model's input limit; a batch that fails permanently is split until the failing
observations are isolated, each dead-lettered with its reason and stage, the rest written in
order; the HTTP API and MCP ``remember`` answer such an item as that item's error (422) and keep
503 for outages. The embedding service is a local HTTP server speaking OpenAI's
``/v1/embeddings`` wire format that, like the hosted APIs, refuses an input over its token limit
with HTTP 400.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService, build_embedded
from query_api.auth import Authenticator, mint
from query_api.http import create_app
from query_api.service import answer_for
from storage.keys import SqliteKeyStore
from streams.isolation import isolate
from tests.conftest import chat_observations, serve_http
from topology.embedding_service import (
    DEFAULT_MAX_TOKENS,
    EmbeddingMisconfigured,
    EmbeddingRefused,
    EmbeddingUnavailable,
    ServiceEmbedder,
    cut,
)
from topology.errors import (
    InvalidEvent,
    ModelMismatch,
    ServiceMisconfigured,
    StoreUnavailable,
    SystemOneError,
    SystemOneRefused,
    kind_of,
    stage_of,
    status_kind,
)
from topology.ports import Embedder
from topology.schemas import Observation
from topology.systemone.port import Answer, Item

DIM = 16
#: The fake service's token limit (a hosted API's is 8,191; BERT-family models' 512).
SERVICE_LIMIT = 600
REFUSE = "FORBIDDEN-TEXT"


def tokens(text: str) -> int:
    """The fake service's token count: words and punctuation marks."""
    return len(re.findall(r"\w+|[^\w\s]", text))


def vector(text: str) -> list[float]:
    v = [0.0] * DIM
    for word in text.lower().split():
        v[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIM] += 1.0
    return v


@dataclass
class Fake:
    url: str = ""
    inputs: list[str] = field(default_factory=list)
    outage: bool = False


@pytest.fixture
def service() -> Iterator[Fake]:
    """Refuses (400) a request with an input over :data:`SERVICE_LIMIT` tokens or naming
    :data:`REFUSE`, answers 503 during an ``outage``."""
    app = FastAPI()
    state = Fake()

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Any:
        body = await request.json()
        if state.outage:
            return JSONResponse({"error": {"message": "overloaded"}}, status_code=503)
        for text in body["input"]:
            if tokens(text) > SERVICE_LIMIT:
                return JSONResponse({"error": {"message": f"This model's maximum context length is {SERVICE_LIMIT} "
                                                          f"tokens, however you requested {tokens(text)} tokens",
                                               "type": "invalid_request_error"}}, status_code=400)
            if REFUSE in text:
                return JSONResponse({"error": {"message": "input refused by policy"}}, status_code=400)
        state.inputs += body["input"]
        return {"object": "list", "model": body["model"],
                "data": [{"object": "embedding", "index": i, "embedding": vector(t)} for i, t in enumerate(body["input"])]}

    with serve_http(app) as url:
        state.url = f"{url}/v1"
        yield state


def long_text(chars: int = 20_000) -> str:
    words = "the quick brown fox jumps over the lazy dog while Ana walks Biscuit along the river".split()
    out, i = [], 0
    while sum(len(w) + 1 for w in out) < chars:
        out.append(words[i % len(words)])
        i += 1
    return " ".join(out)[:chars]


def three(middle: str) -> list[dict[str, Any]]:
    obs = [o.model_dump(mode="json") for o in chat_observations(n=3)]
    obs[1]["content"] = middle
    return obs


@dataclass
class Api:
    url: str
    auth: dict[str, str]
    service: EmbeddedService


async def api_over(emb: Embedder) -> tuple[EmbeddedService, Authenticator, str]:
    keys = SqliteKeyStore(":memory:")
    key, record = mint("t1", ["ingest", "query", "admin"])
    await keys.create(record)
    return EmbeddedService(Settings(), embedder=emb, data_dir=":memory:"), Authenticator(keys), key


# --- the error tree -------------------------------------------------------------------------------


def test_the_error_tree_says_once_what_a_retry_can_fix() -> None:
    assert [status_kind(s) for s in (400, 413, 422, 408, 429, 500, 503, 401, 403, 404)] == [
        "permanent", "permanent", "permanent", "transient", "transient", "transient", "transient",
        "configuration", "configuration", "configuration"]
    assert kind_of(EmbeddingRefused("too long", 400)) == "permanent"
    assert kind_of(EmbeddingUnavailable("no answer")) == "transient"
    assert kind_of(StoreUnavailable("es down")) == kind_of(TimeoutError()) == kind_of(ConnectionError()) == "transient"
    assert kind_of(SystemOneError("5xx")) == "transient" and kind_of(SystemOneRefused("400", 400)) == "permanent"
    assert kind_of(InvalidEvent("bad")) == kind_of(KeyError("a bug a record triggers")) == "permanent"
    assert kind_of(ModelMismatch("other model")) == kind_of(EmbeddingMisconfigured("401", 401)) == "configuration"
    # a refusal is not an outage: the API answers it 422, an outage 503, a refused deployment 502
    assert not isinstance(EmbeddingRefused("x"), StoreUnavailable)
    assert [answer_for(e, "").status for e in (EmbeddingRefused("x", 400), SystemOneRefused("x", 400),  # type: ignore[union-attr]
                                               EmbeddingUnavailable("x"), ServiceMisconfigured("x", 401))] == [422, 422, 503, 502]


def test_the_embedding_client_says_refusal_outage_or_configuration(service: Fake) -> None:
    emb = ServiceEmbedder(service.url, "fake-embed", dimensions=DIM, backoff_s=0.01, attempts=2, max_tokens=100_000)
    with pytest.raises(EmbeddingRefused, match="HTTP 400") as refused:
        emb.embed(["fine", f"a {REFUSE} b"])
    assert refused.value.status == 400 and kind_of(refused.value) == "permanent"
    service.outage = True
    with pytest.raises(EmbeddingUnavailable, match="failed 2 times; last: HTTP 503"):
        emb.embed(["fine"])
    emb.close()


def test_each_text_is_cut_to_the_models_input_limit(service: Fake) -> None:
    assert cut("héllo", 2) == "h" and cut("héllo", 3) == "hé" and cut("abc", 10) == "abc"
    emb = ServiceEmbedder(service.url, "fake-embed", dimensions=DIM, passage_prefix="passage: ")
    assert emb.max_tokens == DEFAULT_MAX_TOKENS  # unknown model: the BERT-family limit
    assert ServiceEmbedder(service.url, "text-embedding-3-small", dimensions=DIM).max_tokens == 8191
    text = long_text()
    [v] = emb.embed([text])
    sent = service.inputs[-1]
    assert len(sent.encode()) <= DEFAULT_MAX_TOKENS and text.startswith(sent.removeprefix("passage: "))
    assert v == emb.embed([sent.removeprefix("passage: ")])[0]  # embedded from its cut start
    emb.close()


# --- isolation ------------------------------------------------------------------------------------


async def test_isolation_splits_until_the_failing_records_are_alone_and_keeps_order() -> None:
    written: list[int] = []
    attempts: list[list[int]] = []

    async def attempt(part: list[int]) -> None:
        attempts.append(part)
        if 3 in part or 7 in part:
            raise EmbeddingRefused("refused", 400)
        written.extend(part)

    failed = await isolate(list(range(10)), attempt)
    assert [(f.item, type(f.error).__name__) for f in failed] == [(3, "EmbeddingRefused"), (7, "EmbeddingRefused")]
    assert written == [0, 1, 2, 4, 5, 6, 8, 9]  # in order: records after a failed one are written after it
    assert len(attempts) <= 2 * 4 * 2 + 1

    async def outage(part: list[int]) -> None:
        raise StoreUnavailable("down")

    with pytest.raises(StoreUnavailable):  # transient: never split, never dead-lettered
        await isolate(list(range(4)), outage)


# --- the embedded write path, HTTP and MCP --------------------------------------------------------


async def test_a_long_observation_is_written_from_its_cut_text(service: Fake) -> None:
    """Three observations, one of 20,000 characters: all three written, the long one embedded
    from its cut start, its node keeping the whole content (before: 503 for the whole request)."""
    emb = ServiceEmbedder(service.url, "fake-embed", dimensions=DIM)
    svc, auth, key = await api_over(emb)
    with serve_http(create_app(svc, auth)) as url, httpx.Client(base_url=url, timeout=60,
                                                                headers={"Authorization": f"Bearer {key}"}) as c:
        r = c.post("/v1/observations", json=three(long_text()))
        assert r.status_code == 200 and r.json()["accepted"] == 3, r.text
        nodes = c.get("/v1/conversations/c1/nodes").json()
        contents = [n["content"] for n in sorted(nodes, key=lambda n: n["seq"])]
        assert len(contents) == 3 and len(contents[1]) == 20_000
        assert max(len(t.encode()) for t in service.inputs) <= DEFAULT_MAX_TOKENS
    emb.close()


async def test_a_refused_item_is_its_own_error_and_the_others_are_written(service: Fake) -> None:
    """A service that refuses one specific text: that item is dead-lettered with the reason, the
    other two written in order, HTTP 422 with that item's index; an outage is 503, no letter."""
    emb = ServiceEmbedder(service.url, "fake-embed", dimensions=DIM, backoff_s=0.01, attempts=2)
    svc, auth, key = await api_over(emb)
    with serve_http(create_app(svc, auth)) as url, httpx.Client(base_url=url, timeout=60,
                                                                headers={"Authorization": f"Bearer {key}"}) as c:
        bad = three(f"Please remember {REFUSE} for me.")
        bad.insert(0, {"conversation_id": "c1"})  # invalid (no event id, no content): index 0
        r = c.post("/v1/observations", json=bad)
        assert r.status_code == 422, r.text
        body = r.json()
        assert body["accepted"] == 2 and body["rejected"] == 2
        assert [e["index"] for e in body["errors"]] == [0, 2]
        assert "embed" in body["errors"][1]["reason"] and "HTTP 400" in body["errors"][1]["reason"]
        nodes = sorted(c.get("/v1/conversations/c1/nodes").json(), key=lambda n: n["seq"])
        assert [(n["event_id"], n["seq"]) for n in nodes] == [("e0", 0), ("e2", 1)]
        letters = c.get("/v1/dead-letters").json()
        refused = [d for d in letters if d["event_id"] == "e1"]
        assert len(refused) == 1 and "EmbeddingRefused" in refused[0]["reason"]
        assert refused[0]["source"] == "api:embed" and REFUSE in refused[0]["original"]

        service.outage = True
        r = c.post("/v1/observations", json=three("An ordinary turn."))
        assert r.status_code == 503 and r.headers["retry-after"] == "5", r.text
        assert len(c.get("/v1/dead-letters").json()) == len(letters)  # an outage dead-letters nothing
    emb.close()


async def test_mcp_remember_answers_a_refused_item_as_its_error(service: Fake) -> None:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    emb = ServiceEmbedder(service.url, "fake-embed", dimensions=DIM)
    svc, auth, key = await api_over(emb)
    items = [{k: v for k, v in o.items() if k not in ("tenant_id", "conversation_id")}
             for o in three(f"{REFUSE} again")]
    with serve_http(create_app(svc, auth)) as url:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http, \
                Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
            res = await client.call_tool("remember", {"observations": items, "conversation_id": "c1"})
            assert not res.is_error, res.content
            out = res.structured_content
            assert out is not None and (out["accepted"], out["rejected"]) == (2, 1)
            assert out["errors"][0]["index"] == 1 and out["event_ids"] == ["e0", "e2"]
    emb.close()


class RefusingRelations:
    """A System One that refuses (permanently) any relation request naming ``marker``: a failure
    after the record's node was stored."""

    def __init__(self, inner: Any, marker: str) -> None:
        self.inner, self.marker = inner, marker

    async def ask(self, items: Sequence[Item]) -> list[Answer]:
        if any(i.task.name == "relation" and self.marker in repr(i.state) for i in items):
            raise SystemOneRefused("typesafe system_one failed: HTTP 400: refused", 400)
        return await self.inner.ask(items)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_record_refused_after_its_node_was_stored_leaves_nothing(embedder: Embedder) -> None:
    mem = build_embedded(Settings(), embedder=embedder, data_dir=":memory:")
    try:
        so = mem.pipeline.so
        so.inner = RefusingRelations(so.inner, "POISONED")  # type: ignore[assignment]
        obs = chat_observations(n=6)
        obs[3] = obs[3].model_copy(update={"content": "POISONED " + obs[3].content})
        report = await mem.pipeline.ingest(obs)
        assert [(f.item.event_id, f.stage) for f in report.failed] == [("e3", "relations")]
        assert report.accepted == 5 and len(report.dead_letters) == 1
        nodes = sorted(await mem.stores.nodes.scan(obs[0].scope), key=lambda n: n.seq)
        assert [n.event_id for n in nodes] == ["e0", "e1", "e2", "e4", "e5"]
        assert all("POISONED" not in n.content for n in nodes)
        assert stage_of(report.failed[0].error) == "relations"
        letters = await mem.stores.dead_letters.recent(10, "t1")
        assert [d.event_id for d in letters] == ["e3"] and "SystemOneRefused" in letters[0].reason
        again = await mem.pipeline.ingest([Observation(**{**obs[3].model_dump(), "content": "Fixed now."})])
        assert again.accepted == 1 and not again.failed  # sent again, it comes back at its place
    finally:
        await mem.close()


# --- the worker: stalls are said, not silent ------------------------------------------------------


async def test_a_batch_that_keeps_failing_stalls_its_partitions_and_says_so() -> None:
    from jevmem import metrics
    from streams.faust_app import retrying
    from streams.stalls import STALL_AFTER_ATTEMPTS, Stalls
    from tests.conftest import free_port

    stalls = Stalls()
    seen: list[bool] = []

    async def flaky() -> None:
        seen.append(stalls.ready())
        if len(seen) <= STALL_AFTER_ATTEMPTS + 1:
            raise StoreUnavailable("elasticsearch: no answer")

    port = free_port()
    metrics.serve(port, host="127.0.0.1", ready=lambda: {"ready": stalls.ready(), "stalled": len(stalls.stalled())})
    # the ready flag as each attempt began: healthy until STALL_AFTER_ATTEMPTS attempts failed
    failures = await retrying("batch", flaky, first_s=0.0, stalls=stalls, partitions=[("obs", 3)])
    assert failures == STALL_AFTER_ATTEMPTS + 1
    assert seen == [True] * STALL_AFTER_ATTEMPTS + [False, False]
    assert stalls.ready() and not stalls.stalled()  # the batch went through: the partition moves again

    stalls.failed([("obs", 3)], STALL_AFTER_ATTEMPTS, first_failure=0.0)
    metrics.report_stalled(stalls.stalled().items())
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
        r = c.get("/ready")
        assert r.status_code == 503 and r.json() == {"ready": False, "stalled": 1}
        assert re.search(r'^jevmem_partition_stalled_seconds\{partition="3",topic="obs"\} \d', c.get("/metrics").text, re.M)
        stalls.keep([("obs", 1)])  # the partition moved to another worker
        metrics.report_stalled(stalls.stalled().items())
        assert c.get("/ready").status_code == 200
        assert "jevmem_partition_stalled_seconds{" not in c.get("/metrics").text


def test_a_dead_letter_keeps_the_record_s_own_bytes_and_their_size() -> None:
    """As they came: a record's own bytes (not a re-serialisation), in base64 when they are not
    UTF-8; a cut inside a character keeps whole characters."""
    import base64

    from streams.write_path import decode_batch
    from topology.limits import DEAD_LETTER_ORIGINAL_BYTES
    from topology.schemas import DeadLetter

    spaced = b'{"tenant_id": "t1",  "conversation_id": "c1", "event_id": "e1", "content": 7}'
    _, letters = decode_batch([(spaced, "obs:0:1")])
    assert letters[0].original == spaced.decode() and letters[0].original_bytes == len(spaced)
    assert letters[0].original_encoding == "utf-8" and letters[0].conversation_id == "c1"
    binary = b"\x00\xff\xfe not json"
    _, letters = decode_batch([(binary, "obs:0:2")])
    assert letters[0].original_encoding == "base64" and base64.b64decode(letters[0].original) == binary
    assert letters[0].original_bytes == len(binary)
    long = ("é" * DEAD_LETTER_ORIGINAL_BYTES).encode()
    letter = DeadLetter.of(long, "too long", "http:body")
    assert letter.truncated and letter.original_encoding == "utf-8" and letter.original_bytes == len(long)
    assert set(letter.original) == {"é"} and len(letter.original.encode()) <= DEAD_LETTER_ORIGINAL_BYTES
