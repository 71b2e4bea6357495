"""The embedded deployment: its stores (SQLite in one directory), the product over them
(:func:`build_embedded`; the write and read paths come from :mod:`jevmem.assembly`), and the
service front ends call (:class:`EmbeddedService`, writing concurrent requests as one batch:
:class:`GroupWrite`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jevmem import assembly
from jevmem.settings import Settings
from query_api.items import ItemError
from query_api.retrieval.controller import Retrieval, RetrievalController
from query_api.service import ForgetApplied
from storage.sqlite.base import DirLock, scrub
from storage.sqlite.store import (
    CACHE_MB,
    SqliteDeadLetters,
    SqliteEdgeStore,
    SqliteLexicalIndex,
    SqliteNodeStore,
    check_model,
    connect,
    lexical_table,
)
from storage.sqlite.vectors import MAX_ROWS as VECTOR_ROWS
from storage.sqlite.vectors import MatrixVectorIndex
from streams.in_process import IngestReport, InProcessWriter
from streams.write_path import Stores
from topology.ports import Embedder
from topology.schemas import ConsolidationDecision, DeadLetter, EdgeEvent, MemoryNode, Observation, Realm, Scope


def embedded_stores(data_dir: Path | str, dim: int, embedder: str | None = None, cache_mb: int = CACHE_MB,
                    vector_rows: int = VECTOR_ROWS) -> Stores:
    """SQLite under ``data_dir`` (``memory.sqlite3``: nodes with their embeddings, edges, lexical,
    dead letters), with vector search over the nodes' own embeddings (at most ``vector_rows``
    held in memory); ``":memory:"`` keeps everything in RAM. After a forget, the forgotten
    tenants' FTS5 segments are merged and the write-ahead log is checkpointed and truncated
    (``storage.sqlite.base.scrub``; the file is opened with ``secure_delete``). The process holds the directory's
    lock until the stores close (:class:`~storage.sqlite.base.DirLock`).

    ``embedder`` is recorded with a new store; opening a store built with another model raises
    :class:`~topology.errors.ModelMismatch` (its vectors would not be comparable)."""
    mem = str(data_dir) == ":memory:"
    lock = None if mem else DirLock(data_dir)
    try:
        db = ":memory:" if mem else Path(data_dir) / "memory.sqlite3"
        # the node, edge and lexical connections share ``cache_mb`` of page cache; dead letters get SQLite's default
        caches = [cache_mb * 1024 // 3] * 3 + [2048]
        conns = [connect(db, kib) for kib in caches] if not mem else [connect(":memory:")] * 4
        if embedder is not None:
            check_model(conns[0], embedder)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    async def purge(scopes: Sequence[Scope]) -> None:  # forgotten means gone from the file and its log too
        scrub(conns[2], sorted({lexical_table(s.tenant_id) for s in scopes}))

    return Stores(
        nodes=SqliteNodeStore(conns[0], lock), edges=SqliteEdgeStore(conns[1]),
        vectors=MatrixVectorIndex(conns[0], dim, vector_rows, None if mem else Path(data_dir) / "realms"),
        lexical=SqliteLexicalIndex(conns[2]), dead_letters=SqliteDeadLetters(conns[3]),
        purge=None if mem else purge,
    )


@dataclass
class Embedded:
    """The embedded product over one store: ``pipeline`` writes it (in this process),
    ``controller`` answers queries from it; :meth:`close` closes the writer and the stores."""

    pipeline: InProcessWriter
    controller: RetrievalController
    embedder: Embedder
    stores: Stores

    async def close(self) -> None:
        await self.pipeline.close()


def build_embedded(settings: Settings, embedder: Embedder | None = None, data_dir: Path | str | None = None) -> Embedded:
    """The embedded product over the store in ``data_dir`` (default: ``settings.data_dir``),
    with ``embedder`` (default: the configured one): the stores sized by the cache budget
    (``settings.memory``), and the write and read paths over them (:func:`jevmem.assembly.paths`)."""
    emb = embedder or assembly.load_embedder(settings)
    budget = settings.memory(emb.dim)
    stores = embedded_stores(data_dir if data_dir is not None else settings.data_dir, emb.dim, emb.name,
                             budget.sqlite_cache_mb, budget.vector_rows)
    built = assembly.paths(settings, stores, emb, embedded=True)
    return Embedded(InProcessWriter(stores, built.writer(), built.system_one, settings.write_batch), built.controller,
                    emb, stores)


class GroupWrite:
    """Concurrent writes as one batch (a group commit): a write waits while the one before it is
    being written, and every write that arrived meanwhile is then written together, in arrival
    order, by one ``write`` call (the written graph does not depend on batching, and a batch
    pays the model, the System One requests and the store transactions once). Each caller gets
    the group's report (its own items' failures are found in it by event), or the exception
    that failed the group. A caller that stops waiting does not withdraw its items."""

    def __init__(self, write: Callable[[list[Observation]], Awaitable[IngestReport]]) -> None:
        self._write = write
        self._queue: list[tuple[list[Observation], asyncio.Future[IngestReport]]] = []
        self._drainer: asyncio.Task[None] | None = None
        #: groups written (for tests)
        self.groups = 0

    async def submit(self, observations: list[Observation]) -> IngestReport:
        done: asyncio.Future[IngestReport] = asyncio.get_running_loop().create_future()
        self._queue.append((observations, done))
        if self._drainer is None:
            self._drainer = asyncio.ensure_future(self._drain())
        return await done

    async def _drain(self) -> None:
        group: list[tuple[list[Observation], asyncio.Future[IngestReport]]] = []
        try:
            while self._queue:
                group, self._queue = self._queue, []
                self.groups += 1
                try:
                    report = await self._write([o for part, _ in group for o in part])
                except Exception as exc:  # every caller of the group answers it (an outage: 503)
                    for _, f in group:
                        if not f.done():
                            f.set_exception(exc)
                    continue
                for _, f in group:
                    if not f.done():
                        f.set_result(report)
            group = []
        finally:
            self._drainer = None
            for _, f in group + self._queue:  # cancelled (shutdown): what is left is not written
                if not f.done():
                    f.cancel()
            self._queue = []


def failed_items(observations: Sequence[Observation], report: IngestReport) -> list[ItemError]:
    """The items of ``observations`` that ``report`` says failed permanently, with their indexes
    and reasons (every copy of a duplicated event)."""
    reasons = {(f.item.tenant_id, f.item.conversation_id, f.item.event_id): f.reason for f in report.failed}
    return [ItemError(index=i, reason=reasons[key]) for i, o in enumerate(observations)
            if (key := (o.tenant_id, o.conversation_id, o.event_id)) in reasons]


class EmbeddedService:
    """:class:`query_api.service.MemoryService` over the embedded deployment (one process owns the
    store). Its stores translate their own failures (a locked, closed, full or corrupt database
    is :class:`~topology.errors.StoreUnavailable`). Concurrent submits are written in groups
    (:class:`GroupWrite`), each observation stamped with the time its request was accepted."""

    def __init__(self, settings: Settings, embedder: Embedder | None = None, data_dir: Path | str | None = None) -> None:
        self.settings, self._embedder, self._data_dir = settings, embedder, data_dir
        self._mem: Embedded | None = None
        self._s2 = assembly.system_two(settings)
        self._group = GroupWrite(lambda obs: self.mem.pipeline.ingest(obs, source="api"))

    @property
    def mem(self) -> Embedded:
        if self._mem is None:
            raise RuntimeError("service not started")
        return self._mem

    def restarted(self) -> EmbeddedService:
        """A new (not yet started) service over the same store, settings and embedder: what a
        process started afresh over this one's directory would be (stop this one first)."""
        return EmbeddedService(self.settings, self._embedder, self._data_dir)

    async def start(self) -> None:
        self._mem = build_embedded(self.settings, self._embedder, self._data_dir)
        await self._mem.controller.warm()

    async def stop(self) -> None:
        if self._mem is not None:
            await self._mem.close()
            self._mem = None
        if self._s2 is not None:
            await self._s2.aclose()

    async def submit(self, observations: Sequence[Observation]) -> list[ItemError]:
        """Write ``observations``; those that failed permanently (isolated and dead-lettered by the
        in-process writer, sourced ``api:<stage>``) are returned with their indexes (every copy of a
        duplicated event)."""
        now = datetime.now(UTC)
        return failed_items(observations, await self._group.submit([o.stamped(now) for o in observations]))

    async def load(self, payloads: Sequence[bytes | str], *, source: str, offset: int = 0) -> IngestReport:
        """Bulk-load raw records (JSON observations and forget records, as on the observations
        topic, e.g. a file's lines): :meth:`streams.in_process.InProcessWriter.ingest_raw` without
        per-node results (a load of any size holds none); an invalid record is a dead letter
        sourced ``"{source}#{offset + index}"``."""
        return await self.mem.pipeline.ingest_raw(payloads, source=source, keep_results=False, offset=offset)

    async def reject(self, letters: Sequence[DeadLetter]) -> None:
        await self.mem.stores.dead_letters.put(letters)

    async def retrieve(self, scope: Scope, question: str, top_k: int, as_of: datetime | None = None) -> Retrieval:
        return await self.mem.controller.retrieve(scope, question, top_k, as_of)

    async def recall(self, realm: Realm, question: str, top_k: int, as_of: datetime | None = None) -> Retrieval:
        return await self.mem.controller.retrieve_realm(realm, question, top_k, as_of)

    async def answer(self, question: str, evidence: Sequence[str]) -> str | None:
        return None if self._s2 is None else await self._s2.answer(question, evidence)

    async def nodes(self, scope: Scope) -> list[MemoryNode]:
        return await self.mem.stores.nodes.scan(scope)

    async def edges(self, scope: Scope) -> list[EdgeEvent]:
        return await self.mem.stores.edges.scan(scope)

    async def dead_letters(self, tenant_id: str, limit: int) -> list[DeadLetter]:
        return await self.mem.stores.dead_letters.recent(limit, tenant_id)

    async def conversations(self, tenant_id: str, users: Collection[str] | None = None) -> list[tuple[str, int]]:
        return await self.mem.stores.nodes.conversations(tenant_id, users)

    async def decisions(self, scope: Scope) -> list[ConsolidationDecision]:
        return await self.mem.stores.edges.decisions(scope)

    async def forget(self, scope: Scope, event_id: str | None) -> ForgetApplied:
        """Forget one observation (``event_id``) or the whole conversation (None), synchronously:
        what was removed (see :mod:`streams.forget` for semantics)."""
        report = await self.mem.pipeline.forget(scope, event_id)
        return ForgetApplied.counted(report.nodes, report.edges, report.decisions, report.seq)

    async def health(self) -> dict[str, Any]:
        return {"status": "ok", "mode": "embedded", "embedder": self.mem.embedder.name,
                "system_one": self.settings.system_one, "system_two": self._s2 is not None}
