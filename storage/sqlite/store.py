"""Embedded stores on SQLite (WAL): nodes, a BM25 lexical index on FTS5, dead letters, and the
edge store (:mod:`storage.sqlite.edges`) over the same database.

Why SQLite: it is in the standard library, crash-safe, transactional (an upsert batch is one
commit, acknowledged when ``commit`` returns), and FTS5 ships a real BM25 ranker with incremental
updates, which in-memory BM25 libraries (rank-bm25, bm25s) lack. Calls are synchronous inside
``async def``: each is a sub-millisecond local transaction.

Errors: every store call, read or write, raises :class:`StoreUnavailable` for any ``sqlite3.Error``
(a locked, closed, full or corrupt database), translated by :func:`storage.sqlite.base.sqlite_errors`
(the public methods carry ``translated``); no ``sqlite3`` exception leaves these stores.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import zlib
from collections import OrderedDict
from collections.abc import Collection, Sequence
from pathlib import Path

import numpy as np
import orjson

from storage.ports import Hit
from storage.sqlite.base import Base, DirLock, open_file, rollback, sqlite_errors, transaction, translated
from storage.sqlite.edges import ADJACENCY_AFTER, EDGE_CACHE, SqliteEdgeStore, migrate_edges
from topology import text as textmod
from topology.errors import ModelMismatch
from topology.schemas import DeadLetter, MemoryNode, Realm, Scope

log = logging.getLogger("jevmem.sqlite")

__all__ = ["ADJACENCY_AFTER", "CACHE_MB", "EDGE_CACHE", "SqliteDeadLetters", "SqliteEdgeStore", "SqliteLexicalIndex",
           "SqliteNodeStore", "check_model", "connect", "lexical_table", "open_file", "rollback", "scope_token",
           "sqlite_errors", "transaction", "translated"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS node_blocks (
  tenant TEXT NOT NULL, conv TEXT NOT NULL, block INTEGER NOT NULL UNIQUE,
  PRIMARY KEY (tenant, conv)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS node_entities (
  tenant TEXT NOT NULL, conv TEXT NOT NULL, entity TEXT NOT NULL, node TEXT NOT NULL, seq INTEGER NOT NULL,
  PRIMARY KEY (tenant, conv, entity, node));
CREATE INDEX IF NOT EXISTS node_entities_seq ON node_entities(tenant, conv, entity, seq);
CREATE TABLE IF NOT EXISTS decisions (
  tenant TEXT NOT NULL, conv TEXT NOT NULL, id TEXT NOT NULL, body BLOB NOT NULL,
  PRIMARY KEY (tenant, conv, id));
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS dead_letters (
  n INTEGER PRIMARY KEY AUTOINCREMENT, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS lexical_rows (
  tenant TEXT NOT NULL, conv TEXT NOT NULL, node TEXT NOT NULL, rid INTEGER NOT NULL,
  PRIMARY KEY (tenant, conv, node));
CREATE TABLE IF NOT EXISTS postings (
  tenant TEXT NOT NULL, conv TEXT NOT NULL, token TEXT NOT NULL, node TEXT NOT NULL, seq INTEGER NOT NULL,
  PRIMARY KEY (tenant, conv, token, node));
CREATE INDEX IF NOT EXISTS postings_seq ON postings(tenant, conv, token, seq);
CREATE TABLE IF NOT EXISTS forgotten (
  tenant TEXT NOT NULL, conv TEXT NOT NULL, event_id TEXT NOT NULL, seq INTEGER NOT NULL,
  PRIMARY KEY (tenant, conv, event_id));
"""

#: The node layout this build reads (``meta`` key ``nodes``): rows keyed by ``n`` = the
#: conversation's block (``node_blocks``) << :data:`SLOT_BITS` | the node's slot in it, so a
#: conversation's rows are one range of the table however conversations interleave.
NODE_LAYOUT = "conversation-blocks-v1"
#: Slots per conversation block (node rows a conversation can ever hold).
SLOT_BITS = 32
_NODES = """CREATE TABLE {name} (
  n INTEGER PRIMARY KEY,
  tenant TEXT NOT NULL, conv TEXT NOT NULL, id TEXT NOT NULL, event_id TEXT NOT NULL,
  seq INTEGER NOT NULL, kind TEXT NOT NULL, body BLOB NOT NULL, embedding BLOB, user TEXT,
  UNIQUE (tenant, conv, id))"""
_NODE_INDEXES = ("CREATE UNIQUE INDEX IF NOT EXISTS nodes_event ON nodes(tenant, conv, event_id)",
                 "CREATE INDEX IF NOT EXISTS nodes_seq ON nodes(tenant, conv, seq)")
#: A user's nodes (``MemoryNode.user_id``; NULL: none), for the vector rows of a user's realm.
_USER_INDEX = "CREATE INDEX IF NOT EXISTS nodes_user ON nodes(tenant, user) WHERE user IS NOT NULL"
_NODE_COLUMNS = "tenant, conv, id, event_id, seq, kind, body, embedding"


def migrate_nodes(conn: sqlite3.Connection) -> int:
    """Create the node table in the current layout, or rewrite one of the earlier layout (rows
    in insertion order) into it, in one transaction: each conversation gets a block, its rows
    slots in (seq, id) order. Returns the rows moved (0 when the store was current or new)."""
    cols = {r[1] for r in conn.execute("PRAGMA table_info(nodes)")}
    if not cols:
        conn.execute(_NODES.format(name="nodes"))
        for statement in (*_NODE_INDEXES, _USER_INDEX):
            conn.execute(statement)
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('nodes', ?)", (NODE_LAYOUT,))
        return 0
    if "n" in cols:
        _add_user_column(conn, cols)
        return 0
    log.warning("rewriting the node table so that each conversation's rows are contiguous (once)")
    with transaction(conn):
        conn.execute("INSERT INTO node_blocks SELECT tenant, conv, ROW_NUMBER() OVER (ORDER BY tenant, conv) - 1 "
                     "FROM (SELECT DISTINCT tenant, conv FROM nodes)")
        conn.execute(_NODES.format(name="nodes_v2"))
        cur = conn.execute(
            f"INSERT INTO nodes_v2 (n, {_NODE_COLUMNS}) SELECT (b.block << {SLOT_BITS}) + ROW_NUMBER() OVER "
            "(PARTITION BY o.tenant, o.conv ORDER BY o.seq, o.id) - 1, o.tenant, o.conv, o.id, o.event_id, o.seq, "
            "o.kind, o.body, o.embedding FROM nodes o JOIN node_blocks b ON b.tenant = o.tenant AND b.conv = o.conv "
            "ORDER BY 1")
        moved = cur.rowcount
        conn.execute("DROP TABLE nodes")  # its indexes go with it
        conn.execute("ALTER TABLE nodes_v2 RENAME TO nodes")
        for statement in _NODE_INDEXES:
            conn.execute(statement)
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('nodes', ?)", (NODE_LAYOUT,))
        _add_user_column(conn, {r[1] for r in conn.execute("PRAGMA table_info(nodes)")})
    log.warning("node table rewritten: %d rows", moved)
    return moved


def _add_user_column(conn: sqlite3.Connection, cols: set[str]) -> None:
    """The ``user`` column and its index, on a store made before nodes carried their user (its
    nodes have none: NULL)."""
    if "user" not in cols:
        conn.execute("ALTER TABLE nodes ADD COLUMN user TEXT")
    conn.execute(_USER_INDEX)


#: The lexical layout this build reads: one FTS5 table per tenant (``meta`` key ``lexical``).
LEXICAL_LAYOUT = "per-tenant-v3"


def lexical_table(tenant_id: str) -> str:
    """The tenant's FTS5 table: BM25 statistics (document count, lengths, term frequencies) are
    then the tenant's own, so another tenant's writes never change its rankings. The name is a
    hash of the tenant id (any id, no quoting or collisions to worry about)."""
    return "lexical_t_" + hashlib.sha256(tenant_id.encode("utf-8")).hexdigest()[:24]


def _create_lexical(conn: sqlite3.Connection, table: str) -> None:
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING fts5("
                 "content, scope, conv UNINDEXED, node UNINDEXED, seq UNINDEXED, tokenize = 'porter unicode61')")


def migrate_lexical(conn: sqlite3.Connection) -> int:
    """Move an older store's shared FTS5 table (``lexical_v2``, BM25 over all tenants) into one
    table per tenant, in one transaction, and record the layout; returns the rows moved (0 when
    there was nothing to migrate). Runs when a store is opened: idempotent, and a crash rolls back."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name='lexical_v2'").fetchone() is None:
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('lexical', ?)", (LEXICAL_LAYOUT,))
        return 0
    moved = 0
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name='lexical_v2'").fetchone() is not None:
            rows = conn.execute("SELECT rowid, content, scope, tenant, conv, node, seq FROM lexical_v2").fetchall()
            for _rid, content, scope, tenant, conv, node, seq in rows:
                table = lexical_table(tenant)
                _create_lexical(conn, table)
                cur = conn.execute(f"INSERT INTO {table} VALUES (?,?,?,?,?)", (content, scope, conv, node, seq))
                conn.execute("INSERT OR REPLACE INTO lexical_rows VALUES (?,?,?,?)", (tenant, conv, node, cur.lastrowid))
                moved += 1
            conn.execute("DROP TABLE lexical_v2")
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('lexical', ?)", (LEXICAL_LAYOUT,))
        conn.execute("COMMIT")
    except sqlite3.Error:
        rollback(conn)
        raise
    return moved


#: Page cache per connection, in KiB, of a connection opened without one (SQLite's default is
#: 2 MiB). A batch that mixes many conversations touches pages all over the B-trees, so a page
#: cache much smaller than the hot part of the file makes writes re-read pages from the OS.
CACHE_KIB = 64 * 1024
#: Page size of a new memory store, in bytes. A node row (its body and its 384 float32s, about
#: 2.1 KB) does not fit twice in SQLite's default 4 KiB page, so each took a page of its own.
PAGE_SIZE = 16384
#: The write-ahead log is checkpointed once it holds this many bytes of pages, and cut back to
#: this size after a checkpoint: SQLite's own threshold counts pages (1,000), which at
#: :data:`PAGE_SIZE` would keep a 16 MiB log beside the database.
WAL_BYTES = 4 << 20
#: Page cache of an embedded store opened without a memory plan, in MiB, shared by its node, edge
#: and lexical connections (a plan's ``sqlite_cache_mb``: ``storage.budget``).
CACHE_MB = 256


def _page_size(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA page_size").fetchone()[0])


def connect(path: str | Path, cache_kib: int = CACHE_KIB) -> sqlite3.Connection:
    """Open (and create, with pages of :data:`PAGE_SIZE`) the database as :func:`open_file`
    does, with a page cache of ``cache_kib``, and the schema."""
    conn = open_file(path, PAGE_SIZE)
    with sqlite_errors(str(path)):
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA cache_size=-{max(64, cache_kib)}")
        conn.execute(f"PRAGMA wal_autocheckpoint={WAL_BYTES // _page_size(conn)}")
        conn.execute(f"PRAGMA journal_size_limit={WAL_BYTES}")
        conn.executescript(_SCHEMA)
        migrate_nodes(conn)
        # stores of an earlier layout kept a second vector per turn (its context vector); a turn's
        # embedding is now read after the turn before it in one pass, and the table goes
        conn.execute("DROP TABLE IF EXISTS node_contexts")
        migrate_lexical(conn)
        migrate_edges(conn)
    return conn


def check_model(conn: sqlite3.Connection, embedder: str) -> None:
    """Record ``embedder`` in a new store; raise :class:`ModelMismatch` if the store was built
    with another model (its vectors are not comparable: rebuild with ``jevmem replay``/re-ingest)."""
    with sqlite_errors("model check"):
        recorded = _recorded_model(conn, embedder)
    if recorded != embedder:
        raise ModelMismatch(f"this store was built with embedding model {recorded!r}, not {embedder!r}: "
                            "use that model (JEVMEM_EMBEDDER) or rebuild the store into a fresh directory")


def _recorded_model(conn: sqlite3.Connection, embedder: str) -> str:
    """The model the store records, recording ``embedder`` first in a new store."""
    if conn.execute("SELECT 1 FROM meta WHERE key='embedder'").fetchone() is None and \
            conn.execute("SELECT 1 FROM nodes LIMIT 1").fetchone() is not None:
        raise ModelMismatch("this store was built before stores recorded their embedding model: "
                            "rebuild it into a fresh directory")
    conn.execute("INSERT OR IGNORE INTO meta VALUES ('embedder', ?)", (embedder,))
    return str(conn.execute("SELECT value FROM meta WHERE key='embedder'").fetchone()[0])


def _vec(blob: bytes | None, dtype: type[np.floating] = np.float32) -> list[float] | None:
    return None if blob is None else np.frombuffer(blob, dtype=dtype).astype(np.float64).tolist()  # exact


def _matrix(blobs: Sequence[bytes | None], dim: int, dtype: type[np.floating] = np.float32) -> np.ndarray:
    """Stored vectors (``dtype`` bytes: float32 embeddings, float16 context vectors) as one float32
    ``(len(blobs), dim)`` matrix (zeros where a node has no vector of width ``dim``)."""
    out = np.zeros((len(blobs), dim), dtype=np.float32)
    width = np.dtype(dtype).itemsize * dim
    for j, blob in enumerate(blobs):
        if blob is not None and len(blob) == width:
            out[j] = np.frombuffer(blob, dtype=dtype)
    return out


def _packed_body(n: MemoryNode) -> bytes:
    """A node's body as stored: its JSON (without its vectors), zlib-compressed (about half)."""
    return zlib.compress(orjson.dumps(n.without_embedding().model_dump(mode="json")), 1)


def _body(raw: bytes) -> bytes:
    """A stored body's JSON (bodies written before compression are JSON already)."""
    return raw if raw[:1] == b"{" else zlib.decompress(raw)


#: Decoded nodes kept in memory (each without its embedding, plus the embedding's float32 bytes:
#: about 6 KB at 384 dimensions, a third of a node holding its embedding as a list of floats):
#: queries fetch the same nodes again and again (a query reads at most ``limits.visited_nodes``).
NODE_CACHE = 4096

#: A cached node: the node without its embedding, and its embedding as stored (float32 bytes, or None).
_Cached = tuple[MemoryNode, bytes | None]


def _blob(vector: Sequence[float] | None, dtype: type[np.floating] = np.float32) -> bytes | None:
    return None if vector is None else np.asarray(vector, dtype=dtype).tobytes()


def retrieval_matrix(embeddings: Sequence[bytes | None], dim: int) -> np.ndarray:
    """The nodes' retrieval rows (their embeddings, :mod:`topology.vectors`) from their stored vectors."""
    return _matrix(embeddings, dim)


def _full(n: MemoryNode, emb: bytes | None) -> MemoryNode:
    """A cached node with its embedding."""
    if emb is None:
        return n
    return n.model_copy(update={"embedding": _vec(emb)})


class SqliteNodeStore(Base):
    """Canonical nodes (JSON body, float32 embedding) and an entity posting table.

    ``get`` and ``get_rows`` keep an LRU of decoded nodes; this store is its database's only
    writer of nodes, and an upsert or a delete drops the nodes it rewrites from the cache, so the
    cache never serves stale data."""

    def __init__(self, conn: sqlite3.Connection, lock: DirLock | None = None) -> None:
        super().__init__(conn, lock)
        self._cache: OrderedDict[str, _Cached] = OrderedDict()
        #: (tenant, conversation) -> (its next free row key, its block's last; see :data:`NODE_LAYOUT`)
        self._next_row: dict[tuple[str, str], tuple[int, int]] = {}

    def _new_row(self, tenant: str, conv: str) -> int:
        """A free row key in the conversation's block (the block made on its first node); in the
        caller's transaction."""
        got = self._next_row.get((tenant, conv))
        if got is None:
            row = self._conn.execute("SELECT block FROM node_blocks WHERE tenant=? AND conv=?", (tenant, conv)).fetchone()
            if row is None:
                block = int(self._conn.execute("SELECT COALESCE(MAX(block) + 1, 0) FROM node_blocks").fetchone()[0])
                self._conn.execute("INSERT INTO node_blocks VALUES (?,?,?)", (tenant, conv, block))
            else:
                block = int(row[0])
            low, end = block << SLOT_BITS, ((block + 1) << SLOT_BITS) - 1
            top = self._conn.execute("SELECT MAX(n) FROM nodes WHERE n BETWEEN ? AND ?", (low, end)).fetchone()[0]
            got = (low if top is None else int(top) + 1, end)
        free, end = got
        if free > end:
            raise sqlite3.DatabaseError(f"conversation {conv!r} has used all {1 << SLOT_BITS} node rows of its block")
        self._next_row[(tenant, conv)] = (free + 1, end)
        return free

    @translated
    async def upsert(self, nodes: Sequence[MemoryNode]) -> None:
        if not nodes:
            return
        for n in nodes:
            self._cache.pop(n.id, None)
        try:
            with transaction(self._conn):
                self._upsert(nodes)
        except BaseException:
            self._next_row.clear()  # what it handed out may not have been committed: read the table again
            raise

    def _upsert(self, nodes: Sequence[MemoryNode]) -> None:
        """Every node is offered a fresh row key; a node already stored keeps its row (the upsert
        updates it in place), so a rewrite leaves one unused slot in its conversation's block."""
        for n in nodes:
            emb = _blob(n.embedding)
            row = self._new_row(n.tenant_id, n.conversation_id)
            self._conn.execute(
                f"INSERT INTO nodes (n, {_NODE_COLUMNS}, user) VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT(tenant, conv, id) "
                "DO UPDATE SET body=excluded.body, embedding=COALESCE(excluded.embedding, nodes.embedding), "
                "seq=excluded.seq, user=excluded.user",
                (row, n.tenant_id, n.conversation_id, n.id, n.event_id, n.seq, n.kind, _packed_body(n), emb,
                 n.user_id))
            self._conn.executemany(
                "INSERT OR IGNORE INTO node_entities VALUES (?,?,?,?,?)",
                [(n.tenant_id, n.conversation_id, e.id, n.id, n.seq) for e in n.entities])

    def _read(self, scope: Scope, ids: Sequence[str]) -> list[_Cached]:
        """The cached form of the scope's nodes ``ids``, in order, unknown ids skipped (through the LRU)."""
        if not ids:
            return []
        cache = self._cache
        found: dict[str, _Cached] = {}
        for i in ids:
            got = cache.get(i)
            if got is not None and got[0].tenant_id == scope.tenant_id and got[0].conversation_id == scope.conversation_id:
                found[i] = got
                cache.move_to_end(i)
        missing = [i for i in dict.fromkeys(ids) if i not in found]
        if missing:
            marks = ",".join("?" * len(missing))
            rows = self._conn.execute(
                f"SELECT id, body, embedding FROM nodes WHERE tenant=? AND conv=? AND id IN ({marks})",
                (scope.tenant_id, scope.conversation_id, *missing)).fetchall()
            for nid, body, emb in rows:
                found[nid] = cache[nid] = (MemoryNode.model_validate_json(_body(body)), emb)
            while len(cache) > NODE_CACHE:
                cache.popitem(last=False)
        return [found[i] for i in ids if i in found]

    @translated
    async def get(self, scope: Scope, ids: Sequence[str]) -> list[MemoryNode]:
        return [_full(*got) for got in self._read(scope, ids)]

    @translated
    async def get_heads(self, scope: Scope, ids: Sequence[str]) -> list[MemoryNode]:
        return [got[0] for got in self._read(scope, ids)]

    @translated
    async def get_rows(self, scope: Scope, ids: Sequence[str], dim: int) -> tuple[list[MemoryNode], np.ndarray]:
        got = self._read(scope, ids)
        return [g[0] for g in got], retrieval_matrix([g[1] for g in got], dim)

    @translated
    async def seqs(self, scope: Scope, event_ids: Sequence[str]) -> dict[str, int]:
        if not event_ids:
            return {}
        marks = ",".join("?" * len(event_ids))
        rows = self._conn.execute(
            f"SELECT event_id, seq FROM nodes WHERE tenant=? AND conv=? AND event_id IN ({marks})",
            (scope.tenant_id, scope.conversation_id, *event_ids)).fetchall()
        return {r[0]: int(r[1]) for r in rows}

    @translated
    async def next_seq(self, scope: Scope) -> int:
        row = self._conn.execute(
            "SELECT MAX(seq) FROM nodes WHERE tenant=? AND conv=? AND kind='observation'",
            (scope.tenant_id, scope.conversation_id)).fetchone()
        return 0 if row[0] is None else int(row[0]) + 1

    @translated
    async def observation_count(self, scope: Scope) -> int:
        row = self._conn.execute(
            "SELECT COUNT(*) FROM nodes WHERE tenant=? AND conv=? AND kind='observation'",
            (scope.tenant_id, scope.conversation_id)).fetchone()
        return int(row[0])

    @translated
    async def used_seqs(self, scope: Scope) -> list[int]:
        rows = self._conn.execute(
            "SELECT seq FROM nodes WHERE tenant=? AND conv=? AND kind='observation' ORDER BY seq",
            (scope.tenant_id, scope.conversation_id)).fetchall()
        return [int(r[0]) for r in rows]

    @translated
    async def scan(self, scope: Scope) -> list[MemoryNode]:
        rows = self._conn.execute("SELECT body FROM nodes WHERE tenant=? AND conv=? ORDER BY seq, id",
                                  (scope.tenant_id, scope.conversation_id)).fetchall()
        return [MemoryNode.model_validate_json(_body(r[0])) for r in rows]

    @translated
    async def scan_rows(self, scope: Scope, dim: int) -> tuple[list[MemoryNode], np.ndarray]:
        """Read past the LRU of :meth:`get` (a whole conversation would flush it)."""
        rows = self._conn.execute("SELECT body, embedding FROM nodes WHERE tenant=? AND conv=? ORDER BY seq, id",
                                  (scope.tenant_id, scope.conversation_id)).fetchall()
        return [MemoryNode.model_validate_json(_body(r[0])) for r in rows], _matrix([r[1] for r in rows], dim)

    @translated
    async def conversations(self, tenant_id: str, users: Collection[str] | None = None) -> list[tuple[str, int]]:
        if users is None:
            rows = self._conn.execute("SELECT conv, count(*) FROM nodes WHERE tenant=? GROUP BY conv ORDER BY conv",
                                      (tenant_id,)).fetchall()
        else:
            wanted = sorted(users)
            marks = ",".join("?" * len(wanted))
            rows = self._conn.execute(
                f"SELECT conv, count(*) FROM nodes WHERE tenant=? AND user IN ({marks}) GROUP BY conv ORDER BY conv",
                (tenant_id, *wanted)).fetchall() if wanted else []
        return [(str(c), int(n)) for c, n in rows]

    @translated
    async def sharing_entities_before(self, scope: Scope, entity_ids: Sequence[str], before_seq: int, limit: int) -> list[str]:
        if not entity_ids:
            return []
        marks = ",".join("?" * len(entity_ids))
        rows = self._conn.execute(
            f"SELECT node, MAX(seq) s FROM node_entities WHERE tenant=? AND conv=? AND entity IN ({marks}) "
            "AND seq < ? GROUP BY node ORDER BY COUNT(*) DESC, s DESC LIMIT ?",
            (scope.tenant_id, scope.conversation_id, *entity_ids, before_seq, limit)).fetchall()
        return [r[0] for r in rows]

    @translated
    async def preceding(self, scope: Scope, before_seq: int, limit: int) -> list[str]:
        rows = self._conn.execute(
            "SELECT id FROM nodes WHERE tenant=? AND conv=? AND seq < ? AND kind='observation' "
            "ORDER BY seq DESC LIMIT ?", (scope.tenant_id, scope.conversation_id, before_seq, limit)).fetchall()
        return [r[0] for r in rows]

    def _drop_cached(self, scope: Scope) -> None:
        for nid in [i for i, (n, _) in self._cache.items()
                    if n.tenant_id == scope.tenant_id and n.conversation_id == scope.conversation_id]:
            del self._cache[nid]

    @translated
    async def delete(self, scope: Scope, ids: Sequence[str]) -> int:
        if not ids:
            return 0
        for i in ids:
            self._cache.pop(i, None)
        marks, sc = ",".join("?" * len(ids)), (scope.tenant_id, scope.conversation_id)
        return self._delete([(f"DELETE FROM node_entities WHERE tenant=? AND conv=? AND node IN ({marks})", (*sc, *ids)),
                             (f"DELETE FROM nodes WHERE tenant=? AND conv=? AND id IN ({marks})", (*sc, *ids))])

    @translated
    async def delete_scope(self, scope: Scope) -> int:
        self._drop_cached(scope)
        sc = (scope.tenant_id, scope.conversation_id)
        return self._delete([("DELETE FROM node_entities WHERE tenant=? AND conv=?", sc),
                             ("DELETE FROM nodes WHERE tenant=? AND conv=?", sc),
                             ("DELETE FROM forgotten WHERE tenant=? AND conv=?", sc)], counted=1)

    @translated
    async def record_forgotten(self, scope: Scope, event_id: str, seq: int) -> None:
        self._write("INSERT OR REPLACE INTO forgotten VALUES (?,?,?,?)",
                    [(scope.tenant_id, scope.conversation_id, event_id, seq)])

    @translated
    async def forgotten(self, scope: Scope) -> dict[str, int]:
        rows = self._conn.execute("SELECT event_id, seq FROM forgotten WHERE tenant=? AND conv=?",
                                  (scope.tenant_id, scope.conversation_id)).fetchall()
        return {r[0]: int(r[1]) for r in rows}


def fts_query(query: str) -> str:
    """An FTS5 MATCH expression: OR of the quoted content words (no operator injection)."""
    words = [w for w in textmod.tokens_raw(query) if w not in textmod.STOPWORDS]
    return " OR ".join(f'"{w}"' for w in dict.fromkeys(words))


def scope_token(scope: Scope) -> str:
    """One FTS token per (tenant, conversation), unambiguous for any ids: a search ANDs it with the
    query so FTS5 walks only the scope's rows (cost flat in the size of other scopes)."""
    return "s" + hashlib.sha256(orjson.dumps([scope.tenant_id, scope.conversation_id])).hexdigest()[:24]


def user_token(tenant_id: str, user_id: str) -> str:
    """One FTS token per (tenant, user), beside the scope token of each of the user's rows."""
    return "u" + hashlib.sha256(orjson.dumps([tenant_id, "user", user_id])).hexdigest()[:24]


def _scope_column(n: MemoryNode) -> str:
    """The tokens a node's row carries in the FTS ``scope`` column: its conversation's and its user's."""
    own = scope_token(n.scope)
    return own if n.user_id is None else f"{own} {user_token(n.tenant_id, n.user_id)}"


def realm_match(realm: Realm, query: str) -> str:
    """The FTS5 MATCH expression of ``query`` (:func:`fts_query`, non-empty) over ``realm``'s rows."""
    parts = [f"content : ({query})"]
    if realm.user_id is not None:
        parts.append(f"scope : {user_token(realm.tenant_id, realm.user_id)}")
    if realm.conversation_ids is not None:
        scopes = [scope_token(Scope(tenant_id=realm.tenant_id, conversation_id=c)) for c in realm.conversation_ids]
        parts.append(f"scope : ({' OR '.join(scopes)})")
    return " AND ".join(parts)


class SqliteLexicalIndex(Base):
    """BM25 on FTS5 (porter stemming) plus a token posting table for candidate overlap.

    One FTS5 table per tenant (:func:`lexical_table`, created on the tenant's first write), so BM25
    statistics are per tenant: a tenant's rankings never depend on other tenants' data. Each row
    carries its conversation's token in a second column (weight 0 in BM25) so a search is an FTS5
    AND over the conversation's rows; ``lexical_rows`` maps a node to its FTS rowid so a re-index
    or a delete goes by rowid instead of scanning the table. A search of a tenant with no table
    yet returns nothing."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__(conn)
        self._tables: set[str] = set()

    def _table(self, tenant_id: str, create: bool) -> str | None:
        table = lexical_table(tenant_id)
        if table not in self._tables:
            if create:
                _create_lexical(self._conn, table)
            elif self._conn.execute("SELECT 1 FROM sqlite_master WHERE name=?", (table,)).fetchone() is None:
                return None
            self._tables.add(table)
        return table

    @translated
    async def upsert(self, nodes: Sequence[MemoryNode]) -> None:
        if not nodes:
            return
        tables = {t: self._table(t, create=True) for t in {n.tenant_id for n in nodes}}
        with transaction(self._conn):
            for n in nodes:
                table = tables[n.tenant_id]
                old = self._conn.execute("SELECT rid FROM lexical_rows WHERE tenant=? AND conv=? AND node=?",
                                         (n.tenant_id, n.conversation_id, n.id)).fetchone()
                if old is not None:
                    self._conn.execute(f"DELETE FROM {table} WHERE rowid=?", (old[0],))
                cur = self._conn.execute(f"INSERT INTO {table} VALUES (?,?,?,?,?)",
                                         (n.content, _scope_column(n), n.conversation_id, n.id, n.seq))
                self._conn.execute("INSERT OR REPLACE INTO lexical_rows VALUES (?,?,?,?)",
                                   (n.tenant_id, n.conversation_id, n.id, cur.lastrowid))
                self._conn.executemany("INSERT OR IGNORE INTO postings VALUES (?,?,?,?,?)",
                                       [(n.tenant_id, n.conversation_id, t, n.id, n.seq) for t in set(n.tokens)])

    @translated
    async def search(self, scope: Scope, text: str, limit: int) -> list[Hit]:
        q = fts_query(text)
        table = self._table(scope.tenant_id, create=False)
        if not q or table is None:
            return []
        match = f"scope : {scope_token(scope)} AND content : ({q})"
        rows = self._conn.execute(
            f"SELECT node, bm25({table}, 1.0, 0.0) b FROM {table} WHERE {table} MATCH ? AND conv=? "
            "ORDER BY b, node LIMIT ?", (match, scope.conversation_id, limit)).fetchall()
        return [Hit(r[0], -float(r[1])) for r in rows]

    @translated
    async def search_realm(self, realm: Realm, query: Sequence[float] | str, limit: int) -> list[Hit]:
        """BM25 over the realm's rows of the tenant's table (the tenant's statistics), best
        first (ties: earlier seq, then id), each hit with its conversation."""
        if not isinstance(query, str):
            raise TypeError("a lexical realm search takes a text")
        q = fts_query(query)
        table = self._table(realm.tenant_id, create=False)
        if not q or table is None or realm.conversation_ids == () or limit <= 0:
            return []
        rows = self._conn.execute(
            f"SELECT node, conv, bm25({table}, 1.0, 0.0) b FROM {table} WHERE {table} MATCH ? "
            "ORDER BY b, seq, node LIMIT ?", (realm_match(realm, q), limit)).fetchall()
        return [Hit(r[0], -float(r[2]), str(r[1])) for r in rows]

    @translated
    async def overlapping(self, scope: Scope, tokens: Sequence[str], before_seq: int, limit: int) -> list[str]:
        toks = sorted(set(tokens))
        if not toks:
            return []
        marks = ",".join("?" * len(toks))
        rows = self._conn.execute(
            f"SELECT node, COUNT(*) c, MAX(seq) s FROM postings WHERE tenant=? AND conv=? AND token IN ({marks}) "
            "AND seq < ? GROUP BY node ORDER BY c DESC, s DESC LIMIT ?",
            (scope.tenant_id, scope.conversation_id, *toks, before_seq, limit)).fetchall()
        return [r[0] for r in rows]

    @translated
    async def delete(self, scope: Scope, ids: Sequence[str]) -> None:
        if ids:
            await self._remove(scope, f"AND node IN ({','.join('?' * len(ids))})", tuple(ids))

    @translated
    async def delete_scope(self, scope: Scope) -> None:
        await self._remove(scope, "", ())

    async def _remove(self, scope: Scope, where: str, args: tuple[object, ...]) -> None:
        sc = (scope.tenant_id, scope.conversation_id, *args)
        table = self._table(scope.tenant_id, create=False)
        rids = [r[0] for r in self._conn.execute(
            f"SELECT rid FROM lexical_rows WHERE tenant=? AND conv=? {where}", sc).fetchall()]
        statements: list[tuple[str, tuple[object, ...]]] = []
        if table is not None:
            statements += [(f"DELETE FROM {table} WHERE rowid=?", (rid,)) for rid in rids]
        statements += [(f"DELETE FROM lexical_rows WHERE tenant=? AND conv=? {where}", sc),
                       (f"DELETE FROM postings WHERE tenant=? AND conv=? {where}", sc)]
        self._delete(statements)


class SqliteDeadLetters(Base):
    """The embedded dead-letter queue: append-only, newest last, listed per tenant."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__(conn)
        with sqlite_errors("dead letters schema"):
            columns = {r[1] for r in conn.execute("PRAGMA table_info(dead_letters)")}
            if "tenant" not in columns:  # stores made before letters carried their tenant
                conn.execute("ALTER TABLE dead_letters ADD COLUMN tenant TEXT")
            if "conv" not in columns:  # stores made before letters named their conversation and event
                conn.execute("ALTER TABLE dead_letters ADD COLUMN conv TEXT")
                conn.execute("ALTER TABLE dead_letters ADD COLUMN event TEXT")
                for n, body in conn.execute("SELECT n, body FROM dead_letters").fetchall():
                    old = DeadLetter.model_validate(orjson.loads(body))
                    claimed = DeadLetter.of(old.original, old.reason, old.source, old.tenant_id)
                    conn.execute("UPDATE dead_letters SET conv = ?, event = ? WHERE n = ?",
                                 (claimed.conversation_id, claimed.event_id, n))
            conn.execute("CREATE INDEX IF NOT EXISTS dead_letters_tenant ON dead_letters(tenant, n)")
            conn.execute("CREATE INDEX IF NOT EXISTS dead_letters_scope ON dead_letters(tenant, conv, event)")

    @translated
    async def put(self, letters: Sequence[DeadLetter]) -> None:
        self._write("INSERT INTO dead_letters (tenant, conv, event, body) VALUES (?, ?, ?, ?)",
                    [(d.tenant_id, d.conversation_id, d.event_id, orjson.dumps(d.model_dump(mode="json")))
                     for d in letters])

    @translated
    async def forget(self, scope: Scope, event_id: str | None) -> int:
        if event_id is None:
            return self._delete([("DELETE FROM dead_letters WHERE tenant = ? AND conv = ?",
                                  (scope.tenant_id, scope.conversation_id))], counted=0)
        return self._delete([("DELETE FROM dead_letters WHERE tenant = ? AND conv = ? AND event = ?",
                              (scope.tenant_id, scope.conversation_id, event_id))], counted=0)

    @translated
    async def recent(self, limit: int = 100, tenant_id: str | None = None) -> list[DeadLetter]:
        """The newest ``limit`` letters, oldest first: ``tenant_id``'s only, or all when None."""
        if tenant_id is None:
            rows = self._conn.execute("SELECT body FROM dead_letters ORDER BY n DESC LIMIT ?", (limit,)).fetchall()
        else:
            rows = self._conn.execute("SELECT body FROM dead_letters WHERE tenant = ? ORDER BY n DESC LIMIT ?",
                                      (tenant_id, limit)).fetchall()
        return [DeadLetter.model_validate(orjson.loads(r[0])) for r in reversed(rows)]
