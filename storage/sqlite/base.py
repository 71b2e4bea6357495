"""What every SQLite store of this package shares: error translation, transactions, opening a
file, and the store base class.

Errors: every store call, read or write, raises :class:`StoreUnavailable` for any ``sqlite3.Error``
(a locked, closed, full or corrupt database), translated by :func:`sqlite_errors` (the public
methods carry :func:`translated`).
"""

from __future__ import annotations

import fcntl
import functools
import sqlite3
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, ParamSpec, TypeVar

from topology.errors import StoreUnavailable

_P = ParamSpec("_P")
_R = TypeVar("_R")


@contextmanager
def sqlite_errors(what: str) -> Iterator[None]:
    """``sqlite3.Error`` raised inside becomes :class:`StoreUnavailable` ``"sqlite {what}: {error}"``
    (the original as its cause). The one place this adapter translates its backend's exceptions."""
    try:
        yield
    except sqlite3.Error as exc:
        raise StoreUnavailable(f"sqlite {what}: {exc}") from exc


def translated(method: Callable[_P, Coroutine[Any, Any, _R]]) -> Callable[_P, Coroutine[Any, Any, _R]]:
    """``method`` with :func:`sqlite_errors` around it, named by its qualified name."""
    what = method.__qualname__

    @functools.wraps(method)
    async def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with sqlite_errors(what):
            return await method(*args, **kwargs)

    return call


def rollback(conn: sqlite3.Connection) -> None:
    """Roll back the open transaction, if any; a connection too broken to say (closed, say) has
    nothing to roll back, and the caller reports the error that brought it here."""
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One transaction around the block: committed when it ends, rolled back when it raises."""
    conn.execute("BEGIN")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise


def open_file(path: str | Path, page_size: int | None = None) -> sqlite3.Connection:
    """A SQLite connection to ``path``, created with its folder: WAL, autocommit, a 10 s busy
    timeout, ``secure_delete`` (deleted content and freed pages are overwritten with zeros, so a
    forgotten text or a destroyed key is not left in the file: ``storage.purge``); ``:memory:``
    for tests. The memory store (:func:`connect`) and the side files (API keys, data keys) all
    open this way. ``page_size`` (bytes, a power of two from 512 to 65536) applies to a file
    created by this call; a file that exists keeps the page size it was made with."""
    if str(path) != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    with sqlite_errors(str(path)):
        conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        if page_size is not None:  # before the first write (WAL mode fixes it from then on)
            conn.execute(f"PRAGMA page_size={int(page_size)}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA busy_timeout=10000")
        conn.execute("PRAGMA secure_delete=ON")
    return conn


def scrub(conn: sqlite3.Connection, fts_tables: Iterable[str]) -> None:
    """Merge the FTS5 segments of ``fts_tables`` that exist (a deleted document's terms leave the
    index), then checkpoint the write-ahead log into the database and truncate it. Raises
    :class:`~topology.errors.StoreUnavailable` when the checkpoint could not complete (a reader
    of another process held an old snapshot past the busy timeout)."""
    with sqlite_errors("purge"):
        for table in fts_tables:
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name=?", (table,)).fetchone() is not None:
                conn.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    if busy:
        raise StoreUnavailable("sqlite purge: the write-ahead log could not be checkpointed (a reader is busy)")


class DirLock:
    """An exclusive, non-blocking lock on a data directory (``<dir>/LOCK``, ``flock``): one
    process owns an embedded store at a time; the lock goes with the process, however it ends."""

    def __init__(self, directory: str | Path) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        self._file: IO[bytes] | None = open(Path(directory) / "LOCK", "ab")  # noqa: SIM115 - held until release
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            self._file.close()
            self._file = None
            raise StoreUnavailable(f"the store in {directory} is in use by another process (one process owns an "
                                   "embedded store: stop the other `jevmem serve`/`ingest`, or use another "
                                   "--data-dir)") from exc

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the descriptor drops the lock
            self._file = None


class Base:
    """A store over one connection (which it closes, with the directory lock it was given)."""

    def __init__(self, conn: sqlite3.Connection, lock: DirLock | None = None) -> None:
        self._conn = conn
        self._lock = lock

    def _write(self, sql: str, rows: Iterable[tuple[object, ...]]) -> None:
        with sqlite_errors("write"), transaction(self._conn):
            self._conn.executemany(sql, rows)

    def _delete(self, statements: Sequence[tuple[str, tuple[object, ...]]], counted: int = -1) -> int:
        """Run ``statements`` in one transaction; returns the row count of statement ``counted``
        (the last by default)."""
        with sqlite_errors("delete"), transaction(self._conn):
            counts = [self._conn.execute(sql, args).rowcount for sql, args in statements]
        return counts[counted]

    async def close(self) -> None:
        self._conn.close()
        if self._lock is not None:
            self._lock.release()
