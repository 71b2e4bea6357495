"""The edge store on Elasticsearch: edges in groups, one document per conversation per write.

Layout (index ``p edges-grouped`` for the store generation prefix ``p``): an upsert writes, for
each conversation among its edges, one document holding those edges (``body``: their table,
:func:`encode_body`), indexed by ``nodes`` (every endpoint) and ``views`` (every view) for the reads, and
stamped ``written`` (nanoseconds since the epoch) and ``gid`` (the document id: a hash of the
conversation and its edges' ids, so sending the same edges again rewrites the same document).
A write batch of the write path thus costs one index operation per conversation instead of one
per edge.

An edge upserted again (a later write of the same id) is in more than one document: a read
takes, per edge id, the version of the latest document (``written``, then ``gid``), which is
the last write, as with one document per edge. Reads (``neighbours``, ``labelled``, ``scan``)
fetch the scope's documents that hold a wanted endpoint and view, then select, rank (probability
descending, then id) and limit the edges here: the same answers as the other edge stores.

A delete (forget) rewrites every document of the scope holding a forgotten endpoint without the
edges touching it (same id and stamp), or deletes it when none is left, and returns the number
of distinct edges removed; ``delete_scope`` deletes the scope's documents. Both refresh, as every
delete of this package does. Consolidation decisions are one document each (``p decisions``).

A generation made by an earlier release keeps one document per edge (``p edges``):
:meth:`ElasticEdgeStore.prepare` (a worker's start) moves those edges into groups (stamped 0, so
any later write wins) and deletes that index.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import orjson
from elasticsearch import AsyncElasticsearch, NotFoundError

from storage.elastic.client import es_errors, retrieved
from storage.elastic.decoded import Kept
from storage.elastic.store import _FILTER_KW, _KW, _OPAQUE, _PAGE, READ_HOT, Visibility, _Elastic, _scoped
from topology.schemas import SCHEMA_VERSION, ConsolidationDecision, EdgeEvent, Scope, View

#: The index of edge groups (see the module).
GROUPS = "edges-grouped"
#: The index of one document per edge, as earlier releases wrote it (moved by ``prepare``).
LEGACY = "edges"
_GROUP_MAPPING: dict[str, Any] = {"dynamic": "strict", "_source": {"excludes": ["nodes", "views"]}, "properties": {
    "tenant_id": _FILTER_KW, "conversation_id": _FILTER_KW, "nodes": _FILTER_KW, "views": _FILTER_KW,
    "gid": _KW, "written": {"type": "long"}, "body": _OPAQUE,
}}
_DECISIONS: dict[str, Any] = {"dynamic": "strict", "properties": {
    "tenant_id": _KW, "conversation_id": _KW, "id": _KW, "body": _OPAQUE,
}}
#: The newest document first wins: hits are read in this order and later versions replace earlier ones.
_ORDER = [{"written": "asc"}, {"gid": "asc"}]
#: Reads answered by one search in :meth:`ElasticEdgeStore.read_many` (its clauses stay far
#: below the server's clause limit).
_READS_A_SEARCH = 128
#: Edges per group document when moving a legacy index.
_MOVE_CHUNK = 500
#: Edges kept decoded across recalls, in the group documents read last (:class:`Kept`: handed
#: back while a document is unchanged), and edges kept validated: about 250 bytes and 1.3 KB
#: each, so at most about 25 MB each.
EDGES_KEPT = 100_000
EVENTS_KEPT = 20_000

#: The body format :func:`encode_body` writes (a body of earlier releases is a JSON array).
BODY_FORMAT = 2


class _Edge(NamedTuple):
    """One edge as a group document holds it: its scope is the document's."""

    id: str
    view: str
    source: str
    target: str
    direction: str
    probability: float
    label: str
    created_by: str

    @classmethod
    def of(cls, e: EdgeEvent) -> _Edge:
        return cls(e.id, e.view, e.source, e.target, e.direction, e.probability, e.label, e.created_by)

    def event(self, tenant: str, conversation: str) -> EdgeEvent:
        """The edge as the other edge stores answer it (validated)."""
        return EdgeEvent.model_validate({
            "schema_version": SCHEMA_VERSION, "id": self.id, "tenant_id": tenant, "conversation_id": conversation,
            "view": self.view, "source": self.source, "target": self.target, "direction": self.direction,
            "probability": self.probability, "label": self.label, "created_by": self.created_by})


def encode_body(edges: Sequence[_Edge]) -> str:
    """A group's edges as a table: ``{"v": 2, "n": [endpoint ids], "k": [words], "e": [[id,
    view, source, target, direction, probability, label, created_by], ...]}``, the endpoints as
    places in ``n`` and the view, direction, label and maker as places in ``k``. A read parses
    about a fifth of the bytes of one JSON object an edge (the scope, the schema version and the
    field names said once, each endpoint id once)."""
    nodes: dict[str, int] = {}
    words: dict[str, int] = {}
    rows = [[e.id, words.setdefault(e.view, len(words)), nodes.setdefault(e.source, len(nodes)),
             nodes.setdefault(e.target, len(nodes)), words.setdefault(e.direction, len(words)), e.probability,
             words.setdefault(e.label, len(words)), words.setdefault(e.created_by, len(words))] for e in edges]
    return orjson.dumps({"v": BODY_FORMAT, "n": list(nodes), "k": list(words), "e": rows}).decode()


def decode_body(body: str | bytes) -> list[_Edge]:
    """The edges of a body :func:`encode_body` wrote, or of an earlier release's (a JSON array
    of edge objects); ``ValueError`` for anything else."""
    doc = orjson.loads(body)
    if isinstance(doc, list):
        return [_Edge(e["id"], e["view"], e["source"], e["target"], e["direction"], float(e["probability"]), e["label"],
                      e["created_by"]) for e in doc]
    if not isinstance(doc, dict) or doc.get("v") != BODY_FORMAT:
        raise ValueError(f"an edge group body of an unknown format ({str(body)[:40]!r})")
    n, k = doc["n"], doc["k"]
    return [_Edge(i, k[v], n[s], n[t], k[d], float(p), k[lab], k[by]) for i, v, s, t, d, p, lab, by in doc["e"]]


def _group_id(tenant: str, conversation: str, edge_ids: Sequence[str]) -> str:
    h = hashlib.sha256(orjson.dumps([tenant, conversation, sorted(edge_ids)]))
    return h.hexdigest()[:40]


def _group_doc(tenant: str, conversation: str, gid: str, written: int, edges: Sequence[_Edge]) -> dict[str, Any]:
    return {"tenant_id": tenant, "conversation_id": conversation, "gid": gid, "written": written,
            "nodes": sorted({e.source for e in edges} | {e.target for e in edges}),
            "views": sorted({e.view for e in edges}), "body": encode_body(edges)}


def _latest(hits: Sequence[dict[str, Any]]) -> dict[str, _Edge]:
    """Edge id -> its latest version among ``hits`` (in :data:`_ORDER`)."""
    out: dict[str, _Edge] = {}
    for h in hits:
        for e in decode_body(h["_source"]["body"]):
            out[e.id] = e
    return out


class _Held:
    """A conversation's group documents as a session holds them: each edge's latest version over
    the documents held (:data:`_ORDER`)."""

    def __init__(self) -> None:
        self.docs: set[str] = set()
        #: edge id -> (its document's order, the edge)
        self.latest: dict[str, tuple[tuple[int, str], _Edge]] = {}

    def add(self, doc_id: str, order: tuple[int, str], edges: list[_Edge]) -> None:
        """Take a document: each of its edges whose latest version it holds now is held so."""
        self.docs.add(doc_id)
        for e in edges:
            held = self.latest.get(e.id)
            if held is None or held[0] < order:
                self.latest[e.id] = (order, e)


class EdgeSession:
    """The edge reads of one retrieval (:class:`~storage.ports.EdgeSession`): each group document
    is fetched once, and every read is answered from the documents fetched.

    A read of ``(scope, ids)`` needs every document of the scope's conversation holding one of
    ``ids`` (an endpoint). The session remembers, per conversation, the ids whose documents it
    has fetched (or is fetching: :meth:`ahead` starts that in the background); a read fetches
    only what is missing, in one search for all its conversations, then selects, ranks and limits
    as :meth:`ElasticEdgeStore.neighbours` does. The extra documents a read finds (fetched for
    other ids) hold no version of an edge at its ids that the documents at its ids lack, so the
    answers are the store's. Documents are read once: a session sees the index as of its
    fetches, and is meant for one retrieval (one request), not to be kept. A failed fetch fails
    every later read of the session."""

    def __init__(self, store: ElasticEdgeStore) -> None:
        self._store = store
        #: (tenant, conversation) -> its documents held
        self._held: dict[tuple[str, str], _Held] = {}
        #: (tenant, conversation) -> the ids whose documents are fetched or being fetched
        self._covered: dict[tuple[str, str], set[str]] = {}
        self._pending: list[asyncio.Future[None]] = []
        self._failed: BaseException | None = None

    def _claim(self, reads: Sequence[tuple[Scope, Sequence[str]]]) -> dict[tuple[str, str], set[str]]:
        """The ids of ``reads`` not yet covered, per conversation, now marked covered."""
        need: dict[tuple[str, str], set[str]] = {}
        for scope, ids in reads:
            key = (scope.tenant_id, scope.conversation_id)
            covered = self._covered.setdefault(key, set())
            new = set(ids) - covered
            if new:
                covered |= new
                need.setdefault(key, set()).update(new)
        return need

    def ahead(self, reads: Sequence[tuple[Scope, Sequence[str]]]) -> None:
        """Start fetching, in the background, what reads of ``reads`` would fetch; a later read
        waits for it instead of asking again."""
        need = self._claim(reads)
        if need and self._failed is None:
            task = asyncio.ensure_future(self._fetch(need))
            task.add_done_callback(retrieved)
            self._pending.append(task)

    async def _settled(self) -> None:
        pending, self._pending = self._pending, []
        for task in pending:
            try:
                await task
            except BaseException as exc:
                self._failed = self._failed or exc
        if self._failed is not None:
            raise self._failed

    async def _fetch(self, need: dict[tuple[str, str], set[str]]) -> None:
        """Fetch the documents of each conversation of ``need`` holding one of its ids, leaving
        out those already held: one search per :data:`_READS_A_SEARCH` groups of conversations
        (conversations asking the same ids share a clause)."""
        index = await self._store._existing(GROUPS)
        if index is None:
            return
        by_ids: dict[tuple[str, frozenset[str]], list[str]] = {}
        for (tenant, conv), ids in need.items():
            by_ids.setdefault((tenant, frozenset(ids)), []).append(conv)
        clauses = [{"bool": {"filter": [{"term": {"tenant_id": tenant}}, {"terms": {"conversation_id": sorted(convs)}},
                                        {"terms": {"nodes": sorted(ids)}}]}} for (tenant, ids), convs in by_ids.items()]
        held = sorted({gid for key in need if key in self._held for gid in self._held[key].docs})
        for at in range(0, len(clauses), _READS_A_SEARCH):
            query: dict[str, Any] = {"bool": {"should": clauses[at: at + _READS_A_SEARCH], "minimum_should_match": 1}}
            if held:
                query["bool"]["must_not"] = [{"ids": {"values": held}}]
            try:
                hits = await self._store._hits(index, query, _ORDER, ["body", "written", "gid", "tenant_id", "conversation_id"],
                                               versions=True)
            except NotFoundError:
                return
            for h in hits:
                src = h["_source"]
                key = (str(src["tenant_id"]), str(src["conversation_id"]))
                self._held.setdefault(key, _Held()).add(h["_id"], (int(src["written"]), str(src["gid"])),
                                                        self._store._kept.take(index, h, _edges_of))

    async def read_many(self, reads: Sequence[tuple[Scope, Sequence[str]]], views: Sequence[View], limit: int,
                        label: str | None) -> list[list[EdgeEvent]]:
        """:class:`~storage.ports.EdgeReads`, answered from this session's documents (see the class)."""
        out: list[list[EdgeEvent]] = [[] for _ in reads]
        wanted = [k for k, (_, ids) in enumerate(reads) if ids]
        if not (wanted and views and limit > 0):
            return out
        need = self._claim([reads[k] for k in wanted])
        await self._settled()
        if need:
            try:
                await self._fetch(need)
            except BaseException as exc:
                self._failed = exc
                raise
        vs = set(views)
        for k in wanted:
            scope, node_ids = reads[k]
            key = (scope.tenant_id, scope.conversation_id)
            held = self._held.get(key)
            if held is None:
                continue
            ids = set(node_ids)
            # an edge at one of ids is in no document that does not hold that id, so its latest
            # version over every document held is its latest over those holding ids
            found = [e for _, e in held.latest.values() if e.view in vs and (e.source in ids or e.target in ids)]
            found.sort(key=lambda e: (-e.probability, e.id))
            out[k] = [self._event(key, e) for e in found[:limit] if label is None or e.label == label]
        return out

    def _event(self, key: tuple[str, str], edge: _Edge) -> EdgeEvent:
        """``edge`` (the latest version held) validated (once while the store keeps it)."""
        return self._store.event(key, edge)

    async def neighbours(self, scope: Scope, node_ids: Sequence[str], views: Sequence[View], limit: int) -> list[EdgeEvent]:
        return (await self.read_many([(scope, node_ids)], views, limit, None))[0]

    async def labelled(self, scope: Scope, node_ids: Sequence[str], views: Sequence[View], limit: int,
                       label: str) -> list[EdgeEvent]:
        return (await self.read_many([(scope, node_ids)], views, limit, label))[0]


def _edges_of(src: Mapping[str, Any]) -> list[_Edge]:
    return decode_body(src["body"])


class ElasticEdgeStore(_Elastic):
    """Edges of the four views in groups (see the module) and consolidation decisions. Group
    documents read by a session are decoded once while unchanged (:class:`Kept`), and their
    edges validated once (:meth:`event`)."""

    def __init__(self, client: AsyncElasticsearch, prefix: str = "jevmem-", visibility: Visibility | None = None) -> None:
        super().__init__(client, prefix, visibility)
        self._kept: Kept[list[_Edge]] = Kept(EDGES_KEPT, len)
        self._events: OrderedDict[tuple[str, str, _Edge], EdgeEvent] = OrderedDict()

    def event(self, key: tuple[str, str], edge: _Edge) -> EdgeEvent:
        """``edge`` of the conversation ``key`` (tenant, conversation) as an event, validated once
        while kept (at most :data:`EVENTS_KEPT`, the least recently used dropped first)."""
        at = (*key, edge)
        event = self._events.get(at)
        if event is None:
            event = self._events[at] = edge.event(*key)
            if len(self._events) > EVENTS_KEPT:
                self._events.popitem(last=False)
        else:
            self._events.move_to_end(at)
        return event

    async def prepare(self) -> None:
        """Create the edge-group and decisions indices now (a worker at startup, not on first
        write), and move a legacy one-document-per-edge index into groups."""
        await self._ensure(GROUPS, _GROUP_MAPPING, READ_HOT)
        await self._ensure("decisions", _DECISIONS)
        await self.move_legacy()

    async def move_legacy(self) -> int:
        """Move the edges of a legacy ``edges`` index (one document per edge) into groups of
        their conversation (stamped 0: older than any write), then delete it; returns how many."""
        old = await self._existing(LEGACY)
        if old is None:
            return 0
        index = await self._ensure(GROUPS, _GROUP_MAPPING, READ_HOT)
        hits = await self._hits(old, {"match_all": {}}, [{"id": "asc"}], ["body"])
        by_scope: dict[tuple[str, str], list[_Edge]] = {}
        for h in hits:
            e = EdgeEvent.model_validate(orjson.loads(h["_source"]["body"]))
            by_scope.setdefault((e.tenant_id, e.conversation_id), []).append(_Edge.of(e))
        ops: list[dict[str, Any]] = []
        for (tenant, conv), edges in by_scope.items():
            for i in range(0, len(edges), _MOVE_CHUNK):
                part = edges[i: i + _MOVE_CHUNK]
                gid = _group_id(tenant, conv, [e.id for e in part])
                ops += [{"index": {"_id": gid}}, _group_doc(tenant, conv, gid, 0, part)]
        for i in range(0, len(ops), 2 * _PAGE):
            await self._bulk(index, ops[i: i + 2 * _PAGE])
        with es_errors(f"delete {old}"):
            await self._client.indices.delete(index=old, ignore_unavailable=True)
        self._found.discard(old)
        return len(hits)

    async def look_up(self) -> None:
        """Look the edge-group index up now (a reader's start), so a first read does not."""
        await self._existing(GROUPS)

    async def upsert(self, edges: Sequence[EdgeEvent]) -> None:
        """One group document per conversation of ``edges`` (an edge given twice: the last)."""
        if not edges:
            return
        index = await self._ensure(GROUPS, _GROUP_MAPPING, READ_HOT)
        by_scope: dict[tuple[str, str], dict[str, _Edge]] = {}
        for e in edges:
            by_scope.setdefault((e.tenant_id, e.conversation_id), {})[e.id] = _Edge.of(e)
        written = time.time_ns()
        ops: list[dict[str, Any]] = []
        for (tenant, conv), group in by_scope.items():
            gid = _group_id(tenant, conv, list(group))
            ops += [{"index": {"_id": gid}}, _group_doc(tenant, conv, gid, written, list(group.values()))]
        await self._bulk(index, ops, deferred=True)

    async def _groups(self, scope: Scope, node_ids: Sequence[str] | None) -> list[dict[str, Any]]:
        """The scope's group documents holding one of ``node_ids`` (all: None), in :data:`_ORDER`."""
        index = await self._existing(GROUPS)
        if index is None:
            return []
        extra: list[dict[str, Any]] = []
        if node_ids is not None:
            extra.append({"terms": {"nodes": sorted(set(node_ids))}})
        try:
            return await self._hits(index, {"bool": {"filter": _scoped(scope, *extra)}}, _ORDER,
                                    ["body", "written", "gid"])
        except NotFoundError:
            return []

    async def neighbours(self, scope: Scope, node_ids: Sequence[str], views: Sequence[View], limit: int) -> list[EdgeEvent]:
        """Edges of ``views`` touching any of ``node_ids`` (either end): probability desc, then id."""
        return (await self.read_many([(scope, node_ids)], views, limit, None))[0]

    async def labelled(self, scope: Scope, node_ids: Sequence[str], views: Sequence[View], limit: int,
                       label: str) -> list[EdgeEvent]:
        return (await self.read_many([(scope, node_ids)], views, limit, label))[0]

    async def read_many(self, reads: Sequence[tuple[Scope, Sequence[str]]], views: Sequence[View], limit: int,
                        label: str | None) -> list[list[EdgeEvent]]:
        """:class:`~storage.ports.EdgeReads`: each read as :meth:`neighbours` (or :meth:`labelled`)
        answers it, from one search a :data:`_READS_A_SEARCH` reads (:class:`EdgeSession`)."""
        return await self.session().read_many(reads, views, limit, label)

    def session(self) -> EdgeSession:
        """:class:`~storage.ports.EdgeSessions`: the reads of one retrieval, sharing what they fetch."""
        return EdgeSession(self)

    async def scan(self, scope: Scope) -> list[EdgeEvent]:
        """All edges of the scope by id."""
        latest = _latest(await self._groups(scope, None))
        return [latest[i].event(scope.tenant_id, scope.conversation_id) for i in sorted(latest)]

    async def upsert_decisions(self, decisions: Sequence[ConsolidationDecision]) -> None:
        """Index each decision under its id (whole-document replace; idempotent)."""
        if not decisions:
            return
        index = await self._ensure("decisions", _DECISIONS)
        ops: list[dict[str, Any]] = []
        for d in decisions:
            ops.append({"index": {"_id": d.id}})
            ops.append({"tenant_id": d.tenant_id, "conversation_id": d.conversation_id, "id": d.id,
                        "body": orjson.dumps(d.model_dump(mode="json")).decode()})
        await self._bulk(index, ops, deferred=True)

    async def decisions(self, scope: Scope) -> list[ConsolidationDecision]:
        """All decisions of the scope by id."""
        index = await self._ensure("decisions", _DECISIONS)
        hits = await self._hits(index, {"bool": {"filter": _scoped(scope)}}, [{"id": "asc"}], ["body"])
        return [ConsolidationDecision.model_validate(orjson.loads(h["_source"]["body"])) for h in hits]

    async def delete(self, scope: Scope, node_ids: Sequence[str]) -> int:
        """Every edge of the scope touching any of ``node_ids`` (either end), from every group
        holding one; returns how many distinct edges went."""
        if not node_ids:
            return 0
        ids = set(node_ids)
        hits = await self._groups(scope, node_ids)
        removed: set[str] = set()
        ops: list[dict[str, Any]] = []
        for h in hits:
            edges = decode_body(h["_source"]["body"])
            keep = [e for e in edges if e.source not in ids and e.target not in ids]
            removed.update(e.id for e in edges if e.source in ids or e.target in ids)
            if not keep:
                ops.append({"delete": {"_id": h["_id"]}})
            else:
                ops += [{"index": {"_id": h["_id"]}},
                        _group_doc(scope.tenant_id, scope.conversation_id, h["_source"]["gid"], h["_source"]["written"], keep)]
        await self._rewrite(ops)
        return len(removed)

    async def delete_edges(self, scope: Scope, node_id: str, edge_ids: Sequence[str]) -> int:
        """The edges ``edge_ids`` of the scope touching ``node_id``, from every group holding one;
        returns how many distinct edges went."""
        doomed = set(edge_ids)
        if not doomed:
            return 0
        removed: set[str] = set()
        ops: list[dict[str, Any]] = []
        for h in await self._groups(scope, [node_id]):
            edges = decode_body(h["_source"]["body"])
            gone = {e.id for e in edges if e.id in doomed and node_id in (e.source, e.target)}
            if not gone:
                continue
            removed |= gone
            keep = [e for e in edges if e.id not in gone]
            if not keep:
                ops.append({"delete": {"_id": h["_id"]}})
            else:
                ops += [{"index": {"_id": h["_id"]}},
                        _group_doc(scope.tenant_id, scope.conversation_id, h["_source"]["gid"], h["_source"]["written"], keep)]
        await self._rewrite(ops)
        return len(removed)

    async def conversations_touching(self, tenant_id: str, node_ids: Sequence[str]) -> list[str]:
        """The tenant's conversations with a group holding one of ``node_ids``, sorted."""
        index = await self._existing(GROUPS)
        if index is None or not node_ids:
            return []
        query = {"bool": {"filter": [{"term": {"tenant_id": tenant_id}}, {"terms": {"nodes": sorted(set(node_ids))}}]}}
        try:
            hits = await self._hits(index, query, _ORDER, ["conversation_id"])
        except NotFoundError:
            return []
        return sorted({str(h["_source"]["conversation_id"]) for h in hits})

    async def delete_scope(self, scope: Scope) -> int:
        """Every edge of the scope; returns how many distinct edges went."""
        hits = await self._groups(scope, None)
        count = len(_latest(hits))
        await self._rewrite([{"delete": {"_id": h["_id"]}} for h in hits])
        return count

    async def _rewrite(self, ops: list[dict[str, Any]]) -> None:
        """Send ``ops`` on the group index in bulks of at most :data:`_PAGE` documents (refreshed)."""
        index = await self._existing(GROUPS)
        if index is None or not ops:
            return
        i = 0
        while i < len(ops):
            j, docs = i, 0
            while j < len(ops) and docs < _PAGE:
                j += 1 if "delete" in ops[j] else 2
                docs += 1
            await self._bulk(index, ops[i:j])
            i = j

    async def delete_decisions(self, scope: Scope, node_ids: Sequence[str]) -> int:
        """Decisions whose left, right or derived node is one of ``node_ids`` (found by a scan of
        the scope's decisions: the references live in the opaque body)."""
        gone = set(node_ids)
        doomed = sorted(d.id for d in await self.decisions(scope) if {d.left, d.right, d.derived_node_id} & gone)
        if not doomed:
            return 0
        query = {"bool": {"filter": _scoped(scope, {"terms": {"id": doomed}})}}
        return await self._delete_matching(await self._existing("decisions"), query)

    async def delete_scope_decisions(self, scope: Scope) -> int:
        return await self._delete_matching(await self._existing("decisions"), {"bool": {"filter": _scoped(scope)}})
