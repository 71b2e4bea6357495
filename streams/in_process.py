"""The in-process writer: the whole write path in one process, over any :class:`Stores`, with no
broker and no workers. The embedded deployment writes its SQLite store with it
(:func:`jevmem.wiring.build_embedded`), and distributed replay rebuilds a store generation with it
from the observations topic (:func:`jevmem.distributed.replay`).

``InProcessWriter.ingest`` validates nothing (it takes models); ``ingest_raw`` decodes bytes,
sends anything invalid to the dead-letter sink with its reason, and writes the rest. Each batch
goes through :func:`streams.write_path.write_batch` (the write path both drivers run: seqs ->
nodes -> materialise -> candidates -> relations -> edges -> consolidation, pipelined in chunks).
Writes and forgets are serialised by one lock: seq assignment needs a single writer per
conversation.

A batch that fails permanently (``topology.errors.kind_of``: a refusal such as an embedding
service's 400, a record the stages cannot process) is split until the failing observations are
isolated (:func:`streams.isolation.isolate`); each becomes a dead letter with its reason and the
stage, whatever an attempt stored of it is removed (:func:`streams.write_path.discard`), and the
rest is written in order. Transient errors (an outage) are raised: nothing is dead-lettered.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from streams import forget as forgetting
from streams.forget import ForgetReport
from streams.isolation import Failed, isolate
from streams.write_path import Stores, Written, decode_batch, discard, relinker, since, stored_events, write_batch
from topology import observe
from topology.pipeline import WritePath, dedupe
from topology.schemas import DeadLetter, EdgeEvent, Forget, Observation, Scope, WriteResult
from topology.systemone.port import CountingSystemOne


@dataclass
class IngestReport:
    """What one ingest wrote. ``results`` holds every written node with its edges (when the call
    asked to keep them: memory grows with the call's size); ``conversations`` counts the
    observation nodes written per (tenant, conversation) either way."""

    accepted: int = 0
    new_nodes: int = 0
    edges: int = 0
    decisions: int = 0
    dead_letters: list[DeadLetter] = field(default_factory=list)
    write_calls: int = 0
    consolidation_calls: int = 0
    results: list[WriteResult] = field(default_factory=list)
    forgets: int = 0
    conversations: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: observations that failed permanently, each dead-lettered (also in ``dead_letters``)
    failed: list[Failed[Observation]] = field(default_factory=list)

    def merge(self, other: IngestReport) -> None:
        """Add ``other`` (a later part of the same input) to this report."""
        self.accepted += other.accepted
        self.new_nodes += other.new_nodes
        self.edges += other.edges
        self.decisions += other.decisions
        self.write_calls += other.write_calls
        self.consolidation_calls += other.consolidation_calls
        self.forgets += other.forgets
        self.results += other.results
        self.dead_letters += other.dead_letters
        self.conversations.update(other.conversations)
        self.failed += other.failed


class InProcessWriter:
    """Writes observations and applies forgets to ``stores`` through ``write_path`` (``so`` is its
    counted System One), ``chunk`` events at a time, one write or forget at a time."""

    def __init__(self, stores: Stores, write_path: WritePath, so: CountingSystemOne, chunk: int = 64) -> None:
        self.stores, self.write_path, self.so, self.chunk = stores, write_path, so, max(1, chunk)
        stores.embedder = write_path.embedder  # a forget re-embeds the turn after the forgotten one
        stores.relink = relinker(stores, write_path)  # and links it again
        self._lock = asyncio.Lock()

    async def ingest_raw(self, payloads: Sequence[bytes | str], source: str = "ingest",
                         keep_results: bool = True, offset: int = 0) -> IngestReport:
        """Decode JSON observations and forget records (as on the observations topic, with the
        worker's decoder: :func:`streams.write_path.decode_batch`); invalid ones become dead
        letters (source ``"{source}#{offset + index}"``), valid ones are applied in order: the
        observations before a forget are written, then it is applied, then the rest
        (``keep_results``: as :meth:`ingest`)."""
        good, bad = decode_batch([(raw, f"{source}#{offset + i}") for i, raw in enumerate(payloads)])
        if bad:
            await self.stores.dead_letters.put(bad)
            observe.count("dead_letter", len(bad), "file")
        report = IngestReport()
        for part in forgetting.split_at_forgets(good):
            if isinstance(part, Forget):
                await self.forget(part.scope, part.event_id)
                report.forgets += 1
                continue
            report.merge(await self.ingest(part, keep_results=keep_results, source=source))
        report.dead_letters = bad + report.dead_letters
        return report

    async def ingest(self, observations: Sequence[Observation], on_chunk: Callable[[int], None] | None = None,
                     keep_results: bool = True, source: str = "ingest") -> IngestReport:
        """Write ``observations`` (any number; duplicates of an event are one event).

        An observation that fails permanently is isolated (see the module's docstring): it is in
        the report's ``failed`` and ``dead_letters`` (stored, sourced ``"{source}:{stage}"``) and
        not counted as accepted; the others are written. A transient failure raises.

        They are numbered up front, then written in chunks of ``chunk`` events, pipelined: chunk
        i+1 is embedded (in worker threads, reading no store) while chunk i is typed, materialised
        and linked, so the embedding model and the linking work use both cores. The graph is the
        same as for any other batching (discovery only sees earlier seqs, materialised first).
        ``on_chunk(n)`` is called after each chunk of ``n`` events. An observation without
        ``observed_at`` is observed now (:meth:`Observation.stamped`). Without ``keep_results``
        the report's ``results`` stay empty, so a bulk load of any size holds no per-node results."""
        now = datetime.now(UTC)
        obs = dedupe([o.stamped(now) for o in observations])
        if not obs:
            return IngestReport()
        async with self._lock:
            before = await stored_events(self.stores, obs)
            report = IngestReport()

            async def attempt(part: list[Observation]) -> None:
                # an attempt's counts join the report only when it succeeds: a failed one is redone in halves
                report.merge(await self._write(part, on_chunk, keep_results))

            async def undo(f: Failed[Observation]) -> None:
                await discard(self.stores, f.item, before)

            failed = await isolate(obs, attempt, undo)
            if failed:
                letters = [DeadLetter.of(f.item.model_dump_json(), f.reason, f"{source}:{f.stage or 'write'}",
                                         f.item.tenant_id) for f in failed]
                await self.stores.dead_letters.put(letters)
                observe.count("dead_letter", len(letters), "write")
                report.failed, report.dead_letters = failed, letters
            return report

    async def _write(self, obs: list[Observation], on_chunk: Callable[[int], None] | None,
                     keep_results: bool) -> IngestReport:
        report = IngestReport(accepted=len(obs))
        calls0 = self.so.calls

        def chunk_done(w: Written) -> None:
            report.edges += len(w.edges)
            report.decisions += len(w.decisions)
            report.conversations.update((n.tenant_id, n.conversation_id) for n in w.nodes if n.kind == "observation")
            if keep_results:
                by_node: dict[str, list[EdgeEvent]] = {}
                for e in w.edges:
                    by_node.setdefault(e.target, []).append(e)
                report.results += [WriteResult(node=n.without_embedding(), edges=by_node.get(n.id, []))
                                   for n in w.nodes]
            if on_chunk is not None:
                on_chunk(len(w.nodes))

        # the report is built from the chunks as they complete: the batch's result keeps no records
        w = await write_batch(self.stores, self.write_path, obs, since(lambda: self.so.calls), self.chunk, chunk_done,
                              keep=False)
        report.new_nodes, report.write_calls = w.new, w.write_calls
        report.consolidation_calls = self.so.calls - calls0 - w.write_calls
        return report

    async def forget(self, scope: Scope, event_id: str | None) -> ForgetReport:
        """Forget one observation or the whole conversation (:meth:`Stores.forget`), serialised
        with writes (a forget lands between two batches, never inside one). What the store's
        files kept of the deleted data is purged before this returns (:meth:`Stores.purged`)."""
        async with self._lock:
            report = await self.stores.forget(scope, event_id)
            await self.stores.purged([scope])
            return report

    async def close(self) -> None:
        await self.so.aclose()
        await self.stores.close()
