"""The edge store on Elasticsearch: edges in groups, one document per conversation per write.

Layout (index ``p edges-grouped`` for the store generation prefix ``p``): an upsert writes, for
each conversation among its edges, one document holding those edges (``body``: their JSON, an
array), indexed by ``nodes`` (every endpoint) and ``views`` (every view) for the reads, and
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

import hashlib
import time
from collections.abc import Sequence
from typing import Any

import orjson
from elasticsearch import NotFoundError

from storage.elastic.store import _FILTER_KW, _KW, _OPAQUE, _PAGE, _Elastic, _scoped, es_errors
from topology.schemas import ConsolidationDecision, EdgeEvent, Scope, View

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

_Edge = dict[str, Any]


def _group_id(tenant: str, conversation: str, edge_ids: Sequence[str]) -> str:
    h = hashlib.sha256(orjson.dumps([tenant, conversation, sorted(edge_ids)]))
    return h.hexdigest()[:40]


def _group_doc(tenant: str, conversation: str, gid: str, written: int, edges: Sequence[_Edge]) -> dict[str, Any]:
    return {"tenant_id": tenant, "conversation_id": conversation, "gid": gid, "written": written,
            "nodes": sorted({e["source"] for e in edges} | {e["target"] for e in edges}),
            "views": sorted({e["view"] for e in edges}), "body": orjson.dumps(list(edges)).decode()}


def _latest(hits: Sequence[dict[str, Any]]) -> dict[str, _Edge]:
    """Edge id -> its latest version among ``hits`` (in :data:`_ORDER`)."""
    out: dict[str, _Edge] = {}
    for h in hits:
        for e in orjson.loads(h["_source"]["body"]):
            out[e["id"]] = e
    return out


def _ranked(edges: Sequence[_Edge], limit: int) -> list[EdgeEvent]:
    chosen = sorted(edges, key=lambda e: (-e["probability"], e["id"]))
    return [EdgeEvent.model_validate(e) for e in (chosen[:limit] if limit >= 0 else chosen)]


class ElasticEdgeStore(_Elastic):
    """Edges of the four views in groups (see the module) and consolidation decisions."""

    async def prepare(self) -> None:
        """Create the edge-group and decisions indices now (a worker at startup, not on first
        write), and move a legacy one-document-per-edge index into groups."""
        await self._ensure(GROUPS, _GROUP_MAPPING)
        await self._ensure("decisions", _DECISIONS)
        await self.move_legacy()

    async def move_legacy(self) -> int:
        """Move the edges of a legacy ``edges`` index (one document per edge) into groups of
        their conversation (stamped 0: older than any write), then delete it; returns how many."""
        old = await self._existing(LEGACY)
        if old is None:
            return 0
        index = await self._ensure(GROUPS, _GROUP_MAPPING)
        hits = await self._hits(old, {"match_all": {}}, [{"id": "asc"}], ["body"])
        by_scope: dict[tuple[str, str], list[_Edge]] = {}
        for h in hits:
            e = orjson.loads(h["_source"]["body"])
            by_scope.setdefault((e["tenant_id"], e["conversation_id"]), []).append(e)
        ops: list[dict[str, Any]] = []
        for (tenant, conv), edges in by_scope.items():
            for i in range(0, len(edges), _MOVE_CHUNK):
                part = edges[i: i + _MOVE_CHUNK]
                gid = _group_id(tenant, conv, [e["id"] for e in part])
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
        index = await self._ensure(GROUPS, _GROUP_MAPPING)
        by_scope: dict[tuple[str, str], dict[str, _Edge]] = {}
        for e in edges:
            by_scope.setdefault((e.tenant_id, e.conversation_id), {})[e.id] = e.model_dump(mode="json")
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
        answers it, from one search a :data:`_READS_A_SEARCH` reads: the group documents of any
        read's conversation that hold one of that read's node ids (a document of a conversation
        read twice is offered to both reads; each keeps the edges at its own ids, so the extra
        documents change no answer)."""
        out: list[list[EdgeEvent]] = [[] for _ in reads]
        wanted = [k for k, (_, ids) in enumerate(reads) if ids]
        index = await self._existing(GROUPS) if wanted and views and limit > 0 else None
        if index is None:
            return out
        docs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for at in range(0, len(wanted), _READS_A_SEARCH):
            part = wanted[at: at + _READS_A_SEARCH]
            should = [{"bool": {"filter": _scoped(reads[k][0], {"terms": {"nodes": sorted(set(reads[k][1]))}})}}
                      for k in part]
            query = {"bool": {"filter": [{"terms": {"views": sorted(set(views))}}], "should": should,
                              "minimum_should_match": 1}}
            try:
                hits = await self._hits(index, query, _ORDER, ["body", "written", "gid", "tenant_id", "conversation_id"])
            except NotFoundError:
                return out
            for h in hits:  # in _ORDER within each conversation, as _groups reads them
                src = h["_source"]
                docs.setdefault((src["tenant_id"], src["conversation_id"]), []).append(h)
        vs = set(views)
        for k in wanted:
            scope, node_ids = reads[k]
            ids = set(node_ids)
            latest = _latest(docs.get((scope.tenant_id, scope.conversation_id), []))
            edges = _ranked([e for e in latest.values() if e["view"] in vs and (e["source"] in ids or e["target"] in ids)],
                            limit)
            out[k] = edges if label is None else [e for e in edges if e.label == label]
        return out

    async def scan(self, scope: Scope) -> list[EdgeEvent]:
        """All edges of the scope by id."""
        latest = _latest(await self._groups(scope, None))
        return [EdgeEvent.model_validate(latest[i]) for i in sorted(latest)]

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
            edges: list[_Edge] = orjson.loads(h["_source"]["body"])
            keep = [e for e in edges if e["source"] not in ids and e["target"] not in ids]
            removed.update(e["id"] for e in edges if e["source"] in ids or e["target"] in ids)
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
            edges: list[_Edge] = orjson.loads(h["_source"]["body"])
            gone = {e["id"] for e in edges if e["id"] in doomed and node_id in (e["source"], e["target"])}
            if not gone:
                continue
            removed |= gone
            keep = [e for e in edges if e["id"] not in gone]
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
