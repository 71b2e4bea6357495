"""Recall across conversations (:mod:`query_api.recall`): one search over a realm (a tenant's
conversations, one user's, or a list), on the real embedded stores; and the CLI's
``query --all-conversations``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from jevmem.cli import app
from jevmem.wiring import Embedded, EmbeddedService
from query_api.recall import MAX_CONVERSATIONS, Recall, TooManyConversations, recall
from storage.ports import Hit
from tests.conftest import chat_observations
from topology.schemas import Observation, Realm, Scope

T0 = datetime(2024, 3, 1, tzinfo=UTC)
SESSIONS = 80  # more than the 50 conversations a fan-out recall used to search
FACT = "My locker code at the gym is 4417, I keep forgetting it."


def _sessions(user: str, tenant: str = "acme", fact_at: int = 37) -> list[Observation]:
    """``SESSIONS`` three-turn sessions of ``user`` about other things; session ``fact_at`` states the fact."""
    out = []
    for s in range(SESSIONS):
        turns = [f"Session {s}: we talked about the weather and a recipe for soup number {s}.",
                 f"I watched episode {s} of a cooking show yesterday.",
                 FACT if s == fact_at else f"Remind me to water the plants on day {s}."]
        for t, text in enumerate(turns):
            out.append(Observation(tenant_id=tenant, conversation_id=f"{user}-s{s:03d}", event_id=f"t{t}", user_id=user,
                                   content=text, speaker=user, observed_at=T0 + timedelta(days=s, minutes=t)))
    return out


class _Service:
    """The embedded deployment's recall, as ``EmbeddedService.recall`` wires it."""

    def __init__(self, mem: Embedded) -> None:
        self.mem = mem

    async def recall(self, realm: Realm, question: str, top_k: int, as_of: datetime | None = None):  # type: ignore[no-untyped-def]
        return await self.mem.controller.retrieve_realm(realm, question, top_k, as_of)


async def _ingest(mem: Embedded, *users: str) -> None:
    for u in users:
        await mem.pipeline.ingest(_sessions(u))


async def test_a_users_fact_is_found_among_many_sessions_in_one_ranking(memory: Embedded) -> None:
    await _ingest(memory, "ana", "ben")
    out: Recall = await recall(_Service(memory), "acme", "What is my locker code at the gym?", top_k=5, user_id="ana")
    top = out.evidence[0]
    assert (top.conversation_id, top.event_id, top.content) == ("ana-s037", "t2", FACT)
    assert all(e.conversation_id.startswith("ana-") for e in out.evidence)  # one user's memory only
    assert out.user_id == "ana" and out.searched == len(out.conversations) >= 1
    assert sum(c.evidence for c in out.conversations) == len(out.evidence)
    assert {c.conversation_id for c in out.conversations} >= {e.conversation_id for e in out.evidence}
    # the whole tenant: both users' facts compete in one ranking; the same fact of either user is first
    tenant = await recall(_Service(memory), "acme", "What is my locker code at the gym?", top_k=4)
    assert {e.conversation_id for e in tenant.evidence[:2]} == {"ana-s037", "ben-s037"}


async def test_scores_are_one_ranking_and_a_conversation_list_limits_it(memory: Embedded) -> None:
    await _ingest(memory, "ana")
    out = await recall(_Service(memory), "acme", "What is my locker code at the gym?", top_k=10, user_id="ana")
    scores = [e.score for e in out.evidence]
    assert scores == sorted(scores, reverse=True)
    only = await recall(_Service(memory), "acme", "What is my locker code at the gym?", top_k=10,
                        conversation_ids=["ana-s001", "ana-s002", "ana-s002", "nope"])
    assert {e.conversation_id for e in only.evidence} <= {"ana-s001", "ana-s002"} and only.evidence
    assert FACT not in [e.content for e in only.evidence]
    mine = await recall(_Service(memory), "acme", "What is my locker code at the gym?", top_k=10, user_id="ana",
                        conversation_ids=["ana-s037", "ana-s002"])
    assert {e.conversation_id for e in mine.evidence} == {"ana-s037", "ana-s002"} and mine.evidence[0].content == FACT
    with pytest.raises(TooManyConversations):
        await recall(_Service(memory), "acme", "q", conversation_ids=[f"c{i}" for i in range(MAX_CONVERSATIONS + 1)])


async def test_other_tenants_and_unknown_users_find_nothing(memory: Embedded) -> None:
    await _ingest(memory, "ana")
    await memory.pipeline.ingest(_sessions("ana", tenant="globex", fact_at=3)[:12])
    assert (await recall(_Service(memory), "acme", "locker code", user_id="nobody")).evidence == []
    other = await recall(_Service(memory), "globex", "What is my locker code at the gym?", top_k=50)
    assert other.evidence and all(e.conversation_id in {f"ana-s{s:03d}" for s in range(4)} for e in other.evidence)
    assert {e.node_id for e in other.evidence}.isdisjoint(
        {e.node_id for e in (await recall(_Service(memory), "acme", "locker code", top_k=50)).evidence})


async def test_realm_indexes_follow_writes_and_forgets(memory: Embedded) -> None:
    vectors, lexical = memory.stores.vectors, memory.stores.lexical
    await memory.pipeline.ingest(_sessions("ana")[:9])  # sessions 0-2
    qvec = memory.embedder.embed_query(["locker code at the gym"])[0]
    realm = Realm(tenant_id="acme", user_id="ana")
    before = await vectors.search_realm(realm, qvec, 50)  # type: ignore[attr-defined]
    assert len(before) == 9 and all(isinstance(h, Hit) and h.conversation_id for h in before)
    late = Observation(tenant_id="acme", conversation_id="ana-late", event_id="x", user_id="ana", content=FACT,
                       observed_at=T0 + timedelta(days=300))
    await memory.pipeline.ingest([late])  # appended to the held realm (no reload)
    hits = await vectors.search_realm(realm, qvec, 3)  # type: ignore[attr-defined]
    assert hits[0].conversation_id == "ana-late"
    scored = []
    for c in {h.conversation_id or "" for h in before} | {"ana-late"}:
        for n in await memory.stores.nodes.get(Scope(tenant_id="acme", conversation_id=c), [h.id for h in before] + [hits[0].id]):
            scored.append((-float(np.dot(n.retrieval_vector() or [], qvec)), n.seq, n.id))
    assert [h.id for h in hits] == [i for _, _, i in sorted(scored)[:3]]  # exact, across conversations (ties: seq, id)
    lex = await lexical.search_realm(realm, "locker code", 5)  # type: ignore[attr-defined]
    assert lex[0].conversation_id == "ana-late"
    await memory.pipeline.forget(Scope(tenant_id="acme", conversation_id="ana-late"), None)
    assert all(h.conversation_id != "ana-late" for h in await vectors.search_realm(realm, qvec, 50))  # type: ignore[attr-defined]
    assert all(h.conversation_id != "ana-late" for h in await lexical.search_realm(realm, "locker code", 50))  # type: ignore[attr-defined]


async def test_embedded_service_recall(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    from jevmem.settings import Settings
    from query_api.service import recall_across

    svc = EmbeddedService(Settings(), embedder=embedder, data_dir=tmp_path)
    await svc.start()
    try:
        await svc.submit(_sessions("ana")[:30])
        out = await recall_across(svc, "acme", "water the plants on day 4", 3, None, "ana")
        assert out.evidence[0].conversation_id == "ana-s004"
    finally:
        await svc.stop()


@pytest.mark.model  # the CLI loads the configured model
def test_cli_query_across_conversations(tmp_path: Path) -> None:
    lines = [o.model_dump_json(exclude={"tenant_id", "conversation_id"}) for o in chat_observations()]
    (tmp_path / "pets.jsonl").write_text("\n".join(lines[:6]) + "\n")
    (tmp_path / "travel.jsonl").write_text("\n".join(lines[6:]) + "\n")
    runner = CliRunner()
    data = str(tmp_path / "data")
    for conv in ("pets", "travel"):
        res = runner.invoke(app, ["ingest", str(tmp_path / f"{conv}.jsonl"), "--data-dir", data, "--conversation", conv])
        assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["query", "Where are Ana and Clara planning a trip?", "--all-conversations",
                              "--data-dir", data, "--json"])
    assert res.exit_code == 0, res.output
    out = orjson.loads(res.stdout.splitlines()[-1])
    assert (out["evidence"][0]["conversation_id"], out["evidence"][0]["event_id"]) == ("travel", "e10")
    assert out["searched"] >= 1
    res = runner.invoke(app, ["query", "What is the name of Ana's puppy?", "-c", "pets", "-c", "travel",
                              "--data-dir", data, "--json"])
    assert orjson.loads(res.stdout.splitlines()[-1])["evidence"][0]["content"].startswith("I adopted a puppy")
    res = runner.invoke(app, ["query", "What is the name of Ana's puppy?", "-c", "pets", "--data-dir", data, "--json"])
    single = orjson.loads(res.stdout.splitlines()[-1])
    assert single["evidence"][0]["event_id"] == "e0" and "stop_reason" in single["trace"]
    res = runner.invoke(app, ["query", "anything", "--data-dir", data])
    assert res.exit_code != 0
