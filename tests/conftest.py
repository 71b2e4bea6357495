"""Shared fixtures: embedders, fresh in-memory embedded stacks, and a helper to serve an ASGI app
over real HTTP on a free loopback port.

Unit tests run on the deterministic hashing embedder (:class:`topology.fakes.HashingEmbedder`):
:func:`embedder` and :func:`memory`. A test that needs the real model asks for
:func:`model_embedder` or :func:`model_memory` and is marked ``model`` (a test asking for them is
marked here too), so ``pytest -m "not model"`` runs every other test without the model's files."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Request

from jevmem.settings import Settings
from jevmem.wiring import Embedded, build_embedded
from storage.sqlite.store import SqliteNodeStore, connect
from storage.sqlite.vectors import MatrixVectorIndex
from topology.embedding import default_embedder
from topology.fakes import HashingEmbedder
from topology.params import Params
from topology.ports import Embedder
from topology.schemas import MemoryNode, Observation

_MODEL_FIXTURES = {"model_embedder", "model_memory"}


class CountingEmbedder:
    """An embedder that counts its question calls (``calls``), the rest passed to ``inner``."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.name, self.dim, self.calls = inner, inner.name, inner.dim, 0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self.inner.embed(texts)

    def embed_query(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        return self.inner.embed_query(texts)

    def embed_after(self, pairs: Sequence[tuple[str | None, str]]) -> list[list[float]]:
        return self.inner.embed_after(pairs)



def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that asks for the real model is a ``model`` test, marked or not."""
    for item in items:
        if _MODEL_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.model)


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """The deterministic hashing embedder: no model files, texts that share words are close."""
    return HashingEmbedder()


@pytest.fixture(scope="session")
def model_embedder() -> Embedder:
    """The real (default) embedding model, loaded once."""
    return default_embedder()


async def _stack(embedder: Embedder) -> AsyncIterator[Embedded]:
    mem = build_embedded(Settings(params=Params()), embedder=embedder, data_dir=":memory:")
    yield mem
    await mem.close()


@pytest.fixture
async def memory(embedder: Embedder) -> AsyncIterator[Embedded]:
    """A fresh in-memory embedded stack over the hashing embedder."""
    async for mem in _stack(embedder):
        yield mem


@pytest.fixture
async def model_memory(model_embedder: Embedder) -> AsyncIterator[Embedded]:
    """A fresh in-memory embedded stack over the real model."""
    async for mem in _stack(model_embedder):
        yield mem


CHAT = [
    ("Ana", "I adopted a puppy named Biscuit last week, he is a golden retriever."),
    ("Ben", "That's wonderful! How is Biscuit settling in?"),
    ("Ana", "He chews everything, so I bought him chew toys yesterday."),
    ("Ben", "I started training for the Berlin marathon because my doctor told me to exercise more."),
    ("Ana", "Good luck with the marathon! When is it?"),
    ("Ben", "It is on 24 September 2023. I run every morning before work."),
    ("Ana", "I love hiking in the Alps with my sister Clara."),
    ("Ben", "My favourite food is ramen, I cook it every Sunday."),
    ("Ana", "Biscuit learned to sit today, I am so proud of him."),
    ("Ben", "I hurt my knee while running, so I had to pause the training."),
    ("Ana", "Clara and I are planning a trip to Lisbon next month."),
    ("Ben", "My knee is better now and I am back to running."),
]


def chat_observations(tenant: str = "t1", conversation: str = "c1", start: int = 0,
                      n: int | None = None) -> list[Observation]:
    base = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    rows = CHAT[start: None if n is None else start + n]
    return [Observation(tenant_id=tenant, conversation_id=conversation, event_id=f"e{start + i}", content=text,
                        speaker=speaker, observed_at=base + timedelta(days=start + i))
            for i, (speaker, text) in enumerate(rows)]


async def reference_vectors(nodes: Sequence[MemoryNode], dim: int) -> MatrixVectorIndex:
    """The embedded store's exact vector search over ``nodes`` (an in-memory node store): the
    reference ranking other vector indexes are compared with."""
    conn = connect(":memory:")
    await SqliteNodeStore(conn).upsert(nodes)
    return MatrixVectorIndex(conn, dim)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve_http(app: Any) -> Iterator[str]:
    """Run an ASGI app with uvicorn in a thread; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started:
        if time.time() > deadline:
            raise RuntimeError("test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def fake_llm() -> tuple[FastAPI, list[dict[str, Any]]]:
    """An OpenAI-compatible chat completions server (System Two stand-in) that records requests
    and answers "Biscuit" when the prompt mentions it; a summarisation prompt gets "Summary: " and
    the first memory."""
    seen: list[dict[str, Any]] = []
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict[str, Any]:
        body = await request.json()
        seen.append(body)
        user = body["messages"][-1]["content"]
        reply = "Biscuit" if "Biscuit" in user else "I do not know"
        if "both memories" in body["messages"][0]["content"]:  # the summarisation prompt
            reply = "Summary: " + " ".join(line.removeprefix("- ") for line in user.splitlines()[:1])
        return {"id": "x", "object": "chat.completion", "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply}}]}

    return app, seen
