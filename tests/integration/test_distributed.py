"""The distributed pipeline on a real Kafka broker, a real Elasticsearch node and a real Qdrant
server, with two Faust worker processes: same graph as the embedded run, survives a SIGKILL at a
random point with no replacement worker, dead-letters bad input while flowing, and replays into an
identical graph. Vectors live in Qdrant (as deployed) except in the HTTP API test, which keeps the
Elasticsearch exact vector index (the fallback when no Qdrant URL is configured) under test.

Needs ``JEVMEM_TEST_KAFKA``, ``JEVMEM_TEST_ES_URL`` and ``JEVMEM_TEST_QDRANT_URL`` (``scripts/test``
starts the three servers) and the LoCoMo dev conversations beside the repository
(``../shared/data/locomo``).
"""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

from tests.integration.servers import ES_URL, KAFKA, LOCOMO, QDRANT_URL, SINGLE_BROKER, require_stack  # noqa: E402

require_stack()

from jevmem import locomo  # noqa: E402
from jevmem.bench.kafka import spawn_worker, stop_workers, worker_env  # noqa: E402
from jevmem.distributed import distributed_stores, replay  # noqa: E402
from jevmem.settings import Settings  # noqa: E402
from jevmem.wiring import build_embedded  # noqa: E402
from storage.elastic.vectors import ElasticVectorIndex  # noqa: E402
from storage.qdrant.index import QdrantVectorIndex  # noqa: E402
from streams.kafka_admin import ensure_topics, read_topic  # noqa: E402
from streams.producer import ObservationProducer  # noqa: E402
from streams.replay import graph_of  # noqa: E402
from topology import ids  # noqa: E402
from topology.embedding import default_embedder  # noqa: E402
from topology.schemas import DeadLetter, Observation, Scope, decode  # noqa: E402
from topology.topics import topics  # noqa: E402

TURNS = 40  # per conversation; three conversations -> 120 observations, 6 consolidation runs


def observations() -> list[Observation]:
    out: list[Observation] = []
    for f in sorted(LOCOMO.glob("*.json")):
        out += locomo.observations(locomo.load(f), "it", f"locomo-{f.stem}")[:TURNS]
    return out


def scopes(obs: list[Observation]) -> list[Scope]:
    return sorted({o.scope for o in obs}, key=lambda s: s.key)


class Stack:
    """One test's topics, consumer group and stores; vectors in Qdrant unless ``vectors="elastic"``."""

    def __init__(self, tmp: Path, vectors: str = "qdrant") -> None:
        tag = uuid.uuid4().hex[:8]
        qdrant = QDRANT_URL if vectors == "qdrant" else None
        self.settings = Settings(kafka_bootstrap=KAFKA or "", elasticsearch_url=ES_URL or "", qdrant_url=qdrant,
                                 topic_prefix=f"it{tag}", app_id=f"it{tag}", store_prefix=f"it{tag}-", partitions=4,
                                 write_batch=16, **SINGLE_BROKER)
        self.env = worker_env(self.settings)
        self.tmp = tmp
        self.workers: list[subprocess.Popen[bytes]] = []

    def start_worker(self, n: int) -> subprocess.Popen[bytes]:
        env = {**self.env, "JEVMEM_WORKER_DATADIR": str(self.tmp / f"worker{n}")}
        proc = spawn_worker(env, self.tmp / f"worker{n}.log")
        self.workers.append(proc)
        return proc

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(self.tmp.glob("worker*.log")))

    def stop(self) -> None:
        stop_workers(self.workers, timeout_s=20)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    yield s
    s.stop()


@pytest.fixture
def elastic_stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path, vectors="elastic")
    yield s
    s.stop()


async def wait_for(check: Any, what: str, stack: Stack, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        if all(p.poll() is not None for p in stack.workers):
            pytest.fail(f"all workers exited while waiting for {what}\n{stack.logs()}")
        await asyncio.sleep(1.0)
    pytest.fail(f"timed out waiting for {what}\n{stack.logs()}")


async def test_two_workers_kill_dead_letter_and_replay(stack: Stack) -> None:
    obs = observations()
    first, second = obs[: len(obs) // 3], obs[len(obs) // 3:]
    ensure_topics(KAFKA or "", stack.settings.topic_prefix, stack.settings.topic_layout())
    w1 = stack.start_worker(1)
    stack.start_worker(2)
    stores = distributed_stores(stack.settings, stack.settings.store_prefix or "", default_embedder().dim)
    assert isinstance(stores.vectors, QdrantVectorIndex)
    try:
        async def both_ready() -> bool:
            return all("[^Worker]: Ready" in (stack.tmp / f"worker{n}.log").read_text(errors="replace") for n in (1, 2))

        await wait_for(both_ready, "both workers to join the group", stack, timeout=120)
        async with ObservationProducer(KAFKA or "", stack.settings.topic_prefix) as producer:
            await producer.send(first)
            await producer.send_raw([("it/bad", b'{"tenant_id": "it", "conversation_id": "bad", "content": 5}')])

            kill_at = random.randint(1, len(first) - 1)  # nodes written when worker 1 is killed

            async def some_written() -> bool:
                counts = [len(await stores.nodes.scan(s)) for s in scopes(obs)]
                return sum(counts) >= kill_at

            await wait_for(some_written, "the first nodes", stack)
            w1.send_signal(signal.SIGKILL)  # at a random point mid-stream; nobody replaces it:
            w1.wait(10)                     # worker 2 must take over its partitions by itself
            await producer.send(second)

        # The same graph as the embedded run of the same observations, reached with no help.
        embedded = build_embedded(Settings(), embedder=default_embedder(), data_dir=":memory:")
        try:
            for i in range(0, len(obs), 16):
                await embedded.pipeline.ingest(obs[i: i + 16])
            want = {s: (await graph_of(embedded.stores, s), await embedded.stores.edges.decisions(s))
                    for s in scopes(obs)}
        finally:
            await embedded.close()

        async def same_graph() -> bool:
            return all([(await graph_of(stores, s), await stores.edges.decisions(s)) == want[s] for s in want])

        await wait_for(same_graph, "the embedded run's graph", stack, timeout=300)
        # Nothing lost, nothing duplicated: every conversation has seqs 0..n-1 exactly once.
        for scope in scopes(obs):
            seqs = [n.seq for n in await stores.nodes.scan(scope)]
            assert sorted(seqs) == list(range(TURNS)), scope
            # one Qdrant point per node with an embedding, no more, no less
            nodes = await stores.nodes.get(scope, [n.id for n in await stores.nodes.scan(scope)])
            assert await stores.vectors.ids(scope) == {n.id for n in nodes if n.embedding}

        # The bad event is on the dead-letter topic with its reason; the stream kept flowing.
        letters = [decode(DeadLetter, r.value) for r in
                   read_topic(KAFKA or "", topics(stack.settings.topic_prefix)["deadletters"].name)]
        # (at-least-once: a worker killed before committing may have reported it too, same offset)
        assert len({d.source for d in letters}) == 1 and all("content" in d.reason for d in letters)
        assert letters[0].source.startswith(topics(stack.settings.topic_prefix)["observations"].name)

        # Replay from the derived log: zero System One calls, identical graph, switch-over.
        out = await replay(stack.settings, "edges", f"{stack.settings.store_prefix}r1-", switch=False)
        assert out["identical"], out["problems"]
        assert out["controller_calls"] == 0 and out["nodes"] >= len(obs)
        # Replay by recomputing from the observations topic: System One asked again, same graph.
        out = await replay(stack.settings, "observations", f"{stack.settings.store_prefix}r2-", switch=False)
        assert out["identical"], out["problems"]
        assert out["controller_calls"] > 0
    finally:
        await stores.close()


async def test_http_api_in_distributed_mode(elastic_stack: Stack) -> None:
    """POST /v1/observations writes valid items to the observations topic (invalid ones to the
    tenant's dead letters, 422); a worker materialises them, hostile-but-valid content included;
    /v1/query reads Elasticsearch directly; keys live in Elasticsearch. Vectors in Elasticsearch's
    exact index: the fallback stays under test."""
    stack = elastic_stack
    import re

    import httpx
    import orjson

    from jevmem.assembly import key_store
    from jevmem.distributed import DistributedService
    from query_api.auth import Authenticator, mint
    from query_api.http import create_app
    from tests.conftest import chat_observations, free_port, serve_http

    ensure_topics(KAFKA or "", stack.settings.topic_prefix, stack.settings.topic_layout())
    metrics_port = free_port()
    stack.env["JEVMEM_METRICS_PORT"] = str(metrics_port)
    stack.start_worker(1)
    settings = stack.settings.model_copy(update={"mode": "distributed", "keys_index": f"{stack.settings.app_id}-keys"})
    keys = key_store(settings)
    key, record = mint("api", ["ingest", "query", "admin"])
    other, other_record = mint("other", ["ingest", "query", "admin"])
    for r in (record, other_record):
        await keys.create(r)
    assert [r.key_id for r in await keys.list("api")] == [record.key_id]
    obs = [o.model_dump(mode="json") for o in chat_observations(tenant="api", conversation="c1")]
    hostile = [{"conversation_id": "c1", "event_id": "h1", "content": "It was 9999 years ago. " + "Zz" * 30_000},
               {"conversation_id": "c1", "event_id": "h2", "content": "Abc Def. " * 5_000}]
    service = DistributedService(stack.settings)
    # the server reads keys through its own client (as `jevmem serve` and `jevmem keys` would)
    with serve_http(create_app(service, Authenticator(key_store(settings)))) as url:
        assert isinstance(service.stores.vectors, ElasticVectorIndex)
        auth = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=url, timeout=60, headers=auth) as c:
            assert (await c.get("/v1/conversations/c1/nodes", headers={"Authorization": ""})).status_code == 401
            r = await c.post("/v1/observations", json=[*obs, *hostile, {"tenant_id": "api", "content": "no ids"}])
            assert r.status_code == 422 and r.json()["accepted"] == len(obs) + len(hostile)

            async def materialised() -> bool:
                r = await c.get("/v1/conversations/c1/nodes")  # 404 until the first batch is written
                return r.status_code == 200 and len(r.json()) == len(obs) + len(hostile)

            await wait_for(materialised, "the API's observations to be materialised", stack)
            # the request's trace id reached the worker through the record headers; the worker
            # logs JSON and serves Prometheus metrics (accepted, consumer lag per partition)
            async def logged() -> bool:  # the worker logs a batch after acknowledging its writes
                stored = [orjson.loads(ln) for ln in (stack.tmp / "worker1.log").read_text().splitlines()
                          if ln.startswith("{") and '"msg":"stored"' in ln]
                return any(r.headers["x-trace-id"] in str(ln.get("trace_id")) for ln in stored)

            await wait_for(logged, "a JSON 'stored' line with the request's trace id", stack, timeout=30)
            async def scraped() -> bool:  # the lag gauge is refreshed every 5 s
                text = (await c.get(f"http://127.0.0.1:{metrics_port}/metrics")).text
                accepted = re.search(r"^jevmem_observations_accepted_total (\S+)$", text, re.MULTILINE)
                lag = re.search(r'^jevmem_consumer_lag\{[^}]*partition="\d+"[^}]*\} \S+$', text, re.MULTILINE)
                return bool(accepted and float(accepted.group(1)) >= len(obs) + len(hostile) and lag)

            await wait_for(scraped, "the worker's metrics (accepted, consumer lag)", stack, timeout=30)
            q = await c.post("/v1/query", json={"conversation_id": "c1",
                                                "question": "What is the name of Ana's puppy?", "top_k": 3})
            assert q.status_code == 200
            assert "Biscuit" in q.json()["evidence"][0]["content"]
            assert (await c.get("/healthz")).json()["mode"] == "distributed"
            assert (await c.get("/v1/conversations")).json() == [{"conversation_id": "c1",
                                                                   "nodes": len(obs) + len(hostile)}]
            letters = (await c.get("/v1/dead-letters")).json()
            assert [d["source"] for d in letters] == [f"http#{len(obs) + len(hostile)}"]
            assert [d["tenant_id"] for d in letters] == ["api"]
            with_other = {"Authorization": f"Bearer {other}"}
            assert (await c.get("/v1/dead-letters", headers=with_other)).json() == []
            unknown = await c.get("/v1/conversations/c1/nodes", headers=with_other)  # c1 is not the other's
            assert unknown.status_code == 404 and "GET /v1/conversations" in unknown.json()["detail"]
            assert (await c.get("/v1/tenants/api/conversations/c1/nodes", headers=with_other)).status_code == 403
            forget = await c.delete("/v1/conversations/c1/observations/h1")
            assert forget.status_code == 202 and forget.json() == {"status": "accepted"}

            async def forgotten() -> bool:
                return "h1" not in {n["event_id"] for n in (await c.get("/v1/conversations/c1/nodes")).json()}

            await wait_for(forgotten, "the forget to be applied by the worker", stack)
    assert await keys.revoke(other_record.key_id)
    assert (await keys.get(other_record.key_id)).revoked_at is not None  # type: ignore[union-attr]
    await keys.close()


async def test_forget_through_the_topic_and_replays(stack: Stack) -> None:
    """A forget on the observations topic removes the observation (node, derived nodes, edges,
    decisions, vectors, lexical entries) at its place in the stream; a whole-conversation forget
    removes everything and the conversation restarts at seq 0. The graph equals an embedded run
    that applied the same deletions, and neither replay brings deleted memory back."""
    from datetime import UTC, datetime

    from jevmem.distributed import DistributedService
    from query_api.service import ForgetAccepted
    from streams.replay import Graph
    from tests.conftest import chat_observations
    from topology.params import Params
    from topology.schemas import Forget

    params = Params(consolidate_every=4)
    stack.env["JEVMEM_PARAMS__CONSOLIDATE_EVERY"] = "4"
    stack.settings = stack.settings.model_copy(update={"params": params})
    c1, c2 = Scope(tenant_id="fg/x", conversation_id="c1"), Scope(tenant_id="fg/x", conversation_id="c2")
    e1 = chat_observations(tenant=c1.tenant_id, conversation="c1")
    e2 = chat_observations(tenant=c2.tenant_id, conversation="c2")
    ensure_topics(KAFKA or "", stack.settings.topic_prefix, stack.settings.topic_layout())
    stack.start_worker(1)
    stores = distributed_stores(stack.settings, stack.settings.store_prefix or "", default_embedder().dim)
    service = DistributedService(stack.settings, embedder=default_embedder())
    await service.start()
    try:
        async with ObservationProducer(KAFKA or "", stack.settings.topic_prefix) as producer:
            await producer.send(e1[:8] + e2)
            assert await service.forget(c1, "e3") == ForgetAccepted()
            await producer.forget([Forget(tenant_id=c2.tenant_id, conversation_id="c2", requested_at=datetime.now(UTC))])
            await producer.send(e1[8:] + e2[4:7])

        # the embedded run of the same stream, forgets at the same places
        embedded = build_embedded(Settings(params=params), embedder=default_embedder(), data_dir=":memory:")
        try:
            await embedded.pipeline.ingest(e1[:8] + e2)
            await embedded.pipeline.forget(c1, "e3")
            await embedded.pipeline.forget(c2, None)
            await embedded.pipeline.ingest(e1[8:] + e2[4:7])
            want = {s: (await graph_of(embedded.stores, s), await embedded.stores.edges.decisions(s)) for s in (c1, c2)}
        finally:
            await embedded.close()
        gone = ids.node_id(c1.tenant_id, "c1", "e3")
        assert gone not in {n for n, _ in want[c1][0].nodes} and want[c1][0].forgotten == (("e3", 3),)
        assert [s for _, s in want[c2][0].nodes] == [0, 1, 2] and want[c2][0].forgotten == ()
        assert want[c1][1], "consolidation should have run"

        async def same_graph() -> bool:
            return all([(await graph_of(stores, s), await stores.edges.decisions(s)) == want[s] for s in want])

        await wait_for(same_graph, "the embedded run's graph after the forgets", stack, timeout=300)
        assert gone not in {h.id for h in await stores.lexical.search(c1, e1[3].content, 50)}
        assert gone not in {h.id for h in await stores.vectors.search(c1, default_embedder().embed([e1[3].content])[0], 50)}
        markers = [r.value for r in read_topic(KAFKA or "", topics(stack.settings.topic_prefix)["memories"].name)
                   if b'"op":"forgotten"' in r.value]
        assert len(markers) >= 2

        for source, tag in (("observations", "r1-"), ("edges", "r2-")):
            out = await replay(stack.settings, source, f"{stack.settings.store_prefix}{tag}", switch=False)
            assert out["identical"], (source, out["problems"])
            assert out["forgets"] >= 2
            rebuilt = distributed_stores(stack.settings, f"{stack.settings.store_prefix}{tag}", default_embedder().dim)
            try:
                assert await graph_of(rebuilt, c1) == want[c1][0] and await graph_of(rebuilt, c2) == want[c2][0]
                assert await rebuilt.nodes.get(c1, [gone]) == []
                assert gone not in {h.id for h in await rebuilt.lexical.search(c1, e1[3].content, 50)}
            finally:
                await rebuilt.close()
        assert isinstance(want[c1][0], Graph)
    finally:
        await service.stop()
        await stores.close()
