"""Sealed under both turns' keys: a memory record whose embedding was read after the turn before
it opens only with both turns' data keys; destroying either makes it unreadable
(``topology.sealing.joint_key``, ``streams.keyring``)."""

from __future__ import annotations

import os
import time

import orjson
import pytest

from storage.datakeys import SqliteDataKeys
from streams.keyring import Keyring, sealed
from topology import ids, sealing
from topology.errors import SealingError
from topology.schemas import MemoryNode, Scope
from topology.sealing import Kek, Keks

SCOPE = Scope(tenant_id="t", conversation_id="c")
MARK = "heron-lantern-4412"


def node(i: int, after: int | None) -> MemoryNode:
    return MemoryNode(id=ids.node_id("t", "c", f"e{i}"), tenant_id="t", conversation_id="c", event_id=f"e{i}", seq=i,
                      content=f"turn {i} {MARK}", embedding=[0.6, 0.8],
                      after=None if after is None else ids.node_id("t", "c", f"e{after}"))


async def ring() -> tuple[Keyring, dict[str, sealing.DataKey]]:
    k = Keyring(SqliteDataKeys(":memory:"), Keks(Kek(os.urandom(32))))
    made = await k.create([("t", "c", ids.node_id("t", "c", f"e{i}")) for i in range(3)])
    return k, {key.node_id or "": key for key in made}


def test_a_joint_key_needs_both_keys() -> None:
    a, b = sealing.new_data_key("t", "c", "n1"), sealing.new_data_key("t", "c", "n0")
    j = sealing.joint_key(a, b)
    assert j.kid == f"{a.kid}+{b.kid}" and sealing.kid_parts(j.kid) == [a.kid, b.kid]
    assert j.secret == sealing.joint_key(a, b).secret  # derived, the same for whoever holds both
    assert j.secret not in (a.secret, b.secret) and sealing.joint_key(b, a).secret != j.secret
    record = sealing.seal_node(node(1, 0).model_dump(mode="json"), j)
    assert MARK not in orjson.dumps(record).decode()
    assert sealing.unseal(record, j)["content"] == f"turn 1 {MARK}"
    for alone in (a, b):
        with pytest.raises(SealingError):
            sealing.unseal(record, alone)
    with pytest.raises(SealingError):
        sealing.joint_key(a, sealing.new_data_key("t", "other", "n0"))


@pytest.mark.parametrize("destroyed", [0, 1])
async def test_destroying_either_turns_key_makes_the_record_unreadable(destroyed: int) -> None:
    k, keys = await ring()
    n1 = node(1, 0)
    own = {n1.id: keys[n1.id]}
    joint = await k.node_keys([n1], own)  # the turn before's key found by its node
    value = sealed(n1, joint[n1.id])
    assert orjson.loads(value)["sealed"]["kid"] == f"{keys[n1.id].kid}+{keys[node(0, None).id].kid}"
    opened = await k.open([value])
    assert opened.forgotten == 0 and isinstance(opened.values[0], dict) and opened.values[0]["embedding"] == [0.6, 0.8]
    # a forget of either turn destroys its keys: the record cannot be opened any more
    await k.destroy(SCOPE, [node(destroyed, None).id], before=time.time())
    assert (await k.open([value])).forgotten == 1
    assert (await k.open([value], cache=False)).forgotten == 1


async def test_a_turn_read_alone_is_sealed_under_its_own_key() -> None:
    k, keys = await ring()
    n0, n2 = node(0, None), node(2, 1)
    got = await k.node_keys([n0, n2, node(3, 2)], {n0.id: keys[n0.id], n2.id: keys[n2.id]})
    assert got[n0.id] is keys[n0.id]
    assert got[n2.id].kid == f"{keys[n2.id].kid}+{keys[node(1, None).id].kid}"
    assert node(3, 2).id not in got  # a node without a key of its own is not sealed here
    # the turn before found in a fresh process (no cache): from the key store, the newest key of the node
    fresh = Keyring(k.store, k.keks)
    newer = await k.create([("t", "c", node(1, None).id)])
    again = await fresh.node_keys([n2], {n2.id: keys[n2.id]})
    assert again[n2.id].kid == f"{keys[n2.id].kid}+{newer[0].kid}"
