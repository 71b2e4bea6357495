"""Crypto-shredding on a real broker, Elasticsearch and Qdrant, with a Faust worker: personal text
never reaches a topic or a log in the clear, a forget makes every record of what it forgot
unreadable (a turn read after it too: its memory record is sealed under both turns' keys, and
the worker logs it again, re-embedded after the turn before the forgotten one), both replays
rebuild the graph and the vectors without it, and a wrong or missing key-encryption key stops a
process at start-up.

Needs ``JEVMEM_TEST_KAFKA``, ``JEVMEM_TEST_ES_URL`` and ``JEVMEM_TEST_QDRANT_URL`` (``scripts/test``
starts the servers).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import orjson
import pytest
from pydantic import SecretStr

pytestmark = pytest.mark.integration

from tests.integration.servers import KAFKA, require_stack  # noqa: E402

require_stack()

from jevmem import assembly  # noqa: E402
from jevmem.bench.kafka import worker_env  # noqa: E402
from jevmem.distributed import DistributedService, checked_keyring, distributed_stores, replay  # noqa: E402
from streams.kafka_admin import ensure_topics, read_topic  # noqa: E402
from streams.producer import ObservationProducer  # noqa: E402
from streams.replay import graph_of  # noqa: E402
from tests.conftest import chat_observations  # noqa: E402
from tests.integration.test_distributed import Stack, wait_for  # noqa: E402
from topology import ids, sealing  # noqa: E402
from topology.embedding import default_embedder  # noqa: E402
from topology.errors import KekMissing  # noqa: E402
from topology.schemas import DeadLetter, Observation, Scope  # noqa: E402
from topology.stages import context  # noqa: E402
from topology.topics import topics  # noqa: E402

SECRET = "okapi-marmalade-4417"  # in content, metadata, provenance and speakers: must never be readable


def marked(tenant: str, conversation: str) -> list[Observation]:
    """The chat turns, one sitting (a minute apart: each read after the turn before it)."""
    first = chat_observations(tenant=tenant, conversation=conversation)[0].observed_at
    assert first is not None
    return [o.model_copy(update={"content": f"{o.content} ({SECRET} {i})", "speaker": f"{o.speaker}-{SECRET}",
                                 "metadata": {"note": f"{SECRET}-meta"}, "provenance": {"by": SECRET},
                                 "observed_at": first + timedelta(minutes=i)})
            for i, o in enumerate(chat_observations(tenant=tenant, conversation=conversation))]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    kek = SecretStr(base64.b64encode(os.urandom(32)).decode())
    s.settings = s.settings.model_copy(update={"encryption": True, "encryption_kek": kek})
    s.env = worker_env(s.settings)
    yield s
    s.stop()


async def test_the_log_holds_no_personal_text_and_a_forget_shreds_it_everywhere(stack: Stack) -> None:
    settings = stack.settings
    c1, c2 = Scope(tenant_id="sl", conversation_id="c1"), Scope(tenant_id="sl", conversation_id="c2")
    e1, e2 = marked("sl", "c1"), marked("sl", "c2")
    ensure_topics(KAFKA or "", settings.topic_prefix, settings.topic_layout())
    stack.start_worker(1)
    service = DistributedService(settings, embedder=default_embedder())
    await service.start()
    stores = distributed_stores(settings, settings.store_prefix or "", default_embedder().dim)
    keyring = assembly.keyring(settings)
    assert keyring is not None
    spec = topics(settings.topic_prefix)
    try:
        await service.submit(e1 + e2)
        # a dead letter from the API (a rejected request) and one from the worker (a sealed record
        # that opens to an invalid observation)
        await service.reject([DeadLetter.of(orjson.dumps({"tenant_id": "sl", "conversation_id": "c2",
                                                          "content": SECRET, "oops": 1}), "oops: not permitted",
                                            "http", tenant_id="sl")])
        [k] = await keyring.create([("sl", "c1", ids.node_id("sl", "c1", "bad"))])
        bad = sealing.seal_observation({"tenant_id": "sl", "conversation_id": "c1", "event_id": "bad",
                                        "content": SECRET, "bogus": SECRET}, k)
        async with ObservationProducer(KAFKA or "", settings.topic_prefix) as raw:
            await raw.send_raw([(c1.key, orjson.dumps(bad))])

        async def stored() -> bool:
            return (len(await stores.nodes.scan(c1)) >= len(e1) and len(await stores.nodes.scan(c2)) >= len(e2)
                    and len(read_topic(KAFKA or "", spec["deadletters"].name)) == 2)

        await wait_for(stored, "both conversations stored and two dead letters", stack)
        assert SECRET in (await stores.nodes.scan(c1))[0].content  # the stores hold the text; the log does not

        logged = {role: read_topic(KAFKA or "", s.name) for role, s in spec.items()}
        assert all(logged[r] for r in ("observations", "memories", "candidates", "judgments", "edges", "deadletters"))
        for role, records in logged.items():
            for r in records:
                assert SECRET.encode() not in r.value, role
        logs = "\n".join(p.read_text(errors="replace") for p in stack.tmp.glob("worker*.log"))
        assert SECRET not in logs and "dead letter" in logs
        letters = await service.dead_letters("sl", 10)
        assert len(letters) == 2 and all(SECRET in d.original for d in letters)  # readable through the API

        gone, nxt, prev = (ids.node_id("sl", "c1", e) for e in ("e3", "e4", "e2"))
        assert (await stores.nodes.get(c1, [nxt]))[0].after == gone
        await service.forget(c1, "e3")
        await service.forget(c2, None)

        async def forgotten() -> bool:
            return (gone not in {n.id for n in await stores.nodes.scan(c1)} and not await stores.nodes.scan(c2)
                    and "keys_destroyed" in "".join(p.read_text() for p in stack.tmp.glob("worker*.log")))

        await wait_for(forgotten, "the forgets applied and their keys destroyed", stack)
        # the turn after the forgotten one, re-embedded after the turn before it, as if never written
        [before, after] = await stores.nodes.get(c1, [prev, nxt])
        assert after.after == prev
        assert after.embedding == default_embedder().embed_after(
            [(context.before_text(before), context.embedding_text(after.speaker, after.content))])[0]
        fresh = assembly.keyring(settings)  # a process that never saw the keys
        assert fresh is not None
        try:
            def opened_as(role: str) -> list[tuple[dict[str, object], bool]]:
                return [(orjson.loads(r.value), v is not None) for r, v in zip(records[role], opened[role], strict=True)]

            records = {role: read_topic(KAFKA or "", spec[role].name) for role in spec}
            opened = {role: (await fresh.open([r.value for r in rs])).values for role, rs in records.items()}
            obs = opened_as("observations")
            assert {(d["event_id"], ok) for d, ok in obs if d.get("conversation_id") == "c1" and d.get("op") is None} == {
                *((o.event_id, o.event_id != "e3") for o in e1), ("bad", True)}
            assert not any(ok for d, ok in obs if d.get("conversation_id") == "c2" and d.get("op") is None)
            for role in ("memories", "candidates"):
                nodes = [(d.get("node", d), ok) for d, ok in opened_as(role) if d.get("op") is None]
                assert {ok for n, ok in nodes if n["id"] == gone or n["conversation_id"] == "c2"} == {False}, role  # type: ignore[index]
                # on the memories topic the turn read after the forgotten one was sealed under both
                # turns' keys: unreadable now, and logged again after the forget
                assert [ok for n, ok in nodes if n["id"] == nxt] == ([False, True] if role == "memories" else [True])  # type: ignore[index]
                assert {ok for n, ok in nodes if n["conversation_id"] == "c1" and n["kind"] == "observation"  # type: ignore[index]
                        and n["id"] not in (gone, nxt)} == {True}, role  # type: ignore[index]
            # edges whose label names something (entity edges) are sealed; a rule's label is not
            edges = [(d, ok) for d, ok in opened_as("edges") if d.get("op") is None and "sealed" in d]
            assert {ok for d, ok in edges if d["conversation_id"] == "c2"} == {False}
            assert True not in {ok for d, ok in edges if gone in (d["source"], d["target"])}
            assert True in {ok for d, ok in edges if d["conversation_id"] == "c1"}
            assert [(d["conversation_id"], ok) for d, ok in opened_as("deadletters")] == [("c2", False), ("c1", True)]
        finally:
            await fresh.close()
        assert [d.conversation_id for d in await service.dead_letters("sl", 10)] == ["c1"]

        live = await graph_of(stores, c1)
        live_ids = [n for n, _ in live.nodes]
        live_vectors = {n.id: (n.embedding, n.after) for n in await stores.nodes.get(c1, live_ids)}
        for source, tag in (("edges", "r2-"), ("observations", "r1-")):
            out = await replay(settings, source, f"{settings.store_prefix}{tag}", switch=False)
            assert out["unreadable"] > 0
            rebuilt = distributed_stores(settings, f"{settings.store_prefix}{tag}", default_embedder().dim)
            try:
                graph = await graph_of(rebuilt, c1)
                assert (graph.nodes, graph.forgotten) == (live.nodes, live.forgotten), source
                assert gone not in {n.id for n in await rebuilt.nodes.scan(c1)} and not await rebuilt.nodes.scan(c2)
                assert {n.id: (n.embedding, n.after) for n in await rebuilt.nodes.get(c1, live_ids)} == live_vectors, source
                if source == "edges":  # the logged graph, exactly
                    assert out["identical"] and graph == live, out["problems"]
                else:  # recomputed without the forgotten text (its record is unreadable): the turns
                    # after the next one were linked live while the forgotten turn was still a
                    # candidate, so their edges may differ; nodes, seqs and every edge among the
                    # turns up to the next one (re-embedded and linked again by the forget) cannot
                    assert out["identical"] or all("edges differ" in p for p in out["problems"]), out["problems"]
                    seq = dict(live.nodes)
                    upto = seq[nxt]
                    earlier = [{e for e in g.edges if seq.get(e[2], upto + 1) <= upto and seq.get(e[3], upto + 1) <= upto}
                               for g in (graph, live)]
                    assert earlier[0] == earlier[1] and any(nxt in e for e in earlier[1])
            finally:
                await rebuilt.close()

        wrong = settings.model_copy(update={"encryption_kek": SecretStr(base64.b64encode(os.urandom(32)).decode())})
        with pytest.raises(KekMissing, match="not configured"):
            await checked_keyring(wrong)
        with pytest.raises(KekMissing, match="needs a key-encryption key"):
            await checked_keyring(settings.model_copy(update={"encryption_kek": None}))
    finally:
        await keyring.close()
        await service.stop()
        await stores.close()
