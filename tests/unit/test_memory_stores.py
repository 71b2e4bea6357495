"""The in-memory fakes (storage.memory) answer as the embedded SQLite stores do: the same graph
written through both, then every read of the ports, before and after a forget."""

from __future__ import annotations

import dataclasses

from jevmem.wiring import embedded_stores
from storage.memory import MemoryDeadLetters, MemoryEdgeStore, MemoryNodeStore
from storage.scope_cache import ScopeCache
from streams.in_process import InProcessWriter
from streams.write_path import Stores
from tests.conftest import chat_observations
from topology.params import Params
from topology.pipeline import WritePath
from topology.ports import Embedder
from topology.schemas import DeadLetter, Scope
from topology.systemone.local import LocalSystemOne
from topology.systemone.port import CountingSystemOne

SCOPE = Scope(tenant_id="t1", conversation_id="c1")


def _pipeline(stores: Stores, embedder: Embedder) -> InProcessWriter:
    so = CountingSystemOne(LocalSystemOne())
    cache = ScopeCache(stores.nodes)
    stores.attach(cache)
    return InProcessWriter(stores, WritePath(embedder, so, cache, Params(consolidate_every=4)), so)


async def _reads(stores: Stores) -> list[object]:
    n, e = stores.nodes, stores.edges
    nodes = await n.scan(SCOPE)
    ids = [x.id for x in nodes]
    entities = sorted({ent.id for x in nodes for ent in x.entities})
    return [
        [x.model_dump() for x in nodes], [x.model_dump() for x in await n.get(SCOPE, [*reversed(ids), "missing"])],
        await n.seqs(SCOPE, [x.event_id for x in nodes] + ["nope"]), await n.next_seq(SCOPE),
        await n.observation_count(SCOPE), await n.used_seqs(SCOPE), await n.forgotten(SCOPE),
        await n.conversations("t1"), await n.conversations("t2"),
        [await n.sharing_entities_before(SCOPE, entities[:k], 9, 5) for k in range(len(entities) + 1)],
        [await n.preceding(SCOPE, s, 3) for s in range(14)],
        [x.model_dump() for x in await e.scan(SCOPE)], [x.model_dump() for x in await e.decisions(SCOPE)],
        [[x.id for x in await e.neighbours(SCOPE, ids[:k], views, lim)]
         for k in (1, 3, 12) for views in (["semantic"], ["temporal", "entity", "causal"]) for lim in (2, 50)],
        [await e.conversations_touching(t, ids[:k]) for t in ("t1", "t2") for k in (0, 1, 12)],
    ]


async def test_memory_stores_answer_as_the_sqlite_stores_do(embedder: Embedder) -> None:
    sqlite = embedded_stores(":memory:", embedder.dim, embedder.name)
    fake = dataclasses.replace(embedded_stores(":memory:", embedder.dim), nodes=MemoryNodeStore(),
                               edges=MemoryEdgeStore(), dead_letters=MemoryDeadLetters())
    pipelines = [_pipeline(s, embedder) for s in (sqlite, fake)]
    try:
        reports = [await p.ingest(chat_observations() + chat_observations(conversation="c2", n=3)) for p in pipelines]
        assert reports[0] == reports[1] and reports[0].decisions > 0
        before = [await _reads(s) for s in (sqlite, fake)]
        assert before[0] == before[1]
        for p in pipelines:
            await p.forget(SCOPE, "e2")
            await p.ingest(chat_observations(start=2, n=1))  # a forgotten event comes back at its seq
        after = [await _reads(s) for s in (sqlite, fake)]
        assert after[0] == after[1] and after[0] != before[0]
        forgets = [await p.forget(Scope(tenant_id="t1", conversation_id="c2"), None) for p in pipelines]
        assert forgets[0] == forgets[1] and forgets[0].nodes == 3
        final = [await _reads(s) for s in (sqlite, fake)]
        assert final[0] == final[1]
        bad = [DeadLetter.of(b"{", f"bad {i}", "test") for i in range(3)]
        for s in (sqlite, fake):
            await s.dead_letters.put(bad)
        letters = [await s.dead_letters.recent(2) for s in (sqlite, fake)]
        assert letters[0] == letters[1] and [d.reason for d in letters[0]] == ["bad 1", "bad 2"]
    finally:
        for p in pipelines:
            await p.close()
