"""``jevmem bench chaos``: faults injected into the distributed pipeline on real servers, and a
check that every conversation came out exactly as the embedded run of the same events.

Each round uses fresh topics, consumer group and store prefix, starts its workers, streams the
LoCoMo observations (paced, so faults land mid-stream) and injects one fault at a random point
(after a random fraction of the nodes were materialised):

* ``kill``: SIGKILL one of two workers; nobody replaces it.
* ``double_kill``: three workers; SIGKILL one, then a second while the group is rebalancing
  (recovering from the first); one worker is left.
* ``broker_restart``: SIGKILL the Kafka broker, restart it (``scripts/kafka/kafka.sh start``).
* ``es_outage``: Elasticsearch unreachable for ``--es-outage`` seconds (SIGSTOP/SIGCONT of the
  node: connections hang and time out, as in a network partition).
* ``scale``: a third worker joins two mid-stream.
* ``poison``: records that deterministically fail a stage mixed into the stream: the workers'
  embedding service refuses (HTTP 400) every text that names a marker (:mod:`jevmem.bench.poison`);
  the round also checks that each poison record is exactly one dead letter naming its cause, and
  that no pause between two batches is longer than a few seconds (the graph is compared with the
  embedded run without the poison records).
* ``qdrant_kill``: SIGKILL the Qdrant server, restart it (``scripts/qdrant/qdrant.sh start``) after a
  few seconds; the round also checks that every vector acknowledged before the kill is still there
  after the restart (the server's write-ahead log). Only with vectors in Qdrant
  (``JEVMEM_QDRANT_URL``); the other faults run with either vector store.

On a cluster (``scripts/kafka/cluster.sh``, three brokers; ``scripts/qdrant/cluster.sh``, three
Qdrant nodes, the collection replicated):

* ``broker_loss``: SIGKILL one of the three brokers; it stays down until the stream is done (the
  partitions' leaders move to the others), then it is started again for the next round.
* ``broker_rolling``: restart the three brokers one after another, each back before the next
  goes, as an upgrade does.
* ``qdrant_node_loss``: SIGKILL one Qdrant node of three; it stays down until the stream is done.

Every round reports ``max_gap_s``: the longest pause between two batches the workers wrote (broker
timestamps of the memories topic), the pause a fault caused.

No worker is ever added after a fault (except ``scale``'s, which *is* the fault) and nothing
nudges the group. A round passes when, within the time bound, every conversation has the
expected events exactly once with seqs ``0..n-1``, its graph (node ids and seqs, edges with
probabilities, consolidation decisions) equals the embedded run's and, with vectors in Qdrant, the
collection holds exactly one point per node. A round whose graph stops
changing for ``stall_s`` (or runs out of time) before that is *stalled* when the group's committed
offsets stop short of the log end (else it is a graph mismatch); the survivors' consumer state
(SIGUSR2 dump) and the committed offsets are then recorded in the result.

The servers are the ones named by ``JEVMEM_KAFKA_BOOTSTRAP`` / ``JEVMEM_ELASTICSEARCH_URL`` /
``JEVMEM_QDRANT_URL``; faults act on the processes of ``scripts/kafka/kafka.sh``,
``scripts/elasticsearch/es.sh`` and ``scripts/qdrant/qdrant.sh`` found through their pid files
(``KAFKA_DATA``, ``ES_HOME_DIR``/``ES_CACHE``+``ES_PORT``, ``QDRANT_DATA``/``QDRANT_PORT``, as
those scripts read them), and through the cluster scripts' own commands (``KAFKA_CLUSTER_DATA``,
``QDRANT_CLUSTER_DATA``).

The faults that restart a server run the scripts themselves (:data:`FAULT_SCRIPTS`), which live in
``scripts/`` of a source checkout and are not installed with the package: with an installed
package those faults are refused up front (:class:`SourceCheckoutNeeded`, naming the scripts and
the faults that need none), and ``kill``, ``double_kill``, ``es_outage`` and ``scale`` still run
against servers the scripts started.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import signal
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from jevmem import assembly, locomo
from jevmem.bench import poison as bench_poison
from jevmem.bench.kafka import spawn_worker, stop_workers, worker_env
from jevmem.bench.meter import server_dirs
from jevmem.distributed import distributed_stores
from jevmem.settings import Settings
from jevmem.wiring import build_embedded
from storage.qdrant.index import QdrantVectorIndex
from streams.kafka_admin import ensure_topics, read_topic, watermarks
from streams.kafka_client import KafkaClient
from streams.producer import ObservationProducer
from streams.replay import Graph, graph_of
from streams.write_path import Stores
from topology.errors import BrokerUnavailable
from topology.ports import Embedder
from topology.schemas import ConsolidationDecision, Observation, Scope

FAULTS = ("kill", "double_kill", "broker_restart", "es_outage", "scale", "qdrant_kill", "broker_loss",
          "broker_rolling", "qdrant_node_loss", "poison")
#: Faults that need vectors in a Qdrant server.
QDRANT_FAULTS = ("qdrant_kill", "qdrant_node_loss")
#: Faults on a single server (one broker, one Qdrant node) and on a cluster of three.
SINGLE_FAULTS = ("broker_restart", "qdrant_kill")
CLUSTER_FAULTS = ("broker_loss", "broker_rolling", "qdrant_node_loss")
#: ``scripts/`` of the source checkout this module runs from (absent in an installed package).
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
#: The script (under :data:`SCRIPTS`) each fault runs to restart or stop a server; the other faults
#: only signal processes found through the scripts' pid files.
FAULT_SCRIPTS = {"broker_restart": "kafka/kafka.sh", "qdrant_kill": "qdrant/qdrant.sh", "broker_loss": "kafka/cluster.sh",
                 "broker_rolling": "kafka/cluster.sh", "qdrant_node_loss": "qdrant/cluster.sh"}
READY = b"[^Worker]: Ready"
#: Observations sent per producer call while streaming (and the pause between calls).
CHUNK, PACE_S = 6, 0.4


class SourceCheckoutNeeded(FileNotFoundError):
    """A chosen fault runs a server script that is not there (the package is installed, not checked out)."""


def missing_scripts(faults: Sequence[str], scripts: Path | None = None) -> dict[str, list[str]]:
    """The scripts ``faults`` need that ``scripts`` (default :data:`SCRIPTS`) lacks, each with the
    faults that need it."""
    scripts = SCRIPTS if scripts is None else scripts
    out: dict[str, list[str]] = {}
    for f in faults:
        script = FAULT_SCRIPTS.get(f)
        if script is not None and not (scripts / script).is_file():
            out.setdefault(script, []).append(f)
    return out


def require_scripts(faults: Sequence[str], scripts: Path | None = None) -> None:
    """Raise :class:`SourceCheckoutNeeded` when ``faults`` need scripts that ``scripts`` (default
    :data:`SCRIPTS`) lacks; the message names them and the faults that run without a checkout."""
    scripts = SCRIPTS if scripts is None else scripts
    missing = missing_scripts(faults, scripts)
    if not missing:
        return
    needs = "; ".join(f"{', '.join(dict.fromkeys(fs))} run scripts/{script}" for script, fs in missing.items())
    free = " ".join(f"--fault {f}" for f in FAULTS if f not in FAULT_SCRIPTS)
    raise SourceCheckoutNeeded(
        f"{needs}, which is part of a source checkout of jevmem, not of the installed package (looked in {scripts}). "
        f"Run the benchmark from a checkout, or choose faults that need no script: {free}")


@dataclass
class Reference:
    """The embedded run of the same events: what every round must reproduce."""

    graphs: dict[Scope, Graph]
    decisions: dict[Scope, list[ConsolidationDecision]]
    events: dict[Scope, list[str]]


@dataclass
class RoundResult:
    fault: str
    passed: bool = False
    lost: int = 0
    duplicated: int = 0
    stalled: bool = False
    graph_mismatch: bool = False
    #: poison rounds: poison records without exactly one dead letter naming the cause, a pause
    #: between batches longer than ``bench_poison.MAX_PAUSE_S``, a poison record retried
    poison_problems: int = 0
    seconds: float = 0.0
    max_gap_s: float = 0.0
    fault_at_nodes: int = 0
    detail: list[str] = field(default_factory=list)
    stall_state: dict[str, Any] = field(default_factory=dict)


def conversations(directory: Path, tenant: str, turns: int) -> list[Observation]:
    obs: list[Observation] = []
    for f in sorted(directory.glob("*.json")):
        obs += locomo.observations(locomo.load(f), tenant, f"locomo-{f.stem}")[:turns]
    if not obs:
        raise FileNotFoundError(f"no conversation files (*.json) in {directory}")
    return obs


async def reference(obs: list[Observation], settings: Settings, embedder: Embedder) -> Reference:
    with tempfile.TemporaryDirectory() as tmp:
        mem = build_embedded(settings, embedder=embedder, data_dir=tmp)
        try:
            for i in range(0, len(obs), settings.write_batch):
                await mem.pipeline.ingest(obs[i: i + settings.write_batch])
            scopes = sorted({o.scope for o in obs}, key=lambda s: s.key)
            return Reference(graphs={s: await graph_of(mem.stores, s) for s in scopes},
                             decisions={s: await mem.stores.edges.decisions(s) for s in scopes},
                             events={s: [o.event_id for o in obs if o.scope == s] for s in scopes})
        finally:
            await mem.close()


class Servers:
    """The broker, Elasticsearch node and Qdrant server of the project's scripts, found by their pid files."""

    def __init__(self) -> None:
        self.kafka_data, self.es_home, self.qdrant_data = server_dirs()

    @staticmethod
    def _pid(path: Path) -> int:
        return int(path.read_text().strip())

    def kill_broker(self) -> None:
        os.kill(self._pid(self.kafka_data / "kafka.pid"), signal.SIGKILL)

    @staticmethod
    async def _script(path: str) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("ES_FRESH", "QDRANT_FRESH")}
        proc = await asyncio.create_subprocess_exec("bash", str(SCRIPTS / path), "start",
                                                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, err = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"{path} start failed: {err.decode(errors='replace')[-2000:]}")

    async def start_broker(self) -> None:
        await self._script("kafka/kafka.sh")

    def kill_qdrant(self) -> None:
        os.kill(self._pid(self.qdrant_data / "qdrant.pid"), signal.SIGKILL)

    async def start_qdrant(self) -> None:
        await self._script("qdrant/qdrant.sh")

    def pause_es(self, paused: bool) -> None:
        os.kill(self._pid(self.es_home / "es.pid"), signal.SIGSTOP if paused else signal.SIGCONT)

    @staticmethod
    async def cluster(script: str, *args: str) -> None:
        """``scripts/<script> <args>`` of a cluster script (``kafka/cluster.sh``, ``qdrant/cluster.sh``)."""
        proc = await asyncio.create_subprocess_exec("bash", str(SCRIPTS / script), *args,
                                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, err = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"{script} {' '.join(args)} failed: {err.decode(errors='replace')[-2000:]}")


class Round:
    """One round: its workers (subprocesses), its stores, its fault."""

    def __init__(self, settings: Settings, fault: str, logdir: Path) -> None:
        tag = f"chaos{uuid.uuid4().hex[:8]}"
        self.tag, self.fault, self.logdir = tag, fault, logdir
        self.settings = settings.model_copy(update={"topic_prefix": tag, "app_id": tag, "store_prefix": f"{tag}-"})
        self.env = worker_env(self.settings)
        self.workers: list[subprocess.Popen[bytes]] = []
        self.down: list[tuple[str, str]] = []  # (cluster script, node) killed by the fault, started after the round

    def log(self, n: int) -> Path:
        return self.logdir / f"{self.tag}-w{n}.log"

    def start_worker(self) -> int:
        n = len(self.workers)
        env = {**self.env, "JEVMEM_WORKER_DATADIR": str(self.logdir / f"{self.tag}-w{n}")}
        self.workers.append(spawn_worker(env, self.log(n)))
        return n

    def kill(self, n: int) -> None:
        self.workers[n].send_signal(signal.SIGKILL)
        self.workers[n].wait(10)

    def alive(self) -> list[int]:
        return [n for n, p in enumerate(self.workers) if p.poll() is None]

    async def wait_ready(self, ns: list[int], timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(READY in self.log(n).read_bytes() for n in ns):
                return
            if any(self.workers[n].poll() is not None for n in ns):
                raise RuntimeError(f"a worker exited before ready:\n{self.tail()}")
            await asyncio.sleep(0.5)
        raise TimeoutError(f"workers not ready:\n{self.tail()}")

    def tail(self, chars: int = 2000) -> str:
        return "\n".join(self.log(n).read_text(errors="replace")[-chars:] for n in range(len(self.workers)))

    def stop(self) -> None:
        stop_workers(self.workers)


async def produce(kafka: KafkaClient, prefix: str, obs: list[Observation]) -> None:
    """Send ``obs`` paced in chunks; a chunk the broker did not acknowledge is sent again (event
    ids make a resend harmless: same node, same seq)."""
    async with ObservationProducer(kafka, prefix) as producer:
        for i in range(0, len(obs), CHUNK):
            while True:
                try:
                    await producer.send(obs[i: i + CHUNK])
                    break
                except BrokerUnavailable:
                    await asyncio.sleep(1.0)
            await asyncio.sleep(PACE_S)


async def _count(stores: Stores, scopes: list[Scope]) -> tuple[int, int, int]:
    """(nodes, edges, decisions) now, or (-1, -1, -1) while the stores do not answer."""
    try:
        nodes = sum([len(await stores.nodes.scan(s)) for s in scopes])
        edges = sum([len(await stores.edges.scan(s)) for s in scopes])
        decisions = sum([len(await stores.edges.decisions(s)) for s in scopes])
    except Exception:  # Elasticsearch paused by the es_outage fault
        return -1, -1, -1
    return nodes, edges, decisions


async def matches(stores: Stores, ref: Reference) -> list[str]:
    problems = []
    for scope, want in ref.graphs.items():
        got = await graph_of(stores, scope)
        if got != want:
            problems.append(f"{scope.key}: {len(got.nodes)}/{len(want.nodes)} nodes, "
                            f"{len(set(got.edges) ^ set(want.edges))} edges differ")
        elif await stores.edges.decisions(scope) != ref.decisions[scope]:
            problems.append(f"{scope.key}: consolidation decisions differ")
    return problems


def committed_offsets(settings: Settings) -> dict[str, dict[str, int]]:
    """The group's committed offset and the log end of every partition of the observations topic."""
    from topology.topics import topics

    c = Consumer(assembly.kafka(settings).librdkafka(**{"group.id": settings.app_id}))
    try:
        name = topics(settings.topic_prefix)["observations"].name
        tps = [TopicPartition(name, p) for p in range(settings.partitions)]
        out = {}
        for tp in c.committed(tps, timeout=10):
            end = watermarks(c, TopicPartition(name, tp.partition))[1]
            out[f"{name}:{tp.partition}"] = {"committed": tp.offset, "end": end}
        return out
    finally:
        c.close()


async def vector_ids(stores: Stores, scopes: list[Scope]) -> set[str]:
    """Every point id of ``scopes`` in the Qdrant collection (empty for the Elasticsearch fallback)."""
    if not isinstance(stores.vectors, QdrantVectorIndex):
        return set()
    out: set[str] = set()
    for s in scopes:
        out |= await stores.vectors.ids(s)
    return out


async def inject(rnd: Round, servers: Servers, rng: random.Random, es_outage_s: float,
                 stores: Stores, scopes: list[Scope]) -> list[str]:
    """Inject ``rnd.fault``; returns what was done (for the report), and problems found on the way
    (prefixed ``problem:``)."""
    done: list[str] = []
    if rnd.fault in ("kill", "double_kill"):
        victim = rng.choice(rnd.alive())
        rnd.kill(victim)
        done.append(f"SIGKILL worker {victim}")
        if rnd.fault == "double_kill":
            # the survivors notice the death after the session timeout (10 s): kill a second
            # worker while they rebalance
            await asyncio.sleep(rng.uniform(9.0, 13.0))
            second = rng.choice(rnd.alive())
            rnd.kill(second)
            done.append(f"SIGKILL worker {second} during the rebalance")
    elif rnd.fault == "broker_restart":
        servers.kill_broker()
        done.append("SIGKILL broker")
        await asyncio.sleep(rng.uniform(1.0, 5.0))
        await servers.start_broker()
        done.append("broker restarted")
    elif rnd.fault == "es_outage":
        servers.pause_es(True)
        try:
            await asyncio.sleep(es_outage_s)
        finally:
            servers.pause_es(False)
        done.append(f"Elasticsearch unreachable {es_outage_s:.0f} s")
    elif rnd.fault == "qdrant_kill":
        before = await vector_ids(stores, scopes)  # acknowledged (wait=True) writes so far
        servers.kill_qdrant()
        done.append(f"SIGKILL Qdrant ({len(before)} points acknowledged)")
        await asyncio.sleep(rng.uniform(2.0, 6.0))
        await servers.start_qdrant()
        after = await vector_ids(stores, scopes)
        done.append("Qdrant restarted")
        if before - after:
            done.append(f"problem: {len(before - after)} of {len(before)} points acknowledged before the kill "
                        "are missing after the restart")
    elif rnd.fault in ("broker_loss", "qdrant_node_loss"):
        script, what = ("kafka/cluster.sh", "broker") if rnd.fault == "broker_loss" else ("qdrant/cluster.sh", "Qdrant node")
        target = str(rng.randint(1, 3))
        await servers.cluster(script, "kill", target)
        rnd.down.append((script, target))
        done.append(f"SIGKILL {what} {target} of 3")
    elif rnd.fault == "broker_rolling":
        for node in ("1", "2", "3"):
            await servers.cluster("kafka/cluster.sh", "restart-node", node)
        done.append("brokers 1, 2, 3 restarted one after another")
    elif rnd.fault == "scale":
        n = rnd.start_worker()
        done.append(f"worker {n} joined")
    else:
        raise ValueError(f"unknown fault {rnd.fault!r}")
    return done


async def run_round(obs: list[Observation], ref: Reference, settings: Settings, fault: str, servers: Servers,
                    rng: random.Random, logdir: Path, embedder: Embedder, stall_s: float = 60.0,
                    timeout_s: float = 420.0, es_outage_s: float = 30.0) -> RoundResult:
    rnd = Round(settings, fault, logdir)
    result = RoundResult(fault=fault)
    t0 = time.monotonic()
    ensure_topics(assembly.kafka(rnd.settings), rnd.settings.topic_prefix, rnd.settings.topic_layout())
    stores = distributed_stores(rnd.settings, rnd.settings.store_prefix or "", embedder.dim)
    scopes = list(ref.graphs)
    producer: asyncio.Task[None] | None = None
    stream, poison = bench_poison.poisoned(obs, rng) if fault == "poison" else (obs, [])
    try:
        await rnd.wait_ready([rnd.start_worker() for _ in range(3 if fault == "double_kill" else 2)])
        producer = asyncio.create_task(produce(assembly.kafka(rnd.settings), rnd.settings.topic_prefix, stream))
        result.fault_at_nodes = rng.randint(len(obs) // 8, len(obs) * 2 // 3) if not poison else 0
        deadline = t0 + timeout_s
        while (await _count(stores, scopes))[0] < result.fault_at_nodes:
            if time.monotonic() > deadline or (producer.done() and producer.exception() is not None):
                result.detail.append("fault point never reached")
                break
            await asyncio.sleep(0.5)
        if poison:  # the fault is in the stream itself
            result.detail.append(f"{len(poison)} poison records among {len(stream)}")
        else:
            result.detail += await inject(rnd, servers, rng, es_outage_s, stores, scopes)
        await producer
        last, since = (-2, -2, -2), time.monotonic()
        now = last
        while time.monotonic() < deadline:
            now = await _count(stores, scopes)
            if now != last:
                last, since = now, time.monotonic()
            else:
                quiet = time.monotonic() - since
                if quiet > stall_s or (now[0] == len(obs) and quiet > 3.0 and not await matches(stores, ref)):
                    break
            await asyncio.sleep(1.0)
        if now[0] != len(obs) or await matches(stores, ref):
            # not finished: stalled if the group stopped short of the log end (else: a mismatch)
            result.stall_state = await stall_state(rnd)
            offsets = result.stall_state.get("offsets", {})
            result.stalled = not offsets or any(o["committed"] < o["end"] for o in offsets.values())
        await check(stores, ref, result)
        result.max_gap_s = await asyncio.to_thread(longest_gap_s, rnd.settings)
        if poison:
            logs = [rnd.log(n).read_text(errors="replace") for n in range(len(rnd.workers))]
            problems, notes = await bench_poison.round_problems(rnd.settings, poison, result.max_gap_s, logs)
            result.poison_problems = len(problems)
            result.detail += notes + [f"problem: {p}" for p in problems]
    finally:
        if producer is not None and not producer.done():
            producer.cancel()
        rnd.stop()
        with contextlib.suppress(Exception):
            await stores.close()
        for script, node in rnd.down:  # the next round starts with the whole cluster
            await servers.cluster(script, "start-node", node)
    result.seconds = round(time.monotonic() - t0, 1)
    result.passed = not (result.lost or result.duplicated or result.stalled or result.graph_mismatch
                         or result.poison_problems)
    return result


def longest_gap_s(settings: Settings) -> float:
    """The longest pause between two consecutive batches the workers logged on the memories topic
    (broker timestamps, seconds)."""
    from topology.topics import topics

    stamps = sorted({r.timestamp_ms for r in read_topic(assembly.kafka(settings), topics(settings.topic_prefix)["memories"].name)})
    return round(max((b - a for a, b in itertools.pairwise(stamps)), default=0) / 1000.0, 2)


async def stall_state(rnd: Round) -> dict[str, Any]:
    """Committed offsets vs log ends, and each survivor's consumer state (its SIGUSR2 dump)."""
    state: dict[str, Any] = {}
    with contextlib.suppress(Exception):
        state["offsets"] = await asyncio.to_thread(committed_offsets, rnd.settings)
    for n in rnd.alive():
        rnd.workers[n].send_signal(signal.SIGUSR2)
    await asyncio.sleep(2.0)
    for n in rnd.alive():
        lines = [ln for ln in rnd.log(n).read_text(errors="replace").splitlines() if "consumer state:" in ln]
        state[f"worker{n}"] = lines[-1].split("consumer state:", 1)[1].strip() if lines else None
    return state


async def check(stores: Stores, ref: Reference, result: RoundResult) -> None:
    for scope, events in ref.events.items():
        nodes = [n for n in await stores.nodes.scan(scope) if n.kind == "observation"]
        have = Counter(n.event_id for n in nodes)
        result.lost += sum(1 for e in events if e not in have)
        result.duplicated += sum(c - 1 for c in have.values()) + sum(c - 1 for c in Counter(n.seq for n in nodes).values())
        if sorted(n.seq for n in nodes) != list(range(len(nodes))):
            result.detail.append(f"{scope.key}: seqs are not 0..n-1")
    problems = await matches(stores, ref) + [d for d in result.detail if d.startswith("problem:")]
    if isinstance(stores.vectors, QdrantVectorIndex):  # one point per embedded node, no more, no less
        for scope in ref.graphs:
            nodes = await stores.nodes.scan(scope)
            embedded = {n.id for n in await stores.nodes.get(scope, [n.id for n in nodes]) if n.embedding}
            points = await stores.vectors.ids(scope)
            if points != embedded:
                problems.append(f"{scope.key}: {len(embedded - points)} vectors missing, {len(points - embedded)} extra")
    result.graph_mismatch = bool(problems)
    result.detail += [p for p in problems if p not in result.detail]


async def run_chaos(directory: Path, settings: Settings, rounds: int = 10, turns: int = 30,
                    faults: tuple[str, ...] | None = None, seed: int | None = None, stall_s: float = 60.0,
                    timeout_s: float = 420.0, es_outage_s: float = 30.0) -> dict[str, Any]:
    """``rounds`` rounds cycling through ``faults`` (default: every fault the configured stores
    allow) over the first ``turns`` turns of each conversation in ``directory``; returns the
    summary and each round's result. Raises ValueError for Qdrant faults without Qdrant and
    :class:`SourceCheckoutNeeded` for faults whose scripts are missing, before any round starts."""
    if faults is None:
        cluster = len(assembly.kafka(settings).check().brokers) >= 3
        faults = tuple(f for f in FAULTS if (settings.qdrant_url or f not in QDRANT_FAULTS)
                       and f not in (SINGLE_FAULTS if cluster else CLUSTER_FAULTS))
    if not settings.qdrant_url and set(faults) & set(QDRANT_FAULTS):
        raise ValueError(f"faults {sorted(set(faults) & set(QDRANT_FAULTS))} need vectors in Qdrant (JEVMEM_QDRANT_URL)")
    require_scripts(faults)
    seed = random.randrange(2**32) if seed is None else seed
    rng = random.Random(seed)
    embedder = assembly.load_embedder(settings)
    obs = conversations(directory, "chaos", turns)
    chosen = faults[:rounds] if rounds < len(faults) else faults
    ref = await reference(obs, settings, embedder) if set(chosen) - {"poison"} else None
    servers = Servers()
    logdir = Path(tempfile.mkdtemp(prefix="jevmem-chaos-"))
    results = []
    with contextlib.ExitStack() as stack:
        # poison rounds: the workers (and their reference run) embed through a service that refuses the poison
        poisoned = None
        if "poison" in chosen:
            url = stack.enter_context(bench_poison.refusing_service(embedder))
            p_settings = bench_poison.settings_for(settings, url, embedder.dim)
            p_embedder = assembly.load_embedder(p_settings)
            poisoned = (p_settings, await reference(obs, p_settings, p_embedder), p_embedder)
        for i in range(rounds):
            fault = faults[i % len(faults)]
            r_settings, r_ref, r_embedder = poisoned if fault == "poison" and poisoned is not None else (settings, ref, embedder)
            assert r_ref is not None
            results.append(await run_round(obs, r_ref, r_settings, fault, servers, rng, logdir, r_embedder,
                                           stall_s=stall_s, timeout_s=timeout_s, es_outage_s=es_outage_s))
    per_fault: dict[str, dict[str, int]] = {}
    for r in results:
        f = per_fault.setdefault(r.fault, {"rounds": 0, "passed": 0})
        f["rounds"] += 1
        f["passed"] += int(r.passed)
    return {
        "rounds": rounds, "passed": sum(r.passed for r in results), "lost": sum(r.lost for r in results),
        "duplicated": sum(r.duplicated for r in results), "stalled": sum(r.stalled for r in results),
        "graph_mismatches": sum(r.graph_mismatch for r in results),
        "poison_problems": sum(r.poison_problems for r in results), "faults": per_fault,
        "max_gap_s": {f: max(r.max_gap_s for r in results if r.fault == f) for f in per_fault},
        "observations": len(obs), "seed": seed, "logs": str(logdir),
        "results": [r.__dict__ for r in results],
    }
