"""The embedded driver: the whole write path in one process, no servers.

``EmbeddedPipeline.ingest`` validates nothing (it takes models); ``ingest_raw`` decodes bytes,
sends anything invalid to the dead-letter sink with its reason, and writes the rest. A batch is
processed in chunks as: seqs -> nodes (1 embedding call, 1 typing request) -> materialise nodes ->
candidates -> relations (1 request) -> edges -> consolidation when a block of writes completes; the
next chunk's embedding runs while the current chunk is linked.
Writes are serialised by one lock: seq assignment needs a single writer per conversation.
``write_batch`` is the write path both drivers run (the Faust agent calls it per micro-batch).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from storage.ports import DeadLetterSink, EdgeStore, LexicalIndex, NodeStore, SeqSource, VectorIndex
from storage.scope_cache import ScopeCache
from streams import forget as forgetting
from streams.forget import ForgetReport
from topology import observe
from topology.errors import InvalidEvent
from topology.pipeline import SeqState, WritePath, assign_seqs, consolidation_runs, dedupe
from topology.ports import LinkMemory
from topology.schemas import (
    CandidateSet,
    ConsolidationDecision,
    DeadLetter,
    EdgeEvent,
    Forget,
    MemoryNode,
    Observation,
    RelationJudgment,
    Scope,
    WriteResult,
    decode_input,
)
from topology.systemone.port import CountingSystemOne


@dataclass
class Stores:
    nodes: NodeStore
    edges: EdgeStore
    vectors: VectorIndex
    lexical: LexicalIndex
    dead_letters: DeadLetterSink

    #: called with every materialised batch once the stores took it (acknowledged, or buffered by a
    #: deferred ``visibility``: sent before the batch is acknowledged, and a failed batch is
    #: retried until written), e.g. the write path's in-memory reader, :class:`storage.scope_cache.ScopeCache`
    listeners: list[Callable[[Sequence[MemoryNode]], Awaitable[None]]] = field(default_factory=list)
    #: called with a scope after a forget deleted some of it (in-memory views drop the scope)
    on_forget: list[Callable[[Scope], Awaitable[None]]] = field(default_factory=list)
    #: the write path's memory of recent links (:class:`storage.scope_cache.ScopeCache`): told
    #: every chunk's nodes and edges, asked for a consolidation window's incoming semantic edges
    links: LinkMemory | None = None
    #: sends every buffered write (``storage.elastic.Visibility.flush``: durable; searchable by
    #: the reads that refresh for it); None: writes are sent when acknowledged (SQLite, a refresh
    #: per Elasticsearch bulk)
    visibility: Callable[[], Awaitable[None]] | None = None
    #: makes the next read of each store see every write any process acknowledged before the call
    #: (``storage.elastic.Visibility.invalidate``); None: every read already does (SQLite)
    invalidate: Callable[[], None] | None = None
    #: where the write path reads seqs (``streams.embedded.number``): the write path's in-memory
    #: conversations once attached, else the node store
    seq_source: SeqSource | None = None

    def attach(self, cache: ScopeCache) -> None:
        """Keep the write path's in-memory conversations (``cache``) in step with these stores:
        told every materialised node and every forget, and asked for recent links."""
        self.listeners.append(cache.add)
        self.on_forget.append(cache.drop)
        self.links = cache
        self.seq_source = cache

    async def sync(self) -> None:
        """Every write made so far is sent and acknowledged (durable) when this returns."""
        if self.visibility is not None:
            await self.visibility()

    def fresh_reads(self) -> None:
        """The next read of each store sees every write acknowledged before this call."""
        if self.invalidate is not None:
            self.invalidate()

    async def materialise(self, nodes: Sequence[MemoryNode]) -> None:
        """Write nodes to every store that candidate discovery and queries read; the node store
        last, so a node that is listed (and counted by seq assignment) is also searchable."""
        await self.vectors.upsert(nodes)
        await self.lexical.upsert(nodes)
        await self.nodes.upsert(nodes)
        for listener in self.listeners:
            await listener(nodes)

    async def forget(self, scope: Scope, event_id: str | None,
                     requested_at: datetime | None = None) -> ForgetReport:
        """Forget one observation (``event_id``) or the whole conversation (None) everywhere: its
        node, derived nodes built from it, edges touching them, decisions referencing them,
        vectors and lexical entries (see :mod:`streams.forget` for the order and the seq rule)."""
        request = Forget(tenant_id=scope.tenant_id, conversation_id=scope.conversation_id, event_id=event_id,
                         requested_at=requested_at or datetime.now(UTC))
        return await forgetting.apply(self, await forgetting.plan(self, request))

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
    forgets: int = 0

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


def dead_letter(original: bytes | str, reason: str, source: str) -> DeadLetter:
    """A bounded dead letter; the tenant is read from the payload when it names one."""
    return DeadLetter.of(original, reason, source)


async def number(nodes: SeqSource, obs: Sequence[Observation]) -> tuple[list[tuple[Observation, int]], int]:
    """Seqs for a deduplicated batch, read from the node store (the authority: a conversation has
    one writer, its partition's owner, and nodes are acknowledged before the input offset is
    committed), and the number of events not stored before. Scopes are read concurrently.

    Forgotten events (``NodeStore.forgotten``) count as known with their old seq, and their seqs
    are reserved: a later event never reuses one, a re-sent forgotten event gets its old seq back."""
    by_scope: dict[Scope, list[str]] = {}
    for o in obs:
        by_scope.setdefault(o.scope, []).append(o.event_id)

    async def read(scope: Scope, event_ids: list[str]) -> tuple[SeqState, dict[str, int]]:
        # the counters first, the batch's own events last: a late write of an earlier attempt of
        # this batch then shows up as known events (whose seqs assign_seqs never hands out again)
        nxt, count, gone = await asyncio.gather(nodes.next_seq(scope), nodes.observation_count(scope),
                                                nodes.forgotten(scope))
        holes = count != nxt or bool(gone)
        state = SeqState.of(count, nxt, await nodes.used_seqs(scope) if holes else None, gone.values())
        seqs = await nodes.seqs(scope, event_ids)
        return state, {**{e: gone[e] for e in event_ids if e in gone}, **seqs}

    known: dict[tuple[str, str, str], int] = {}
    states: dict[Scope, SeqState] = {}
    for scope, (state, seqs) in zip(by_scope, await asyncio.gather(*(read(s, e) for s, e in by_scope.items())),
                                    strict=True):
        states[scope] = state
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

    def merge(self, other: Written) -> None:
        """Add ``other`` (a later chunk of the same batch) to this result."""
        self.nodes += other.nodes
        self.candidates += other.candidates
        self.judgments += other.judgments
        self.edges += other.edges
        self.decisions += other.decisions
        self.links += other.links
        self.derived += other.derived
        self.write_calls += other.write_calls


def _since(calls: Callable[[], int]) -> Callable[[], int]:
    """A counter reading ``calls()`` relative to its value now."""
    start = calls()
    return lambda: calls() - start


async def write_batch(stores: Stores, wp: WritePath, obs: list[Observation],
                      calls: Callable[[], int] | None = None, chunk: int | None = None,
                      on_chunk: Callable[[Written], None] | None = None) -> Written:
    """The whole write path for one deduplicated batch, as both drivers run it: seqs -> nodes ->
    materialise -> candidates -> relations -> edges -> consolidation. Every write is an idempotent
    upsert acknowledged before this returns, so running a batch again (after a crash, or any
    prefix of it) writes the same nodes, seqs and edges. ``calls`` reads the System One request
    counter (to report the write path's share; default: the write path's own counter when its
    System One counts requests). Reports the accepted observations and the write path's System
    One requests per observation to :mod:`topology.observe`.

    The batch is numbered up front (while its first chunk is embedded: the model needs no seq),
    then written in chunks of ``chunk`` events (see :func:`chunk_size`), pipelined: chunk i+1 is
    embedded (worker threads, no store reads) while chunk i is typed, materialised and linked, so
    the model and the linking work overlap. The graph is the same as for any other batching:
    discovery only sees earlier seqs, materialised first.
    ``on_chunk`` gets each chunk's part of the result as it completes."""
    if calls is None:
        so = wp.so
        calls = (lambda: so.calls) if isinstance(so, CountingSystemOne) else (lambda: 0)
    out = Written([], [], [], [], [], [], [], 0, 0)
    if not obs:
        return out
    size = chunk_size(len(obs), chunk)
    parts = [obs[i: i + size] for i in range(0, len(obs), size)]
    ahead: asyncio.Task[list[list[float]]] | None = asyncio.create_task(_vectors(wp, parts[0]))
    try:
        with observe.timed("numbering"):
            numbered, out.new = await number(stores.seq_source or stores.nodes, obs)  # in the order of ``obs``
        chunks = [numbered[i: i + size] for i in range(0, len(numbered), size)]
        for i in range(len(chunks)):
            assert ahead is not None
            vectors = await ahead
            ahead = asyncio.create_task(_vectors(wp, parts[i + 1])) if i + 1 < len(parts) else None
            w = await write_embedded(stores, wp, wp.nodes(chunks[i], vectors), 0, _since(calls))
            out.merge(w)
            if on_chunk is not None:
                on_chunk(w)
    finally:
        if ahead is not None:
            ahead.cancel()
    with observe.timed("store_writes"):
        await stores.sync()  # durable before the batch is acknowledged (readers refresh for it)
    observe.count("accepted", len(obs))
    observe.measure("controller_requests_per_write", out.write_calls / len(obs))
    return out


#: A batch of at least this many events that fits one chunk is written as two, so the second
#: half's embedding overlaps the first half's linking (a Kafka worker's micro-batches are small).
PIPELINE_MIN = 16


def chunk_size(n: int, chunk: int | None) -> int:
    """Events per chunk for a batch of ``n``: ``chunk`` (None: all of them), halved when the
    whole batch would be one chunk of at least :data:`PIPELINE_MIN` events."""
    size = min(chunk or n, n)
    if n >= PIPELINE_MIN and size >= n:
        size = (n + 1) // 2
    return max(1, size)


async def _vectors(wp: WritePath, observations: list[Observation]) -> list[list[float]]:
    with observe.timed("embed"):
        return await wp.vectors(observations)


async def write_embedded(stores: Stores, wp: WritePath, embedded: list[MemoryNode], new: int = 0,
                         calls: Callable[[], int] = lambda: 0) -> Written:
    """:func:`write_batch` from embedded (numbered, not yet typed) nodes on: type -> materialise
    -> candidates -> relations -> edges -> consolidation (each timed as a stage)."""
    with observe.timed("typing"):
        nodes = await wp.type(embedded)
    with observe.timed("store_writes"):
        await stores.materialise(nodes)
    with observe.timed("candidates"):
        csets = await wp.discover(nodes)
    with observe.timed("relations"):
        judgments, edges = await wp.judge(csets)
    with observe.timed("store_writes"):
        await stores.edges.upsert(edges)
    out = Written(nodes, csets, judgments, edges, [], [], [], new, calls())

    if stores.links is not None:
        await stores.links.remember_links(nodes, edges)

    async def neighbours(scope: Scope, ids: Sequence[str]) -> list[EdgeEvent]:
        known = stores.links.incoming(scope, ids) if stores.links is not None else None
        return known if known is not None else await stores.edges.neighbours(scope, ids, ["semantic"], 10_000)

    for scope, run, last in consolidation_runs(nodes, wp.params.consolidate_every):
        with observe.timed("consolidation"):
            found, links, derived = await wp.consolidate(scope, run, last, neighbours)
        if derived:
            built = await wp.build_nodes_from(derived)
            with observe.timed("store_writes"):
                await stores.materialise(built)
            out.derived += built
        with observe.timed("store_writes"):
            await stores.edges.upsert_decisions(found)
            await stores.edges.upsert(links)
        out.decisions += found
        out.links += links
    return out


class EmbeddedPipeline:
    def __init__(self, stores: Stores, write_path: WritePath, so: CountingSystemOne, chunk: int = 64) -> None:
        self.stores, self.write_path, self.so, self.chunk = stores, write_path, so, max(1, chunk)
        self._lock = asyncio.Lock()

    async def ingest_raw(self, payloads: Sequence[bytes | str], source: str = "ingest") -> IngestReport:
        """Decode JSON observations and forget records (as on the observations topic); invalid ones
        become dead letters, valid ones are applied in order: the observations before a forget are
        written, then it is applied, then the rest."""
        good: list[Observation | Forget] = []
        bad: list[DeadLetter] = []
        for i, raw in enumerate(payloads):
            try:
                good.append(decode_input(raw))
            except InvalidEvent as exc:
                bad.append(dead_letter(raw, exc.reason, f"{source}#{i}"))
        if bad:
            await self.stores.dead_letters.put(bad)
            observe.count("dead_letter", len(bad), "file")
        report = IngestReport()
        for part in forgetting.split_at_forgets(good):
            if isinstance(part, Forget):
                await self.forget(part.scope, part.event_id)
                report.forgets += 1
                continue
            report.merge(await self.ingest(part))
        report.dead_letters = bad
        return report

    async def ingest(self, observations: Sequence[Observation],
                     on_chunk: Callable[[int], None] | None = None) -> IngestReport:
        """Write ``observations`` (any number; duplicates of an event are one event).

        They are numbered up front, then written in chunks of ``chunk`` events, pipelined: chunk
        i+1 is embedded (in worker threads, reading no store) while chunk i is typed, materialised
        and linked, so the embedding model and the linking work use both cores. The graph is the
        same as for any other batching (discovery only sees earlier seqs, materialised first).
        ``on_chunk(n)`` is called after each chunk of ``n`` events."""
        obs = dedupe(observations)
        if not obs:
            return IngestReport()
        async with self._lock:
            return await self._write(obs, on_chunk)

    async def _write(self, obs: list[Observation], on_chunk: Callable[[int], None] | None) -> IngestReport:
        report = IngestReport(accepted=len(obs))
        calls0 = self.so.calls

        def chunk_done(w: Written) -> None:
            by_node: dict[str, list[EdgeEvent]] = {}
            for e in w.edges:
                by_node.setdefault(e.target, []).append(e)
            report.results += [WriteResult(node=n.without_embedding(), edges=by_node.get(n.id, [])) for n in w.nodes]
            if on_chunk is not None:
                on_chunk(len(w.nodes))

        w = await write_batch(self.stores, self.write_path, obs, _since(lambda: self.so.calls), self.chunk, chunk_done)
        report.new_nodes, report.edges, report.decisions = w.new, len(w.edges), len(w.decisions)
        report.write_calls = w.write_calls
        report.consolidation_calls = self.so.calls - calls0 - w.write_calls
        return report

    async def forget(self, scope: Scope, event_id: str | None) -> ForgetReport:
        """Forget one observation or the whole conversation (:meth:`Stores.forget`), serialised
        with writes (a forget lands between two batches, never inside one)."""
        async with self._lock:
            return await self.stores.forget(scope, event_id)

    async def close(self) -> None:
        await self.so.aclose()
        await self.stores.close()
