"""Sealed records and their keys: what is encrypted, what stays clear, what fails to open, how keys
are made, cached, destroyed and re-wrapped (``topology.sealing``, ``streams.keyring``,
``storage.datakeys``), and the embedded forget of dead letters."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from datetime import UTC, datetime

import numpy as np
import orjson
import pytest
from pydantic import SecretStr

from jevmem import assembly
from jevmem.settings import Settings
from storage.datakeys import SqliteDataKeys
from storage.memory import MemoryDeadLetters
from storage.sqlite.store import SqliteDeadLetters, connect
from streams.keyring import Keyring, letter_owner, sealed
from tests.conftest import chat_observations
from topology import ids, sealing
from topology.errors import KekMissing, SealingError
from topology.schemas import (
    Candidate,
    CandidateFeatures,
    CandidateSet,
    DeadLetter,
    EdgeEvent,
    Entity,
    Forget,
    MemoryNode,
    Observation,
    RelationJudgment,
    Scope,
    decode,
    decode_input,
    encode,
)
from topology.sealing import Kek, Keks

MARK = "zebra-quokka-7731"  # a personal string that must never show in sealed bytes
SCOPE = Scope(tenant_id="t/1", conversation_id="c1")


def kek() -> Kek:
    return Kek(os.urandom(32))


def keyring(keks: Keks | None = None, ttl_s: float = 300.0) -> Keyring:
    return Keyring(SqliteDataKeys(":memory:"), keks or Keks(kek()), ttl_s=ttl_s)


def observation() -> Observation:
    return Observation(tenant_id=SCOPE.tenant_id, conversation_id="c1", event_id="e1", content=f"I live at {MARK}",
                       speaker=f"{MARK}-speaker", metadata={"note": MARK, "n": 3}, provenance={"src": MARK},
                       entities=[MARK], observed_at=datetime(2024, 1, 2, tzinfo=UTC))


def node() -> MemoryNode:
    return MemoryNode(id=ids.node_id(SCOPE.tenant_id, "c1", "e1"), tenant_id=SCOPE.tenant_id, conversation_id="c1",
                      event_id="e1", seq=4, content=f"I live at {MARK}", metadata={"note": MARK},
                      entities=[Entity(id="x", name=MARK)], tokens=[MARK], embedding=[0.25, -1.5, 3.0])


async def test_each_kind_keeps_ids_clear_and_seals_every_personal_field() -> None:
    ring = keyring()
    [key] = await ring.create([(SCOPE.tenant_id, "c1", ids.node_id(SCOPE.tenant_id, "c1", "e1"))])
    n = node()
    edge = EdgeEvent(id="e", tenant_id=SCOPE.tenant_id, conversation_id="c1", view="entity", source="a", target=n.id,
                     direction="undirected", probability=1.0, label=f"shares:{MARK}", created_by="rule")
    cands = CandidateSet(node=n.without_embedding(), candidates=[
        Candidate(node_id="a", seq=1, score=0.5, features=CandidateFeatures(cosine=0.1, lexical=0, entity=0, temporal=0))])
    letter = DeadLetter.of(orjson.dumps({"tenant_id": SCOPE.tenant_id, "conversation_id": "c1", "event_id": "e9",
                                         "content": MARK, "bad": 1}), "bad: Extra inputs are not permitted", "t:0:1")
    for model, clear in ((observation(), {"tenant_id": SCOPE.tenant_id, "event_id": "e1"}),
                         (n, {"id": n.id, "seq": 4, "event_id": "e1"}),
                         (edge, {"source": "a", "target": n.id, "probability": 1.0}),
                         (letter, {"tenant_id": SCOPE.tenant_id, "conversation_id": "c1", "event_id": "e9"})):
        raw = sealed(model, key)
        assert MARK.encode() not in raw, type(model).__name__
        data = orjson.loads(raw)
        assert {k: data[k] for k in clear} == clear and data["sealed"]["kid"] == key.kid
        opened = await ring.open([raw])
        assert opened.values[0] == model.model_dump(mode="json") and opened.keys[0] == key
        assert type(model).model_validate(opened.values[0]) == model
    # an embedding travels as exact float32 bytes inside the ciphertext: smaller than its JSON
    from topology.embedding import rounded

    [vec] = rounded(np.random.default_rng(3).standard_normal((1, 384)))
    with_vec = n.model_copy(update={"embedding": vec})
    raw = sealed(with_vec, key)
    assert len(raw) < len(encode(with_vec)) / 2
    assert MemoryNode.model_validate((await ring.open([raw])).values[0]) == with_vec
    odd = n.model_copy(update={"embedding": [0.1, 1 / 3]})  # not float32-exact: kept as JSON, exactly
    assert MemoryNode.model_validate((await ring.open([sealed(odd, key)])).values[0]) == odd
    raw = sealed(cands, key)
    assert MARK.encode() not in raw and orjson.loads(raw)["candidates"][0]["node_id"] == "a"
    assert decode(CandidateSet, (await ring.open([raw])).values[0]) == cands  # type: ignore[arg-type]
    # nothing personal in these: written as they are
    judgment = RelationJudgment(tenant_id="t", conversation_id="c", source="a", target="b", semantic=0.5,
                                caused_by=0.1, causes=0.2)
    forget = Forget(tenant_id="t", conversation_id="c", requested_at=datetime.now(UTC))
    assert sealed(judgment, key) == encode(judgment) and sealed(forget, key) == encode(forget)
    related = edge.model_copy(update={"view": "semantic", "label": "related"})  # a rule's name: nothing personal
    assert sealed(related, key) == encode(related)
    assert sealed(observation(), None) == encode(observation())


async def test_a_sealed_record_does_not_open_when_tampered_moved_or_read_without_its_key() -> None:
    ring = keyring()
    k1, k2 = await ring.create([(SCOPE.tenant_id, "c1", None), (SCOPE.tenant_id, "c2", None)])
    data = orjson.loads(sealed(observation(), k1))
    flipped = dict(data, sealed={**data["sealed"], "data": base64.b64encode(
        bytes([base64.b64decode(data["sealed"]["data"])[0] ^ 1]) + base64.b64decode(data["sealed"]["data"])[1:]).decode()})
    with pytest.raises(SealingError):
        sealing.unseal(flipped, k1)
    with pytest.raises(SealingError):  # the ciphertext names k1; k2 (another conversation) cannot open it
        sealing.unseal(dict(data, sealed={**data["sealed"], "kid": k2.kid}), k2)
    with pytest.raises(SealingError):  # the clear scope was changed to another conversation
        sealing.unseal(dict(data, conversation_id="c2"), k1)
    # a sealed record read as if it were plain is rejected, not half-read
    with pytest.raises(Exception, match="sealed"):
        decode_input(orjson.dumps(data))


async def test_keys_are_made_once_cached_destroyed_by_node_or_scope_and_made_after_a_forget_survive() -> None:
    ring = keyring()
    e1, e2 = ids.node_id(SCOPE.tenant_id, "c1", "e1"), ids.node_id(SCOPE.tenant_id, "c1", "e2")
    a, b, other = await ring.create([(SCOPE.tenant_id, "c1", e1), (SCOPE.tenant_id, "c1", e2), ("t/1", "c2", None)])
    raws = [sealed(observation(), a), sealed(observation().model_copy(update={"event_id": "e2"}), b)]
    forget_at = time.time()
    time.sleep(0.01)
    [later] = await ring.create([(SCOPE.tenant_id, "c1", e1)])  # the same event sent again after the forget
    assert await ring.destroy(SCOPE, [e1], before=forget_at) == 1
    fresh = Keyring(ring.store, ring.keks)  # another process: nothing cached
    for r in (ring, fresh):
        opened = await r.open([*raws, sealed(observation(), later)])
        assert opened.values[0] is None and opened.values[1] is not None and opened.values[2] is not None
        assert opened.forgotten == 1
    assert await ring.destroy(SCOPE, None, before=time.time()) == 2  # b and later; c2's key is another scope
    assert (await ring.open(raws)).forgotten == 2
    # another process that had read b keeps it until its cache lifetime ends; a new one cannot
    assert (await fresh.open(raws)).forgotten == 1
    assert (await Keyring(ring.store, ring.keks).open(raws)).forgotten == 2
    assert set(await fresh.lookup([other.kid])) == {other.kid}


async def test_the_cache_forgets_a_key_after_its_lifetime() -> None:
    ring = keyring(ttl_s=0.05)
    [k] = await ring.create([(SCOPE.tenant_id, "c1", None)])
    assert k.kid in await ring.lookup([k.kid])  # read once: cached
    await ring.store.destroy(SCOPE, None, before=time.time())  # behind the cache's back (another process)
    assert k.kid in await ring.lookup([k.kid])
    assert await ring.lookup([k.kid], cache=False) == {}
    time.sleep(0.1)
    assert await ring.lookup([k.kid]) == {}


async def test_rotation_rewraps_every_key_and_a_wrong_kek_is_named_at_the_check() -> None:
    old, new = kek(), kek()
    ring = keyring(Keks(old))
    keys = await ring.create([(SCOPE.tenant_id, "c1", None) for _ in range(7)])
    raw = sealed(observation(), keys[0])
    with pytest.raises(KekMissing, match=old.id):
        await Keyring(ring.store, Keks(new)).check()
    rotating = Keyring(ring.store, Keks(new, (old,)))
    await rotating.check()
    assert await rotating.rotate(page=3) == 7 and await ring.store.kek_ids() == {new.id}
    after = Keyring(ring.store, Keks(new))
    await after.check()
    assert (await after.open([raw])).values[0] == observation().model_dump(mode="json")
    assert await rotating.rotate() == 0


def test_key_encryption_keys_come_from_the_settings_or_stop_the_start_with_what_to_set(tmp_path: object) -> None:
    with pytest.raises(KekMissing, match="JEVMEM_ENCRYPTION_KEK"):
        assembly.keyring(Settings(encryption=True, encryption_kek=None))
    with pytest.raises(KekMissing, match="not base64 of 32 bytes"):
        assembly.keyring(Settings(encryption=True, encryption_kek=SecretStr("c2hvcnQ=")))
    assert assembly.keyring(Settings(encryption=False)) is None
    a, b = (base64.b64encode(os.urandom(32)).decode() for _ in range(2))
    keks = assembly.keks(Settings(encryption=True, encryption_kek=SecretStr(f"{a},\n{b}")))
    assert keks.current.secret == base64.b64decode(a) and [k.secret for k in keks.previous] == [base64.b64decode(b)]
    out = subprocess.run([sys.executable, "-c", "from jevmem.cli import main; main()", "encryption", "check"],
                         env={**os.environ, "JEVMEM_ENCRYPTION_KEK": ""}, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "needs a key-encryption key" in out.stderr and "Traceback" not in out.stderr


def test_a_dead_letter_is_sealed_under_its_conversation_and_event() -> None:
    letter = DeadLetter.of(b'{"tenant_id": "t", "conversation_id": "c", "event_id": "e", "content": 5}', "r", "s")
    assert letter_owner(letter) == ("t", "c", ids.node_id("t", "c", "e"))
    assert letter_owner(DeadLetter.of(b"not json", "r", "s", tenant_id="t")) == ("t", "", None)


@pytest.mark.parametrize("sink", ["sqlite", "memory"])
async def test_an_embedded_forget_deletes_the_dead_letters_naming_the_conversation_or_event(sink: str) -> None:
    letters = SqliteDeadLetters(connect(":memory:")) if sink == "sqlite" else MemoryDeadLetters()

    def bad(conv: str, event: str) -> DeadLetter:
        return DeadLetter.of(orjson.dumps({"tenant_id": "t", "conversation_id": conv, "event_id": event,
                                           "content": MARK, "x": 1}), "x: Extra inputs are not permitted", "file:1")
    await letters.put([bad("c1", "e1"), bad("c1", "e2"), bad("c2", "e1"), DeadLetter.of(b"junk", "not JSON", "f")])
    assert await letters.forget(Scope(tenant_id="t", conversation_id="c1"), "e1") == 1
    assert [(d.conversation_id, d.event_id) for d in await letters.recent(10, "t")] == [("c1", "e2"), ("c2", "e1")]
    assert await letters.forget(Scope(tenant_id="t", conversation_id="c1"), None) == 1
    assert [(d.conversation_id, d.event_id) for d in await letters.recent(10, "t")] == [("c2", "e1")]
    assert len(await letters.recent(10)) == 2  # the letter of no known tenant stays


async def test_embedded_pipeline_forget_leaves_no_dead_letter_of_the_conversation() -> None:
    from jevmem.wiring import build_embedded
    from topology.fakes import HashingEmbedder

    mem = build_embedded(Settings(), embedder=HashingEmbedder(), data_dir=":memory:")
    try:
        await mem.pipeline.ingest(chat_observations(tenant="t", conversation="c1", n=3))
        await mem.stores.dead_letters.put([DeadLetter.of(orjson.dumps({"tenant_id": "t", "conversation_id": "c1",
                                                                       "event_id": "e7", "content": ""}),
                                                         "content: too short", "file:3")])
        await mem.pipeline.forget(Scope(tenant_id="t", conversation_id="c1"), None)
        assert await mem.stores.dead_letters.recent(10, "t") == []
    finally:
        await mem.close()
