"""Rebuilding memory from the log, and checking that two stores hold the same graph.

Two ways to rebuild into fresh stores:

* from the derived log (memories + edges + consolidation topics): pure materialisation, zero
  System One calls, zero embedding calls;
* by recomputing from the observations topic: the same write path as the first run (so System One
  is asked again), in topic order per conversation, which reproduces the seqs and so the graph.

``verify`` compares node ids and seqs and edge ids (with probabilities) scope by scope.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from streams.embedded import EmbeddedPipeline, Stores
from topology.errors import InvalidEvent
from topology.schemas import ConsolidationDecision, EdgeEvent, MemoryNode, Observation, Scope, decode

CHUNK = 500


@dataclass
class RebuildReport:
    scopes: set[Scope] = field(default_factory=set)
    nodes: int = 0
    edges: int = 0
    decisions: int = 0
    skipped: int = 0
    controller_calls: int = 0


def _chunks(items: Sequence[bytes]) -> Iterable[Sequence[bytes]]:
    for i in range(0, len(items), CHUNK):
        yield items[i: i + CHUNK]


async def rebuild_from_log(stores: Stores, memories: Sequence[bytes], edges: Sequence[bytes],
                           decisions: Sequence[bytes]) -> RebuildReport:
    """Materialise logged nodes, edges and decisions (idempotent upserts; later records win)."""
    report = RebuildReport()
    for part in _chunks(memories):
        nodes = [decode(MemoryNode, v) for v in part]
        await stores.materialise(nodes)
        report.nodes += len(nodes)
        report.scopes.update(n.scope for n in nodes)
    for part in _chunks(edges):
        found = [decode(EdgeEvent, v) for v in part]
        await stores.edges.upsert(found)
        report.edges += len(found)
    for part in _chunks(decisions):
        ds = [decode(ConsolidationDecision, v) for v in part]
        await stores.edges.upsert_decisions(ds)
        report.decisions += len(ds)
    return report


async def recompute(pipeline: EmbeddedPipeline, observations: Sequence[bytes], batch: int = 64) -> RebuildReport:
    """Run the write path again over logged observations (invalid ones were dead-lettered the
    first time and are skipped)."""
    report = RebuildReport()
    valid: list[Observation] = []
    for raw in observations:
        try:
            valid.append(decode(Observation, raw))
        except InvalidEvent:
            report.skipped += 1
    calls0 = pipeline.so.calls
    for i in range(0, len(valid), batch):
        rep = await pipeline.ingest(valid[i: i + batch])
        report.nodes += rep.new_nodes
        report.edges += rep.edges
    report.scopes.update(o.scope for o in valid)
    report.controller_calls = pipeline.so.calls - calls0
    return report


@dataclass(frozen=True)
class Graph:
    nodes: tuple[tuple[str, int], ...]
    edges: tuple[tuple[str, str, str, str, str, float], ...]


async def graph_of(stores: Stores, scope: Scope) -> Graph:
    nodes = tuple(sorted((n.id, n.seq) for n in await stores.nodes.scan(scope)))
    edges = tuple(sorted((e.id, e.view, e.source, e.target, e.label, round(e.probability, 4))
                         for e in await stores.edges.scan(scope)))
    return Graph(nodes, edges)


async def verify(a: Stores, b: Stores, scopes: Iterable[Scope]) -> list[str]:
    """Differences between the graphs of ``a`` and ``b`` (empty when identical)."""
    problems = []
    for scope in sorted(scopes, key=lambda s: s.key):
        ga, gb = await graph_of(a, scope), await graph_of(b, scope)
        if ga.nodes != gb.nodes:
            problems.append(f"{scope.key}: nodes differ ({len(ga.nodes)} vs {len(gb.nodes)}; "
                            f"{len(set(ga.nodes) ^ set(gb.nodes))} not shared)")
        if ga.edges != gb.edges:
            problems.append(f"{scope.key}: edges differ ({len(ga.edges)} vs {len(gb.edges)}; "
                            f"{len(set(ga.edges) ^ set(gb.edges))} not shared)")
    return problems
