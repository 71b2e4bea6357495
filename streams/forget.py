"""Forgetting: deleting one observation, or a whole conversation, from every store.

A forget is two steps, so that every driver deletes exactly the same things:

* :func:`plan` reads the node store and describes what goes as a :class:`Forgotten` marker: the
  observation's node (its id is a pure function of the event, so a retried forget finds it even
  when an earlier attempt already deleted it), every derived node built from it (transitively: a
  derived node carries its sources' content), and the event's seq. A whole conversation is just
  the scope.
* :func:`apply` deletes what a marker describes, in an order that makes a retry after a crash
  harmless: the forgotten-event record first (so the seq can never be handed out again, even if
  the deletion is cut short), then edges touching the nodes, decisions referencing them, the
  dead letters naming the conversation (or the event), vectors, lexical entries, and the nodes
  last (so a retry still finds what is left). Every step is an idempotent delete, but one: the
  next observation after a forgotten one was read after it (its embedding is one pass over
  the two turns, :mod:`topology.stages.context`), so it is embedded again after its new turn
  before (the observation before the forgotten one when of the same sitting, else alone),
  exactly as writing the conversation without the forgotten turn computes it, and rewritten in
  the vector index and the node store before the forgotten nodes are deleted (then the
  in-memory views drop the conversation and reload it). It is in the report (``rewritten``) so
  the Faust worker logs the new node record. The re-embedding is deterministic, so a retry
  rewrites the same vector. A rebuild from the derived log does not re-embed (``embedder``
  None): the worker logged the rewritten node after the marker. The Faust
  worker logs the marker on the memories, edges and consolidation topics *before* applying it,
  and a rebuild from that derived log applies each topic's share of it (``parts``) at the same
  point of that topic.

Both take the stores as :class:`ForgetTargets` (what :class:`streams.write_path.Stores` offers).

Seq rule (see ``streams.write_path.number``): a forgotten observation's seq is kept in a
forgotten-event record ``(scope, event_id, seq)``, so later events never reuse it and "earlier"
keeps meaning what it meant. Sending a forgotten ``event_id`` again re-adds it at its old seq,
like any redelivery of a known event. Forgetting a whole conversation removes the records too:
the conversation then starts again at seq 0. Forgetting an event that was never stored deletes
nothing and records nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from storage.ports import (
    DeadLetterSink,
    EarlierNodes,
    EdgeStore,
    LexicalIndex,
    NodeEraser,
    NodeReader,
    NodeWriter,
    VectorIndex,
)
from topology import ids
from topology.ports import Embedder
from topology.schemas import EdgeEvent, Forget, Forgotten, MemoryNode, Observation, Scope, View
from topology.stages import context


class ForgetNodes(NodeReader, EarlierNodes, NodeWriter, NodeEraser, Protocol):
    """What forgetting reads (the scope's nodes, its forgotten events), rewrites (the next turn's
    context vector) and deletes of the node store."""


class ForgetTargets(Protocol):
    """The stores a forget deletes from, and who is told after it (:class:`streams.write_path.Stores`)."""

    @property
    def nodes(self) -> ForgetNodes: ...

    @property
    def edges(self) -> EdgeStore: ...

    @property
    def vectors(self) -> VectorIndex: ...

    @property
    def lexical(self) -> LexicalIndex: ...

    @property
    def dead_letters(self) -> DeadLetterSink: ...

    @property
    def on_forget(self) -> list[Callable[[Scope], Awaitable[None]]]: ...

T = TypeVar("T")

#: The write path's linking of nodes already stored (candidates, the relation request, rule
#: edges), returning their edges: how a forget links the next observation again.
Relink = Callable[[Sequence[MemoryNode]], Awaitable[list[EdgeEvent]]]
#: Every relation view.
VIEWS: tuple[View, ...] = ("semantic", "temporal", "causal", "entity")
#: At most this many edges of the next observation are read when planning a forget.
RELINK_EDGES = 10_000

Part = Literal["nodes", "edges", "decisions"]
ALL_PARTS: tuple[Part, ...] = ("nodes", "edges", "decisions")


@dataclass
class ForgetReport:
    """What :func:`apply` removed (counts of records that existed)."""

    nodes: int = 0
    edges: int = 0
    decisions: int = 0
    seq: int | None = None
    #: the next observation, re-embedded after its new turn before (see the module)
    rewritten: list[MemoryNode] = field(default_factory=list)
    #: the edges it was given again (see :func:`apply`)
    relinked: list[EdgeEvent] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """``status`` is "deleted" when anything was removed, else "not_found"."""
        found = self.nodes or self.edges or self.decisions
        return {"status": "deleted" if found else "not_found", "nodes": self.nodes, "edges": self.edges,
                "decisions": self.decisions, "seq": self.seq}


def derived_closure(root: str, nodes: Sequence[MemoryNode]) -> list[str]:
    """``root`` and every derived node of ``nodes`` built from it, directly or through other
    derived nodes (in ``nodes`` order after ``root``). Pure."""
    gone = {root}
    out = [root]
    changed = True
    while changed:
        changed = False
        for n in nodes:
            if n.kind == "derived" and n.id not in gone and gone.intersection(n.derived_from):
                gone.add(n.id)
                out.append(n.id)
                changed = True
    return out


async def plan(stores: ForgetTargets, forget: Forget) -> Forgotten:
    """The :class:`Forgotten` marker for ``forget`` against the stores' current contents."""
    base = {"tenant_id": forget.tenant_id, "conversation_id": forget.conversation_id,
            "event_id": forget.event_id, "requested_at": forget.requested_at}
    if forget.event_id is None:
        return Forgotten(**base)
    scope = forget.scope
    root = ids.node_id(forget.tenant_id, forget.conversation_id, forget.event_id)
    nodes = await stores.nodes.scan(scope)
    seq = next((n.seq for n in nodes if n.id == root), None)
    gone = await stores.nodes.forgotten(scope)
    if seq is None:
        seq = gone.get(forget.event_id)
    closure = derived_closure(root, nodes)
    nxt = None if seq is None else next_observation(nodes, seq, set(gone.values()))
    replaced: list[str] = []
    if nxt is not None:
        later = {n.id for n in nodes if n.seq > nxt.seq} | set(closure)
        touching = await stores.edges.neighbours(scope, [nxt.id], VIEWS, RELINK_EDGES)
        replaced = sorted({e.id for e in touching
                           if (e.target if e.source == nxt.id else e.source) not in later})
    return Forgotten(**base, seq=seq, node_ids=closure, relinked=nxt.id if nxt else None, replaced_edges=replaced)


def next_observation(nodes: Sequence[MemoryNode], seq: int, gone: Collection[int]) -> MemoryNode | None:
    """The observation of ``nodes`` right after ``seq`` (seqs in ``gone``, forgotten, skipped),
    or None when the next seq holds none. Pure."""
    at = {n.seq: n for n in nodes if n.kind == "observation"}
    nxt = seq + 1
    while nxt not in at:
        if nxt not in gone:
            return None
        nxt += 1
    return at[nxt]


async def apply(stores: ForgetTargets, marker: Forgotten, parts: Collection[Part] = ALL_PARTS,
                embedder: Embedder | None = None, relink: Relink | None = None) -> ForgetReport:
    """Delete what ``marker`` describes from the stores named by ``parts`` ("nodes": the
    forgotten-event record, vectors, lexical entries and nodes; "edges": the scope's, and for an
    event, every edge of the tenant's other conversations that touches its nodes, and the edges
    the next observation was given when written; "decisions"), then tell ``stores.on_forget``
    (in-memory views drop the conversation). With ``embedder`` (and "nodes"), the next observation
    after a forgotten one is re-embedded and rewritten first (see the module); with ``relink`` as
    well (and "edges"), it is then linked again, as the write path links a new turn, and its new
    edges written (``relinked`` in the report). Idempotent."""
    scope, rep = marker.scope, ForgetReport(seq=marker.seq)
    whole = marker.event_id is None
    if "nodes" in parts and not whole and marker.seq is not None and marker.event_id is not None:
        await stores.nodes.record_forgotten(scope, marker.event_id, marker.seq)
    if "edges" in parts:
        rep.edges = await (stores.edges.delete_scope(scope) if whole else stores.edges.delete(scope, marker.node_ids))
        if marker.relinked is not None:
            rep.edges += await stores.edges.delete_edges(scope, marker.relinked, marker.replaced_edges)
        if not whole:  # an update edge to a forgotten memory is kept with the newer turn's conversation
            for other in await stores.edges.conversations_touching(scope.tenant_id, marker.node_ids):
                if other != scope.conversation_id:
                    rep.edges += await stores.edges.delete(Scope(tenant_id=scope.tenant_id, conversation_id=other),
                                                           marker.node_ids)
    if "decisions" in parts:
        rep.decisions = await (stores.edges.delete_scope_decisions(scope) if whole
                               else stores.edges.delete_decisions(scope, marker.node_ids))
    if "nodes" in parts and not whole and marker.seq is not None and embedder is not None:
        rep.rewritten = await reembed_next(stores, scope, marker.seq, embedder)
    if "nodes" in parts:
        await stores.dead_letters.forget(scope, marker.event_id)
        if whole:
            await stores.vectors.delete_scope(scope)
            await stores.lexical.delete_scope(scope)
            rep.nodes = await stores.nodes.delete_scope(scope)
        else:
            await stores.vectors.delete(scope, marker.node_ids)
            await stores.lexical.delete(scope, marker.node_ids)
            rep.nodes = await stores.nodes.delete(scope, marker.node_ids)
    for listener in stores.on_forget:
        await listener(scope)
    if relink is not None and rep.rewritten and "edges" in parts:
        rep.relinked = await relink(rep.rewritten)
        await stores.edges.upsert(rep.relinked)
    return rep


async def _at(stores: ForgetTargets, scope: Scope, before_seq: int) -> MemoryNode | None:
    """The latest stored observation of ``scope`` before ``before_seq``, or None."""
    got = await stores.nodes.get(scope, await stores.nodes.preceding(scope, before_seq, 1))
    return got[0] if got else None


async def reembed_next(stores: ForgetTargets, scope: Scope, seq: int, embedder: Embedder) -> list[MemoryNode]:
    """Re-embed the next stored observation after the forgotten ``seq`` (later forgotten seqs
    with no node skipped) after the latest observation before ``seq``, as writing the
    conversation without the forgotten turn would (``topology.stages.context``), and rewrite it
    in the vector index and the node store; returns it (none when there is none)."""
    gone = set((await stores.nodes.forgotten(scope)).values())
    at = seq + 1
    while (nxt := await _at(stores, scope, at + 1)) is None or nxt.seq != at:
        if at not in gone:
            return []
        at += 1
    before = await _at(stores, scope, seq)
    plain = nxt.model_copy(update={"embedding": None, "context": None, "after": None})
    [node] = await context.embed([plain], {plain.id: before} if before is not None else {}, embedder)
    await stores.vectors.upsert([node])
    await stores.nodes.upsert([node])
    return [node]


def split_at_forgets(items: Sequence[Observation | T]) -> list[list[Observation] | T]:
    """An input batch as runs of observations and the other items between them (forgets; a
    replay's unreadable records), order kept, so a driver writes the observations before a
    forget, applies it, then writes the rest. Pure."""
    out: list[list[Observation] | T] = []
    for item in items:
        if not isinstance(item, Observation):
            out.append(item)
        elif out and isinstance(out[-1], list):
            out[-1].append(item)
        else:
            out.append([item])
    return out
