"""The LoCoMo benchmark runner on a tiny synthetic conversation file: methods, ablation, recall."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from jevmem.bench.locomo import METHODS, NO_GRAPH, methods, no_graph, recall, run_locomo
from jevmem.settings import Settings
from tests.conftest import CHAT
from topology.params import Params
from topology.ports import Embedder


def _locomo_file(tmp_path: Path) -> Path:
    turns = [{"speaker": s, "dia_id": f"D1:{i + 1}", "text": t} for i, (s, t) in enumerate(CHAT)]
    data = {"speaker_a": "Ana", "speaker_b": "Ben", "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": turns,
            "qa": [{"question": "What is the name of Ana's puppy?", "evidence": ["D1:1"], "category": 4},
                   {"question": "Why did Ben pause his marathon training?", "evidence": ["D1:10"], "category": 1}]}
    path = tmp_path / "c1.json"
    path.write_bytes(orjson.dumps(data))
    return path


def test_recall_and_methods() -> None:
    assert recall(["a", "b", "c"], ["b", "z"], 2) == 0.5
    assert methods(False) == METHODS
    assert methods(True) == (*METHODS, NO_GRAPH)


def test_no_graph_turns_expansion_off_and_keeps_the_rest() -> None:
    p = Params(anchors=12)
    flat = no_graph(p)
    assert flat.limits.depth == 0 and p.limits.depth == 8
    assert flat.anchors == 12 and flat.limits.controller_calls == p.limits.controller_calls


async def test_ablation_reports_no_graph_in_the_same_run(tmp_path: Path, embedder: Embedder) -> None:
    _locomo_file(tmp_path)
    plain = await run_locomo(tmp_path, Settings(params=Params()), embedder)
    out = await run_locomo(tmp_path, Settings(params=Params()), embedder, ablate=True)
    assert set(plain["recall"]) == set(METHODS)
    assert set(out["recall"]) == {*METHODS, NO_GRAPH}
    assert out["questions"] == 2
    for m in out["recall"].values():
        assert set(m) == {"5", "10", "20"}
        assert m["20"]["overall"] is not None
    # the ablation is not counted in the run's controller figures
    assert out["controller_calls"] == plain["controller_calls"]
    cpu = plain["build_cpu_seconds"]
    assert set(cpu) == {"event_loop", "other_threads"} and cpu["event_loop"] > 0.0 and cpu["other_threads"] >= 0.0


@pytest.mark.parametrize("active", [None, 4])
def test_scale_workload_is_deterministic_complete_and_bounded_in_flight(active: int | None) -> None:
    from jevmem.bench.scale import workload

    stream = list(workload(2_000, conversations=40, tenants=4, active=active))
    assert [o.model_dump() for o in stream] == [o.model_dump() for o in workload(2_000, 40, 4, active=active)]
    assert len(stream) == 2_000
    turns: dict[str, list[int]] = {}
    for o in stream:
        turns.setdefault(o.conversation_id, []).append(int(o.event_id[1:]))
    assert len(turns) == 40 and all(t == list(range(50)) for t in turns.values())  # every turn once, in order
    assert {o.tenant_id for o in stream} == {f"tenant-{k}" for k in range(4)}
    in_flight, started, done = 0, set(), {c: 0 for c in turns}
    for o in stream:
        if o.conversation_id not in started:
            started.add(o.conversation_id)
            in_flight += 1
        done[o.conversation_id] += 1
        assert in_flight <= (active or 40)
        if done[o.conversation_id] == 50:
            in_flight -= 1
    if active:  # a stationary mix: each tenth holds early and late turns alike
        means = [sum(int(o.event_id[1:]) for o in stream[k * 200:(k + 1) * 200]) / 200 for k in range(10)]
        assert all(15 < m < 35 for m in means)


async def test_scale_run_keeps_its_store_in_the_directory_given_and_refuses_a_used_one(
        tmp_path: Path, embedder: Embedder) -> None:
    from jevmem.bench.scale import run_scale
    from jevmem.wiring import build_embedded
    from topology.schemas import Scope

    kept = tmp_path / "store"
    out = await run_scale(Settings(params=Params()), embedder, 120, conversations=6, tenants=2, queries=4,
                          active=3, data_dir=kept)
    assert out["observations"] == 120 and len(out["rate_by_tenth"]) == 10 and out["disk_mb"] > 0
    mem = build_embedded(Settings(params=Params()), embedder=embedder, data_dir=str(kept))
    try:  # the store outlives the run: every turn of a conversation is there to query
        assert await mem.stores.nodes.observation_count(Scope(tenant_id="tenant-0", conversation_id="conv-0")) == 20
    finally:
        await mem.close()
    with pytest.raises(ValueError, match="empty directory"):
        await run_scale(Settings(params=Params()), embedder, 10, conversations=1, tenants=1, queries=1, data_dir=kept)


def test_kafka_bench_interleaves_conversations_keeping_each_order() -> None:
    from jevmem.bench.kafka import interleave
    from jevmem.bench.scale import workload

    a = list(workload(5, conversations=1, tenants=1))
    b = [o.model_copy(update={"conversation_id": "other"}) for o in workload(3, conversations=1, tenants=1)]
    out = interleave([a, b])
    assert [(o.conversation_id, o.event_id) for o in out] == [
        ("conv-0", "t0"), ("other", "t0"), ("conv-0", "t1"), ("other", "t1"), ("conv-0", "t2"), ("other", "t2"),
        ("conv-0", "t3"), ("conv-0", "t4")]
    assert interleave([]) == []


def test_context_tokens_are_counted_with_the_llm_tokenizer() -> None:
    from jevmem import tokens
    from jevmem.bench.locomo import context_tokens

    assert tokens.count(["hello world", ""]) == [2, 0]
    got = context_tokens({"json": ['[{"content": "I adopted a puppy"}]'], "prompt": ["Ana: I adopted a puppy"]})
    assert got["tokenizer"].startswith("o200k_base") and got["top_k"] == 10
    assert got["json"]["mean"] > got["prompt"]["mean"] > 0
