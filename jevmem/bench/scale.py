"""``jevmem bench scale``: does ingest stay flat as memory grows?

A synthetic, deterministic workload (a seeded generator, no data files): N chat-like
observations over ``conversations`` conversations of ``tenants`` tenants, arriving interleaved
as a multi-tenant stream would (each batch mixes many conversations). The embedded pipeline
ingests them in stream order, every stage on, into a fresh store; the benchmark reports the
ingest rate per tenth of the run, then query latency over the full store, peak RSS and disk use.

``active`` is how many conversations are in flight at once (a finished one is replaced by the
next). A service sees conversations start and end, so with a small ``active`` every tenth of the
run holds the same mix of early and late turns and what changes from tenth to tenth is only the
size of memory: the question this benchmark asks. With ``active == conversations`` every
conversation grows through the whole run, so early tenths are also cheaper because each
conversation is short then (small candidate pools), which conflates the two effects.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import random
import resource
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from jevmem.bench.locomo import percentile
from jevmem.settings import Settings
from jevmem.wiring import build_embedded
from topology.ports import Embedder
from topology.schemas import Observation, Scope

_NAMES = ["Ana", "Ben", "Chloe", "Dev", "Elif", "Farid", "Grace", "Hugo", "Ines", "Jon", "Kemi", "Lior",
          "Maya", "Nils", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tara"]
_PLACES = ["Boston", "Denver", "Lisbon", "Osaka", "Nairobi", "Oslo", "Lima", "Seoul", "Austin", "Porto"]
_THINGS = ["a puppy", "a bike", "a guitar", "a new job", "a garden", "a camera", "a kayak", "a novel", "a cat",
           "a pottery class", "a marathon", "a sourdough starter"]
_TEMPLATES = [
    "I moved to {place} {when}.",
    "We adopted {thing} {when} and named it {name2}.",
    "{name2} told me about {thing} at the cafe.",
    "Did you ever go to {place}?",
    "My favourite thing this month is {thing}.",
    "I started {thing} because {name2} recommended it.",
    "The trip to {place} was cancelled {when}, so I stayed home.",
    "Can you remind me what {name2} said about {place}?",
    "I finished {thing} {when}; it took weeks.",
    "Honestly, {thing} has been the best part of living in {place}.",
]
_WHEN = ["yesterday", "last week", "two days ago", "last Friday", "this morning", "in March", "a month ago"]


def workload(n: int, conversations: int = 1000, tenants: int = 10, seed: int = 7,
             active: int | None = None) -> Iterator[Observation]:
    """``n`` observations in stream order; the same arguments give the same stream. Each
    conversation gets ``n // conversations`` turns (the first ``n % conversations`` one more);
    each step takes the next turn of a random one of the ``active`` conversations in flight
    (default: all of them), and a finished conversation is replaced by the next unstarted one."""
    rng = random.Random(seed)
    lengths = [n // conversations + (1 if c < n % conversations else 0) for c in range(conversations)]
    counters = [0] * conversations
    live = [c for c in range(min(active or conversations, conversations)) if lengths[c]]
    waiting = iter([c for c in range(len(live), conversations) if lengths[c]] if live else [])
    start = datetime(2024, 1, 1, tzinfo=UTC)
    for i in range(n):
        slot = rng.randrange(len(live))
        c = live[slot]
        turn = counters[c]
        counters[c] += 1
        if counters[c] == lengths[c]:
            nxt = next(waiting, None)
            if nxt is None:
                live.pop(slot)
            else:
                live[slot] = nxt
        a, b = _NAMES[c % len(_NAMES)], _NAMES[(c * 7 + 3) % len(_NAMES)]
        text = rng.choice(_TEMPLATES).format(place=rng.choice(_PLACES), thing=rng.choice(_THINGS),
                                            when=rng.choice(_WHEN), name2=rng.choice(_NAMES))
        yield Observation(tenant_id=f"tenant-{c % tenants}", conversation_id=f"conv-{c}", event_id=f"t{turn}",
                          content=text, speaker=a if turn % 2 == 0 else b, role="user",
                          observed_at=start + timedelta(minutes=i))


def questions(n: int = 200, conversations: int = 1000, tenants: int = 10) -> list[tuple[Scope, str]]:
    """The benchmark's ``n`` questions, each of a random conversation of the workload (seeded:
    the same arguments give the same questions)."""
    rng = random.Random(11)
    asked = []
    for _ in range(n):
        c = rng.randrange(conversations)
        asked.append((Scope(tenant_id=f"tenant-{c % tenants}", conversation_id=f"conv-{c}"),
                      f"What did {rng.choice(_NAMES)} say about {rng.choice(_PLACES)}?"))
    return asked


#: Conversations in flight at once unless told otherwise (``jevmem bench scale --active``).
DEFAULT_ACTIVE = 20


def _disk_mb(path: Path) -> float:
    """Allocated size (blocks, as ``du`` counts): the vector engine preallocates sparse files."""
    return round(sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file()) / 2**20, 1)


async def run_scale(settings: Settings, embedder: Embedder, n: int = 100_000, conversations: int = 1000,
                    tenants: int = 10, queries: int = 200, active: int | None = DEFAULT_ACTIVE,
                    progress: Callable[[int, int], None] | None = None,
                    data_dir: Path | None = None) -> dict[str, Any]:
    """Run the benchmark into a fresh temporary store, or into ``data_dir`` (which must be empty
    or absent; the store is kept there, to query or inspect after the run). ``active`` defaults
    to the command's :data:`DEFAULT_ACTIVE`; None puts every conversation in flight."""
    if data_dir is not None and data_dir.exists() and any(data_dir.iterdir()):
        raise ValueError(f"bench scale needs an empty directory, and {data_dir} is not empty")
    stream = workload(n, conversations, tenants, active=active)  # made as it is ingested: not held
    tenth = max(1, n // 10)
    rates: list[float] = []
    rss: list[float | None] = []
    with contextlib.ExitStack() as stack:
        if data_dir is None:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="jevmem-scale-"))
        else:
            data_dir.mkdir(parents=True, exist_ok=True)
            tmp = str(data_dir)
        mem = build_embedded(settings, embedder=embedder, data_dir=tmp)
        try:
            t_all = time.perf_counter()
            for k in range(10):
                part = list(itertools.islice(stream, tenth if k < 9 else n))
                t0 = time.perf_counter()
                await mem.pipeline.ingest(part, keep_results=False)
                rates.append(round(len(part) / (time.perf_counter() - t0), 2))
                rss.append(resident_mb())
                if progress:
                    progress(min(n, (k + 1) * tenth), n)
            total_s = time.perf_counter() - t_all
            asked = questions(queries, conversations, tenants)
            latencies: dict[str, list[float]] = {"cold": [], "warm": []}
            for kind in ("cold", "warm"):  # warm: the same queries again (caches hold them)
                for scope, question in asked:
                    t1 = time.perf_counter()
                    await mem.controller.retrieve(scope, question, top_k=10)
                    latencies[kind].append((time.perf_counter() - t1) * 1000)
            disk = _disk_mb(Path(tmp))
            tables = table_bytes(Path(tmp))
        finally:
            await mem.close()
    return {
        "observations": n, "conversations": conversations, "tenants": tenants, "embedder": embedder.name,
        "active": min(active or conversations, conversations),
        "observations_per_second": round(n / total_s, 2),
        "rate_by_tenth": rates,
        "last_over_first": round(rates[-1] / rates[0], 3) if rates[0] else None,
        "query_ms": {"p50": round(percentile(latencies["cold"], 50), 2), "p95": round(percentile(latencies["cold"], 95), 2),
                     "warm": {"p50": round(percentile(latencies["warm"], 50), 2),
                              "p95": round(percentile(latencies["warm"], 95), 2)}},
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "rss_by_tenth_mb": rss,
        "memory_mb": settings.memory_mb, "memory_plan": dataclasses.asdict(settings.memory(embedder.dim)),
        "disk_mb": disk,
        "disk_bytes_per_observation": round(disk * 2**20 / n),
        "disk_by_table_mb": tables,
    }


def resident_mb() -> float | None:
    """The process's resident memory now (MB; Linux's ``/proc``), None where it cannot be read."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def table_bytes(path: Path) -> dict[str, float]:
    """MB per SQLite table and index (``dbstat``) of every database under ``path``, and per
    top-level directory for what is not SQLite (the vector engine's files)."""
    import sqlite3

    out: dict[str, float] = {}
    for db in sorted(path.rglob("*.sqlite3")):
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            for name, size in conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"):
                key = name if db.name == "memory.sqlite3" else f"{db.name}:{name}"
                out[key] = out.get(key, 0.0) + size / 2**20
        except sqlite3.OperationalError:  # a build without dbstat
            out[db.name] = db.stat().st_size / 2**20
        finally:
            conn.close()
    for d in sorted(p for p in path.iterdir() if p.is_dir()):
        out[f"{d.name}/"] = _disk_mb(d)
    return {k: round(v, 1) for k, v in sorted(out.items(), key=lambda kv: -kv[1]) if v >= 0.05}
