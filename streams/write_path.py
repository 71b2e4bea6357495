"""The write path's driver, shared by both deployments: numbering, the stages, the stores.

:func:`write_batch` runs the whole write path for one deduplicated batch of observations, as the
in-process writer (:mod:`streams.in_process`) and the Faust agent (:mod:`streams.faust_app`) both do:
seqs (:func:`number`) -> nodes (embedding, typing) -> materialise -> candidates -> relations ->
edges -> consolidation, in pipelined chunks (:func:`write_chunk`), and returns what it wrote
(:class:`Written`). :class:`Stores` are the stores it writes, with the in-memory views kept in step
with them and the forget that deletes from all of them (:mod:`streams.forget`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import orjson

from storage.ports import DeadLetterSink, EdgeStore, LexicalIndex, NodeStore, SeqSource, VectorIndex
from storage.scope_cache import ScopeCache
from streams import forget as forgetting
from streams.forget import ForgetReport
from topology import observe
from topology.errors import InvalidEvent
from topology.pipeline import SeqState, WritePath, assign_seqs, consolidation_runs, dedupe
from topology.ports import Embedder, LinkMemory
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
    decode_input,
)
from topology.stages import context, memory_nodes


@dataclass
class Stores:
    """The stores a deployment writes (and its queries read), and the in-memory views of them
    that the write path keeps in step: told every materialised batch, every forget, and every
    change of the conversations this process owns."""

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
    #: sends every buffered write (``storage.elastic.store.Visibility.flush``: durable; searchable by
    #: the reads that refresh for it); None: writes are sent when acknowledged (SQLite, a refresh
    #: per Elasticsearch bulk)
    visibility: Callable[[], Awaitable[None]] | None = None
    #: makes the next read of each store see every write any process acknowledged before the call
    #: (``storage.elastic.store.Visibility.invalidate``); None: every read already does (SQLite)
    invalidate: Callable[[], None] | None = None
    #: starts refreshing, in the background, what a request of the tenant reads
    #: (``storage.elastic.store.Visibility.ahead``), so that its reads wait less; None: nothing to start
    refresh_ahead: Callable[[str], None] | None = None
    #: where the write path reads seqs (:func:`number`): the write path's in-memory
    #: conversations once attached, else the node store
    seq_source: SeqSource | None = None
    #: called when the conversations this process writes may have changed hands (a Faust
    #: rebalance): in-memory views drop everything and reload from the stores on use
    on_reassign: list[Callable[[], None]] = field(default_factory=list)
    #: after forgets of these scopes deleted what they name: removes what the stores keep of the
    #: deleted data in their files (``storage.purge``: SQLite's write-ahead log and FTS5 segments,
    #: Elasticsearch's deleted documents), before a forget is reported applied; None: nothing kept
    purge: Callable[[Sequence[Scope]], Awaitable[None]] | None = None
    #: the model that re-embeds the observation after a forgotten one (read after it:
    #: ``streams.forget.reembed_next``), set by the driver that writes these stores; None: a
    #: forget does not re-embed (a rebuild from the derived log, which logged the rewritten node)
    embedder: Embedder | None = None
    #: how a forget links the re-embedded observation again (:func:`relinker`), set with
    #: ``embedder``; None: it keeps the edges it has, less those to the forgotten turn
    relink: forgetting.Relink | None = None

    def attach(self, cache: ScopeCache) -> None:
        """Keep the write path's in-memory conversations (``cache``) in step with these stores:
        told every materialised node, every forget and every reassignment, and asked for seqs
        and recent links."""
        self.listeners.append(cache.add)
        self.on_forget.append(cache.drop)
        self.on_reassign.append(cache.clear)
        self.links = cache
        self.seq_source = cache

    def reassigned(self) -> None:
        """Another process may have written the conversations this one writes: every in-memory
        view forgets them (``on_reassign``), and the next read of each store sees every write
        acknowledged before this call (:meth:`fresh_reads`)."""
        for drop in self.on_reassign:
            drop()
        self.fresh_reads()

    async def sync(self) -> None:
        """Every write made so far is sent and acknowledged (durable) when this returns."""
        if self.visibility is not None:
            await self.visibility()

    def fresh_reads(self, tenant_id: str | None = None) -> None:
        """The next read of each store sees every write acknowledged before this call; with
        ``tenant_id`` (a request of that tenant), what its reads need starts now (``refresh_ahead``)."""
        if self.invalidate is not None:
            self.invalidate()
        if tenant_id is not None and self.refresh_ahead is not None:
            self.refresh_ahead(tenant_id)

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
        return await forgetting.apply(self, await forgetting.plan(self, request), embedder=self.embedder,
                                      relink=self.relink)

    async def purged(self, scopes: Sequence[Scope]) -> None:
        """Call :attr:`purge` for forgets of ``scopes`` (none: nothing to do)."""
        if self.purge is not None and scopes:
            await self.purge(scopes)

    async def close(self) -> None:
        """Close every store; the node store last (an embedded one holds the directory's lock)."""
        await self.edges.close()
        await self.vectors.close()
        await self.lexical.close()
        await self.nodes.close()


def dead_letter(original: bytes | str, reason: str, source: str) -> DeadLetter:
    """A bounded dead letter; the tenant is read from the payload when it names one."""
    return DeadLetter.of(original, reason, source)


EventKey = tuple[str, str, str]
#: A raw record: bytes, a text, or the JSON object it was opened to.
R = TypeVar("R", bound=bytes | str | dict[str, Any])


def decode_batch(values: Sequence[tuple[R, str]], timestamps: Sequence[float] | None = None,
                 origins: dict[EventKey, tuple[R, str]] | None = None,
                 ) -> tuple[list[Observation | Forget], list[DeadLetter]]:
    """The one decoder of raw observations-topic records (the Faust worker's batches, the
    in-process writer's raw input): observations and forgets of a batch in order (between two
    forgets, the first copy of each event id is kept, see ``dedupe``; a copy after a forget is a
    new request) and a dead letter for every value that does not decode; ``values`` are (bytes, a
    text, or the JSON object they were opened to; the source a dead letter names, e.g.
    "topic:partition:offset"). An observation without ``observed_at`` (from a producer other than ours, which stamps them) is
    observed at its record's timestamp (``timestamps``, seconds: in the log, so a replay sees the
    same). ``origins``, when given, gets each observation's first record (value, source) by
    (tenant, conversation, event id): what a dead letter of it carries (a record's own bytes; a
    sealed record as it was opened, which an operator can read)."""
    good: list[Observation | Forget] = []
    letters: list[DeadLetter] = []
    for i, (value, source) in enumerate(values):
        try:
            item = decode_input(value)
            if isinstance(item, Observation) and timestamps is not None:
                item = item.stamped(datetime.fromtimestamp(timestamps[i], UTC))
            if isinstance(item, Observation) and origins is not None:
                origins.setdefault((item.tenant_id, item.conversation_id, item.event_id), (value, source))
            good.append(item)
        except InvalidEvent as exc:
            letters.append(dead_letter(orjson.dumps(value) if isinstance(value, dict) else value, exc.reason, source))
    out: list[Observation | Forget] = []
    for part in forgetting.split_at_forgets(good):
        out += [part] if isinstance(part, Forget) else dedupe(part)
    return out, letters



async def stored_events(stores: Stores, obs: Sequence[Observation]) -> set[EventKey]:
    """The (tenant, conversation, event id) of those of ``obs`` already stored (one read per
    conversation, from the write path's in-memory conversations when attached)."""
    source = stores.seq_source or stores.nodes
    by_scope: dict[Scope, list[str]] = {}
    for o in obs:
        by_scope.setdefault(o.scope, []).append(o.event_id)
    found = await asyncio.gather(*(source.seqs(scope, ids) for scope, ids in by_scope.items()))
    return {(s.tenant_id, s.conversation_id, e) for s, seqs in zip(by_scope, found, strict=True) for e in seqs}


def relinker(stores: Stores, wp: WritePath) -> forgetting.Relink:
    """Link stored nodes again as :func:`write_chunk` links new ones (candidates, one relation
    request, rule edges; no consolidation), remembered by the in-memory views; returns the edges
    (the caller writes them)."""

    async def relink(nodes: Sequence[MemoryNode]) -> list[EdgeEvent]:
        csets = await wp.discover(nodes)
        _, edges = await wp.judge(csets)
        if stores.links is not None:
            await stores.links.remember_links(list(nodes), edges)
        return edges

    return relink


async def discard(stores: Stores, obs: Observation, before: set[EventKey]) -> bool:
    """Remove what failed attempts wrote of ``obs``, a record isolated as failing permanently
    after its node was stored (e.g. refused at the relation stage): forgotten like a deleted
    event (its seq stays reserved, so later records keep theirs, and sending the event again
    brings it back at its place). Nothing is removed when the event was stored ``before`` the
    batch (:func:`stored_events`: an accepted copy is never lost to a failing one) or when no
    attempt stored it (a failure before materialising, e.g. the embedding). True when removed."""
    key = (obs.tenant_id, obs.conversation_id, obs.event_id)
    source = stores.seq_source or stores.nodes
    if key in before or obs.event_id not in await source.seqs(obs.scope, [obs.event_id]):
        return False
    await stores.forget(obs.scope, obs.event_id)
    return True


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

    def merge(self, other: Written, keep: bool = True) -> None:
        """Add ``other`` (a later chunk of the same batch) to this result: its records too, unless
        not ``keep`` (then only its count of write-path requests)."""
        self.write_calls += other.write_calls
        if not keep:
            return
        self.nodes += other.nodes
        self.candidates += other.candidates
        self.judgments += other.judgments
        self.edges += other.edges
        self.decisions += other.decisions
        self.links += other.links
        self.derived += other.derived


def since(calls: Callable[[], int]) -> Callable[[], int]:
    """A counter reading ``calls()`` relative to its value now."""
    start = calls()
    return lambda: calls() - start


async def write_batch(stores: Stores, wp: WritePath, obs: list[Observation],
                      calls: Callable[[], int] | None = None, chunk: int | None = None,
                      on_chunk: Callable[[Written], None] | None = None, keep: bool = True) -> Written:
    """The whole write path for one deduplicated batch, as both drivers run it: seqs -> nodes ->
    materialise -> candidates -> relations -> edges -> consolidation. Every write is an idempotent
    upsert acknowledged before this returns, so running a batch again (after a crash, or any
    prefix of it) writes the same nodes, seqs and edges. ``calls`` reads the System One request
    counter (to report the write path's share; default: the write path's own System One's
    count). Reports the accepted observations and the write path's System
    One requests per observation to :mod:`topology.observe`.

    The batch is numbered up front, then written in chunks of ``chunk`` events (see
    :func:`chunk_size`), pipelined: while chunk i is typed, materialised and linked, chunk i+1 is
    embedded (worker threads) and chunk i+2 waits for the model (:data:`EMBED_AHEAD`), so the
    model goes from one chunk to the next without waiting for the event loop. Each turn is embedded
    after the latest earlier observation of its conversation (``WritePath.embed``: found in the
    numbered batch, or stored by an earlier batch), so the vectors, and the graph (discovery only
    sees earlier seqs, materialised first), are the same as for any other batching.
    ``on_chunk`` gets each chunk's part of the result as it completes. Without ``keep`` the
    result holds no records (the count of new nodes and of write-path requests only), so a batch
    of any size holds at most three chunks' records at a time."""
    if calls is None:
        so = wp.so
        calls = lambda: so.calls  # noqa: E731
    out = Written([], [], [], [], [], [], [], 0, 0)
    if not obs:
        return out
    size = chunk_size(len(obs), chunk)
    with observe.timed("numbering"):
        numbered, out.new = await number(stores.seq_source or stores.nodes, obs)  # in the order of ``obs``
    batch = context.Numbered(numbered)
    chunks = [numbered[i: i + size] for i in range(0, len(numbered), size)]
    ahead: deque[asyncio.Task[list[MemoryNode]]] = deque()

    async def embed_ahead() -> None:
        # keep EMBED_AHEAD chunks handed to the model; a yield lets each new task prepare its
        # inputs and queue for the model before this coroutine goes on linking
        started = len(ahead)
        while len(ahead) < EMBED_AHEAD and (k := done + len(ahead)) < len(chunks):
            ahead.append(asyncio.create_task(_embedded(wp, chunks[k], batch)))
        if len(ahead) > started:
            await asyncio.sleep(0)

    await wp.prepare()  # what the linking reads from the model, before any chunk is handed to it
    done = 0
    try:
        await embed_ahead()
        while ahead:
            embedded = await ahead.popleft()
            done += 1
            await embed_ahead()
            w = await write_chunk(stores, wp, embedded, since(calls))
            out.merge(w, keep)
            if on_chunk is not None:
                on_chunk(w)
    finally:
        for task in ahead:
            task.cancel()
    with observe.timed("store_writes"):
        await stores.sync()  # durable before the batch is acknowledged (readers refresh for it)
    observe.count("accepted", len(obs))
    observe.measure("controller_requests_per_write", out.write_calls / len(obs))
    return out


#: Chunks of a batch handed to the model at a time: the next one waits for the model while one is
#: embedded, so the model goes on to it without waiting for the event loop.
EMBED_AHEAD = 2

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


async def _embedded(wp: WritePath, numbered: list[tuple[Observation, int]], batch: context.Numbered) -> list[MemoryNode]:
    nodes = [memory_nodes.describe(o, s) for o, s in numbered]
    with observe.timed("embed"):
        return await wp.embed(nodes, batch)


async def write_chunk(stores: Stores, wp: WritePath, embedded: list[MemoryNode],
                      calls: Callable[[], int] = lambda: 0) -> Written:
    """One chunk of :func:`write_batch`, from numbered nodes that carry their embeddings (not
    yet typed) on: type -> materialise -> candidates -> relations -> edges -> consolidation (each
    timed as a stage). ``calls()`` is the chunk's System One requests when it returns; the
    result's ``new`` is 0 (the batch counts new events once, when numbering)."""
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
    out = Written(nodes, csets, judgments, edges, [], [], [], 0, calls())

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


