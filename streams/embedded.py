"""The embedded driver: the whole write path in one process, no servers.

``EmbeddedPipeline.ingest`` validates nothing (it takes models); ``ingest_raw`` decodes bytes,
sends anything invalid to the dead-letter sink with its reason, and writes the rest. A batch is
processed in chunks as: seqs -> nodes (1 embedding call, 1 typing request) -> materialise nodes ->
candidates -> relations (1 request) -> edges -> consolidation when a block of writes completes; the
next chunk's embedding runs while the current chunk is linked.
Writes are serialised by one lock: seq assignment needs a single writer per conversation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from storage.ports import DeadLetterSink, EdgeStore, LexicalIndex, NodeStore, VectorIndex
from topology.errors import InvalidEvent
from topology.pipeline import WritePath, assign_seqs, consolidation_runs, dedupe
from topology.schemas import DeadLetter, EdgeEvent, MemoryNode, Observation, Scope, WriteResult, decode
from topology.systemone.port import CountingSystemOne


@dataclass
class Stores:
    nodes: NodeStore
    edges: EdgeStore
    vectors: VectorIndex
    lexical: LexicalIndex
    dead_letters: DeadLetterSink

    async def materialise(self, nodes: Sequence[MemoryNode]) -> None:
        """Write nodes to every store that candidate discovery and queries read."""
        await self.nodes.upsert(nodes)
        await self.vectors.upsert(nodes)
        await self.lexical.upsert(nodes)

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


class EmbeddedPipeline:
    def __init__(self, stores: Stores, write_path: WritePath, so: CountingSystemOne, chunk: int = 64) -> None:
        self.stores, self.write_path, self.so, self.chunk = stores, write_path, so, max(1, chunk)
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

    async def ingest(self, observations: Sequence[Observation],
                     on_chunk: Callable[[int], None] | None = None) -> IngestReport:
        """Write ``observations`` (any number; duplicates of an event are one event).

        They are written in chunks of ``chunk`` events, pipelined: chunk i+1 is embedded (in
        worker threads, reading no store) while chunk i is typed, materialised and linked, so the
        embedding model and the linking work use both cores. The graph is the same as for any
        other batching (seqs are assigned up front; discovery only sees earlier seqs, which are
        materialised first). ``on_chunk(n)`` is called after each chunk of ``n`` events."""
        obs = dedupe(observations)
        if not obs:
            return IngestReport()
        async with self._lock:
            return await self._write(obs, on_chunk)

    async def _number(self, obs: list[Observation]) -> tuple[list[tuple[Observation, int]], set[tuple[str, str, str]]]:
        nodes = self.stores.nodes
        known: dict[tuple[str, str, str], int] = {}
        next_seq: dict[Scope, int] = {}
        by_scope: dict[Scope, list[str]] = {}
        for o in obs:
            by_scope.setdefault(o.scope, []).append(o.event_id)
        for scope, event_ids in by_scope.items():
            seqs = await nodes.seqs(scope, event_ids)
            known.update({(scope.tenant_id, scope.conversation_id, e): s for e, s in seqs.items()})
            next_seq[scope] = await nodes.next_seq(scope)
        return assign_seqs(obs, known, next_seq), set(known)

    async def _write(self, obs: list[Observation], on_chunk: Callable[[int], None] | None) -> IngestReport:
        numbered, known = await self._number(obs)
        chunks = [numbered[i: i + self.chunk] for i in range(0, len(numbered), self.chunk)]
        report = IngestReport(accepted=len(obs), new_nodes=sum(
            1 for o in obs if (o.tenant_id, o.conversation_id, o.event_id) not in known))
        ahead: asyncio.Task[list[MemoryNode]] | None = asyncio.create_task(self.write_path.embed(chunks[0]))
        try:
            for i in range(len(chunks)):
                assert ahead is not None
                embedded = await ahead
                ahead = asyncio.create_task(self.write_path.embed(chunks[i + 1])) if i + 1 < len(chunks) else None
                await self._link(embedded, report)
                if on_chunk is not None:
                    on_chunk(len(chunks[i]))
        finally:
            if ahead is not None:
                ahead.cancel()
        return report

    async def _link(self, embedded: list[MemoryNode], report: IngestReport) -> None:
        """Type, materialise, link and consolidate one chunk of embedded nodes."""
        stores, wp = self.stores, self.write_path
        calls0 = self.so.calls
        nodes = await wp.type(embedded)
        await stores.materialise(nodes)
        _, _, edges = await wp.link(nodes)
        await stores.edges.upsert(edges)
        report.write_calls += self.so.calls - calls0
        calls1 = self.so.calls
        for scope, run, last in consolidation_runs(nodes, wp.params.consolidate_every):
            found, links, derived = await wp.consolidate(scope, run, last, self._neighbours)
            if derived:
                await stores.materialise(await wp.build_nodes_from(derived))
            await stores.edges.upsert_decisions(found)
            await stores.edges.upsert(links)
            report.decisions += len(found)
        report.consolidation_calls += self.so.calls - calls1
        report.edges += len(edges)
        by_node: dict[str, list[EdgeEvent]] = {}
        for e in edges:
            by_node.setdefault(e.target, []).append(e)
        report.results += [WriteResult(node=n.without_embedding(), edges=by_node.get(n.id, [])) for n in nodes]

    async def _neighbours(self, scope: Scope, ids: Sequence[str]) -> list[EdgeEvent]:
        return await self.stores.edges.neighbours(scope, ids, ["semantic"], 10_000)

    async def close(self) -> None:
        await self.so.aclose()
        await self.stores.close()
