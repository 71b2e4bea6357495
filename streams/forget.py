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
  turn right after a forgotten observation loses its context vector (embedded with the forgotten
  turn's text, :mod:`topology.stages.context`), rewritten in the vector index and the node store
  before the nodes, vectors and lexical entries are deleted. The Faust
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
from dataclasses import dataclass
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
from topology.schemas import Forget, Forgotten, MemoryNode, Observation, Scope


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

Part = Literal["nodes", "edges", "decisions"]
ALL_PARTS: tuple[Part, ...] = ("nodes", "edges", "decisions")


@dataclass
class ForgetReport:
    """What :func:`apply` removed (counts of records that existed)."""

    nodes: int = 0
    edges: int = 0
    decisions: int = 0
    seq: int | None = None

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
    if seq is None:
        seq = (await stores.nodes.forgotten(scope)).get(forget.event_id)
    return Forgotten(**base, seq=seq, node_ids=derived_closure(root, nodes))


async def apply(stores: ForgetTargets, marker: Forgotten, parts: Collection[Part] = ALL_PARTS) -> ForgetReport:
    """Delete what ``marker`` describes from the stores named by ``parts`` ("nodes": the
    forgotten-event record, vectors, lexical entries and nodes; "edges"; "decisions"), then tell
    ``stores.on_forget`` (in-memory views drop the conversation). Idempotent."""
    scope, rep = marker.scope, ForgetReport(seq=marker.seq)
    whole = marker.event_id is None
    if "nodes" in parts and not whole and marker.seq is not None and marker.event_id is not None:
        await stores.nodes.record_forgotten(scope, marker.event_id, marker.seq)
    if "edges" in parts:
        rep.edges = await (stores.edges.delete_scope(scope) if whole else stores.edges.delete(scope, marker.node_ids))
    if "decisions" in parts:
        rep.decisions = await (stores.edges.delete_scope_decisions(scope) if whole
                               else stores.edges.delete_decisions(scope, marker.node_ids))
    if "nodes" in parts and not whole and marker.seq is not None:
        await _drop_next_context(stores, scope, marker.seq)
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
    return rep


async def _drop_next_context(stores: ForgetTargets, scope: Scope, seq: int) -> None:
    """Rewrite the observation at ``seq + 1`` without its context vector (when it has one)."""
    for node in await stores.nodes.get(scope, await stores.nodes.preceding(scope, seq + 2, 1)):
        if node.seq == seq + 1 and node.context is not None and node.embedding is not None:
            plain = node.model_copy(update={"context": None})
            await stores.vectors.upsert([plain])
            await stores.nodes.upsert([plain])


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
