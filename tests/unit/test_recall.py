"""Tenant-wide recall (:mod:`query_api.recall`): the fan-out cap, the merge, bounded concurrency,
failures, and the CLI's ``query --all-conversations``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from jevmem.cli import app
from query_api.controller import Evidence, Retrieval, Trace
from query_api.recall import CONCURRENCY, MAX_CONVERSATIONS, TooManyConversations, recall
from tests.conftest import chat_observations
from topology.errors import StoreUnavailable
from topology.schemas import Scope


def _retrieval(question: str, conv: str, scores: list[float]) -> Retrieval:
    ev = [Evidence(node_id=f"{conv}-n{i}", event_id=f"e{i}", content=f"{conv} {i}", speaker=None, score=s, relevance=s,
                   via="anchor", seq=i, observed_at=None, event_time=None, temporal_refs=[], provenance={})
          for i, s in enumerate(scores)]
    trace = Trace(route={"semantic": 0.91234}, active_views=["semantic"], budgets={}, depth=1, anchors=len(ev), rounds=[],
                  stop_reason="exhausted", controller_calls=3, visited=len(ev), examined_edges=0, timings_ms={"total": 1.0})
    return Retrieval(question=question, evidence=ev, trace=trace)


class FakeService:
    """``conversations`` (id -> node count) and canned per-conversation scores; records calls and
    the most retrievals seen running at once."""

    def __init__(self, convs: dict[str, int], scores: dict[str, list[float]] | None = None,
                 fail: str | None = None) -> None:
        self.convs, self.scores, self.fail = convs, scores or {}, fail
        self.calls: list[Scope] = []
        self.running = self.peak = 0

    async def conversations(self, tenant_id: str) -> list[tuple[str, int]]:
        return sorted(self.convs.items()) if tenant_id == "acme" else []

    async def retrieve(self, scope: Scope, question: str, top_k: int) -> Retrieval:
        self.calls.append(scope)
        self.running += 1
        self.peak = max(self.peak, self.running)
        await asyncio.sleep(0.01)
        self.running -= 1
        if scope.conversation_id == self.fail:
            raise StoreUnavailable("down")
        return _retrieval(question, scope.conversation_id, self.scores.get(scope.conversation_id, [])[:top_k])


async def test_merge_by_score_keeps_each_items_conversation() -> None:
    svc = FakeService({"a": 3, "b": 2, "c": 0}, {"a": [0.9, 0.5, 0.1], "b": [0.7, 0.6]})
    out = await recall(svc, "acme", "q", top_k=4)
    assert [(e.conversation_id, e.score) for e in out.evidence] == [("a", 0.9), ("b", 0.7), ("b", 0.6), ("a", 0.5)]
    assert out.searched == 3 and out.skipped == 0
    kept = {t.conversation_id: t.evidence for t in out.conversations}
    assert kept == {"a": 2, "b": 2, "c": 0}
    assert out.conversations[0].route == {"semantic": 0.91} and out.conversations[0].controller_calls == 3
    assert {s.tenant_id for s in svc.calls} == {"acme"}


async def test_the_fan_out_is_capped_and_bounded() -> None:
    svc = FakeService({f"c{i:03d}": i for i in range(MAX_CONVERSATIONS + 10)})
    out = await recall(svc, "acme", "q")
    assert out.searched == MAX_CONVERSATIONS and out.skipped == 10
    assert {s.conversation_id for s in svc.calls} == {f"c{i:03d}" for i in range(10, MAX_CONVERSATIONS + 10)}  # the largest
    assert 1 < svc.peak <= CONCURRENCY
    with pytest.raises(TooManyConversations):
        await recall(svc, "acme", "q", conversation_ids=[f"x{i}" for i in range(MAX_CONVERSATIONS + 1)])
    explicit = await recall(svc, "acme", "q", conversation_ids=["c001", "c001", "zz"])
    assert explicit.searched == 2  # duplicates collapse; unknown ids just find nothing


async def test_a_failure_fails_the_call_and_no_conversations_is_empty() -> None:
    with pytest.raises(StoreUnavailable):
        await recall(FakeService({"a": 1, "b": 1}, fail="b"), "acme", "q")
    empty = await recall(FakeService({"a": 1}), "globex", "q")
    assert empty.evidence == [] and empty.searched == 0


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
    assert out["searched"] == 2
    res = runner.invoke(app, ["query", "What is the name of Ana's puppy?", "-c", "pets", "-c", "travel",
                              "--data-dir", data, "--json"])
    assert orjson.loads(res.stdout.splitlines()[-1])["evidence"][0]["content"].startswith("I adopted a puppy")
    res = runner.invoke(app, ["query", "What is the name of Ana's puppy?", "-c", "pets", "--data-dir", data, "--json"])
    single = orjson.loads(res.stdout.splitlines()[-1])
    assert single["evidence"][0]["event_id"] == "e0" and "stop_reason" in single["trace"]
    res = runner.invoke(app, ["query", "anything", "--data-dir", data])
    assert res.exit_code != 0
