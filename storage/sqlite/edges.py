"""The embedded edge store on SQLite: edges of the four views and consolidation decisions.

Layout (``edges``, ``WITHOUT ROWID``): clustered by ``(scope, source, view, id)``, so a
conversation's edges are contiguous and the edges leaving a node are one range; one secondary
index by ``(scope, target, view)`` that also holds every other column read, so incoming edges
are read from the index alone. ``scope`` is a conversation's number in ``edge_scopes``
(tenant, conversation), given with its first edge and dropped with the conversation's edges
(:meth:`SqliteEdgeStore.delete_scope`), so the names are stored once per conversation rather
than in every edge and index entry; ``view`` is a number
(:data:`VIEWS`). Node and edge ids in UUID form are stored as their 16 bytes (:func:`key`), any
other id as text, and read back as the same string (:func:`unkey`). An edge's id determines
its source and view (ids are derived from them), so the clustered key is unique per edge and
an upsert by it rewrites the same edge. Decision bodies are JSON, zlib-compressed. A store of
an earlier layout is rewritten into this one when opened (:func:`migrate_edges`).
"""

from __future__ import annotations

import functools
import logging
import sqlite3
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from storage.sqlite.base import Base, sqlite_errors, transaction, translated
from topology.schemas import ConsolidationDecision, EdgeEvent, Scope, View

log = logging.getLogger("jevmem.sqlite")

#: A stored edge as read (:data:`_READ`): (source, view number, id, target, probability, label,
#: directed, by_rule, version), ids as stored (:func:`key`).
_Row = tuple[Any, ...]

#: The edge layout this build reads (``meta`` key ``edges``).
EDGE_LAYOUT = "scoped-binary-v4"

#: Each conversation with edges, numbered: the ``scope`` column of ``edges``.
_SCOPES = """CREATE TABLE IF NOT EXISTS edge_scopes (
  id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, conv TEXT NOT NULL, UNIQUE (tenant, conv))"""
_TABLE = """CREATE TABLE IF NOT EXISTS {name} (
  scope INTEGER NOT NULL, source BLOB NOT NULL, view INTEGER NOT NULL, id BLOB NOT NULL,
  target BLOB NOT NULL, probability REAL NOT NULL, label TEXT NOT NULL,
  directed INTEGER NOT NULL, by_rule INTEGER NOT NULL, version INTEGER NOT NULL,
  PRIMARY KEY (scope, source, view, id)) WITHOUT ROWID"""
#: Edges by target, covering every column an edge is read with: a neighbourhood's incoming edges
#: are answered from the index alone (without it, each one was a second descent of the table).
_INDEX = "CREATE INDEX IF NOT EXISTS edges_to ON edges(scope, target, view, probability, label, directed, by_rule, version)"
#: The columns an edge is stored and read back as (:func:`_row`, :func:`_edge_of`).
_COLUMNS = "scope, source, view, id, target, probability, label, directed, by_rule, version"
#: The views by their stored number (the ``view`` column).
VIEWS: tuple[View, ...] = ("semantic", "temporal", "causal", "entity")
_VIEW_CODE: dict[str, int] = {v: i for i, v in enumerate(VIEWS)}

_HEX = frozenset("0123456789abcdef")


def key(i: str) -> bytes | str:
    """How id ``i`` is stored: the 16 bytes of a lowercase canonical UUID, else ``i`` itself.
    Bytes order as the UUID strings do, so ``ORDER BY`` an id column keeps the string order."""
    if len(i) == 36 and i[8] == i[13] == i[18] == i[23] == "-":
        h = i[:8] + i[9:13] + i[14:18] + i[19:23] + i[24:]
        if _HEX.issuperset(h):
            return bytes.fromhex(h)
    return i


#: :func:`key` of node ids (an edge's endpoints): a node id is stored with every edge it ends.
_node_key = functools.lru_cache(maxsize=8192)(key)


def unkey(v: bytes | str) -> str:
    """The id stored as ``v`` (:func:`key`)."""
    if isinstance(v, bytes):
        h = v.hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    return v


#: :func:`unkey` of node ids (an edge's endpoints): a neighbourhood names the same few nodes in
#: many edges, so their strings are made once.
_node_id = functools.lru_cache(maxsize=1 << 16)(unkey)


def _columns(conn: sqlite3.Connection, table: str) -> dict[str, str]:
    return {r[1]: str(r[2]).upper() for r in conn.execute(f"PRAGMA table_info({table})")}


def migrate_edges(conn: sqlite3.Connection) -> int:
    """Create the edge tables in the current layout, or rewrite an earlier one into it in one
    transaction: a rowid table with each edge's JSON body, the text-id table clustered by edge
    id, or the table that named the tenant and conversation in every row. Returns the number of
    edges moved (0 when the store was current or new)."""
    cols = _columns(conn, "edges")
    if "scope" in cols or not cols:
        conn.execute(_SCOPES)
        conn.execute(_TABLE.format(name="edges"))
        conn.execute(_INDEX)
        return 0
    if "body" in cols:  # the JSON-body layout
        fields = ("e.source, e.view, e.id, e.target, e.probability, "
                  "json_extract(CAST(e.body AS TEXT), '$.label'), "
                  "json_extract(CAST(e.body AS TEXT), '$.direction') = 'directed', "
                  "json_extract(CAST(e.body AS TEXT), '$.created_by') = 'rule', "
                  "json_extract(CAST(e.body AS TEXT), '$.schema_version')")
    else:
        fields = "e.source, e.view, e.id, e.target, e.probability, e.label, e.directed, e.by_rule, e.version"
    log.warning("rewriting the edge table into the current layout (once; about 30 s per million edges)")
    with transaction(conn):
        conn.execute(_SCOPES)
        conn.execute("INSERT OR IGNORE INTO edge_scopes (tenant, conv) SELECT DISTINCT tenant, conv FROM edges "
                     "ORDER BY tenant, conv")
        conn.execute(_TABLE.format(name="edges_v4"))
        moved = 0
        cur = conn.execute(f"SELECT s.id, {fields} FROM edges e JOIN edge_scopes s ON s.tenant = e.tenant "
                           "AND s.conv = e.conv")
        while rows := cur.fetchmany(10_000):
            conn.executemany(f"INSERT INTO edges_v4 ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)",
                             [(r[0], _stored(r[1]), _VIEW_CODE[r[2]], _stored(r[3]), _stored(r[4]), *r[5:])
                              for r in rows])
            moved += len(rows)
        conn.execute("DROP TABLE edges")  # its indexes go with it
        conn.execute("ALTER TABLE edges_v4 RENAME TO edges")
        conn.execute(_INDEX)
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('edges', ?)", (EDGE_LAYOUT,))
    log.warning("edge table rewritten: %d edges", moved)
    return moved


def _stored(i: bytes | str) -> bytes | str:
    """An id as the current layout stores it (:func:`key`; stored bytes are kept)."""
    return i if isinstance(i, bytes) else key(i)


def _row(e: EdgeEvent) -> _Row:
    """The stored columns of ``e`` after ``scope`` (:data:`_READ`)."""
    return (_node_key(e.source), _VIEW_CODE[e.view], key(e.id), _node_key(e.target), e.probability, e.label,
            int(e.direction == "directed"), int(e.created_by == "rule"), e.schema_version)


def _edge_of(scope: Scope, r: _Row) -> EdgeEvent:
    """The edge of a stored row (validating a dict is the fastest way pydantic builds one)."""
    return EdgeEvent.model_validate({
        "tenant_id": scope.tenant_id, "conversation_id": scope.conversation_id, "source": _node_id(r[0]),
        "view": VIEWS[r[1]], "id": unkey(r[2]), "target": _node_id(r[3]), "probability": r[4], "label": r[5],
        "direction": "directed" if r[6] else "undirected", "created_by": "rule" if r[7] else "system_one",
        "schema_version": r[8]})


#: The columns of :data:`_Row`.
_READ = "source, view, id, target, probability, label, directed, by_rule, version"
#: Decoded edges kept in memory: graph expansion reads the same neighbourhoods again and again.
EDGE_CACHE = 32768
#: Conversations whose edge index (:class:`_Adjacency`) is kept in memory (least recent dropped).
ADJACENCY_SCOPES = 64
#: Reads of a scope before its edge index is built (again, after a delete). Building it reads
#: every edge of the conversation (one range of the clustered table), while SQL answers one
#: frontier from the key and the target index; a query makes about 3 reads, so the index pays
#: off for a conversation queried repeatedly, not for a one-off query.
ADJACENCY_AFTER = 12


@dataclass
class _Adjacency:
    """A scope's edges by endpoint: node id -> view -> edge id -> ``(-probability, edge id)``
    (its sort key) for every edge it is the source or target of, and every edge's stored row by id.
    ``index`` is None until the scope was read :data:`ADJACENCY_AFTER` times; once built, the
    store's upserts keep it current (:meth:`SqliteEdgeStore._follow`)."""

    reads: int = 0
    index: dict[str, dict[str, dict[str, tuple[float, str]]]] | None = None
    rows: dict[str, _Row] | None = None


class SqliteEdgeStore(Base):
    """Edges of the four views and consolidation decisions (layout: see the module).

    ``neighbours`` ranks edges and decodes only those not in its LRU; an upsert drops the edges
    it rewrites from the cache. This store is its database's only writer of edges (the process
    holds the data directory's lock, and no other store writes the table), so what it has read
    stays true until it writes.

    Ranking: in SQL, or, once a scope has been read :data:`ADJACENCY_AFTER` times, from an
    in-memory index of the scope's edges by endpoint (same order: probability descending, then
    id). Each write is one committed transaction: an upsert that returned is applied to its
    scopes' indexes as SQL applied it, and a delete drops the scope's index (the next reads are
    SQL's until it is built again). Writes to one conversation, and every other table's writes
    (nodes, the lexical index, on their own connections), leave other conversations' indexes as
    they were."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__(conn)
        self._cache: OrderedDict[bytes | str, EdgeEvent] = OrderedDict()
        self._adjacency: OrderedDict[Scope, _Adjacency] = OrderedDict()
        self._scopes: dict[tuple[str, str], int] = {}
        #: (scope number, label) -> the node ids at either end of the scope's edges so labelled
        #: (read once a scope and label; an upsert adds to it, a delete in the scope drops it): a
        #: labelled read whose ids hold none of them has nothing to rank
        self._marked: dict[tuple[int, str], set[str]] = {}

    def _scope(self, scope: Scope) -> int | None:
        """The number of ``scope`` in ``edge_scopes`` (None: it has no edges)."""
        return self._number((scope.tenant_id, scope.conversation_id))

    def _number(self, k: tuple[str, str]) -> int | None:
        """The number of (tenant, conversation) ``k``, from memory or the table (None: none yet)."""
        n = self._scopes.get(k)
        if n is None:
            row = self._conn.execute("SELECT id FROM edge_scopes WHERE tenant=? AND conv=?", k).fetchone()
            if row is None:
                return None
            n = self._scopes[k] = int(row[0])
        return n

    def _numbered(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """The numbers of ``keys`` (tenant, conversation), given to those without one; in the
        caller's open transaction, so a number is kept only if the edges written with it are."""
        out = {}
        for k in keys:
            n = self._number(k)
            if n is None:
                n = int(self._conn.execute("INSERT INTO edge_scopes (tenant, conv) VALUES (?, ?) RETURNING id",
                                           k).fetchone()[0])
            out[k] = n
        return out

    def _follow(self, edges: Sequence[EdgeEvent], stored: Sequence[_Row]) -> None:
        """Apply the committed upsert of ``edges`` (stored as the rows ``stored``, :func:`_row`)
        to the built indexes of their scopes, as the ``ON CONFLICT`` clause applied it: a new edge
        is added; a stored one keeps its target and label and takes the new probability,
        direction, creator and version."""
        by_scope: dict[tuple[str, str], list[tuple[EdgeEvent, _Row]]] = {}
        for e, row in zip(edges, stored, strict=True):
            by_scope.setdefault((e.tenant_id, e.conversation_id), []).append((e, row))
        for (tenant, conv), group in by_scope.items():
            adj = self._adjacency.get(Scope(tenant_id=tenant, conversation_id=conv))
            if adj is None or adj.index is None or adj.rows is None:
                continue  # not built: a build reads the table, these edges included
            index, rows = adj.index, adj.rows
            for e, r in group:
                old = rows.get(e.id)
                if old is not None:
                    r = (*old[:4], r[4], old[5], *r[6:])
                rows[e.id] = r
                source, target = (e.source, e.target) if old is None else (unkey(old[0]), unkey(old[3]))
                for end in (source, target) if target != source else (source,):
                    index.setdefault(end, {}).setdefault(e.view, {})[e.id] = (-e.probability, e.id)

    def _index(self, scope: Scope) -> _Adjacency | None:
        """The scope's current endpoint index, or None while SQL should answer (see class)."""
        adj = self._adjacency.get(scope)
        if adj is None:
            self._adjacency[scope] = _Adjacency(1)
            self._adjacency.move_to_end(scope)
            while len(self._adjacency) > ADJACENCY_SCOPES:
                self._adjacency.popitem(last=False)
            return None
        self._adjacency.move_to_end(scope)
        adj.reads += 1
        if adj.reads < ADJACENCY_AFTER:
            return None
        if adj.index is None or adj.rows is None:
            index: dict[str, dict[str, dict[str, tuple[float, str]]]] = {}
            rows: dict[str, _Row] = {}
            for r in self._conn.execute(f"SELECT {_READ} FROM edges WHERE scope=?", (self._scope(scope),)):
                source, view, eid, target, p = unkey(r[0]), VIEWS[r[1]], unkey(r[2]), unkey(r[3]), r[4]
                for end in (source, target) if target != source else (source,):
                    index.setdefault(end, {}).setdefault(view, {})[eid] = (-p, eid)
                rows[eid] = r
            adj.index, adj.rows = index, rows
        return adj

    @translated
    async def upsert(self, edges: Sequence[EdgeEvent]) -> None:
        rows = [_row(e) for e in edges]
        for r in rows:
            self._cache.pop(r[2], None)  # the cache is keyed by the stored edge id
        with sqlite_errors("write"), transaction(self._conn):
            numbers = self._numbered(list(dict.fromkeys((e.tenant_id, e.conversation_id) for e in edges)))
            self._conn.executemany(
                f"INSERT INTO edges ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT(scope, source, view, id) "
                "DO UPDATE SET probability=excluded.probability, directed=excluded.directed, by_rule=excluded.by_rule, "
                "version=excluded.version",
                [(numbers[(e.tenant_id, e.conversation_id)], *r) for e, r in zip(edges, rows, strict=True)])
        self._scopes.update(numbers)
        for e in edges:  # a superset of what is stored (an upsert keeps a stored edge's label): enough to skip on
            got = self._marked.get((numbers[(e.tenant_id, e.conversation_id)], e.label))
            if got is not None:
                got.update((e.source, e.target))
        self._follow(edges, rows)

    @staticmethod
    def _found(adj: _Adjacency, node_ids: Sequence[str], views: Sequence[View]) -> list[tuple[float, str]]:
        """``(-probability, id)`` of the edges of ``views`` touching ``node_ids`` (each once), from the index."""
        found: dict[str, tuple[float, str]] = {}
        index = adj.index if adj.index is not None else {}
        for nid in dict.fromkeys(node_ids):
            by_view = index.get(nid)
            if by_view is not None:
                for view in views:
                    got = by_view.get(view)
                    if got:
                        found.update(got)
        return list(found.values())

    def _sql_ranked(self, scope: Scope, node_ids: Sequence[str], views: Sequence[View], limit: int) -> list[_Row]:
        """The rows of the edges of ``views`` touching ``node_ids``: probability descending, then id."""
        number = self._scope(scope)
        if number is None:
            return []
        keys, codes = [key(i) for i in node_ids], [_VIEW_CODE[v] for v in views]
        n, v = ",".join("?" * len(keys)), ",".join("?" * len(codes))
        return list(self._conn.execute(
            f"SELECT {_READ} FROM edges WHERE scope=? AND source IN ({n}) AND view IN ({v}) "
            f"UNION SELECT {_READ} FROM edges WHERE scope=? AND target IN ({n}) AND view IN ({v}) "
            f"ORDER BY probability DESC, id LIMIT ?",
            (number, *keys, *codes, number, *keys, *codes, limit)).fetchall())

    def _decoded(self, scope: Scope, rows: Sequence[_Row]) -> list[EdgeEvent]:
        """The edges of ``rows``, in order, decoded through the LRU (keyed by the stored id)."""
        cache = self._cache
        out = []
        for r in rows:
            e = cache.get(r[2])
            if e is None:
                e = cache[r[2]] = _edge_of(scope, r)
            else:
                cache.move_to_end(r[2])
            out.append(e)
        while len(cache) > EDGE_CACHE:
            cache.popitem(last=False)
        return out

    @translated
    async def neighbours(self, scope: Scope, node_ids: Sequence[str], views: Sequence[View], limit: int) -> list[EdgeEvent]:
        return self._neighbours(scope, node_ids, views, limit)

    @translated
    async def read_many(self, reads: Sequence[tuple[Scope, Sequence[str]]], views: Sequence[View], limit: int,
                        label: str | None) -> list[list[EdgeEvent]]:
        """:class:`~storage.ports.EdgeReads`: each read as :meth:`neighbours` or :meth:`labelled`
        answers it, one after the other in this call."""
        if label is None:
            return [self._neighbours(scope, ids, views, limit) for scope, ids in reads]
        return [self._labelled(scope, ids, views, limit, label) for scope, ids in reads]

    def _neighbours(self, scope: Scope, node_ids: Sequence[str], views: Sequence[View], limit: int) -> list[EdgeEvent]:
        if not node_ids or not views:
            return []
        adj = self._index(scope)
        if adj is None or adj.rows is None:
            return self._decoded(scope, self._sql_ranked(scope, node_ids, views, limit))
        ranked = [eid for _, eid in sorted(self._found(adj, node_ids, views))]  # the SQL order
        rows = adj.rows
        return self._decoded(scope, [rows[eid] for eid in (ranked[:limit] if limit >= 0 else ranked)])

    @translated
    async def labelled(self, scope: Scope, node_ids: Sequence[str], views: Sequence[View], limit: int,
                       label: str) -> list[EdgeEvent]:
        """The edges of :meth:`neighbours` (same arguments) labelled ``label``, in its order; only
        those are decoded (and from the index, only those are ranked when all candidates fit in
        ``limit``)."""
        return self._labelled(scope, node_ids, views, limit, label)

    def _labelled(self, scope: Scope, node_ids: Sequence[str], views: Sequence[View], limit: int,
                  label: str) -> list[EdgeEvent]:
        if not node_ids or not views:
            return []
        number = self._scope(scope)
        if number is None or self._ends(number, label).isdisjoint(node_ids):
            return []
        adj = self._index(scope)
        if adj is None or adj.rows is None:
            return self._decoded(scope, [r for r in self._sql_ranked(scope, node_ids, views, limit) if r[5] == label])
        found, rows = self._found(adj, node_ids, views), adj.rows
        if 0 <= limit < len(found):  # the limit cuts: rank everything first, as neighbours does
            ranked = [eid for _, eid in sorted(found)][:limit]
            return self._decoded(scope, [rows[eid] for eid in ranked if rows[eid][5] == label])
        return self._decoded(scope, [rows[eid] for _, eid in sorted(k for k in found if rows[k[1]][5] == label)])

    def _ends(self, number: int, label: str) -> set[str]:
        """The node ids at either end of the edges labelled ``label`` of scope ``number`` (see
        ``_marked``)."""
        got = self._marked.get((number, label))
        if got is None:
            got = self._marked[(number, label)] = set()
            for source, target in self._conn.execute("SELECT source, target FROM edges WHERE scope=? AND label=?",
                                                     (number, label)):
                got.update((unkey(source), unkey(target)))
        return got

    def _unmark(self, scope: Scope) -> None:
        """Forget the labelled ends of ``scope`` (its edges were deleted)."""
        number = self._scopes.get((scope.tenant_id, scope.conversation_id))
        if number is not None:
            for k in [k for k in self._marked if k[0] == number]:
                del self._marked[k]

    @translated
    async def scan(self, scope: Scope) -> list[EdgeEvent]:
        rows = self._conn.execute(f"SELECT {_READ} FROM edges WHERE scope=?", (self._scope(scope),)).fetchall()
        return sorted((_edge_of(scope, r) for r in rows), key=lambda e: e.id)

    @translated
    async def upsert_decisions(self, decisions: Sequence[ConsolidationDecision]) -> None:
        self._write(
            "INSERT INTO decisions VALUES (?,?,?,?) ON CONFLICT(tenant, conv, id) DO UPDATE SET body=excluded.body",
            [(d.tenant_id, d.conversation_id, d.id, zlib.compress(orjson.dumps(d.model_dump(mode="json")), 1))
             for d in decisions])

    @translated
    async def decisions(self, scope: Scope) -> list[ConsolidationDecision]:
        rows = self._conn.execute("SELECT body FROM decisions WHERE tenant=? AND conv=? ORDER BY id",
                                  (scope.tenant_id, scope.conversation_id)).fetchall()
        return [ConsolidationDecision.model_validate(orjson.loads(_json(r[0]))) for r in rows]

    @translated
    async def delete(self, scope: Scope, node_ids: Sequence[str]) -> int:
        if not node_ids:
            return 0
        self._cache.clear()
        self._adjacency.pop(scope, None)
        self._unmark(scope)
        keys = [key(i) for i in node_ids]
        n = ",".join("?" * len(keys))
        return self._delete([(f"DELETE FROM edges WHERE scope=? AND (source IN ({n}) OR target IN ({n}))",
                              (self._scope(scope), *keys, *keys))])

    @translated
    async def delete_edges(self, scope: Scope, node_id: str, edge_ids: Sequence[str]) -> int:
        if not edge_ids:
            return 0
        self._cache.clear()
        self._adjacency.pop(scope, None)
        self._unmark(scope)
        keys = [key(i) for i in edge_ids]
        n = ",".join("?" * len(keys))
        args = (self._scope(scope), key(node_id), *keys)
        counts = [self._delete([(f"DELETE FROM edges WHERE scope=? AND {end}=? AND id IN ({n})", args)])
                  for end in ("source", "target")]
        return sum(counts)

    @translated
    async def conversations_touching(self, tenant_id: str, node_ids: Sequence[str]) -> list[str]:
        if not node_ids:
            return []
        keys = [key(i) for i in node_ids]
        n = ",".join("?" * len(keys))
        rows = self._conn.execute(f"SELECT DISTINCT s.conv FROM edge_scopes s JOIN edges e ON e.scope = s.id "
                                  f"WHERE s.tenant=? AND (e.source IN ({n}) OR e.target IN ({n})) ORDER BY s.conv",
                                  (tenant_id, *keys, *keys)).fetchall()
        return [str(r[0]) for r in rows]

    @translated
    async def delete_scope(self, scope: Scope) -> int:
        self._cache.clear()
        self._adjacency.pop(scope, None)
        self._unmark(scope)
        number = self._scope(scope)
        self._scopes.pop((scope.tenant_id, scope.conversation_id), None)
        return self._delete([("DELETE FROM edges WHERE scope=?", (number,)),
                             ("DELETE FROM edge_scopes WHERE id=?", (number,))], counted=0)

    @translated
    async def delete_decisions(self, scope: Scope, node_ids: Sequence[str]) -> int:
        gone = set(node_ids)
        doomed = [d.id for d in await self.decisions(scope) if {d.left, d.right, d.derived_node_id} & gone]
        if not doomed:
            return 0
        return self._delete([(f"DELETE FROM decisions WHERE tenant=? AND conv=? AND id IN ({','.join('?' * len(doomed))})",
                              (scope.tenant_id, scope.conversation_id, *doomed))])

    @translated
    async def delete_scope_decisions(self, scope: Scope) -> int:
        return self._delete([("DELETE FROM decisions WHERE tenant=? AND conv=?", (scope.tenant_id, scope.conversation_id))])


def _json(raw: bytes) -> bytes:
    """A stored body's JSON (bodies written before compression are JSON already)."""
    return raw if raw[:1] == b"{" else zlib.decompress(raw)
