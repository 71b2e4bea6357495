"""The write path over ports: the stages both drivers (embedded, Faust) run, and seq assignment.

:class:`WritePath` holds what the stages need (embedder, System One, the read-your-writes
reader, parameters) and offers one method per stage: numbered, described observations ->
:meth:`~WritePath.embed` -> :meth:`~WritePath.type` -> (the driver materialises them) ->
:meth:`~WritePath.discover` -> :meth:`~WritePath.judge` -> (the driver writes the edges) ->
:meth:`~WritePath.consolidate`. The driver that sequences them, numbers the batch and writes to the
stores is :func:`streams.write_path.write_batch`.

The pure pieces live here too: :func:`dedupe` (one event per id), :func:`assign_seqs` (idempotent
numbering: a redelivered event keeps its seq) and :func:`consolidation_runs`. Discovery only ever
looks at earlier seqs, so the graph does not depend on batching.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from topology.params import Params
from topology.ports import Embedder, MemoryReader
from topology.schemas import (
    CandidateFeatures,
    CandidateSet,
    ConsolidationDecision,
    EdgeEvent,
    MemoryNode,
    Observation,
    RelationJudgment,
    Scope,
)
from topology.stages import candidates, consolidation, context, memory_nodes, relations, updates
from topology.systemone.attribute_model import AttributeModel
from topology.systemone.attributes import AttributeSpace, before_rows
from topology.systemone.port import CountingSystemOne
from topology.systemone.update_model import attributes_embedder


def dedupe(observations: Sequence[Observation]) -> list[Observation]:
    """First occurrence of each (tenant, conversation, event_id), order kept.

    An event id names one event: a second copy in the same batch is the same event delivered
    twice (a producer retry, an at-least-once redelivery), so it is dropped on purpose; it would
    map to the same node id anyway. (A copy in a later batch is a redelivery: it keeps its seq.)"""
    seen: dict[tuple[str, str, str], Observation] = {}
    for o in observations:
        seen.setdefault((o.tenant_id, o.conversation_id, o.event_id), o)
    return list(seen.values())


@dataclass(frozen=True)
class SeqState:
    """A scope's stored observation seqs, as seq assignment needs them: ``next`` is one past the
    largest, ``free`` the unused seqs below it, ascending (holes left by a batch that was only
    partly written before a crash)."""

    next: int = 0
    free: tuple[int, ...] = ()

    @staticmethod
    def of(count: int, next_seq: int, used: Iterable[int] | None = None, reserved: Iterable[int] = ()) -> SeqState:
        """From the store's observation ``count`` and ``next_seq``; ``used`` (every stored seq) is
        needed only when there are holes (``count != next_seq``) or ``reserved`` seqs, and is then
        required. ``reserved`` are forgotten events' seqs: never free, and ``next`` is past them
        (a forgotten seq is not handed to a later event, see ``streams.forget``)."""
        kept = set(reserved)
        if count == next_seq and not kept:
            return SeqState(next_seq)
        if used is None:
            raise ValueError(f"{next_seq - count} holes below {next_seq}: the used seqs are needed")
        top = max(next_seq, max(kept, default=-1) + 1)
        return SeqState(top, tuple(sorted(set(range(top)) - set(used) - kept)))


def assign_seqs(observations: Sequence[Observation], known: Mapping[tuple[str, str, str], int],
                states: Mapping[Scope, SeqState]) -> list[tuple[Observation, int]]:
    """Number a batch: an event already stored keeps its seq (``known``); new events take the
    lowest free seqs of their scope in arrival order (holes first, then ``next`` onwards).

    Why holes first: a batch numbers its new events in offset order; if a crash left only some of
    them written, redelivery (which resumes at or before that batch, in the same order) gives the
    missing events exactly the seqs they had, because those are the holes, ascending. So seqs
    stay ``0..n-1`` and a conversation's graph does not depend on where a worker died.
    A seq held by a known event of the batch is never drawn for a new one: ``states`` may be read
    *before* ``known`` (see ``streams.write_path.number``), so a write of this same batch that lands
    late (a request that timed out but was applied afterwards) cannot make two events share a seq.
    Forgotten events: the caller passes them in ``known`` (a re-sent forgotten event gets its old
    seq back) and their seqs as ``SeqState.of(..., reserved=...)`` (never drawn for a new event).
    Contract: ``observations`` holds each (tenant, conversation, event_id) once (see ``dedupe``).
    """
    taken: dict[Scope, set[int]] = {}
    for o in observations:
        seq = known.get((o.tenant_id, o.conversation_id, o.event_id))
        if seq is not None:
            taken.setdefault(o.scope, set()).add(seq)
    free = {scope: list(st.free) for scope, st in states.items()}
    nxt = {scope: st.next for scope, st in states.items()}

    def draw(scope: Scope) -> int:
        holes = free.setdefault(scope, [])
        while holes:
            seq = holes.pop(0)
            if seq not in taken.get(scope, ()):
                return seq
        while True:
            seq = nxt.get(scope, 0)
            nxt[scope] = seq + 1
            if seq not in taken.get(scope, ()):
                return seq

    out: list[tuple[Observation, int]] = []
    for o in observations:
        key = (o.tenant_id, o.conversation_id, o.event_id)
        out.append((o, known[key] if key in known else draw(o.scope)))
    return out


async def stored_before(reader: MemoryReader, scope: Scope, seq: int) -> MemoryNode | None:
    """The latest observation of ``scope`` that ``reader`` holds before ``seq``, or None."""
    ids = await reader.preceding(scope, seq, 1)
    got = await reader.get_nodes(scope, ids) if ids else []
    return got[0] if got else None


def consolidation_runs(nodes: Sequence[MemoryNode], every: int) -> list[tuple[Scope, int, int]]:
    """(scope, run, last seq) for every node whose seq completes a block of ``every`` writes."""
    return [(n.scope, (n.seq + 1) // every, n.seq) for n in nodes
            if n.kind == "observation" and consolidation.due(n.seq + 1, every)]


class WritePath:
    """The write-path stages over ports. ``so`` counts its requests (its ``calls`` are what the
    driver reports as the write path's controller requests)."""

    def __init__(self, embedder: Embedder, so: CountingSystemOne, reader: MemoryReader, params: Params,
                 summariser: consolidation.Summariser | None = None, facts: updates.SpeakerFacts | None = None,
                 attribute_model: AttributeModel | None = None) -> None:
        self.embedder, self.so, self.reader, self.params = embedder, so, reader, params
        #: the learned attribute model the linking reads with (None: the one shipped for the embedder)
        self.attribute_model = attribute_model
        self.summariser = summariser
        #: earlier memories of a speaker across the user's conversations (the update question's
        #: bounded candidates, :mod:`topology.stages.updates`); None: the candidates alone
        self.facts = facts
        self._space: tuple[AttributeSpace | None] | None = None

    async def prepare(self) -> None:
        """Embed what the linking reads from the model once per process (the attribute space),
        so that a batch asks for it before its chunks are handed to the model: asked for by the
        first chunk's linking, it would queue behind the chunks ahead."""
        await self.attribute_space()

    async def attribute_space(self) -> AttributeSpace | None:
        """The embedder's :class:`~topology.systemone.attributes.AttributeSpace` (embedded on
        first use, off the event loop), or None for an embedder other than the one the shipped
        update judge read attributes with (:func:`~topology.systemone.update_model.attributes_embedder`):
        under another model the similarities mean something else, so the update question's
        states say "unknown" and its candidates are searched by the statements' own vectors."""
        if self._space is None:
            self._space = ((await asyncio.to_thread(AttributeSpace.of, self.embedder, self.attribute_model)
                            if self.embedder.name == attributes_embedder() else None),)
        return self._space[0]

    async def build_nodes(self, numbered: Sequence[tuple[Observation, int]]) -> list[MemoryNode]:
        """Describe, embed (:meth:`embed`) and type (one embedding call, one typing request)."""
        return await self.type(await self.embed([memory_nodes.describe(o, s) for o, s in numbered]))

    async def embed(self, nodes: Sequence[MemoryNode], batch: context.Numbered | None = None) -> list[MemoryNode]:
        """Numbered, described nodes with their embeddings (one embedding call, off the event
        loop; :mod:`topology.stages.context`): each observation read after the latest earlier
        observation of its conversation, found among ``nodes`` and ``batch`` (the whole batch
        being written, numbered) or else read (earlier batches are materialised first), when
        both are of one sitting. A node is read after the same turn however the batch was cut,
        so the vectors do not depend on batching."""
        found = context.latest_before(nodes)
        for n in nodes:
            if batch is not None and context.needs_store(n, found.get(n.id)) and \
                    (best := context.later(found.get(n.id), batch.before(n))) is not None:
                found[n.id] = best
        wanted = [n for n in nodes if context.needs_store(n, found.get(n.id))]
        for n, stored in zip(wanted, await asyncio.gather(*(self.stored_before(n.scope, n.seq) for n in wanted)),
                             strict=True):
            if (best := context.later(found.get(n.id), stored)) is not None:
                found[n.id] = best
        return await context.embed(nodes, found, self.embedder)

    async def stored_before(self, scope: Scope, seq: int) -> MemoryNode | None:
        """The latest stored observation of ``scope`` before ``seq``, or None."""
        return await stored_before(self.reader, scope, seq)

    async def type(self, nodes: Sequence[MemoryNode]) -> list[MemoryNode]:
        """Type embedded nodes (one request): the other half of :meth:`build_nodes`."""
        return await memory_nodes.type_only(nodes, self.so)

    async def build_nodes_from(self, derived: Sequence[MemoryNode]) -> list[MemoryNode]:
        """Embed and type System-Two-derived nodes (one embedding call, one typing request)."""
        return await memory_nodes.type_nodes(derived, self.embedder, self.so)

    async def discover(self, nodes: Sequence[MemoryNode]) -> list[CandidateSet]:
        """Candidate sets for (already materialised) observation nodes, in (scope, seq) order."""
        ordered = sorted((n for n in nodes if n.kind == "observation"), key=lambda n: (n.scope.key, n.seq))
        return await candidates.discover_many(ordered, self.reader, self.params.k_write)

    async def judge(self, csets: Sequence[CandidateSet]) -> tuple[list[RelationJudgment], list[EdgeEvent]]:
        """One relation request for all pairs of ``csets``, plus the rule edges."""
        wanted: dict[Scope, set[str]] = {}
        for cs in csets:
            wanted.setdefault(cs.node.scope, set()).update(c.node_id for c in cs.candidates)
        earlier: dict[str, MemoryNode] = {}
        for got in await asyncio.gather(*(self.reader.get_nodes(scope, sorted(ids)) for scope, ids in wanted.items())):
            earlier.update({n.id: n for n in got})
        space = await self.attribute_space()
        # the vectors of the turns the batch's nodes were read after, read once for both uses
        before: dict[str, Sequence[float]] | None = None
        if space is not None and space.reads_before:
            before = await self._before([cs.node for cs in csets],
                                        {cs.node.id: cs.node.embedding for cs in csets if cs.node.embedding})
        vectors: dict[str, Sequence[float]] = {cs.node.id: cs.node.embedding for cs in csets if cs.node.embedding}
        update_pairs = await self._update_pairs(csets, before, vectors)
        await self._vectors(wanted, update_pairs, vectors)
        if before is not None:
            others = [*earlier.values(), *(n for got in update_pairs.values() for n, _ in got)]
            before.update(await self._before([n for n in others if n.id in vectors and n.id not in before], vectors))
        attributes = relations.Attributes(space, vectors, before)
        judgments, so_edges = await relations.judge(csets, earlier, self.so, self.params, update_pairs, attributes)
        edges = [e for cs in csets for e in relations.rule_edges(cs, earlier, self.params.theta_rel)] + so_edges
        return judgments, edges

    async def _before(self, nodes: Sequence[MemoryNode], known: Mapping[str, Sequence[float]]
                      ) -> dict[str, Sequence[float]]:
        """Node id -> the vector of the turn it was read after (``MemoryNode.after``), for those of
        ``nodes`` read after one: from ``known`` (node id -> vector), else read from the store."""
        out: dict[str, Sequence[float]] = {}
        need: dict[Scope, set[str]] = {}
        for n in nodes:
            if n.after is None:
                continue
            if n.after in known:
                out[n.id] = known[n.after]
            else:
                need.setdefault(n.scope, set()).add(n.after)
        read: dict[str, Sequence[float]] = {}
        await self._read_vectors(need, read)
        for n in nodes:
            if n.after is not None and n.id not in out and n.after in read:
                out[n.id] = read[n.after]
        return out

    async def _vectors(self, wanted: Mapping[Scope, set[str]],
                       update_pairs: Mapping[str, Sequence[tuple[MemoryNode, CandidateFeatures]]],
                       vectors: dict[str, Sequence[float]]) -> None:
        """Add to ``vectors`` (node id -> vector) those of the batch's candidates (``wanted``) and
        update candidates it lacks (the stores' reads return nodes without them)."""
        need = {scope: set(ids) for scope, ids in wanted.items()}
        for got in update_pairs.values():
            for n, _ in got:
                if n.embedding:
                    vectors.setdefault(n.id, n.embedding)
                else:
                    need.setdefault(n.scope, set()).add(n.id)
        await self._read_vectors(need, vectors)

    async def _read_vectors(self, need: Mapping[Scope, Iterable[str]], into: dict[str, Sequence[float]]) -> None:
        """Read the vectors of ``need`` (node ids by scope) that ``into`` lacks into it, one read
        per scope, ids in sorted order."""
        for scope, ids in need.items():
            order = sorted(set(ids) - into.keys())
            if order:
                into.update(zip(order, await self.reader.embeddings(scope, order, self.embedder.dim), strict=True))

    async def _update_pairs(self, csets: Sequence[CandidateSet], before: dict[str, Sequence[float]] | None = None,
                            vectors: dict[str, Sequence[float]] | None = None
                            ) -> dict[str, list[tuple[MemoryNode, CandidateFeatures]]]:
        """The update-only pairs of ``csets``' statements (:func:`topology.stages.updates.pairs`);
        ``before``: node id -> the vector of the turn it was read after (:meth:`_before`), which
        the attribute space reads where it discounts them. The candidates are the speaker's
        :meth:`_pool_size` earlier statements most similar to the steered vector, ordered by
        attribute (:meth:`_by_attribute`) under a learned model, which reads their vectors into
        ``vectors`` (node id -> vector) and theirs into ``before``."""
        people = [cs.node for cs in csets if updates.person_turn(cs.node)]
        if self.facts is None or not people or self.params.k_update <= 0:
            return {}
        queries = None
        space = await self.attribute_space()
        profiles = None  # the asking statements' attribute distributions, for both uses below
        about: dict[str, float] = {}  # node id -> how far the learned model reads it as about one attribute
        if space is not None and (self.params.update_steer > 0 or space.learned is not None):
            rows = np.asarray([n.embedding for n in people], dtype=np.float32)
            profiles = space.profiles(rows, before_rows([n.id for n in people], before, rows.shape[1])
                                      if before and space.reads_before else None)
            if (read := space.about(profiles)) is not None:
                about = {n.id: float(a) for n, a in zip(people, read, strict=True)}
        keep = [i for i, n in enumerate(people) if updates.statement(n, about.get(n.id))]
        if not keep:
            return {}
        asking = [people[i] for i in keep]
        if space is not None and profiles is not None:
            profiles = profiles[keep]
            if self.params.update_steer > 0:
                queries = space.steer(rows[keep], self.params.update_steer, profiles)
        found = await self.facts.earlier_by_speaker(asking, self._pool_size(space),
                                                    None if queries is None else queries.tolist())
        if space is not None and space.learned is not None and profiles is not None:
            found = await self._by_attribute(space, profiles, found, before, {} if vectors is None else vectors, about)
        return updates.pairs(csets, {n.id: f for n, f in zip(asking, found, strict=True)}, self.params.k_update, about)

    def _pool_size(self, space: AttributeSpace | None) -> int:
        """How many of a speaker's earlier statements the update search returns: ``update_pool``
        under a learned attribute model (which then picks the ``k_update`` asked), else
        ``k_update + k_write`` (the ``k_update`` most similar that are not candidates already);
        never fewer than ``k_update + k_write``."""
        floor = self.params.k_update + self.params.k_write
        return max(self.params.update_pool, floor) if space is not None and space.learned is not None else floor

    async def _by_attribute(self, space: AttributeSpace, asking: np.ndarray,
                            found: Sequence[Sequence[tuple[MemoryNode, float]]],
                            before: dict[str, Sequence[float]] | None,
                            vectors: dict[str, Sequence[float]],
                            about: dict[str, float]) -> list[list[tuple[MemoryNode, float]]]:
        """Each of ``found`` (the update candidates of the asking statements, whose attribute
        distributions are the rows of ``asking``, same order) ordered by
        :func:`topology.stages.updates.by_attribute` under ``space``'s learned model, each
        candidate read after the turn it was read after where the model discounts it: the
        candidates' vectors are read into ``vectors`` and those turns' into ``before``, one read
        per scope each, for the judge to use again; how far the model reads each candidate as
        about one attribute goes into ``about`` (node id -> probability)."""
        nodes = {n.id: n for got in found for n, _ in got}
        if not nodes:
            return [list(got) for got in found]
        need: dict[Scope, list[str]] = {}
        for i, n in nodes.items():
            if n.embedding:
                vectors.setdefault(i, n.embedding)
            else:
                need.setdefault(n.scope, []).append(i)
        await self._read_vectors(need, vectors)
        if space.reads_before and before is not None:
            before.update(await self._before([n for i, n in nodes.items() if i not in before], vectors))
        ids = list(nodes)
        rows = np.asarray([vectors[i] for i in ids], dtype=np.float32)
        profiles = space.profiles(rows, before_rows(ids, before, rows.shape[1]) if before else None)
        if (read := space.about(profiles)) is not None:
            about.update(zip(ids, (float(a) for a in read), strict=True))
        row = {i: k for k, i in enumerate(ids)}
        return [updates.by_attribute(got, [float(asking[k] @ profiles[row[n.id]]) for n, _ in got])
                for k, got in enumerate(found)]

    async def consolidate(self, scope: Scope, run: int, last_seq: int,
                          neighbours: Callable[[Scope, Sequence[str]], Awaitable[list[EdgeEvent]]]
                          ) -> tuple[list[ConsolidationDecision], list[EdgeEvent], list[MemoryNode]]:
        """Run ``run`` over the block of writes ending at ``last_seq``: each node with its closest
        earlier semantic neighbour (:func:`~topology.stages.relations.consolidation_key`), at most ``consolidation_pairs``
        pairs, one request. ``neighbours(scope, ids)`` returns, for each of ``ids``, at least its
        closest semantic edge into it; edges of other views or into other nodes are ignored."""
        every = self.params.consolidate_every
        window_seqs = set(range(last_seq - every + 1, last_seq + 1))
        window_ids = await self.reader.preceding(scope, last_seq + 1, every)
        window = {n.id: n for n in await self.reader.get_nodes(scope, window_ids) if n.seq in window_seqs}
        edges = await neighbours(scope, sorted(window))
        best = {t: e.source for t, e in relations.closest_incoming(edges).items() if t in window}
        chosen = sorted(best.items(), key=lambda kv: -window[kv[0]].seq)[: self.params.consolidation_pairs]
        olders = {n.id: n for n in await self.reader.get_nodes(scope, sorted({src for _, src in chosen}))}
        pairs = [(window[nid], olders[src]) for nid, src in chosen if src in olders]
        pairs = await self._embedded(scope, pairs)
        return await consolidation.consolidate(run, pairs, self.so, self.params, self.summariser,
                                               await self._pair_attributes(pairs))

    async def _pair_attributes(self, pairs: Sequence[tuple[MemoryNode, MemoryNode]]) -> relations.Attributes:
        """The attribute readings of the consolidation pairs' memories (each read after the turn it
        was read after, where the space discounts it), as the write path reads them; empty without
        an attribute space."""
        space = await self.attribute_space()
        nodes = {n.id: n for pair in pairs for n in pair}
        vectors: dict[str, Sequence[float]] = {i: n.embedding for i, n in nodes.items() if n.embedding}
        if space is None or not vectors:
            return relations.Attributes()
        before = await self._before(list(nodes.values()), vectors) if space.reads_before else None
        return relations.Attributes(space, vectors, before)

    async def _embedded(self, scope: Scope, pairs: list[tuple[MemoryNode, MemoryNode]]
                        ) -> list[tuple[MemoryNode, MemoryNode]]:
        """``pairs`` with every node's embedding (the reader may give nodes without them; a
        consolidation pair's cosine needs them)."""
        ids = sorted({n.id for pair in pairs for n in pair if n.embedding is None})
        if not ids:
            return pairs
        rows = await self.reader.embeddings(scope, ids, self.embedder.dim)
        vec = {i: (r.tolist() if r.any() else None) for i, r in zip(ids, rows, strict=True)}

        def full(n: MemoryNode) -> MemoryNode:
            return n if n.embedding is not None else n.model_copy(update={"embedding": vec.get(n.id)})

        return [(full(a), full(b)) for a, b in pairs]
