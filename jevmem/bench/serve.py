"""``jevmem bench serve``: load on ``jevmem serve`` (embedded), as an agent fleet makes it.

A ``jevmem serve`` process is started on a loopback port over a fresh data directory (a key is
minted into its key store first), seeded with the LoCoMo conversations' first turns, then driven
by closed-loop HTTP clients at each concurrency level (default 1, 4 and 16): every client, for
``seconds``, sends a request, waits for its answer, and sends the next; of every
:data:`INGEST_EVERY` requests one is ``POST /v1/observations`` (a few new turns of its own
conversation), the rest ``POST /v1/query`` (a question from the turns seeded). Reported per
level: requests per second, p50/p95/p99 latency of queries and of ingests, errors (answers other
than 2xx, and requests that got no answer) and 5xx among them. At the end every ingest answered
200 is checked to be stored (``lost``: acknowledged observations not found).

Each level also reports the CPU time the server process used during it, per request
(``server_cpu_ms_per_request``: every thread of it, the model's included; read from
``/proc/<pid>/stat``, None where there is none), and the CPU the load generator used per request
(``client_cpu_ms_per_request``: on a small machine the clients share the server's cores). With
``ingest_every=0`` every request is a query, so the server figure is the CPU per query.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from jevmem import locomo
from query_api.auth import mint
from storage.keys import SqliteKeyStore
from topology.schemas import Observation

#: One request in this many is an ingest (agents read their memory more often than they write it).
INGEST_EVERY = 5
#: Observations per ingest request (a turn or two of a chat, a tool result).
INGEST_ITEMS = 2
#: Turns of each LoCoMo conversation seeded before the load.
SEED_TURNS = 200
#: How long to wait for the server to answer /healthz.
START_TIMEOUT_S = 120.0
TENANT = "bench"


@dataclass
class Level:
    clients: int
    seconds: float = 0.0
    requests: int = 0
    errors: int = 0
    server_errors: int = 0
    query_ms: list[float] = field(default_factory=list)
    ingest_ms: list[float] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)
    #: CPU seconds of the server process and of this (client) process during the level
    server_cpu_s: float | None = None
    client_cpu_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        def pct(xs: list[float]) -> dict[str, float | None]:
            if not xs:
                return {"p50": None, "p95": None, "p99": None}
            a = np.asarray(xs)
            return {f"p{q}": round(float(np.percentile(a, q)), 1) for q in (50, 95, 99)}

        def per(cpu_s: float | None) -> float | None:
            return round(1000 * cpu_s / self.requests, 2) if cpu_s is not None and self.requests else None

        return {"clients": self.clients, "seconds": round(self.seconds, 1), "requests": self.requests,
                "per_second": round(self.requests / self.seconds, 1) if self.seconds else 0.0,
                "queries": len(self.query_ms), "query_ms": pct(self.query_ms),
                "ingests": len(self.ingest_ms), "ingest_ms": pct(self.ingest_ms),
                "errors": self.errors, "5xx": self.server_errors, "statuses": dict(sorted(self.statuses.items())),
                "server_cpu_ms_per_request": per(self.server_cpu_s), "client_cpu_ms_per_request": per(self.client_cpu_s)}


def _observations(directory: Path) -> list[Observation]:
    out: list[Observation] = []
    for f in sorted(directory.glob("*.json")):
        out += locomo.observations(locomo.load(f), TENANT, f"locomo-{f.stem}")
    if not out:
        raise FileNotFoundError(f"no conversation files (*.json) in {directory}")
    return out


async def _start(data_dir: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "JEVMEM_DATA_DIR": str(data_dir)}
    proc = subprocess.Popen([sys.executable, "-c", "from jevmem.cli import main; main()", "serve", "--port", str(port)],
                            env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT_S
    async with httpx.AsyncClient(timeout=5) as http:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"jevmem serve exited:\n{log.read_text(errors='replace')[-3000:]}")
            try:
                if (await http.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200:
                    return proc
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.5)
    proc.terminate()
    raise TimeoutError(f"jevmem serve did not answer within {START_TIMEOUT_S:.0f} s")


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds process ``pid`` has used (all its threads), or None without ``/proc``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "; utime, stime are fields 14, 15
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _self_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


async def _level(url: str, key: str, clients: int, seconds: float, questions: Sequence[tuple[str, str]],
                 acked: list[Observation], rng: random.Random, server_pid: int | None = None,
                 ingest_every: int = INGEST_EVERY) -> Level:
    level = Level(clients)
    counter = itertools.count()
    stop = time.monotonic() + seconds

    async def client(n: int) -> None:
        mine = f"load-{clients}-{n}"
        async with httpx.AsyncClient(base_url=url, timeout=120, headers={"Authorization": f"Bearer {key}"}) as http:
            i = 0
            while time.monotonic() < stop:
                i += 1
                ingest = ingest_every > 0 and i % ingest_every == 0
                t0 = time.perf_counter()
                batch: list[Observation] = []
                try:
                    if ingest:
                        k = next(counter)
                        batch = [Observation(tenant_id=TENANT, conversation_id=mine, event_id=f"e{k}-{j}",
                                             content=f"Load turn {k}.{j}: I moved the meeting with Sam to {k % 28 + 1} May.",
                                             speaker="Ana") for j in range(INGEST_ITEMS)]
                        r = await http.post("/v1/observations", json=[o.model_dump(mode="json") for o in batch])
                    else:
                        conversation, question = rng.choice(questions)
                        r = await http.post("/v1/query", json={"conversation_id": conversation, "question": question,
                                                               "top_k": 5})
                    status = str(r.status_code)
                except httpx.HTTPError as exc:
                    status = type(exc).__name__
                ms = 1000 * (time.perf_counter() - t0)
                level.requests += 1
                level.statuses[status] = level.statuses.get(status, 0) + 1
                if status == "200":
                    (level.ingest_ms if ingest else level.query_ms).append(ms)
                    acked.extend(batch)
                else:
                    level.errors += 1
                    level.server_errors += status.startswith("5")

    cpu0 = process_cpu_s(server_pid) if server_pid is not None else None
    self0 = _self_cpu_s()
    t0 = time.monotonic()
    await asyncio.gather(*(client(n) for n in range(clients)))
    level.seconds = time.monotonic() - t0
    level.client_cpu_s = _self_cpu_s() - self0
    cpu1 = process_cpu_s(server_pid) if server_pid is not None else None
    level.server_cpu_s = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
    return level


async def run_serve(directory: Path, levels: Sequence[int] = (1, 4, 16), seconds: float = 30.0,
                    seed: int = 7, data_dir: Path | None = None, seed_turns: int = SEED_TURNS,
                    ingest_every: int = INGEST_EVERY) -> dict[str, Any]:
    """Start ``jevmem serve`` (embedded) over ``data_dir`` (default: a fresh temporary one), seed
    it with ``seed_turns`` turns of each conversation, run each level of ``levels`` concurrent
    clients for ``seconds`` (one request in ``ingest_every`` an ingest; 0: queries only); returns
    the per-level summaries and the count of acknowledged observations not stored."""
    obs = _observations(directory)
    seeded = [o for c in dict.fromkeys(o.conversation_id for o in obs)
              for o in [x for x in obs if x.conversation_id == c][:seed_turns]]
    rng = random.Random(seed)
    questions = [(o.conversation_id, o.content[:200]) for o in rng.sample(seeded, min(200, len(seeded)))]
    with tempfile.TemporaryDirectory(prefix="jevmem-bench-serve-") as tmp:
        root = data_dir or Path(tmp) / "data"
        root.mkdir(parents=True, exist_ok=True)
        key, record = mint(TENANT, ["ingest", "query", "admin"])
        store = SqliteKeyStore(root / "keys.sqlite3")
        await store.create(record)
        await store.close()
        sock_port = _free_port()
        log = Path(tmp) / "serve.log"
        proc = await _start(root, sock_port, log)
        url = f"http://127.0.0.1:{sock_port}"
        try:
            t0 = time.perf_counter()
            async with httpx.AsyncClient(base_url=url, timeout=300, headers={"Authorization": f"Bearer {key}"}) as http:
                for i in range(0, len(seeded), 64):
                    r = await http.post("/v1/observations", json=[o.model_dump(mode="json") for o in seeded[i: i + 64]])
                    r.raise_for_status()
            seed_s = time.perf_counter() - t0
            acked: list[Observation] = []
            results = [(await _level(url, key, c, seconds, questions, acked, rng, proc.pid, ingest_every)).summary()
                       for c in levels]
            lost = await _lost(url, key, acked)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    return {"levels": results, "seeded": len(seeded), "seed_seconds": round(seed_s, 1),
            "acknowledged": len(acked), "lost": lost, "ingest_every": ingest_every, "ingest_items": INGEST_ITEMS,
            "cpus": os.cpu_count()}


async def _lost(url: str, key: str, acked: Sequence[Observation]) -> int:
    """Acknowledged observations whose node the server does not list."""
    by_conversation: dict[str, set[str]] = {}
    for o in acked:
        by_conversation.setdefault(o.conversation_id, set()).add(o.event_id)
    lost = 0
    async with httpx.AsyncClient(base_url=url, timeout=120, headers={"Authorization": f"Bearer {key}"}) as http:
        for conversation, events in by_conversation.items():
            r = await http.get(f"/v1/conversations/{conversation}/nodes")
            have = {n["event_id"] for n in r.json()} if r.status_code == 200 else set()
            lost += len(events - have)
    return lost


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
