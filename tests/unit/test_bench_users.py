"""``jevmem bench users``: the synthetic users are deterministic, their wording split is clean,
every question's gold is a real stating turn, and a tiny run on the product gives sane figures."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

import orjson
import pytest
from typer.testing import CliRunner

from jevmem.bench.users import CLASSES, above, distractor_class, run_users
from jevmem.bench.users_data import (
    FACTS,
    LOCKER,
    SLOTS,
    Dataset,
    allowed,
    generate,
    held_out,
    many_sessions,
    tables,
    templates,
)
from jevmem.cli import app
from jevmem.settings import Settings
from topology.ports import Embedder


def _rows(data: Dataset) -> list[tuple[object, ...]]:
    return [(t.event_id, t.conversation_id, t.user_id, t.role, t.speaker, t.content, t.observed_at, t.kind, t.session,
             t.fact, t.template) for t in data.turns()]


def test_the_generator_is_deterministic_and_the_seed_matters() -> None:
    a, b = generate(3, 10, seed=5), generate(3, 10, seed=5)
    assert _rows(a) == _rows(b) and a.questions == b.questions
    assert _rows(generate(3, 10, seed=6)) != _rows(a)
    m1, m2 = many_sessions(40, 5), many_sessions(40, 5)
    assert _rows(m1) == _rows(m2) and m1.questions == m2.questions


def test_train_and_heldout_wordings_are_disjoint() -> None:
    for name, table in tables().items():
        assert len(table) >= 3, name
        assert allowed(len(table), "train") and allowed(len(table), "heldout"), name
        assert len(set(table)) == len(table), name
    train, held = templates("train"), templates("heldout")
    assert not train & held
    assert train | held == templates("all")
    runs = {w: generate(2, 12, wordings=w, seed=3) for w in ("train", "heldout")}
    for wordings, data in runs.items():
        used = [t.template for t in data.turns()] + [q.template for q in data.questions]
        assert all(held_out(int(u.rsplit(":", 1)[1])) == (wordings == "heldout") for u in used), wordings
    texts = {w: {t.content for t in d.turns()} | {q.text for q in d.questions} for w, d in runs.items()}
    assert not texts["train"] & texts["heldout"]


def test_every_question_has_its_stating_turn_as_gold() -> None:
    data = generate(4, 16, facts=5, seed=11)
    turns = {t.event_id: t for t in data.turns()}
    assert len(turns) == sum(1 for _ in data.turns())  # event ids are unique
    assert len(data.questions) == 4 * 5
    for q in data.questions:
        gold = turns[q.gold]
        assert (gold.kind, gold.user_id, gold.fact, gold.role) == ("statement", q.user_id, q.fact, "user")
        assert gold.session == "statement"
        later = [t for t in data.turns() if t.user_id == q.user_id and t.fact == q.fact and t.event_id != q.gold]
        assert later and all(t.observed_at > gold.observed_at for t in later)  # asked about only after it was said
    kinds = Counter(t.kind for t in data.turns())
    assert {"statement", "question", "tool_call", "tool_result", "advice", "small_talk"} <= set(kinds)
    assert Counter(s.kind for s in data.sessions)["one_turn"] == 4 * 4
    for s in data.sessions:
        assert 1 <= len(s.turns) <= 50
        assert len({t.user_id for t in s.turns}) == 1
    for user in data.users():
        times: list[datetime] = [t.observed_at for s in data.sessions if s.user_id == user for t in s.turns]
        assert times == sorted(times) and len(set(times)) == len(times)


def test_many_sessions_states_the_code_once() -> None:
    data = many_sessions(50, repeats=7, wordings="train")
    assert len(data.sessions) == 50 and all(len(s.turns) == 3 for s in data.sessions)
    stated = [t for t in data.turns() if t.kind == "statement"]
    assert len(stated) == 1 and stated[0].fact == "locker"
    assert len(data.questions) == 7 and {q.gold for q in data.questions} == {stated[0].event_id}
    assert {q.text for q in data.questions} <= {LOCKER.question[i] for i in allowed(len(LOCKER.question), "train")}


def test_a_missing_fact_is_below_every_class() -> None:
    data = generate(2, 8, seed=2)
    turns = {t.event_id: t for t in data.turns()}
    q = data.questions[0]
    mine = [t for t in data.turns() if t.user_id == q.user_id]
    tool = next(t for t in mine if t.kind == "tool_call")
    one = next(t for t in mine if t.session == "one_turn")
    other = next(t for t in data.turns() if t.user_id != q.user_id)
    assert distractor_class(other, q) == "other_user" and distractor_class(turns[q.gold], q) is None
    assert above([tool.event_id, q.gold, one.event_id], q, turns) == {"tool"}
    assert above([other.event_id, "unknown", q.gold], q, turns) == set()
    assert above([one.event_id], q, turns) == set(CLASSES)
    assert above([one.event_id], q, turns, missing_counts=False) == {"one_turn_session"}


def _check_sane(out: dict[str, object]) -> None:
    users = out["users"]
    assert isinstance(users, dict)
    for key in ("fact_at_1", "fact_in_top5", "fact_in_top10", "other_user_recalled"):
        assert 0.0 <= users[key] <= 1.0, key
    assert users["fact_at_1"] <= users["fact_in_top5"] <= users["fact_in_top10"]
    assert set(users["above_fact"]) == set(CLASSES) == set(users["above_fact_recalled"])
    for c in CLASSES:
        assert 0.0 <= users["above_fact_recalled"][c] <= users["above_fact"][c] <= 1.0
    assert 0 < users["recall_ms"]["p50"] <= users["recall_ms"]["p95"]
    assert users["observations_per_second"] > 0 and users["questions"] == 5
    many = out["many_sessions"]
    assert isinstance(many, dict)
    assert many["sessions"] == 5 and many["questions"] == 2
    assert 0.0 <= many["fact_at_1"] <= 1.0 and many["skipped"]["max"] >= 0


async def test_a_tiny_run_on_the_product(model_embedder: Embedder) -> None:
    out = await run_users(Settings(), model_embedder, users=1, sessions=4, many=5, repeats=2)
    assert out["mode"] in ("user_id", "tenant_per_user")
    _check_sane(out)
    assert out["scale"] is None


def test_the_command_prints_json(embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("jevmem.assembly.load_embedder", lambda *_a, **_k: embedder)
    runner = CliRunner()
    res = runner.invoke(app, ["bench", "users", "--users", "1", "--sessions", "4", "--many-sessions", "5",
                              "--repeats", "2", "--wordings", "heldout", "--scale-sessions", "3", "--json"])
    assert res.exit_code == 0, res.output
    out = orjson.loads(res.stdout)
    assert out["config"]["wordings"] == "heldout"
    _check_sane(out)
    scale = out["scale"]  # every fact asked in each held-out question wording (one per fact)
    assert scale["sessions"] == 3 and scale["questions"] == 5 and scale["peak_rss_mb"] > 0
    assert 0 < scale["recall_ms"]["p50"] <= scale["recall_ms"]["p95"]
    res = runner.invoke(app, ["bench", "users", "--wordings", "test"])
    assert res.exit_code == 2
    text = runner.invoke(app, ["bench", "users", "--help"]).output
    assert "<bool>" not in text and "<str>" not in text.split("Options:", 1)[1] and "--scale-sessions" in text


def test_facts_are_all_usable() -> None:
    for fact in (*FACTS, LOCKER):
        assert len(fact.tool_call) == len(fact.tool_result), fact.name
        for value in fact.values:
            for table in fact.tables().values():
                for text in table:
                    assert text.format_map({**{k: v[0] for k, v in SLOTS.items()}, **value})
