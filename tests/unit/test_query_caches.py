"""The read path's caches and fast paths never change an answer.

* The edge store's in-memory endpoint index and the controller's node-info cache follow writes and
  forgets: a memory queried between writes answers exactly as a fresh memory given the same writes.
* The edge index ranks exactly as SQL does; ``labelled`` equals filtering ``neighbours``.
* Scoring with the in-process local System One equals scoring through ``ask``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from jevmem.settings import Settings
from jevmem.wiring import Embedded, build_embedded
from query_api.retrieval.controller import RetrievalController
from query_api.retrieval.nodeinfo import NodeInfoCache
from query_api.retrieval.scoring import AskScorer, LocalScorer
from storage.sqlite.store import ADJACENCY_AFTER, SqliteEdgeStore
from tests.conftest import chat_observations
from topology.params import Params
from topology.ports import Embedder
from topology.schemas import MemoryNode, Scope
from topology.systemone.features import ScoreState
from topology.systemone.local import LocalSystemOne

SCOPE = Scope(tenant_id="t1", conversation_id="c1")
QUESTIONS = ["What is the name of Ana's puppy?", "Why did Ben pause his training?",
             "When is the Berlin marathon?", "Where are Ana and Clara travelling?", "What does Ben cook on Sundays?"]


def _memory(embedder: Embedder, where: str, tmp: Path) -> Embedded:
    return build_embedded(Settings(params=Params(consolidate_every=4)), embedder=embedder,
                          data_dir=":memory:" if where == "memory" else tmp)


async def _answers(mem: Embedded) -> list[dict[str, Any]]:
    out = []
    for q in QUESTIONS:
        res = (await mem.controller.retrieve(SCOPE, q, top_k=10)).model_dump()
        res["trace"].pop("timings_ms")
        out.append(res)
    return out


@pytest.mark.parametrize("where", ["file", "memory"])
async def test_answers_after_more_writes_and_a_forget_equal_a_fresh_memory(
        embedder: Embedder, tmp_path: Path, where: str) -> None:
    chat = chat_observations()
    queried, fresh = _memory(embedder, where, tmp_path / "a"), _memory(embedder, where, tmp_path / "b")
    try:
        await queried.pipeline.ingest(chat[:6])
        await fresh.pipeline.ingest(chat[:6])
        first = await _answers(queried)
        assert await _answers(queried) == first  # served from warm caches
        edges = queried.stores.edges
        assert isinstance(edges, SqliteEdgeStore)
        adj = edges._adjacency.get(SCOPE)
        assert adj is not None and adj.index is not None, "the edge index should be in use"
        assert len(queried.controller.info) > 0

        await queried.pipeline.ingest(chat[6:])
        await fresh.pipeline.ingest(chat[6:])
        assert await _answers(queried) == await _answers(fresh)

        for mem in (queried, fresh):
            out = await mem.pipeline.forget(SCOPE, "e3")
            assert out.as_dict()["status"] == "deleted"
        after = await _answers(queried)
        assert after == await _answers(fresh)
        assert all(e["event_id"] != "e3" for a in after for e in a["evidence"])
    finally:
        await queried.close()
        await fresh.close()


async def test_the_edge_index_ranks_as_sql(memory: Embedded) -> None:
    await memory.pipeline.ingest(chat_observations())
    edges = memory.stores.edges
    assert isinstance(edges, SqliteEdgeStore)
    ids = [n.id for n in await memory.stores.nodes.scan(SCOPE)]
    views: list[Sequence[Any]] = [["semantic"], ["temporal"], ["entity", "causal"],
                                  ["semantic", "temporal", "entity", "causal"]]
    rng = random.Random(7)
    for _ in range(40):
        some = rng.sample(ids, rng.randint(1, len(ids)))
        vs, limit = rng.choice(views), rng.choice([0, 1, 3, 10, 1000])
        edges._adjacency.clear()
        edges._cache.clear()
        by_sql = [await edges.neighbours(SCOPE, some, vs, limit) for _ in range(ADJACENCY_AFTER - 1)]
        assert edges._adjacency[SCOPE].index is None and all(r == by_sql[0] for r in by_sql)
        edges._cache.clear()
        by_index = await edges.neighbours(SCOPE, some, vs, limit)
        assert edges._adjacency[SCOPE].index is not None
        assert by_index == by_sql[0]
        all_edges = by_index
        for label in {e.label for e in all_edges} | {"supersedes"}:
            assert await edges.labelled(SCOPE, some, vs, limit, label) == [e for e in all_edges if e.label == label]


async def test_the_edge_index_follows_upserts_and_writes_elsewhere_leave_it_built(memory: Embedded) -> None:
    await memory.pipeline.ingest(chat_observations())
    edges = memory.stores.edges
    assert isinstance(edges, SqliteEdgeStore)
    ids = [n.id for n in await memory.stores.nodes.scan(SCOPE)]
    views: Any = ["semantic", "temporal", "entity", "causal"]
    for _ in range(ADJACENCY_AFTER):
        await edges.neighbours(SCOPE, ids, views, 1000)
    built = edges._adjacency[SCOPE]
    assert built.index is not None
    # another conversation's writes leave this index as it was
    await memory.pipeline.ingest(chat_observations(conversation="c2", n=4))
    await edges.neighbours(SCOPE, ids, views, 1000)
    assert edges._adjacency[SCOPE] is built and built.index is not None
    # this conversation's upserts: a new edge, and a stored one rewritten (label and target kept, as SQL keeps them)
    stored = (await edges.neighbours(SCOPE, ids[:1], views, 1000))[0]
    rewritten = stored.model_copy(update={"probability": 0.01, "label": "other", "target": ids[-1]})
    new = stored.model_copy(update={"id": "edge-new", "source": ids[2], "target": ids[3], "probability": 0.99,
                                    "view": "causal", "label": "causes"})
    await edges.upsert([rewritten, new])
    assert edges._adjacency[SCOPE] is built
    for some in (ids, ids[:1], ids[2:4], ids[-1:]):
        for vs in (views, ["causal"], [stored.view]):
            for limit in (1, 5, 1000):
                by_index = await edges.neighbours(SCOPE, some, vs, limit)
                edges._cache.clear()
                by_sql = edges._decoded(SCOPE, edges._sql_ranked(SCOPE, some, vs, limit))
                assert by_index == by_sql
    got = {e.id: e for e in await edges.neighbours(SCOPE, ids, views, 1000)}
    assert got["edge-new"].probability == 0.99
    assert (got[stored.id].probability, got[stored.id].label, got[stored.id].target) == (0.01, stored.label, stored.target)
    # a delete drops the scope's index: the next reads are SQL's
    await edges.delete(SCOPE, [ids[2]])
    assert SCOPE not in edges._adjacency
    assert all(ids[2] not in (e.source, e.target) for e in await edges.neighbours(SCOPE, ids, views, 1000))


async def test_in_process_scoring_equals_scoring_through_ask(memory: Embedded) -> None:
    await memory.pipeline.ingest(chat_observations())
    c, backend = memory.controller, LocalSystemOne()
    fast = RetrievalController(c.embedder, backend, c.vectors, c.lexical, c.nodes, c.edges, c.params,
                               scorer=LocalScorer(backend))
    slow = RetrievalController(c.embedder, backend, c.vectors, c.lexical, c.nodes, c.edges, c.params,
                               scorer=AskScorer())
    recorded: dict[str, list[list[dict[str, Any]]]] = {"fast": [], "slow": []}

    def recorder(key: str) -> Any:
        def keep(question: str, nodes: Sequence[MemoryNode], states: Sequence[ScoreState]) -> None:
            recorded[key].append([s.model_dump() for s in states])
        return keep

    fast.recorder, slow.recorder = recorder("fast"), recorder("slow")
    for q in QUESTIONS:
        a, b = (await fast.retrieve(SCOPE, q, 10)).model_dump(), (await slow.retrieve(SCOPE, q, 10)).model_dump()
        a["trace"].pop("timings_ms")
        b["trace"].pop("timings_ms")
        assert a == b
    assert recorded["fast"] == recorded["slow"] and recorded["fast"]


async def test_node_info_is_derived_again_for_a_rewritten_node(memory: Embedded) -> None:
    await memory.pipeline.ingest(chat_observations(n=3))
    node = (await memory.stores.nodes.scan(SCOPE))[0]
    node = (await memory.stores.nodes.get(SCOPE, [node.id]))[0]
    cache = NodeInfoCache(memory.embedder.dim)
    info = cache.get(node)
    assert cache.get(node) is info and info.row.tolist() == node.embedding
    assert cache.get(node.model_copy()) is info  # the same version read again: no new derivation
    moved = node.model_copy(update={"embedding": [0.0] * (memory.embedder.dim - 1) + [1.0]})
    assert cache.get(moved) is not info and cache.get(moved).row[-1] == 1.0
    rewritten = node.model_copy(update={"content": "Why? Because I said so.", "embedding": None})
    again = cache.get(rewritten)
    assert again is not info and again.is_question is False and again.causal and not again.row.any()


class _GetOnly:
    """A node reader without ``get_rows``: nodes come with their embeddings as lists."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def get(self, scope: Scope, ids: Sequence[str]) -> list[MemoryNode]:
        return list(await self.inner.get(scope, ids))

    async def scan(self, scope: Scope) -> list[MemoryNode]:
        return list(await self.inner.scan(scope))

    async def forgotten(self, scope: Scope) -> dict[str, int]:
        return dict(await self.inner.forgotten(scope))


async def test_nodes_read_as_matrix_rows_answer_as_nodes_with_embeddings(memory: Embedded) -> None:
    await memory.pipeline.ingest(chat_observations())
    c = memory.controller
    rows = RetrievalController(c.embedder, c.so, c.vectors, c.lexical, c.nodes, c.edges, c.params, scorer=c.scorer)
    lists = RetrievalController(c.embedder, c.so, c.vectors, c.lexical, _GetOnly(c.nodes), c.edges, c.params,
                                scorer=c.scorer)
    assert rows.reads_rows and not lists.reads_rows
    for q in QUESTIONS:
        a, b = (await rows.retrieve(SCOPE, q, 10)).model_dump(), (await lists.retrieve(SCOPE, q, 10)).model_dump()
        a["trace"].pop("timings_ms")
        b["trace"].pop("timings_ms")
        assert a == b and a["evidence"]


async def test_node_info_from_a_row_equals_node_info_from_the_embedding(memory: Embedded) -> None:
    await memory.pipeline.ingest(chat_observations(n=3))
    full = await memory.stores.nodes.get(SCOPE, [n.id for n in await memory.stores.nodes.scan(SCOPE)])
    lean, rows = await memory.stores.nodes.get_rows(SCOPE, [n.id for n in full], memory.embedder.dim)
    assert [n.embedding for n in lean] == [None] * len(full)
    assert [n.model_copy(update={"embedding": f.embedding}) for n, f in zip(lean, full, strict=True)] == full
    by_row, by_list = NodeInfoCache(memory.embedder.dim), NodeInfoCache(memory.embedder.dim)
    for j, (n, f) in enumerate(zip(lean, full, strict=True)):
        a, b = by_row.get(n, rows[j]), by_list.get(f)
        assert a.stamp == b.stamp and a.row.tolist() == b.row.tolist() == f.embedding
        assert (a.tokens, a.names, a.content_tokens, a.dates) == (b.tokens, b.names, b.content_tokens, b.dates)
    moved = rows[0].copy()
    moved[0] += 1.0  # the same body with another embedding: derived again
    assert by_row.get(lean[0].model_copy(), moved).row[0] == moved[0]
