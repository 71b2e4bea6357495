"""The Qdrant server vector index against a real Qdrant server: exact search equal to the embedded
engine's, batched search equal to single searches, realm searches (one ranking over a tenant's or a
user's conversations), tenant isolation, deletes, the version check, error translation, and
durability across a SIGKILL of the server.

Needs ``JEVMEM_TEST_QDRANT_URL`` (``scripts/test`` starts the server with
``scripts/qdrant/qdrant.sh``). The SIGKILL test starts its own server (on a free port, data in the
test's temporary directory) through the same script, so the shared one is never disturbed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.integration

QDRANT_URL = os.environ.get("JEVMEM_TEST_QDRANT_URL")
if not QDRANT_URL:
    pytest.skip("JEVMEM_TEST_QDRANT_URL is not set", allow_module_level=True)

from storage.qdrant.index import QdrantVectorIndex, check_server  # noqa: E402
from tests.conftest import free_port, reference_vectors  # noqa: E402
from tests.integration.servers import folder_bytes, missing_data  # noqa: E402
from topology import ids  # noqa: E402
from topology.errors import StoreUnavailable  # noqa: E402
from topology.schemas import MemoryNode, Realm, Scope  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "qdrant" / "qdrant.sh"
DIM = 8


def node(tenant: str, conv: str, seq: int, vec: list[float], user: str | None = None) -> MemoryNode:
    return MemoryNode(id=ids.node_id(tenant, conv, f"e{seq}"), tenant_id=tenant, conversation_id=conv,
                      event_id=f"e{seq}", seq=seq, content="x", embedding=vec, user_id=user)


def unit_vectors(n: int, seed: int) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((n, DIM))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return [row.round(6).tolist() for row in v]


@pytest.fixture
async def index() -> AsyncIterator[QdrantVectorIndex]:
    idx = QdrantVectorIndex.server(QDRANT_URL or "", DIM, collection=f"test_{uuid.uuid4().hex[:10]}")
    yield idx
    await idx._client.delete_collection(idx.collection)
    await idx.close()


async def test_server_version_is_checked_and_supported() -> None:
    version = await check_server(QDRANT_URL or "")
    assert version.startswith("1.")


async def test_exact_search_equals_the_embedded_engine_and_batches_equal_singles(index: QdrantVectorIndex) -> None:
    vecs = unit_vectors(60, 7)
    nodes = [node(t, c, i, vecs[k]) for k, (t, c, i) in
             enumerate((t, c, i) for t in ("a", "b") for c in ("c1", "c2") for i in range(15))]
    edge = await reference_vectors(nodes, DIM)
    try:
        await index.upsert(nodes)
        await index.upsert(nodes[:5])  # idempotent
        scope = Scope(tenant_id="a", conversation_id="c2")
        queries: list[tuple[Scope, list[float], int | None]] = []
        for probe in vecs[:8]:
            for before in (None, 3, 10):
                got = await index.search(scope, probe, 6, before_seq=before)
                want = await edge.search(scope, probe, 6, before_seq=before)
                assert [h.id for h in got] == [h.id for h in want]
                assert all(abs(g.score - w.score) < 1e-6 for g, w in zip(got, want, strict=True))
                mine = [n for n in nodes if n.scope == scope and (before is None or n.seq < before)]
                brute = sorted(mine, key=lambda n: -float(np.dot(n.embedding or [], probe)))[:6]
                assert [h.id for h in got] == [n.id for n in brute]
                queries.append((scope, probe, before))
        batch = await index.search_many(queries, 6)
        singles = [await index.search(s, v, 6, before_seq=b) for s, v, b in queries]
        assert batch == singles
        assert await index.search_many([], 6) == []
        assert await index.ids(scope) == {n.id for n in nodes if n.scope == scope}
    finally:
        await edge.close()


async def test_two_tenants_never_mix(index: QdrantVectorIndex) -> None:
    """Same conversation ids, same event ids, same vectors: a search of one tenant never returns
    the other's points (their node ids differ: ids are derived from the tenant too)."""
    vecs = unit_vectors(10, 3)
    a = [node("tenant-a", "conv", i, vecs[i]) for i in range(10)]
    b = [node("tenant-b", "conv", i, vecs[i]) for i in range(10)]
    assert not {n.id for n in a} & {n.id for n in b}
    await index.upsert(a + b)
    sa, sb = a[0].scope, b[0].scope
    for probe in vecs:
        assert {h.id for h in await index.search(sa, probe, 50)} == {n.id for n in a}
        assert {h.id for h in await index.search(sb, probe, 50)} == {n.id for n in b}
    batch = await index.search_many([(sa, vecs[0], None), (sb, vecs[0], None), (sa, vecs[1], 5)], 50)
    assert {h.id for h in batch[0]} == {n.id for n in a} and {h.id for h in batch[1]} == {n.id for n in b}
    assert {h.id for h in batch[2]} == {n.id for n in a[:5]}
    # deleting tenant b's ids through tenant a's scope deletes nothing; a scope delete stays in its scope
    await index.delete(sa, [n.id for n in b])
    assert await index.ids(sb) == {n.id for n in b}
    await index.delete(sa, [a[0].id, a[1].id])
    assert await index.ids(sa) == {n.id for n in a[2:]}
    await index.delete(sa, [])
    await index.delete_scope(sa)
    assert await index.ids(sa) == set() and await index.search(sa, vecs[0], 50) == []
    assert await index.ids(sb) == {n.id for n in b}


async def test_unreachable_server_is_store_unavailable() -> None:
    dead = QdrantVectorIndex.server(f"http://127.0.0.1:{free_port()}", DIM)
    try:
        with pytest.raises(StoreUnavailable):
            await dead.search(Scope(tenant_id="t", conversation_id="c"), [1.0] * DIM, 3)
        with pytest.raises(StoreUnavailable):
            await dead.upsert([node("t", "c", 0, [1.0] * DIM)])
    finally:
        await dead.close()
    with pytest.raises(StoreUnavailable):
        await check_server(f"http://127.0.0.1:{free_port()}")


@pytest.fixture
def private_server(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A Qdrant server of its own (free ports, data under ``tmp_path``), stopped afterwards."""
    port, grpc = free_port(), free_port()
    env = {**os.environ, "QDRANT_PORT": str(port), "QDRANT_GRPC_PORT": str(grpc), "QDRANT_DATA": str(tmp_path / "q")}
    binary = Path(env.get("QDRANT_BIN", str(REPO.parent / "shared" / "qdrant" / "qdrant")))
    if not binary.is_file():
        missing_data("the Qdrant server binary (QDRANT_BIN)", binary)  # a failure in CI
    subprocess.run(["bash", str(SCRIPT), "start"], env=env, check=True, timeout=90)
    try:
        yield f"http://127.0.0.1:{port}", env
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop"], env=env, check=False, timeout=60)


async def test_acknowledged_writes_survive_a_sigkill_of_the_server(private_server: tuple[str, dict[str, str]]) -> None:
    url, env = private_server
    vecs = unit_vectors(300, 11)
    nodes = [node("t", f"c{i % 3}", i, v) for i, v in enumerate(vecs)]
    index = QdrantVectorIndex.server(url, DIM)
    try:
        for i in range(0, len(nodes), 50):  # acknowledged (wait=True) batch by batch, as the workers write
            await index.upsert(nodes[i: i + 50])
        scope = nodes[0].scope
        before = await index.search(scope, vecs[0], 10)
        pid = int((Path(env["QDRANT_DATA"]) / "qdrant.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(StoreUnavailable):  # down: a clear, retryable error (no hang)
            await index.search(scope, vecs[0], 10)
        subprocess.run(["bash", str(SCRIPT), "start"], env=env, check=True, timeout=90)
        # the same client object carries on after the restart; every acknowledged point is back (WAL)
        for s in sorted({n.scope for n in nodes}, key=lambda s: s.key):
            assert await index.ids(s) == {n.id for n in nodes if n.scope == s}
        assert await index.search(scope, vecs[0], 10) == before
    finally:
        await index.close()


#: A vector several nodes of user u2 share (conversation, seq): a tie the realm ranking orders by
#: earlier seq, then id, across conversations.
TIED = (("c03", 3), ("c05", 1), ("c09", 1), ("c11", 0), ("c13", 2), ("c21", 1), ("c25", 0))


def realm_nodes(tenant: str) -> list[MemoryNode]:
    """30 conversations of 4 nodes: even ones user u1's, odd ones u2's, c28 and c29 without a
    user; the same vectors for every tenant, and :data:`TIED`'s nodes share ``vecs[-1]``."""
    vecs = unit_vectors(30 * 4 + 1, 21)
    out = []
    for c in range(30):
        user = None if c >= 28 else ("u1", "u2")[c % 2]
        for seq in range(4):
            tied = (f"c{c:02d}", seq) in TIED
            out.append(node(tenant, f"c{c:02d}", seq, vecs[-1] if tied else vecs[c * 4 + seq], user))
    return out


def brute_realm(nodes: list[MemoryNode], realm: Realm, probe: list[float], limit: int) -> list[MemoryNode]:
    """The realm's exact ranking: dot product, ties by earlier seq, then id."""
    mine = [n for n in nodes if realm.holds(n)]
    return sorted(mine, key=lambda n: (-float(np.dot(n.embedding or [], probe)), n.seq, n.id))[:limit]


async def test_a_realm_search_is_one_exact_ranking_over_the_realms_conversations(index: QdrantVectorIndex) -> None:
    """A user spread over 30 conversations (two users, nodes without a user, a second tenant with
    the same conversations, users and vectors): each realm search equals the brute-force ranking
    of the realm's nodes, ties by earlier seq then id, hits naming their conversations."""
    t1, t2 = realm_nodes("t1"), realm_nodes("t2")
    await index.upsert(t1 + t2)
    everyone = t1 + t2
    by_id = {n.id: n for n in everyone}
    vecs = unit_vectors(30 * 4 + 1, 21)
    realms = [Realm(tenant_id="t1"), Realm(tenant_id="t1", user_id="u1"), Realm(tenant_id="t1", user_id="u2"),
              Realm(tenant_id="t1", conversation_ids=("c03", "c17", "c28", "c29", "nowhere")),
              Realm(tenant_id="t1", user_id="u1", conversation_ids=("c02", "c03", "c28")),
              Realm(tenant_id="t2", user_id="u1")]
    for realm in realms:
        for probe in [vecs[-1], vecs[17 * 4 + 2], *vecs[:4]]:
            for limit in (1, 3, 7, 200):
                got = await index.search_realm(realm, probe, limit)
                want = brute_realm(everyone, realm, probe, limit)
                assert [h.id for h in got] == [n.id for n in want], (realm, limit)
                assert all(h.conversation_id == by_id[h.id].conversation_id for h in got)
                assert all(abs(h.score - float(np.dot(by_id[h.id].embedding or [], probe))) < 1e-5 for h in got)
    # many searches in one request answer as each alone does, ties included
    queries = [(realm, probe) for realm in [*realms, Realm(tenant_id="t1", conversation_ids=())]
               for probe in [vecs[-1], vecs[17 * 4 + 2], vecs[0]]]
    for limit in (1, 3, 200):
        alone = [await index.search_realm(realm, probe, limit) for realm, probe in queries]
        assert await index.search_realms(queries, limit) == alone
        assert any(alone) and alone[-1] == []
    assert await index.search_realms([], 3) == []
    # the best node of any conversation comes first: c17 is u2's, and the probe is its node's vector
    best = await index.search_realm(Realm(tenant_id="t1"), vecs[17 * 4 + 2], 5)
    assert (best[0].id, best[0].conversation_id) == (t1[17 * 4 + 2].id, "c17")
    assert (await index.search_realm(Realm(tenant_id="t1", user_id="u2"), vecs[17 * 4 + 2], 5))[0] == best[0]
    assert t1[17 * 4 + 2].id not in {h.id for h in await index.search_realm(Realm(tenant_id="t1", user_id="u1"),
                                                                           vecs[17 * 4 + 2], 200)}
    # ties across conversations: earlier seq, then id, even where the limit cuts the tie
    tied = sorted((n for n in t1 if (n.conversation_id, n.seq) in TIED), key=lambda n: (n.seq, n.id))
    assert [h.id for h in await index.search_realm(Realm(tenant_id="t1", user_id="u2"), vecs[-1], 3)] == [
        n.id for n in tied[:3]]
    # one conversation's realm ranks as the per-conversation search does
    one = await index.search_realm(Realm(tenant_id="t1", conversation_ids=("c04",)), vecs[0], 4)
    assert [h.id for h in one] == [h.id for h in await index.search(Scope(tenant_id="t1", conversation_id="c04"), vecs[0], 4)]


async def test_realm_searches_through_hnsw_answer_a_small_realm_exactly() -> None:
    """Given ``realm_ef``, realm searches ask for Qdrant's HNSW index (here with the lowest
    ``hnsw_ef``, the most approximate); a realm too small for an index to pay is still scanned,
    so it gets the exact ranking, ties included, as an index without ``realm_ef`` gives it."""
    name = f"test_{uuid.uuid4().hex[:10]}"
    approximate = QdrantVectorIndex.server(QDRANT_URL or "", DIM, collection=name, realm_ef=1)
    exact = QdrantVectorIndex.server(QDRANT_URL or "", DIM, collection=name)
    assert approximate.realm_params.hnsw_ef == 1 and not approximate.realm_params.exact
    assert exact.realm_params.exact
    try:
        t1 = realm_nodes("t1")
        await approximate.upsert(t1)
        vecs = unit_vectors(30 * 4 + 1, 21)
        for realm in (Realm(tenant_id="t1"), Realm(tenant_id="t1", user_id="u2")):
            for probe in (vecs[-1], vecs[5], vecs[40]):
                for limit in (3, 50):
                    want = [n.id for n in brute_realm(t1, realm, probe, limit)]
                    assert [h.id for h in await approximate.search_realm(realm, probe, limit)] == want
                    assert [h.id for h in await exact.search_realm(realm, probe, limit)] == want
                    assert [[h.id for h in hits] for hits in await approximate.search_realms([(realm, probe)], limit)] == [want]
    finally:
        await approximate._client.delete_collection(name)
        await approximate.close()
        await exact.close()


async def test_realms_keep_tenants_and_users_apart(index: QdrantVectorIndex) -> None:
    """Another tenant's points never answer; nodes without a user answer the tenant's realm only;
    an empty conversation list, an unknown tenant or user hold nothing; a text is refused."""
    t1, t2 = realm_nodes("t1"), realm_nodes("t2")
    await index.upsert(t1 + t2)
    probe = unit_vectors(1, 5)[0]
    whole = {h.id for h in await index.search_realm(Realm(tenant_id="t1"), probe, 1000)}
    assert whole == {n.id for n in t1}
    no_user = {n.id for n in t1 if n.user_id is None}
    assert no_user and no_user <= whole
    for user in ("u1", "u2"):
        hits = await index.search_realm(Realm(tenant_id="t1", user_id=user), probe, 1000)
        assert {h.id for h in hits} == {n.id for n in t1 if n.user_id == user}
        assert not {h.id for h in hits} & no_user
        assert len({h.conversation_id for h in hits}) == 14
    assert await index.search_realm(Realm(tenant_id="t1", conversation_ids=()), probe, 10) == []
    assert await index.search_realm(Realm(tenant_id="t3"), probe, 10) == []
    assert await index.search_realm(Realm(tenant_id="t1", user_id="u9"), probe, 10) == []
    assert await index.search_realm(Realm(tenant_id="t1"), probe, 0) == []
    with pytest.raises(TypeError):
        await index.search_realm(Realm(tenant_id="t1"), "a text", 3)
    # deletes stay in their scope; a realm search no longer finds what was deleted
    await index.delete_scope(Scope(tenant_id="t1", conversation_id="c02"))
    left = {h.id for h in await index.search_realm(Realm(tenant_id="t1", user_id="u1"), probe, 1000)}
    assert left == {n.id for n in t1 if n.user_id == "u1" and n.conversation_id != "c02"}
    assert {h.id for h in await index.search_realm(Realm(tenant_id="t2", user_id="u1"), probe, 1000)} == {
        n.id for n in t2 if n.user_id == "u1"}


async def test_a_purge_leaves_no_deleted_vector_id_or_conversation_in_any_file(index: QdrantVectorIndex) -> None:
    """A byte scan of the collection's folder (when the server's data is on this machine:
    ``QDRANT_DATA``, as ``scripts/test`` exports it) finds each forgotten vector, id and
    conversation id before the purge, and none after it; what was not deleted stays searchable.
    A small collection (segments under the vacuum's minimum) is padded to be vacuumed."""
    secret = f"Qxz{uuid.uuid4().hex[:10]}"
    vecs = unit_vectors(40, 13)
    nodes = [node("t", secret if i < 8 else "kept", i, vecs[i]) for i in range(40)]
    await index.upsert(nodes)
    data = os.environ.get("QDRANT_DATA")
    folder = Path(data) / "storage" / "collections" / index.collection if data else None

    def needles() -> list[bytes]:
        gone = nodes[:8]
        return ([secret.encode()] + [np.asarray(n.embedding, dtype=np.float32).tobytes() for n in gone]
                + [uuid.UUID(n.id).bytes for n in gone])

    def found() -> int:
        assert folder is not None
        blobs = folder_bytes(folder)
        return sum(1 for n in needles() if any(n in b for b in blobs))

    if folder is not None and folder.is_dir():
        assert found() >= len(needles()) // 2  # the scan sees them before (the log and the segments hold them)
    await index.delete_scope(Scope(tenant_id="t", conversation_id=secret))
    await index.purge()
    if folder is not None and folder.is_dir():
        assert found() == 0
    kept = Scope(tenant_id="t", conversation_id="kept")
    assert await index.ids(kept) == {n.id for n in nodes[8:]}
    assert [h.id for h in await index.search(kept, vecs[20], 1)] == [nodes[20].id]
    counted = await index.call(lambda c: c.count(index.collection, exact=True), "count")
    assert counted.count == len(nodes) - 8  # no filler or padding point is left behind
