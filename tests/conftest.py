"""Shared fixtures: the real embedding model (loaded once), fresh in-memory embedded stacks, and
a helper to serve an ASGI app over real HTTP on a free loopback port."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Request

from jevmem.settings import Settings
from jevmem.wiring import Embedded, build_embedded
from topology.embedding import default_embedder
from topology.params import Params
from topology.ports import Embedder
from topology.schemas import Observation


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    return default_embedder()


@pytest.fixture
async def memory(embedder: Embedder) -> AsyncIterator[Embedded]:
    mem = build_embedded(Settings(params=Params()), embedder=embedder, data_dir=":memory:")
    yield mem
    await mem.close()


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
