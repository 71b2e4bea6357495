"""Embedded vector search: exact ranking over the node store's own vectors, a conversation at a time.

The embedded store keeps each node's embedding once, as float32 bytes in its node table
(:class:`storage.sqlite.store.SqliteNodeStore`). Every search is scoped to one conversation, so this
index reads that conversation's retrieval rows (:mod:`topology.vectors`) into one float32 matrix
and answers with a matrix product: no second copy of the vectors on disk, and the cost of a
search follows the size of its conversation, never the size of the store.

Contracts:

* Exact: a hit's score is the dot product of the node's retrieval vector and the query, in
  float64 (for a node without a context vector, its embedding: the cosine, embeddings being
  L2-normalised); best first, ties by earlier seq, then id. Scoped
  by tenant and conversation, and ``seq < before_seq`` when given. Nodes without an embedding
  are never hits.
* Read-your-writes: the node store is written before this index is told (``Stores.materialise``);
  a conversation not held is read from the node store on its next search, and :meth:`upsert`
  replaces or appends the rows of a held one, so a node is one row however the two interleave.
  :meth:`delete` and :meth:`delete_scope` drop the held conversation (read again on next use).
* Realms (:meth:`search_realm`): with a ``realms`` folder, a tenant's and each user's rows are
  kept in realm files (:mod:`storage.sqlite.realm_files`: written by :meth:`upsert`, overwritten
  with zeros by a delete, checked against the node table when first opened; a tenant's whole
  realm, while every node written has a user, only from its first search on) and ranked in place
  with one float32 product; without one (a store in memory), each realm's rows are read from the
  node table into one matrix on first use (kept current by :meth:`upsert`, dropped by any delete
  of the tenant). Either way the best candidates are then ranked exactly, in float64 (each
  row's score the same wherever the row sits: :func:`~storage.sqlite.realm_files.exact_scores`).
  A user's realm limited to a list of conversations ranks their rows together.
* Memory is bounded: at most ``max_rows`` rows over all held conversations and in-memory realms,
  and over the realm files' lookups (a writer's ids, the conversations); the least recently
  searched are dropped first (the one being searched is always kept). A realm file's vectors
  are mapped, not held: the operating system's page cache keeps them.
* The store has one writing process (:class:`storage.sqlite.base.DirLock`), so no write bypasses
  :meth:`upsert`.
"""

from __future__ import annotations

import sqlite3
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from storage.ports import Hit
from storage.sqlite.base import translated
from storage.sqlite.realm_files import Entry, RealmFile, exact_scores, fits, realm_path
from storage.sqlite.store import retrieval_matrix
from topology.schemas import MemoryNode, Realm, Scope

#: Rows held by default (about 1.5 KB each at 384 dimensions).
MAX_ROWS = 65_536


class _Held:
    """One conversation's rows: ``matrix[:n]`` (float32, grown by doubling), ids and seqs."""

    def __init__(self, dim: int, rows: np.ndarray | None = None, ids: list[str] | None = None,
                 seqs: list[int] | None = None) -> None:
        self.ids = ids or []
        self.row_of = {nid: j for j, nid in enumerate(self.ids)}
        self.matrix = rows if rows is not None else np.zeros((0, dim), dtype=np.float32)
        self.seqs = np.asarray(seqs or [], dtype=np.int64)
        self.n = len(self.ids)

    def put(self, nid: str, seq: int, vec: np.ndarray) -> None:
        at = self.row_of.get(nid)
        if at is None:
            if self.n == len(self.matrix):
                grown = max(16, 2 * self.n)
                self.matrix = np.resize(self.matrix, (grown, self.matrix.shape[1]))
                self.seqs = np.resize(self.seqs, grown)
            at = self.row_of[nid] = self.n
            self.ids.append(nid)
            self.n += 1
        self.matrix[at], self.seqs[at] = vec, seq


class _HeldRealm(_Held):
    """A realm's rows (:class:`_Held`) with each row's conversation."""

    def __init__(self, dim: int, rows: np.ndarray, ids: list[str], seqs: list[int], convs: list[str]) -> None:
        super().__init__(dim, rows, ids, seqs)
        self.convs = convs
        self.conv_of = dict(zip(ids, convs, strict=True))

    def put_in(self, nid: str, conv: str, seq: int, vec: np.ndarray) -> None:
        if nid not in self.row_of:
            self.convs.append(conv)
            self.conv_of[nid] = conv
        self.put(nid, seq, vec)


#: A held realm's key: (tenant, user or None for the whole tenant).
_RealmKey = tuple[str, str | None]
#: Extra candidates taken from a realm's float32 ranking before the exact float64 one.
_REALM_MARGIN = 16
#: Queries of one realm ranked by one matrix product in :meth:`MatrixVectorIndex.search_realms`
#: (its rows x this many float32 scores at a time: 12.8 MB at 100,000 rows).
_REALMS_AT_ONCE = 32
#: Realm files open at once (each maps its files; the least recently used is closed first).
OPEN_REALMS = 128


def _where(key: _RealmKey) -> tuple[str, tuple[str, ...]]:
    """The node table's filter for the realm ``key`` (after ``WHERE tenant=?``) and its arguments."""
    tenant, user = key
    return ("AND user=?", (tenant, user)) if user is not None else ("", (tenant,))


class MatrixVectorIndex:
    """A :class:`~storage.ports.VectorIndex` (and batch search) over the embeddings of the node
    table of ``conn`` (see the module)."""

    def __init__(self, conn: sqlite3.Connection, dim: int, max_rows: int = MAX_ROWS,
                 realms: Path | None = None) -> None:
        self._conn, self._dim, self._max = conn, dim, max(1, max_rows)
        self._held: OrderedDict[Scope | _RealmKey, _Held] = OrderedDict()
        self._rows = 0
        self._folder = realms
        self._files: OrderedDict[_RealmKey, RealmFile] = OrderedDict()
        #: realms held in memory although a folder is given (a node id too long for a record)
        self._unfiled: set[_RealmKey] = set()

    def _realm_rows(self, key: _RealmKey) -> Iterator[tuple[str, str, int, bytes | None]]:
        """The realm's node rows in the node table: (id, conversation, seq, embedding)."""
        where, args = _where(key)
        for nid, conv, seq, blob in self._conn.execute(
                f"SELECT id, conv, seq, embedding FROM nodes WHERE tenant=? {where} ORDER BY n", args):
            yield str(nid), str(conv), int(seq), blob

    def _on_disk(self, key: _RealmKey) -> bool:
        """Whether the realm's file is open in this process or its records are on disk."""
        if key in self._files or self._folder is None:
            return key in self._files
        base = realm_path(self._folder, *key)
        return base.with_name(base.name + ".rows").exists()

    def _file(self, key: _RealmKey, create: bool = False) -> RealmFile | None:
        """The realm's open file, checked against the node table (rebuilt from it when they do not
        agree); None where realms are held in memory. A realm with no rows and no file gets a
        file only when ``create`` (a search of a user never written leaves nothing on disk)."""
        if self._folder is None or key in self._unfiled:
            return None
        got = self._files.get(key)
        if got is not None:
            self._files.move_to_end(key)
            return got
        where, args = _where(key)
        [(count,)] = self._conn.execute(f"SELECT count(*) FROM nodes WHERE tenant=? {where}", args).fetchall()
        f = RealmFile(realm_path(self._folder, *key), self._dim)
        if not f.check(int(count)):
            if not count and not create:
                return f  # empty: nothing to rank
            rows = list(self._realm_rows(key))
            if not all(fits(r[0]) for r in rows):
                self._unfiled.add(key)
                return None
            usable = [j for j, r in enumerate(rows) if r[3] is not None and len(r[3]) == 4 * self._dim]
            vectors: list[np.ndarray | None] = [None] * len(rows)
            for j, row in zip(usable, retrieval_matrix([rows[j][3] for j in usable], self._dim), strict=True):
                vectors[j] = row
            f.rebuild(Entry(nid, conv, seq, vec) for (nid, conv, seq, _), vec in zip(rows, vectors, strict=True))
        self._files[key] = f
        while len(self._files) > OPEN_REALMS or (len(self._files) > 1 and self._file_rows() > self._max):
            self._files.popitem(last=False)[1].close()
        return f

    def _file_rows(self) -> int:
        return sum(f.held for f in self._files.values())

    def _load(self, scope: Scope) -> _Held:
        held = self._held.get(scope)
        if held is not None:
            self._held.move_to_end(scope)
            return held
        found = [(nid, int(seq), blob) for nid, seq, blob in self._conn.execute(
            "SELECT id, seq, embedding FROM nodes WHERE tenant=? AND conv=? "
            "AND embedding IS NOT NULL", (scope.tenant_id, scope.conversation_id)) if len(blob) == 4 * self._dim]
        rows = retrieval_matrix([f[2] for f in found], self._dim)
        held = _Held(self._dim, rows, [f[0] for f in found], [f[1] for f in found])
        self._held[scope] = held
        self._rows += held.n
        self._evict()
        return held

    def _load_realm(self, key: _RealmKey) -> _HeldRealm:
        held = self._held.get(key)
        if isinstance(held, _HeldRealm):
            self._held.move_to_end(key)
            return held
        where, args = _where(key)
        found = [(nid, str(conv), int(seq), blob) for nid, conv, seq, blob in self._conn.execute(
            f"SELECT id, conv, seq, embedding FROM nodes WHERE tenant=? {where} "
            "AND embedding IS NOT NULL", args) if len(blob) == 4 * self._dim]
        rows = retrieval_matrix([f[3] for f in found], self._dim)
        realm = _HeldRealm(self._dim, rows, [f[0] for f in found], [f[2] for f in found], [f[1] for f in found])
        self._held[key] = realm
        self._rows += realm.n
        self._evict()
        return realm

    def _evict(self) -> None:
        while self._rows > self._max and len(self._held) > 1:
            _, gone = self._held.popitem(last=False)
            self._rows -= gone.n

    def _rank(self, held: _Held, vector: Sequence[float], limit: int, before_seq: int | None,
              conversation_id: str | None = None) -> list[Hit]:
        """The held conversation's best ``limit`` rows before ``before_seq`` (score descending, then
        seq, then id), as hits naming ``conversation_id``."""
        m, seqs = held.matrix[:held.n], held.seqs[:held.n]
        if not held.n or limit <= 0:
            return []
        scores = m.astype(np.float64) @ np.asarray(vector, dtype=np.float64)
        ok = np.flatnonzero(seqs < before_seq) if before_seq is not None else np.arange(len(seqs))
        if len(ok) > limit:  # only rows scoring at least the limit-th best can be hits
            kept = scores[ok]
            ok = ok[kept >= np.partition(kept, len(kept) - limit)[len(kept) - limit]]
        ids, rows = held.ids, ok.tolist()
        # the sort reads Python numbers (indexing numpy scalars per comparison key costs more)
        score, seq = scores[ok].tolist(), seqs[ok].tolist()
        order = sorted(range(len(rows)), key=lambda k: (-score[k], seq[k], ids[rows[k]]))[:limit]
        return [Hit(ids[rows[k]], score[k], conversation_id) for k in order]

    @translated
    async def search(self, scope: Scope, vector: Sequence[float], limit: int, before_seq: int | None = None) -> list[Hit]:
        return self._rank(self._load(scope), vector, limit, before_seq)

    @translated
    async def search_realm(self, realm: Realm, query: Sequence[float] | str, limit: int) -> list[Hit]:
        """The realm's best ``limit`` nodes by dot product with ``query`` (a vector), each hit
        naming its conversation (see the module for the ranking)."""
        if isinstance(query, str):
            raise TypeError("a vector realm search takes a vector")
        if realm.conversation_ids is not None:
            return self._rank_conversations(realm, query, limit)
        key = (realm.tenant_id, realm.user_id)
        f = self._file(key)
        if f is not None:
            return f.search(query, limit)
        return self._rank_realm(self._load_realm(key), query, limit)

    @translated
    async def search_realms(self, queries: Sequence[tuple[Realm, Sequence[float]]], limit: int) -> list[list[Hit]]:
        """:meth:`search_realm` for each ``(realm, vector)``, in order, the same hits; the queries of
        one user's (or tenant's) whole realm share its float32 products, :data:`_REALMS_AT_ONCE`
        queries a matrix product (one pass over the realm's rows instead of one a query)."""
        out: list[list[Hit]] = [[] for _ in queries]
        groups: dict[_RealmKey, list[int]] = {}
        for i, (realm, vector) in enumerate(queries):
            if isinstance(vector, str):
                raise TypeError("a vector realm search takes a vector")
            if realm.conversation_ids is not None:
                out[i] = self._rank_conversations(realm, vector, limit)
            else:
                groups.setdefault((realm.tenant_id, realm.user_id), []).append(i)
        for key, idx in groups.items():
            f = self._file(key)
            held = self._load_realm(key) if f is None else None
            for at in range(0, len(idx), _REALMS_AT_ONCE):
                part = idx[at:at + _REALMS_AT_ONCE]
                block = np.asarray([queries[i][1] for i in part], dtype=np.float32)
                if f is not None:
                    rough = f.rough(block)
                    for j, i in enumerate(part):
                        out[i] = f.search(queries[i][1], limit, rough=rough[:, j])
                    continue
                assert held is not None
                rough = held.matrix[:held.n] @ block.T
                for j, i in enumerate(part):
                    out[i] = self._rank_realm(held, queries[i][1], limit, rough=rough[:, j])
        return out

    @staticmethod
    def _rank_realm(held: _HeldRealm, query: Sequence[float], limit: int, only: set[str] | None = None,
                    rough: np.ndarray | None = None) -> list[Hit]:
        """A held realm's best ``limit`` rows (of the conversations ``only``, when given): one float32
        product (``rough``, when given: that product over every row), then the exact ranking of the
        best."""
        kept = np.arange(held.n) if only is None else np.flatnonzero([c in only for c in held.convs[:held.n]])
        if not len(kept) or limit <= 0:
            return []
        if rough is None or only is not None:
            # every row: the held matrix as it is (a view); some: those rows gathered
            rows = held.matrix[:held.n] if only is None else held.matrix[kept]
            rough = rows @ np.asarray(query, dtype=np.float32)
        take = min(len(kept), limit + _REALM_MARGIN)
        best = kept[np.argpartition(-rough, take - 1)[:take]] if take < len(kept) else kept
        exact = exact_scores(held.matrix[best], query)
        rows, ids = best.tolist(), held.ids
        seq = held.seqs[best].tolist()
        order = sorted(range(len(rows)), key=lambda j: (-exact[j], seq[j], ids[rows[j]]))[:limit]
        return [Hit(ids[rows[j]], exact[j], held.convs[rows[j]]) for j in order]

    def _rank_conversations(self, realm: Realm, vector: Sequence[float], limit: int) -> list[Hit]:
        """A realm limited to its ``conversation_ids``: each conversation's best, ranked together."""
        if realm.user_id is not None:  # the user's rows, then only those of the listed conversations
            f = self._file((realm.tenant_id, realm.user_id))
            if f is not None:
                return f.search(vector, limit, list(realm.conversation_ids or ()))
            return self._rank_realm(self._load_realm((realm.tenant_id, realm.user_id)), vector, limit,
                                    set(realm.conversation_ids or ()))
        convs = list(dict.fromkeys(realm.conversation_ids or ()))
        if len(convs) == 1:  # one conversation's ranking is already in the realm's order
            return self._rank(self._load(Scope(tenant_id=realm.tenant_id, conversation_id=convs[0])), vector, limit,
                              None, convs[0])
        hits: list[tuple[float, int, str, str]] = []
        for conv in convs:
            held = self._load(Scope(tenant_id=realm.tenant_id, conversation_id=conv))
            hits += [(h.score, int(held.seqs[held.row_of[h.id]]), h.id, conv) for h in self._rank(held, vector, limit, None)]
        hits.sort(key=lambda x: (-x[0], x[1], x[2]))
        return [Hit(nid, score, conv) for score, _, nid, conv in hits[:limit]]

    @translated
    async def search_many(self, queries: Sequence[tuple[Scope, Sequence[float], int | None]],
                          limit: int) -> list[list[Hit]]:
        return [self._rank(self._load(s), v, limit, b) for s, v, b in queries]

    @translated
    async def upsert(self, nodes: Sequence[MemoryNode]) -> None:
        """The nodes' rows in every held conversation and realm, and in their realms' files (the
        tenant's, and the user's where the node has one): replaced where the row is there,
        appended otherwise. A node without a usable vector is a row of its realms' files that is
        never a hit (the files then count every node of the realm, as the node table does)."""
        if self._folder is not None:
            self._write_files(nodes)
        for n in nodes:
            if n.embedding is None or len(n.embedding) != self._dim:
                continue
            vec: np.ndarray | None = None
            keys: list[Scope | _RealmKey] = [n.scope]
            if self._folder is None or (n.tenant_id, None) in self._unfiled:
                keys.append((n.tenant_id, None))
            if n.user_id is not None and (self._folder is None or (n.tenant_id, n.user_id) in self._unfiled):
                keys.append((n.tenant_id, n.user_id))
            for key in keys:
                held = self._held.get(key)
                if held is None:
                    continue
                if vec is None:
                    vec = np.asarray(n.retrieval_vector(), dtype=np.float32)
                before = held.n
                if isinstance(held, _HeldRealm):
                    held.put_in(n.id, n.conversation_id, n.seq, vec)
                else:
                    held.put(n.id, n.seq, vec)
                self._rows += held.n - before
        self._evict()

    def _write_files(self, nodes: Sequence[MemoryNode]) -> None:
        by_realm: dict[_RealmKey, list[Entry]] = {}
        for n in nodes:
            ok = n.embedding is not None and len(n.embedding) == self._dim
            e = Entry(n.id, n.conversation_id, n.seq,
                      np.asarray(n.retrieval_vector(), dtype=np.float32) if ok else None)
            by_realm.setdefault((n.tenant_id, None), []).append(e)
            if n.user_id is not None:
                by_realm.setdefault((n.tenant_id, n.user_id), []).append(e)
        all_users = all(n.user_id is not None for n in nodes)
        for key, entries in by_realm.items():
            if key[1] is None and all_users and not self._on_disk(key):
                continue  # a tenant whose nodes have users gets its whole realm's file when first searched
            f = self._file(key, create=True)
            if f is None:
                continue
            if not all(fits(e.id) for e in entries):  # held in memory from now on
                self._files.pop(key)
                f.close()
                self._unfiled.add(key)
                continue
            f.write(entries)

    @translated
    async def delete(self, scope: Scope, ids: Sequence[str]) -> None:
        """Drops the held conversation and every held realm of its tenant (read again on next
        use), and overwrites the nodes' rows in their realms' files with zeros (called before the
        node table deletes them)."""
        if ids:
            self._forget(scope, ids)

    @translated
    async def delete_scope(self, scope: Scope) -> None:
        """:meth:`delete` of every node of the conversation."""
        self._forget(scope, None)

    def _forget(self, scope: Scope, ids: Sequence[str] | None) -> None:
        for key in [k for k in self._held if k == scope or (isinstance(k, tuple) and k[0] == scope.tenant_id)]:
            self._rows -= self._held.pop(key).n
        if self._folder is None:
            return
        found = self._conn.execute("SELECT id, user FROM nodes WHERE tenant=? AND conv=?",
                                   (scope.tenant_id, scope.conversation_id)).fetchall()
        wanted = None if ids is None else set(ids)
        users: dict[str | None, list[str]] = {}
        for nid, user in found:
            if wanted is None or nid in wanted:
                users.setdefault(None, []).append(nid)
                if user is not None:
                    users.setdefault(str(user), []).append(nid)
        for user, gone in users.items():
            key = (scope.tenant_id, user)
            if not self._on_disk(key):
                continue  # no file yet: built from the node table, after these deletes, when first used
            f = self._file(key)
            if f is not None:
                f.delete(gone)

    async def close(self) -> None:
        """The connection belongs to the node store, which closes it."""
        self._held.clear()
        self._rows = 0
        for f in self._files.values():
            f.close()
        self._files.clear()
