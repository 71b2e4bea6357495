"""What a benchmark run costs, by component: CPU seconds from each process's own accounting
(``/proc/PID/stat``: user + system time of all its threads) and bytes on disk per store.

The servers are the ones of the project's scripts, found through their pid files and data
directories as those scripts name them (``KAFKA_DATA``, ``ES_HOME_DIR`` / ``ES_CACHE`` +
``ES_PORT``, ``QDRANT_DATA`` / ``QDRANT_PORT``), or given as ``role=PID`` pairs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elasticsearch import AsyncElasticsearch

TICKS = os.sysconf("SC_CLK_TCK")
ROLES = ("broker", "elasticsearch", "qdrant")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (every thread); 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14, 15 of stat)


def allocated_bytes(paths: Iterable[Path]) -> int:
    """Bytes allocated on disk (blocks, as ``du`` counts) by every file under ``paths``."""
    total = 0
    for root in paths:
        files = [root] if root.is_file() else root.rglob("*") if root.is_dir() else []
        for p in files:
            try:
                if p.is_file():
                    total += p.stat().st_blocks * 512
            except OSError:  # removed while walking (segment merges, log rolls)
                continue
    return total


def server_dirs() -> tuple[Path, Path, Path]:
    """The data directories of the project's single-node Kafka broker, Elasticsearch node and
    Qdrant server (their pid files live there), as their scripts name them from the environment."""
    env = os.environ
    es_cache = Path(env.get("ES_CACHE", str(Path.home() / ".cache" / "jevmem-es")))
    return (Path(env.get("KAFKA_DATA", "/tmp/jevmem-kafka")),
            Path(env.get("ES_HOME_DIR", str(es_cache / f"node-{env.get('ES_PORT', '9200')}"))),
            Path(env.get("QDRANT_DATA", f"/tmp/jevmem-qdrant-{env.get('QDRANT_PORT', '6333')}")))


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


@dataclass
class Servers:
    """The script-started servers' pids and data directories."""

    pids: dict[str, list[int]] = field(default_factory=dict)
    kafka_logs: Path | None = None
    qdrant_storage: Path | None = None

    @classmethod
    def find(cls, given: Mapping[str, list[int]] | None = None) -> Servers:
        kafka, es_home, qdrant = server_dirs()
        found = {"broker": _pid(kafka / "kafka.pid"), "elasticsearch": _pid(es_home / "es.pid"),
                 "qdrant": _pid(qdrant / "qdrant.pid")}
        pids = {role: [pid] for role, pid in found.items() if pid is not None and cpu_seconds(pid) > 0}
        pids.update(given or {})
        return cls(pids, kafka / "logs", qdrant / "storage")

    def cpu(self) -> dict[str, float]:
        return {role: sum(cpu_seconds(p) for p in self.pids.get(role, [])) for role in ROLES}

    def kafka_bytes(self, topics: Iterable[str]) -> int:
        if self.kafka_logs is None:
            return 0
        names = set(topics)
        return allocated_bytes(p for p in self.kafka_logs.glob("*") if p.name.rsplit("-", 1)[0] in names)

    def qdrant_bytes(self, collection: str) -> int:
        if self.qdrant_storage is None:
            return 0
        return allocated_bytes([self.qdrant_storage / "collections" / collection])


async def elasticsearch_bytes(es: AsyncElasticsearch, prefix: str) -> int:
    """Primary store size of every index of the store generation ``prefix`` (after a flush)."""
    await es.indices.flush(index=f"{prefix}*", allow_no_indices=True)
    rows: Any = await es.cat.indices(index=f"{prefix}*", bytes="b", format="json", h="index,pri.store.size")
    return sum(int(r["pri.store.size"] or 0) for r in rows)


#: Where an Elasticsearch node's time goes: (stats section, counter) pairs of ``_nodes/stats``.
ES_WORK = {"index_ops": ("indexing", "index_total"), "index_ms": ("indexing", "index_time_in_millis"),
           "queries": ("search", "query_total"), "query_ms": ("search", "query_time_in_millis"),
           "fetch_ms": ("search", "fetch_time_in_millis"), "refreshes": ("refresh", "total"),
           "refresh_ms": ("refresh", "total_time_in_millis"), "merge_ms": ("merges", "total_time_in_millis"),
           "flush_ms": ("flush", "total_time_in_millis"), "bulk_ops": ("bulk", "total_operations")}


async def elasticsearch_work(es: AsyncElasticsearch) -> dict[str, int]:
    """The node(s)' cumulative indexing, search, refresh, merge and flush counters (:data:`ES_WORK`)."""
    res: Any = await es.nodes.stats(metric="indices")
    out = dict.fromkeys(ES_WORK, 0)
    for node in res["nodes"].values():
        for name, (section, counter) in ES_WORK.items():
            out[name] += int(node["indices"].get(section, {}).get(counter, 0))
    return out


async def elasticsearch_sizes(es: AsyncElasticsearch, prefix: str) -> dict[str, int]:
    """Primary store bytes of the generation's indices by kind (memories of every tenant together)."""
    rows: Any = await es.cat.indices(index=f"{prefix}*", bytes="b", format="json", h="index,pri.store.size")
    out: dict[str, int] = {}
    for r in rows:
        kind = str(r["index"])[len(prefix):].split("-", 1)[0]
        out[kind] = out.get(kind, 0) + int(r["pri.store.size"] or 0)
    return out


def per_observation(values: Mapping[str, float], n: int, scale: float = 1.0) -> dict[str, float]:
    """Each value divided by ``n`` and multiplied by ``scale`` (e.g. 1000: seconds -> ms), rounded."""
    return {k: round(v * scale / n, 3) for k, v in values.items()}


def worker_stages(lines: Iterable[bytes]) -> dict[str, Any]:
    """Where the workers' time went, from their JSON log lines (``stored``: one per batch, with
    ``observations`` and ``stage_ms``; other lines are skipped): the number of batches, mean
    observations per batch, and each stage's mean milliseconds per batch and per observation."""
    batches, observations, totals = 0, 0, dict[str, float]()
    for line in lines:
        if b'"msg":"stored"' not in line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        batches += 1
        observations += int(rec.get("observations", 0))
        for stage, ms in rec.get("stage_ms", {}).items():
            totals[stage] = totals.get(stage, 0.0) + float(ms)
    if not batches:
        return {"batches": 0}
    return {"batches": batches, "observations_per_batch": round(observations / batches, 2),
            "ms_per_batch": {k: round(v / batches, 2) for k, v in sorted(totals.items())},
            "ms_per_observation": {k: round(v / max(1, observations), 3) for k, v in sorted(totals.items())}}
