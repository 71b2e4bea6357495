"""The embedded driver: the whole write path in one process, no servers.

``EmbeddedPipeline.ingest`` validates nothing (it takes models); ``ingest_raw`` decodes bytes,
sends anything invalid to the dead-letter sink with its reason, and writes the rest. A batch is
processed as: seqs -> nodes (1 embedding call, 1 typing request) -> materialise nodes -> candidates
-> relations (1 request) -> edges -> consolidation when a block of writes completes.
Writes are serialised by one lock: seq assignment needs a single writer per conversation.
``write_batch`` is the write path both drivers run (the Faust agent calls it per micro-batch).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from storage.ports import DeadLetterSink, EdgeStore, LexicalIndex, NodeStore, VectorIndex
from topology.errors import InvalidEvent
from topology.pipeline import SeqState, WritePath, assign_seqs, consolidation_runs, dedupe
from topology.schemas import (
    CandidateSet,
    ConsolidationDecision,
    DeadLetter,
    EdgeEvent,
    MemoryNode,
    Observation,
    RelationJudgment,
    Scope,
    WriteResult,
    decode,
)
from topology.systemone.port import CountingSystemOne


@dataclass
class Stores:
    nodes: NodeStore
    edges: EdgeStore
    vectors: VectorIndex
    lexical: LexicalIndex
    dead_letters: DeadLetterSink

    async def materialise(self, nodes: Sequence[MemoryNode]) -> None:
        """Write nodes to every store that candidate discovery and queries read; the node store
        last, so a node that is listed (and counted by seq assignment) is also searchable."""
        await self.vectors.upsert(nodes)
        await self.lexical.upsert(nodes)
        await self.nodes.upsert(nodes)

    async def close(self) -> None:
        await self.nodes.close()
        await self.edges.close()
        await self.vectors.close()
        await self.lexical.close()


@dataclass
class IngestReport:
    accepted: int = 0
    new_nodes: int = 0
    edges: int = 0
    decisions: int = 0
    dead_letters: list[DeadLetter] = field(default_factory=list)
    write_calls: int = 0
    consolidation_calls: int = 0
    results: list[WriteResult] = field(default_factory=list)


def dead_letter(original: bytes | str, reason: str, source: str) -> DeadLetter:
    raw = original.decode("utf-8", "replace") if isinstance(original, bytes) else original
    return DeadLetter(original=raw, reason=reason, source=source, received_at=datetime.now(UTC))


async def number(nodes: NodeStore, obs: Sequence[Observation]) -> tuple[list[tuple[Observation, int]], int]:
    """Seqs for a deduplicated batch, read from the node store (the authority: a conversation has
    one writer, its partition's owner, and nodes are acknowledged before the input offset is
    committed), and the number of events not stored before."""
    known: dict[tuple[str, str, str], int] = {}
    states: dict[Scope, SeqState] = {}
    for scope in dict.fromkeys(o.scope for o in obs):
        # the counters first, the batch's own events last: a late write of an earlier attempt of
        # this batch then shows up as known events (whose seqs assign_seqs never hands out again)
        nxt, count = await nodes.next_seq(scope), await nodes.observation_count(scope)
        states[scope] = SeqState.of(count, nxt, await nodes.used_seqs(scope) if count != nxt else None)
        seqs = await nodes.seqs(scope, [o.event_id for o in obs if o.scope == scope])
        known.update({(scope.tenant_id, scope.conversation_id, e): s for e, s in seqs.items()})
    numbered = assign_seqs(obs, known, states)
    return numbered, sum(1 for o in obs if (o.tenant_id, o.conversation_id, o.event_id) not in known)


@dataclass
class Written:
    """Everything one batch wrote (what the Faust driver also logs to the output topics)."""

    nodes: list[MemoryNode]
    candidates: list[CandidateSet]
    judgments: list[RelationJudgment]
    edges: list[EdgeEvent]
    decisions: list[ConsolidationDecision]
    links: list[EdgeEvent]
    derived: list[MemoryNode]
    new: int
    write_calls: int


async def write_batch(stores: Stores, wp: WritePath, obs: list[Observation],
                      calls: Callable[[], int] = lambda: 0) -> Written:
    """The whole write path for one deduplicated batch, as both drivers run it: seqs -> nodes ->
    materialise -> candidates -> relations -> edges -> consolidation. Every write is an idempotent
    upsert acknowledged before this returns, so running a batch again (after a crash, or any
    prefix of it) writes the same nodes, seqs and edges. ``calls`` reads the System One request
    counter (to report the write path's share)."""
    numbered, new = await number(stores.nodes, obs)
    nodes = await wp.build_nodes(numbered)
    await stores.materialise(nodes)
    csets, judgments, edges = await wp.link(nodes)
    await stores.edges.upsert(edges)
    out = Written(nodes, csets, judgments, edges, [], [], [], new, calls())

    async def neighbours(scope: Scope, ids: Sequence[str]) -> list[EdgeEvent]:
        return await stores.edges.neighbours(scope, ids, ["semantic"], 10_000)

    for scope, run, last in consolidation_runs(nodes, wp.params.consolidate_every):
        found, links, derived = await wp.consolidate(scope, run, last, neighbours)
        if derived:
            built = await wp.build_nodes_from(derived)
            await stores.materialise(built)
            out.derived += built
        await stores.edges.upsert_decisions(found)
        await stores.edges.upsert(links)
        out.decisions += found
        out.links += links
    return out


class EmbeddedPipeline:
    def __init__(self, stores: Stores, write_path: WritePath, so: CountingSystemOne) -> None:
        self.stores, self.write_path, self.so = stores, write_path, so
        self._lock = asyncio.Lock()

    async def ingest_raw(self, payloads: Sequence[bytes | str], source: str = "ingest") -> IngestReport:
        """Decode JSON observations; invalid ones become dead letters, valid ones are written."""
        good: list[Observation] = []
        bad: list[DeadLetter] = []
        for i, raw in enumerate(payloads):
            try:
                good.append(decode(Observation, raw))
            except InvalidEvent as exc:
                bad.append(dead_letter(raw, exc.reason, f"{source}#{i}"))
        if bad:
            await self.stores.dead_letters.put(bad)
        report = await self.ingest(good)
        report.dead_letters = bad
        return report

    async def ingest(self, observations: Sequence[Observation]) -> IngestReport:
        obs = dedupe(observations)
        if not obs:
            return IngestReport()
        async with self._lock:
            return await self._write(obs)

    async def _write(self, obs: list[Observation]) -> IngestReport:
        calls0 = self.so.calls
        w = await write_batch(self.stores, self.write_path, obs, lambda: self.so.calls - calls0)
        by_node: dict[str, list[EdgeEvent]] = {}
        for e in w.edges:
            by_node.setdefault(e.target, []).append(e)
        return IngestReport(
            accepted=len(obs), new_nodes=w.new, edges=len(w.edges), decisions=len(w.decisions),
            write_calls=w.write_calls, consolidation_calls=self.so.calls - calls0 - w.write_calls,
            results=[WriteResult(node=n.without_embedding(), edges=by_node.get(n.id, []))
                     for n in w.nodes],
        )

    async def close(self) -> None:
        await self.so.aclose()
        await self.stores.close()
