"""A poisoned batch moves on: a real Kafka broker, a real Elasticsearch node, a real Faust worker
process, and an embedding service (a local HTTP server speaking OpenAI's ``/v1/embeddings``)
that refuses, with HTTP 400, every text naming a marker.

Poison records in the middle of a batch: each is one dead letter on the dead-letter topic with the
exception, the stage and its ``topic:partition:offset``; every other record is written once, in
order (seqs follow the produce order, the poison ones skipped), and the partition moves on (later
records are written too). A refusal of the deployment (401: a revoked key) is not dead-lettered:
the worker stalls, says so (``jevmem_partition_stalled_seconds``, ``/ready`` 503) and moves on
when the service takes it back.

Needs ``JEVMEM_TEST_KAFKA`` and ``JEVMEM_TEST_ES_URL`` (``scripts/test`` starts the servers).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from tests.conftest import free_port, serve_http
from tests.integration.servers import ES_URL, KAFKA, SINGLE_BROKER

pytestmark = pytest.mark.integration
if not (KAFKA and ES_URL):
    pytest.skip("JEVMEM_TEST_KAFKA / JEVMEM_TEST_ES_URL not set", allow_module_level=True)

from jevmem.bench.kafka import spawn_worker, stop_workers, worker_env  # noqa: E402
from jevmem.distributed import distributed_stores  # noqa: E402
from jevmem.settings import Settings  # noqa: E402
from streams.kafka_admin import ensure_topics, read_topic  # noqa: E402
from streams.producer import ObservationProducer  # noqa: E402
from topology.schemas import DeadLetter, Observation, Scope, decode  # noqa: E402
from topology.topics import topics  # noqa: E402

DIM = 16
POISON = "POISON-PILL"


def vector(text: str) -> list[float]:
    v = [0.0] * DIM
    for word in text.lower().split():
        v[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIM] += 1.0
    return v


@dataclass
class Service:
    url: str = ""
    deny: bool = False  # answer 401 (a revoked key) to everything
    refused: list[str] = field(default_factory=list)


@pytest.fixture
def embeddings() -> Iterator[Service]:
    app = FastAPI()
    state = Service()

    @app.post("/v1/embeddings")
    async def embed(request: Request) -> Any:
        body = await request.json()
        if state.deny:
            return JSONResponse({"error": {"message": "invalid api key"}}, status_code=401)
        poisoned = [t for t in body["input"] if POISON in t]
        if poisoned:
            state.refused += poisoned
            return JSONResponse({"error": {"message": "input refused", "type": "invalid_request_error"}}, status_code=400)
        return {"object": "list", "model": body["model"],
                "data": [{"object": "embedding", "index": i, "embedding": vector(t)} for i, t in enumerate(body["input"])]}

    with serve_http(app) as url:
        state.url = f"{url}/v1"
        yield state


def turns(conversation: str, start: int, n: int, poison: set[int]) -> list[Observation]:
    base = datetime(2024, 3, 1, 9, tzinfo=UTC)
    return [Observation(tenant_id="pt", conversation_id=conversation, event_id=f"e{i}", speaker="Ana" if i % 2 else "Ben",
                        content=(f"{POISON} " if i in poison else "") + f"Turn {i}: we talked about topic {i % 7} again.",
                        observed_at=base + timedelta(minutes=i))
            for i in range(start, start + n)]


async def wait_for(check: Any, what: str, worker: Any, log: Path, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        if worker.poll() is not None:
            pytest.fail(f"the worker exited while waiting for {what}\n{log.read_text(errors='replace')[-4000:]}")
        await asyncio.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}\n{log.read_text(errors='replace')[-4000:]}")


async def test_a_poison_record_is_one_dead_letter_and_the_partition_moves_on(embeddings: Service, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    settings = Settings(kafka_bootstrap=KAFKA or "", elasticsearch_url=ES_URL or "", qdrant_url=None,
                        topic_prefix=f"pz{tag}", app_id=f"pz{tag}", store_prefix=f"pz{tag}-", partitions=2,
                        write_batch=16, embedder=f"openai:fake-embed:{DIM}", embedding_url=embeddings.url,
                        **SINGLE_BROKER)
    metrics_port = free_port()
    env = {**worker_env(settings), "JEVMEM_WORKER_DATADIR": str(tmp_path / "worker"),
           "JEVMEM_METRICS_PORT": str(metrics_port)}
    ensure_topics(KAFKA or "", settings.topic_prefix, settings.topic_layout())
    log = tmp_path / "worker.log"
    worker = spawn_worker(env, log)
    stores = distributed_stores(settings, settings.store_prefix or "", DIM)
    scope = Scope(tenant_id="pt", conversation_id="c1")
    poison = {7, 19}
    first = turns("c1", 0, 30, poison)
    try:
        await wait_for(lambda: _true("[^Worker]: Ready" in log.read_text(errors="replace")), "the worker", worker, log)
        async with ObservationProducer(KAFKA or "", settings.topic_prefix) as producer:
            await producer.send(first)  # one micro-batch: the poison records sit among the others

            async def written(n: int) -> bool:
                stores.fresh_reads()
                return len(await stores.nodes.scan(scope)) >= n

            await wait_for(lambda: written(28), "the 28 good records", worker, log)
            nodes = sorted(await stores.nodes.scan(scope), key=lambda n: n.seq)
            good = [o.event_id for o in first if int(o.event_id[1:]) not in poison]
            assert [(n.event_id, n.seq) for n in nodes] == [(e, i) for i, e in enumerate(good)]  # once each, in order
            assert all(POISON not in n.content for n in nodes)

            name = topics(settings.topic_prefix)["deadletters"].name

            async def lettered() -> bool:  # the dead letters are produced with the batch, read back here
                return len(read_topic(KAFKA or "", name)) >= 2

            await wait_for(lettered, "the two dead letters", worker, log)
            letters = [decode(DeadLetter, r.value) for r in read_topic(KAFKA or "", name)]
            assert sorted(d.event_id or "" for d in letters) == ["e19", "e7"]
            observations = topics(settings.topic_prefix)["observations"].name
            for d in letters:
                assert re.fullmatch(rf"{observations}:\d+:\d+", d.source), d.source
                assert "embed" in d.reason and "EmbeddingRefused" in d.reason and "HTTP 400" in d.reason, d.reason
                assert POISON in d.original

            # the partition moves on: later records are written after the poisoned batch
            await producer.send(turns("c1", 30, 5, set()))
            await wait_for(lambda: written(33), "the records after the poisoned batch", worker, log)
            seqs = {n.event_id: n.seq for n in await stores.nodes.scan(scope)}
            assert [seqs[f"e{i}"] for i in range(30, 35)] == list(range(28, 33))
            async with httpx.AsyncClient(timeout=10) as http:
                ready = await http.get(f"http://127.0.0.1:{metrics_port}/ready")
                assert ready.status_code == 200 and ready.json() == {"ready": True, "stalled": {}}

                # a refusal of the deployment (a revoked key) dead-letters nothing: the worker stalls and says so
                embeddings.deny = True
                await producer.send(turns("c1", 35, 3, set()))

                async def unready() -> bool:
                    r = await http.get(f"http://127.0.0.1:{metrics_port}/ready")
                    text = (await http.get(f"http://127.0.0.1:{metrics_port}/metrics")).text
                    return r.status_code == 503 and "jevmem_partition_stalled_seconds{" in text

                await wait_for(unready, "the worker to report a stalled partition", worker, log, timeout=60)
                embeddings.deny = False
                await wait_for(lambda: written(36), "the stalled records once the key works again", worker, log)

                async def ready_again() -> bool:
                    return (await http.get(f"http://127.0.0.1:{metrics_port}/ready")).status_code == 200

                await wait_for(ready_again, "the worker to be ready again", worker, log, timeout=30)
            assert len(list(read_topic(KAFKA or "", name))) == 2  # still only the two poison records
    finally:
        stop_workers([worker], timeout_s=20)
        await stores.close()


async def _true(value: bool) -> bool:
    return value
