"""Rebuilding memory from the log, and checking that two stores hold the same graph.

Two ways to rebuild into fresh stores:

* from the derived log (memories + edges + consolidation topics): pure materialisation, zero
  System One calls, zero embedding calls;
* by recomputing from the observations topic: the same write path as the first run (so System One
  is asked again), in topic order per conversation, which reproduces the seqs and so the graph.

``verify`` compares node ids and seqs, edge ids (with probabilities) and forgotten-event records
scope by scope.

Replays never bring forgotten memory back:

* recomputing applies each :class:`~topology.schemas.Forget` of the observations topic at its
  place in the log (the observations before it are written first, as the worker did);
* the derived log carries a :class:`~topology.schemas.Forgotten` marker on each of the memories,
  edges and consolidation topics, logged by the worker at the point it deleted (after everything it
  deletes, before anything written later): each topic is rebuilt in order and applies its share of
  each marker where it stands (nodes, vectors, lexical entries and the forgotten-event record;
  edges; decisions). A conversation forgotten and then written again comes back with only what was
  written after the forget, in both modes.

With encryption on, the caller opens the records first (``streams.keyring.Keyring.open``):
records sealed under a key a forget destroyed cannot be read. On the derived topics they are left
out, which changes nothing: the markers at their places delete what they held anyway (and keep
the forgotten seqs). On the observations topic each becomes an :class:`Unreadable` that keeps its
place: it takes the seq the first run gave it, as a forgotten event, so later events keep theirs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from pydantic import BaseModel

from streams import forget as forgetting
from streams.in_process import InProcessWriter
from streams.write_path import Stores, number
from topology.errors import InvalidEvent
from topology.schemas import (
    ConsolidationDecision,
    EdgeEvent,
    Forget,
    Forgotten,
    MemoryNode,
    Observation,
    Scope,
    decode_input,
    decode_logged,
)

M = TypeVar("M", bound=BaseModel)

#: A logged value: its bytes, or the JSON object it was opened to (``streams.keyring``).
Record = bytes | dict[str, Any]

CHUNK = 500


@dataclass
class RebuildReport:
    scopes: set[Scope] = field(default_factory=set)
    nodes: int = 0
    edges: int = 0
    decisions: int = 0
    skipped: int = 0
    controller_calls: int = 0
    forgets: int = 0


def _forgets(marker: Forgotten, item: Any) -> bool:
    """Whether ``marker`` deletes the logged ``item`` (a node, edge or decision of its scope): all
    of the scope for a conversation's forget, else the forgotten nodes, their edges and the edges
    they replaced."""
    if (item.tenant_id, item.conversation_id) != (marker.scope.tenant_id, marker.scope.conversation_id):
        return False
    if marker.event_id is None:
        return True
    gone = set(marker.node_ids)
    touched = {getattr(item, "id", None), getattr(item, "source", None), getattr(item, "target", None)}
    return bool(gone & touched) or getattr(item, "id", None) in marker.replaced_edges


async def _replay_topic(stores: Stores, records: Sequence[Record], cls: type[M], part: forgetting.Part,
                        upsert: Callable[[list[M]], Awaitable[None]]) -> tuple[list[M], list[Forgotten]]:
    """Upsert one derived topic in order, in chunks of :data:`CHUNK`, applying this topic's share
    of each :class:`Forgotten` marker where it stands; returns what it stored (the latest record of
    each id that no later marker deleted, in order) and the markers."""
    live: dict[str, M] = {}
    markers: list[Forgotten] = []
    pending: list[M] = []

    async def flush() -> None:
        if pending:
            await upsert(list(pending))
            for x in pending:
                live.pop(str(getattr(x, "id", id(x))), None)
                live[str(getattr(x, "id", id(x)))] = x
            pending.clear()

    for raw in records:
        item = decode_logged(cls, raw)
        if isinstance(item, Forgotten):
            await flush()
            await forgetting.apply(stores, item, (part,))
            markers.append(item)
            for key in [k for k, x in live.items() if _forgets(item, x)]:
                del live[key]
        else:
            pending.append(item)
            if len(pending) >= CHUNK:
                await flush()
    await flush()
    return list(live.values()), markers


async def rebuild_from_log(stores: Stores, memories: Sequence[Record], edges: Sequence[Record],
                           decisions: Sequence[Record]) -> RebuildReport:
    """Materialise logged nodes, edges and decisions (idempotent upserts; later records win),
    applying forget markers in place (see the module docstring)."""
    report = RebuildReport()
    nodes, markers = await _replay_topic(stores, memories, MemoryNode, "nodes", stores.materialise)
    report.nodes, report.forgets = len(nodes), len(markers)
    report.scopes.update([*(n.scope for n in nodes), *(m.scope for m in markers)])
    found, _ = await _replay_topic(stores, edges, EdgeEvent, "edges", stores.edges.upsert)
    report.edges = len(found)
    ds, _ = await _replay_topic(stores, decisions, ConsolidationDecision, "decisions", stores.edges.upsert_decisions)
    report.decisions = len(ds)
    await stores.sync()
    return report


@dataclass(frozen=True)
class Unreadable:
    """A logged observation sealed under a key a forget destroyed: only its ids can be read."""

    scope: Scope
    event_id: str


async def reserve(stores: Stores, item: Unreadable) -> None:
    """Give an unreadable (forgotten) observation the seq the first run gave it, recorded as a
    forgotten event, so the events after it keep their seqs; nothing when its event is known."""
    nodes = stores.seq_source or stores.nodes
    if item.event_id in await nodes.seqs(item.scope, [item.event_id]) or item.event_id in await nodes.forgotten(item.scope):
        return
    stub = Observation(tenant_id=item.scope.tenant_id, conversation_id=item.scope.conversation_id,
                       event_id=item.event_id, content="-")
    [(_, seq)], _ = await number(nodes, [stub])
    await stores.nodes.record_forgotten(item.scope, item.event_id, seq)
    for listener in stores.on_forget:
        await listener(item.scope)


async def recompute(writer: InProcessWriter, observations: Sequence[Record | Unreadable],
                    batch: int = 64) -> RebuildReport:
    """Run the write path again over logged observations, applying each forget at its place
    (invalid records were dead-lettered the first time and are skipped; an :class:`Unreadable`
    one only keeps its seq, see :func:`reserve`)."""
    report = RebuildReport()
    valid: list[Observation | Forget | Unreadable] = []
    for raw in observations:
        if isinstance(raw, Unreadable):
            valid.append(raw)
            continue
        try:
            valid.append(decode_input(raw))
        except InvalidEvent:
            report.skipped += 1
    calls0 = writer.so.calls
    parts = cast(list[list[Observation] | Forget | Unreadable], forgetting.split_at_forgets(valid))
    for part in parts:
        if isinstance(part, Unreadable):
            await reserve(writer.stores, part)
            report.skipped += 1
            continue
        if isinstance(part, Forget):
            await writer.forget(part.scope, part.event_id)
            report.forgets += 1
            continue
        for i in range(0, len(part), batch):
            rep = await writer.ingest(part[i: i + batch])
            report.nodes += rep.new_nodes
            report.edges += rep.edges
    report.scopes.update(o.scope for o in valid)
    report.controller_calls = writer.so.calls - calls0
    return report



@dataclass(frozen=True)
class Graph:
    nodes: tuple[tuple[str, int], ...]
    edges: tuple[tuple[str, str, str, str, str, float], ...]
    forgotten: tuple[tuple[str, int], ...] = ()


async def graph_of(stores: Stores, scope: Scope) -> Graph:
    nodes = tuple(sorted((n.id, n.seq) for n in await stores.nodes.scan(scope)))
    edges = tuple(sorted((e.id, e.view, e.source, e.target, e.label, round(e.probability, 4))
                         for e in await stores.edges.scan(scope)))
    return Graph(nodes, edges, tuple(sorted((await stores.nodes.forgotten(scope)).items())))


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
        if ga.forgotten != gb.forgotten:
            problems.append(f"{scope.key}: forgotten-event records differ ({len(ga.forgotten)} vs {len(gb.forgotten)})")
    return problems
