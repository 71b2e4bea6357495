"""``jevmem bench kafka``: LoCoMo conversations end to end through the broker with N Faust worker
processes, side by side with the embedded pipeline on the same observations in the same run.

Needs a running Kafka broker and Elasticsearch node (``scripts/kafka/kafka.sh start``,
``scripts/elasticsearch/es.sh start``) and, for vectors in Qdrant, a Qdrant server
(``scripts/qdrant/qdrant.sh start``, ``JEVMEM_QDRANT_URL``). ``vectors`` picks where the workers
keep vectors: ``qdrant`` (the server), ``elastic`` (Elasticsearch's exact index) or ``both`` (one
distributed run each, in that order, fresh topics and stores each, against the same embedded run).

The conversations arrive interleaved (round-robin, each in its own order; :func:`interleave`), in
one burst or paced at ``--rate`` observations/s. Lag of an observation = the record timestamp of
its candidate set (node materialised, embedded, typed and linked to its candidates) minus the
record timestamp of the observation. Throughput = observations / (last edge record - first
observation).
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, TopicPartition
from pydantic import SecretStr

from jevmem import assembly, locomo
from jevmem.bench.locomo import percentile
from jevmem.bench.meter import (
    Servers,
    cpu_seconds,
    elasticsearch_bytes,
    elasticsearch_sizes,
    elasticsearch_work,
    worker_stages,
)
from jevmem.settings import Settings
from jevmem.wiring import build_embedded
from streams.kafka_admin import ensure_topics, read_topic, watermarks
from streams.kafka_client import KafkaClient
from streams.producer import ObservationProducer
from topology.schemas import Observation
from topology.topics import topics


def end_offsets(kafka: KafkaClient | str, topic: str) -> int:
    """Sum of the high watermarks of ``topic`` (records ever written)."""
    c = Consumer(KafkaClient.of(kafka).librdkafka(**{"group.id": "jevmem-bench-watermarks"}))
    try:
        meta = c.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None:
            return 0
        return sum(watermarks(c, TopicPartition(topic, p))[1] for p in meta.partitions)
    finally:
        c.close()


def worker_env(settings: Settings) -> dict[str, str]:
    """The environment of a worker process run with ``settings`` (this process's environment,
    with every set ``JEVMEM_*`` setting of ``settings`` on top; ``qdrant_url`` unset is passed as
    empty, so the worker keeps its vectors in Elasticsearch as this process does)."""
    return {**os.environ, "JEVMEM_QDRANT_URL": "", **settings.env()}


def spawn_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A ``jevmem worker`` process with ``env``, its output in ``log``."""
    return subprocess.Popen([sys.executable, "-c", "from jevmem.cli import main; main()", "worker"],
                            env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def stop_workers(procs: Sequence[subprocess.Popen[bytes]], timeout_s: float = 30.0) -> None:
    """SIGTERM every live worker, then wait for each; one that outlives ``timeout_s`` is killed."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()


async def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"timed out waiting for {what}")


def interleave(conversations: Sequence[Sequence[Observation]]) -> list[Observation]:
    """One stream of several conversations, round-robin (each conversation's order kept), as a
    multi-tenant service receives them: the load is spread over the partitions and workers from
    the start, instead of one conversation (one partition, one worker) at a time."""
    out: list[Observation] = []
    for i in range(max((len(c) for c in conversations), default=0)):
        out += [c[i] for c in conversations if i < len(c)]
    return out


VECTORS = ("qdrant", "elastic", "both")


def vector_stores(vectors: str | None, settings: Settings) -> list[tuple[str, str | None]]:
    """(name, Qdrant URL or None) of each distributed run; ``None``: Qdrant if configured, else Elasticsearch."""
    choice = vectors or ("qdrant" if settings.qdrant_url else "elastic")
    if choice not in VECTORS:
        raise ValueError(f"vectors must be one of {VECTORS}, not {choice!r}")
    if choice in ("qdrant", "both") and not settings.qdrant_url:
        raise ValueError(f"--vectors {choice} needs a Qdrant server (JEVMEM_QDRANT_URL)")
    return [(name, settings.qdrant_url if name == "qdrant" else None)
            for name in ("qdrant", "elastic") if choice in (name, "both")]


async def run_kafka(directory: Path, settings: Settings, workers: int = 2, rate: float = 0.0,
                    timeout: float = 900.0, vectors: str | None = None, encryption: str = "off") -> dict[str, Any]:
    """``rate`` > 0 paces the producer at that many observations per second (lag at a sustained
    load); 0 sends everything at once (throughput; lag is then mostly queueing). The result has
    one entry per vector store under ``kafka`` (see :func:`vector_stores`), and per encryption
    mode (``encryption`` "both": ``<store>`` and ``<store>+sealed``, with ``sealed_vs_plain``: the
    sealed run's throughput and CPU per observation over the plain one's)."""
    stores = vector_stores(vectors, settings)
    modes = encryption_modes(encryption)
    obs = interleave([locomo.observations(locomo.load(f), "bench", f"locomo-{f.stem}")
                      for f in sorted(directory.glob("*.json"))])
    if not obs:
        raise FileNotFoundError(f"no conversation files (*.json) in {directory}")
    embedder = assembly.load_embedder(settings)

    with tempfile.TemporaryDirectory() as tmp:
        mem = build_embedded(settings, embedder=embedder, data_dir=tmp)
        t0 = time.perf_counter()
        await mem.pipeline.ingest(obs)  # chunks of write_batch, as `bench locomo` and `ingest` do
        embedded_s = time.perf_counter() - t0
        await mem.close()

    runs: dict[str, dict[str, Any]] = {}
    for name, url in stores:
        for on in modes:
            conf = sealed_settings(settings.model_copy(update={"qdrant_url": url}), on)
            runs[name + ("+sealed" if on else "")] = await _distributed(obs, conf, workers, rate, timeout)
    out: dict[str, Any] = {
        "observations": len(obs),
        "embedded": {"seconds": round(embedded_s, 2), "observations_per_second": round(len(obs) / embedded_s, 2)},
        "kafka": runs,
        "kafka_vs_embedded_throughput": {name: round(embedded_s / run["seconds"], 3) for name, run in runs.items()},
    }
    if len(modes) == 2:
        out["sealed_vs_plain"] = {name: sealed_vs_plain(runs[name], runs[name + "+sealed"]) for name, _ in stores}
    return out


def sealed_vs_plain(plain: dict[str, Any], sealed: dict[str, Any]) -> dict[str, float]:
    """A sealed run over a plain one: throughput ratio, and CPU per observation (workers plus
    producer, and all measured components) ratios."""
    def total(run: dict[str, Any], keys: Sequence[str] | None = None) -> float:
        return float(sum(v for k, v in run["cpu_s"].items() if keys is None or k in keys))

    return {"throughput": round(sealed["observations_per_second"] / plain["observations_per_second"], 3),
            "cpu_workers_and_producer": round(total(sealed, ("workers", "producer")) /
                                              max(1e-9, total(plain, ("workers", "producer"))), 3),
            "cpu_all": round(total(sealed) / max(1e-9, total(plain)), 3)}


ENCRYPTION = ("off", "on", "both")


def encryption_modes(encryption: str) -> list[bool]:
    """Whether each run of ``--encryption off|on|both`` seals the log (both: off, then on)."""
    if encryption not in ENCRYPTION:
        raise ValueError(f"encryption must be one of {ENCRYPTION}, not {encryption!r}")
    return [m == "on" for m in ("off", "on") if encryption in (m, "both")]


def sealed_settings(settings: Settings, on: bool) -> Settings:
    """``settings`` with encryption ``on`` (a fresh key-encryption key when none is configured) or off."""
    if not on:
        return settings.model_copy(update={"encryption": False})
    if settings.encryption_kek is None:
        kek = SecretStr(base64.b64encode(os.urandom(32)).decode())
        return settings.model_copy(update={"encryption": True, "encryption_kek": kek})
    return settings.model_copy(update={"encryption": True})


def _clear(raw: bytes) -> dict[str, Any]:
    """A record's JSON object (sealed or not: the ids and timestamps read here stay in the clear)."""
    data: dict[str, Any] = orjson.loads(raw)
    return data


async def _distributed(obs: list[Observation], settings: Settings, workers: int, rate: float,
                       timeout: float, servers: Servers | None = None) -> dict[str, Any]:
    """One distributed run of ``obs`` on fresh topics, group and stores: throughput, lag, the
    workers' and the producer's CPU seconds from the first record sent to the last edge written
    (``cpu_s``; with ``servers``, each server's too) and, with ``servers``, the bytes each store
    holds afterwards (``disk_bytes``). Sealed when ``settings.encryption``."""
    tag = f"bench{uuid.uuid4().hex[:8]}"
    s = settings.model_copy(update={"topic_prefix": tag, "app_id": tag, "store_prefix": f"{tag}-"})
    keyring = assembly.keyring(s)
    spec = topics(tag)
    kafka = assembly.kafka(s)
    ensure_topics(kafka, tag, s.topic_layout())
    logdir = Path(tempfile.mkdtemp(prefix="jevmem-bench-"))
    env = worker_env(s)
    es = assembly.elasticsearch(s)
    procs = [spawn_worker({**env, "JEVMEM_WORKER_DATADIR": str(logdir / f"w{i}")}, logdir / f"w{i}.log") for i in range(workers)]
    try:
        def ready() -> bool:
            return all(b"Ready" in (logdir / f"w{i}.log").read_bytes() for i in range(workers))

        await _wait(ready, 180, "workers ready")
        cpu0 = _cpu(procs, servers)
        es0 = await elasticsearch_work(es) if servers is not None else {}
        producer_cpu0 = time.process_time()
        async with ObservationProducer(kafka, tag, keyring=keyring) as producer:
            if rate <= 0:
                for i in range(0, len(obs), 500):  # as a service's requests would: keys made per request
                    await producer.send(obs[i: i + 500])
            else:
                step, start = 8, time.monotonic()
                for i in range(0, len(obs), step):
                    await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
                    await producer.send(obs[i: i + step])
        producer_cpu = time.process_time() - producer_cpu0
        await _wait(lambda: end_offsets(kafka, spec["candidates"].name) >= len(obs), timeout,
                    "every observation linked")
        last, stable_since = -1, time.monotonic()
        while time.monotonic() - stable_since < 3.0:  # edges of the last batches
            now = end_offsets(kafka, spec["edges"].name)
            if now != last:
                last, stable_since = now, time.monotonic()
            await asyncio.sleep(0.5)
        cpu = {k: v - cpu0[k] for k, v in _cpu(procs, servers).items()}
        cpu["producer"] = producer_cpu
        es_work = {k: v - es0[k] for k, v in (await elasticsearch_work(es)).items()} if servers is not None else {}
    finally:
        stop_workers(procs)
        if keyring is not None:
            await keyring.close()
    stages = worker_stages(line for i in range(workers) for line in (logdir / f"w{i}.log").read_bytes().splitlines())

    sent = {}
    for r in read_topic(kafka, spec["observations"].name):
        o = _clear(r.value)
        sent[(o["tenant_id"], o["conversation_id"], o["event_id"])] = r.timestamp_ms
    lags, late = [], []
    middle = sorted(sent.values())[len(sent) // 2]
    for r in read_topic(kafka, spec["candidates"].name):
        node = _clear(r.value)["node"]
        at = sent[(node["tenant_id"], node["conversation_id"], node["event_id"])]
        lags.append(r.timestamp_ms - at)
        if at >= middle:
            late.append(lags[-1])
    first = min(sent.values())
    end = max(r.timestamp_ms for r in read_topic(kafka, spec["edges"].name))
    kafka_s = (end - first) / 1000.0
    out: dict[str, Any] = {
        "workers": workers, "partitions": s.partitions, "producer_rate": rate or None, "encryption": s.encryption,
        "seconds": round(kafka_s, 2), "observations_per_second": round(len(obs) / kafka_s, 2),
        # the second half of the stream by send time: past the first sight of each conversation
        # (a store read each) and of each tenant (its index created)
        "lag_ms": {"p50": percentile(lags, 50), "p95": percentile(lags, 95),
                   "second_half": {"p50": percentile(late, 50), "p95": percentile(late, 95)}},
        "stages": stages}
    try:
        if servers is not None:
            es_bytes = await elasticsearch_bytes(es, f"{tag}-")
            out["elasticsearch_bytes"] = await elasticsearch_sizes(es, f"{tag}-")
            out["elasticsearch_work"] = es_work
    finally:
        await es.close()
    out["cpu_s"] = {k: round(v, 3) for k, v in cpu.items()}
    if servers is not None:
        out["disk_bytes"] = {"elasticsearch": es_bytes, "qdrant": servers.qdrant_bytes(f"{tag}_memories"),
                             "kafka": servers.kafka_bytes(t.name for t in spec.values())}
    return out


def _cpu(procs: Sequence[subprocess.Popen[bytes]], servers: Servers | None) -> dict[str, float]:
    """CPU seconds so far of the workers together and of each server (zeros without ``servers``)."""
    workers = sum(cpu_seconds(p.pid) for p in procs)
    return {"workers": workers} if servers is None else {"workers": workers, **servers.cpu()}


async def run_fanin(settings: Settings, workers: int = 2, conversations: int = 200, turns: int = 10,
                    tenants: int = 10, timeout: float = 900.0,
                    pids: dict[str, list[int]] | None = None, encryption: str = "off") -> dict[str, Any]:
    """The fan-in benchmark: a synthetic multi-tenant stream (``bench scale``'s workload:
    ``conversations`` x ``turns`` observations of ``tenants`` tenants, interleaved) through the
    embedded pipeline and through Kafka + ``workers`` Faust workers, in the same run, with the
    CPU each component spends per observation and the bytes each store keeps per observation.
    Two distributed runs on fresh topics and stores: a burst (throughput, lag under a backlog)
    and a steady stream at half the burst's throughput (lag at a sustainable load); with
    ``encryption`` "both", a third: the burst with the log sealed (``sealed_vs_plain``)."""
    from jevmem.bench.meter import allocated_bytes, per_observation
    from jevmem.bench.scale import workload

    obs = list(workload(conversations * turns, conversations, tenants))
    servers = Servers.find(pids)
    embedder = assembly.load_embedder(settings)
    with tempfile.TemporaryDirectory(prefix="jevmem-fanin-") as tmp:
        mem = build_embedded(settings, embedder=embedder, data_dir=tmp)
        cpu0, t0 = time.process_time(), time.perf_counter()
        await mem.pipeline.ingest(obs)
        embedded_s, embedded_cpu = time.perf_counter() - t0, time.process_time() - cpu0
        await mem.close()
        embedded_disk = allocated_bytes([Path(tmp)])
    vectors = settings.qdrant_url
    modes = encryption_modes(encryption)
    settings = sealed_settings(settings, modes[0])
    burst = await _distributed(obs, settings, workers, 0.0, timeout, servers)
    sealed = (await _distributed(obs, sealed_settings(settings, True), workers, 0.0, timeout, servers)
              if len(modes) == 2 else None)
    steady = await _distributed(obs, settings, workers, burst["observations_per_second"] / 2, timeout, servers)
    n = len(obs)
    cpu = per_observation(burst["cpu_s"], n, 1000.0)
    embedded_ops = n / embedded_s
    return {
        "observations": n, "conversations": conversations, "tenants": tenants, "workers": workers,
        "partitions": settings.partitions, "vectors": "qdrant" if vectors else "elastic",
        "embedded_ops": round(embedded_ops, 2), "kafka_ops": burst["observations_per_second"],
        "ratio": round(burst["observations_per_second"] / embedded_ops, 3),
        "cpu_ms_per_observation": {**cpu, "total": round(sum(cpu.values()), 3),
                                   "embedded": round(1000.0 * embedded_cpu / n, 3)},
        "disk_bytes_per_observation": {**{k: round(v / n) for k, v in burst["disk_bytes"].items()},
                                       "embedded": round(embedded_disk / n)},
        "lag_ms": {"burst": burst["lag_ms"], "steady": {**steady["lag_ms"], "rate": steady["producer_rate"]}},
        "runs": {"burst": burst, "steady": steady, **({"burst_sealed": sealed} if sealed else {})},
        **({"sealed_vs_plain": {**sealed_vs_plain(burst, sealed), "cpu_ms_per_observation_sealed": {
            k: round(v, 3) for k, v in per_observation(sealed["cpu_s"], n, 1000.0).items()}}} if sealed else {}),
    }
