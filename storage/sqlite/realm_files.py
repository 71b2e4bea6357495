"""A realm's vectors on disk, ready to search: one user's (or one tenant's) rows in three files.

A recall across a user's sessions ranks all of the user's rows. Reading them from the node
table means reading every row's page (bodies included) and decoding each vector in Python: a
load that grows with the user's memory and is paid again after every start. A realm file keeps
the same rows in search order instead, written as the nodes are, and a search maps them
(``numpy.memmap``): the first search after a start reads no row it does not rank, the rows
live in the operating system's page cache rather than in the process, and a realm larger than
the process's memory budget is searched all the same.

Files, under ``<folder>/<tenant hash>/<realm hash>`` (:func:`realm_path`):

* ``.rows``: one record of :data:`ROW` a row: the node id (UTF-8, at most :data:`MAX_ID_BYTES`),
  its seq, its conversation (an index into ``.convs``) and a flag: :data:`VECTOR`, :data:`NONE`
  (the node has no usable vector: never a hit) or :data:`GONE` (deleted: its id and vector are
  overwritten with zeros). The record count is the realm's row count.
* ``.vec``: the rows' float32 retrieval vectors (:mod:`topology.vectors`), row ``i`` of
  ``.rows`` at ``i * dim``.
* ``.convs``: the conversations, one JSON string a line, in the order first written.

Contracts:

* The node table is the truth; these files are derived from it and checked when a process
  first opens them (:meth:`RealmFile.check`): the sizes must agree and the rows not deleted must
  number the realm's rows in the node table. Anything else (a crash between the two writes, a
  store written by a build without realm files) rebuilds the files from the node table, once.
* Appends write ``.vec`` and ``.convs`` before ``.rows``, so a torn append leaves extra vector
  bytes (cut off on open) and never a row without its vector. A rebuild writes new files
  and renames them into place after removing the old ``.rows``: a crash in between leaves no
  ``.rows``, which is a rebuild again.
* One process writes a store (:class:`storage.sqlite.base.DirLock`); it is the only writer of
  these files.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from storage.ports import Hit

#: Bytes a node id may take in a record; a realm with a longer id is not kept on disk.
MAX_ID_BYTES = 64
#: A ``.rows`` record.
ROW = np.dtype([("id", f"S{MAX_ID_BYTES}"), ("seq", "<i8"), ("conv", "<i4"), ("flag", "<i4")])
#: Row flags: a vector to rank; no usable vector; deleted.
VECTOR, NONE, GONE = 1, 0, -1
#: Extra candidates taken from the float32 ranking before the exact float64 one.
MARGIN = 16


def exact_scores(rows: np.ndarray, query: Sequence[float]) -> list[float]:
    """Each row's dot product with ``query`` in float64, the same for a row wherever it sits in
    ``rows`` (a matrix product's rounding depends on a row's position in its block)."""
    scores: list[float] = np.einsum("ij,j->i", np.asarray(rows, dtype=np.float64),
                                    np.asarray(query, dtype=np.float64)).tolist()
    return scores


def realm_path(folder: Path, tenant: str, user: str | None) -> Path:
    """The realm's files' common path (without suffix): a folder per tenant (hash of its id), a
    name per user (hash of its id; ``all`` for the tenant's whole realm)."""
    t = hashlib.sha256(tenant.encode("utf-8")).hexdigest()[:32]
    u = "all" if user is None else "u" + hashlib.sha256(user.encode("utf-8")).hexdigest()[:32]
    return folder / t / u


@dataclass(frozen=True)
class Entry:
    """One node as a realm row: id, conversation, seq, retrieval vector (None: no usable one)."""

    id: str
    conv: str
    seq: int
    vector: np.ndarray | None


def fits(node_id: str) -> bool:
    """Whether ``node_id`` can be a record's id (UTF-8 of at most :data:`MAX_ID_BYTES` bytes, no NUL)."""
    raw = node_id.encode("utf-8")
    return len(raw) <= MAX_ID_BYTES and b"\0" not in raw


def _zero(path: Path) -> None:
    """Overwrite the file at ``path``, if any, with zeros."""
    try:
        with open(path, "r+b") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(0)
            for at in range(0, size, 1 << 20):
                f.write(bytes(min(1 << 20, size - at)))
    except FileNotFoundError:
        return


class RealmFile:
    """One realm's files (see the module): :meth:`check` or :meth:`rebuild` before any other call."""

    def __init__(self, base: Path, dim: int) -> None:
        self.base, self.dim = base, dim
        self.n = 0
        self.convs: list[str] = []
        self.conv_at: dict[str, int] = {}
        #: rows that are not ranked (flag other than VECTOR)
        self.skip: set[int] = set()
        self._row_of: dict[bytes, int] | None = None
        self._maps: tuple[np.ndarray, np.ndarray] | None = None
        #: conversations named by rows not yet written to ``.convs``
        self._pending: list[str] = []

    def _file(self, suffix: str) -> Path:
        return self.base.with_name(self.base.name + suffix)

    @property
    def held(self) -> int:
        """Entries this object holds in memory (ids looked up by a writer, conversations)."""
        return len(self.convs) + (len(self._row_of) if self._row_of is not None else 0)

    def check(self, rows_in_store: int) -> bool:
        """Open the files if they agree with a realm of ``rows_in_store`` node rows (see the module);
        False (nothing opened) when they do not or do not exist."""
        rows, vec, convs = self._file(".rows"), self._file(".vec"), self._file(".convs")
        try:
            n = rows.stat().st_size // ROW.itemsize
            if vec.stat().st_size < n * self.dim * 4:
                return False
            names = [orjson.loads(line) for line in convs.read_bytes().splitlines()]
        except (OSError, orjson.JSONDecodeError):
            return False
        self.n, self.convs = n, names
        self._maps = None
        recs = self._rows()
        flags = recs["flag"]
        if int(np.count_nonzero(flags != GONE)) != rows_in_store or (n and int(recs["conv"].max()) >= len(names)):
            self.n, self.convs, self._maps = 0, [], None
            return False
        self.conv_at = {c: i for i, c in enumerate(names)}
        self.skip = set(np.flatnonzero(flags != VECTOR).tolist())
        for path, size in ((vec, n * self.dim * 4), (rows, n * ROW.itemsize)):  # a torn append's bytes
            if path.stat().st_size != size:
                os.truncate(path, size)
        return True

    def rebuild(self, entries: Iterable[Entry]) -> None:
        """Write the files anew with ``entries`` (the realm's rows in the node table)."""
        self.base.parent.mkdir(parents=True, exist_ok=True)
        self._row_of, self._maps = None, None
        self.n, self.convs, self.conv_at, self.skip, self._pending = 0, [], {}, set(), []
        # what they held may include deleted rows: not left on the disk; without ``.rows`` from
        # here on, a crash before the new files are in place is a rebuild again
        _zero(self._file(".rows"))
        self._file(".rows").unlink(missing_ok=True)
        _zero(self._file(".vec"))
        fresh = {s: self._file(s + ".new") for s in (".rows", ".vec", ".convs")}
        for p in fresh.values():
            p.write_bytes(b"")
        self._append(list(entries), fresh)
        for s in (".vec", ".convs", ".rows"):
            fresh[s].replace(self._file(s))

    def _rows(self) -> np.ndarray:
        return self._mapped()[0]

    def _mapped(self) -> tuple[np.ndarray, np.ndarray]:
        """The records and the vectors, mapped (read-only) at the current row count."""
        if self._maps is None:
            if not self.n:
                self._maps = (np.zeros(0, dtype=ROW), np.zeros((0, self.dim), dtype=np.float32))
            else:
                self._maps = (np.memmap(self._file(".rows"), dtype=ROW, mode="r", shape=(self.n,)),
                              np.memmap(self._file(".vec"), dtype=np.float32, mode="r", shape=(self.n, self.dim)))
        return self._maps

    def row_of(self) -> dict[bytes, int]:
        """Each id's row (built from ``.rows`` on first use; a writer's lookup)."""
        if self._row_of is None:
            ids = self._rows()["id"].tolist()
            self._row_of = {raw: j for j, raw in enumerate(ids) if raw}
        return self._row_of

    def drop_lookup(self) -> None:
        """Forget the id lookup (built again when next needed)."""
        self._row_of = None

    def write(self, entries: Sequence[Entry]) -> None:
        """Each entry as the row of its id: replaced in place where the realm has it (see
        :meth:`_put`), appended otherwise."""
        known = self.row_of()
        new: list[Entry] = []
        for e in entries:
            at = known.get(e.id.encode("utf-8"))
            if at is None:
                new.append(e)
            else:
                self._put(at, e)
        if new:
            self._append(new, {s: self._file(s) for s in (".rows", ".vec", ".convs")})

    def _records(self, entries: Sequence[Entry]) -> tuple[np.ndarray, np.ndarray]:
        """The entries' records and float32 vectors (zeros for an entry without a usable one)."""
        ok = [e.vector is not None and len(e.vector) == self.dim for e in entries]
        recs = np.zeros(len(entries), dtype=ROW)
        recs["id"] = [e.id.encode("utf-8") for e in entries]
        recs["seq"] = [e.seq for e in entries]
        recs["conv"] = [self._conv(e.conv) for e in entries]
        recs["flag"] = np.where(ok, VECTOR, NONE)
        vecs = np.zeros((len(entries), self.dim), dtype=np.float32)
        good = [j for j, y in enumerate(ok) if y]
        if good:
            vecs[good] = np.asarray([entries[j].vector for j in good], dtype=np.float32)
        return recs, vecs

    def _conv(self, conv: str) -> int:
        at = self.conv_at.get(conv)
        if at is None:
            at = self.conv_at[conv] = len(self.convs)
            self.convs.append(conv)
            self._pending.append(conv)
        return at

    def _write_convs(self, path: Path) -> None:
        if self._pending:
            with open(path, "ab") as f:
                f.write(b"".join(orjson.dumps(c) + b"\n" for c in self._pending))
            self._pending = []

    def _append(self, entries: Sequence[Entry], files: dict[str, Path]) -> None:
        recs, vecs = self._records(entries)
        with open(files[".vec"], "ab") as f:
            f.write(vecs.tobytes())
        self._write_convs(files[".convs"])
        with open(files[".rows"], "ab") as f:
            f.write(recs.tobytes())
        start = self.n
        self.skip.update((start + np.flatnonzero(recs["flag"] != VECTOR)).tolist())
        if self._row_of is not None:
            self._row_of.update(zip(recs["id"].tolist(), range(start, start + len(entries)), strict=True))
        self.n += len(entries)
        self._maps = None

    def _put(self, at: int, e: Entry) -> None:
        """Row ``at`` rewritten with ``e``; without a usable vector, the row keeps the one it has
        (as the node table keeps a stored embedding)."""
        rec, vecs_in = self._records([e])
        vec = vecs_in[0]
        if rec["flag"][0] != VECTOR:
            recs, vecs = self._mapped()
            rec["flag"], vec = recs["flag"][at], np.array(vecs[at])
        self._write_convs(self._file(".convs"))
        self._overwrite(at, rec, vec)
        (self.skip.discard if rec["flag"][0] == VECTOR else self.skip.add)(at)

    def _overwrite(self, at: int, rec: np.ndarray, vec: np.ndarray) -> None:
        with open(self._file(".vec"), "r+b") as f:
            f.seek(at * self.dim * 4)
            f.write(vec.astype(np.float32).tobytes())
        with open(self._file(".rows"), "r+b") as f:
            f.seek(at * ROW.itemsize)
            f.write(rec.tobytes())

    def delete(self, ids: Iterable[str]) -> int:
        """Overwrite the rows of ``ids`` with zeros and flag them deleted; the rows so deleted."""
        known, gone = self.row_of(), 0
        for nid in ids:
            at = known.pop(nid.encode("utf-8"), None)
            if at is None:
                continue
            rec = np.zeros(1, dtype=ROW)
            rec["flag"] = GONE
            self._overwrite(at, rec, np.zeros(self.dim, dtype=np.float32))
            self.skip.add(at)
            gone += 1
        return gone

    def search(self, query: Sequence[float], limit: int, convs: Sequence[str] | None = None,
               rough: np.ndarray | None = None) -> list[Hit]:
        """The best ``limit`` rows (of the conversations ``convs``, when given) as hits naming
        their conversation: one float32 product over the mapped vectors (``rough``, when given: that
        product already made), then the best :data:`MARGIN` more ranked exactly (float64 dot
        product), best first, ties by earlier seq, then id."""
        recs, vecs = self._mapped()
        if not self.n or limit <= 0:
            return []
        q32 = np.asarray(query, dtype=np.float32)
        skip = np.fromiter(self.skip, dtype=np.int64, count=len(self.skip)) if self.skip else None
        if convs is not None:  # the listed conversations' rows, gathered
            wanted = [self.conv_at[c] for c in dict.fromkeys(convs) if c in self.conv_at]
            rows = np.flatnonzero(np.isin(np.asarray(recs["conv"]), wanted))
            if skip is not None:
                rows = rows[~np.isin(rows, skip)]
            scores = rough[rows] if rough is not None else np.asarray(vecs[rows]) @ q32
            live = len(rows)
        else:  # every row in place; rows not ranked score -inf (never among the best ``live``)
            rows = None
            scores = np.array(rough if rough is not None else np.asarray(vecs) @ q32, dtype=np.float32,
                              copy=skip is not None)
            if skip is not None:
                scores[skip] = -np.inf
            live = self.n - (0 if skip is None else len(skip))
        if not live:
            return []
        take = min(live, limit + MARGIN)
        at = np.argpartition(-scores, take - 1)[:take] if take < len(scores) else np.arange(len(scores))
        if take >= len(scores) and skip is not None and rows is None:
            at = at[np.isfinite(scores[at])]
        best = at if rows is None else rows[at]
        exact = exact_scores(vecs[best], query)
        picked = recs[best]
        ids = [raw.decode("utf-8") for raw in picked["id"].tolist()]
        seqs, conv = picked["seq"].tolist(), picked["conv"].tolist()
        order = sorted(range(len(ids)), key=lambda j: (-exact[j], seqs[j], ids[j]))[:limit]
        return [Hit(ids[j], exact[j], self.convs[conv[j]]) for j in order]

    def rough(self, queries: np.ndarray) -> np.ndarray:
        """The float32 products of every row with each of ``queries`` (rows x queries)."""
        vecs = self._mapped()[1]
        return np.asarray(vecs @ queries.T) if self.n else np.zeros((0, len(queries)), dtype=np.float32)

    def close(self) -> None:
        """Unmap the files and forget what is held."""
        self._maps, self._row_of = None, None
