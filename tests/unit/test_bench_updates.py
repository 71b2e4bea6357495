"""``jevmem bench updates``: the conversations with changing facts are deterministic, their
wording split is clean, every question's gold ids are the right turns, and a tiny run on the
product gives sane figures."""

from __future__ import annotations

from collections import Counter

import orjson
import pytest
from typer.testing import CliRunner

from jevmem.bench.updates import DENSE, SHARES, above, rank, run_updates, scope_of, statement_pairs
from jevmem.bench.updates_data import ATTRIBUTES, PARTS, SLOTS, UPDATE_KINDS, Dataset, generate, tables, templates
from jevmem.bench.users_data import held_out
from jevmem.cli import app
from jevmem.settings import Settings
from topology.ports import Embedder


def _rows(data: Dataset) -> list[tuple[object, ...]]:
    return [(t.event_id, t.user_id, t.role, t.speaker, t.content, t.observed_at, t.kind, t.template) for t in data.turns()]


def test_the_generator_is_deterministic_and_the_seed_matters() -> None:
    a, b = generate(6, seed=5), generate(6, seed=5)
    assert _rows(a) == _rows(b) and a.questions == b.questions
    assert _rows(generate(6, seed=6)) != _rows(a)


def test_train_and_heldout_wordings_are_disjoint() -> None:
    for name, table in tables().items():
        assert len(table) >= 3 and len(set(table)) == len(table), name
    train, held = templates("train"), templates("heldout")
    assert not train & held and train | held == templates("all")
    runs = {w: generate(6, wordings=w, seed=3) for w in ("train", "heldout")}
    for wordings, data in runs.items():
        used = [t.template for t in data.turns()] + [q.template for q in data.questions]
        assert all(held_out(int(u.rsplit(":", 1)[1])) == (wordings == "heldout") for u in used), wordings
    texts = {w: {t.content for t in d.turns() if t.kind != "small_talk"} for w, d in runs.items()}
    assert not texts["train"] & texts["heldout"]


def test_every_template_fills() -> None:
    slots = {"old": "x", "who": "My sister", "who_l": "my sister", "name": "Ana", **{k: v[0] for k, v in SLOTS.items()}}
    for a in ATTRIBUTES:
        assert len(set(a.values)) == len(a.values) >= 6, a.name
        for part in PARTS:
            for text in getattr(a, part):
                assert text.format_map({**slots, "v": a.values[0]}), (a.name, part)


def test_conversations_are_long_and_alternate() -> None:
    data = generate(6, seed=2)
    assert len(data.conversations) == 6 and len(data.users()) == 5  # the third person has two sessions
    for conv in data.conversations:
        assert len(conv.turns) == 100
        assert all(t.speaker == conv.person for t in conv.turns[::2])
        assert all(t.speaker == conv.partner for t in conv.turns[1::2])
        times = [t.observed_at for t in conv.turns]
        assert times == sorted(times)
    twice = Counter(c.user_id for c in data.conversations).most_common(1)[0][0]
    first, second = [c for c in data.conversations if c.user_id == twice]
    assert first.turns[-1].observed_at < second.turns[0].observed_at
    assert len({t.event_id for t in data.turns()}) == sum(1 for _ in data.turns())


def test_every_question_has_the_right_gold() -> None:
    data = generate(12, seed=11)
    turns = {t.event_id: t for t in data.turns()}
    kinds = Counter(q.kind for q in data.questions)
    assert kinds["present"] == kinds["past"] > 0 and kinds["stable"] > 0
    assert {q.update_kind for q in data.questions if q.kind == "present"} == set(UPDATE_KINDS)
    assert {scope_of(q) for q in data.questions} == {"conversation", "user_same_session", "user_cross_session"}
    for q in data.questions:
        gold = turns[q.gold]
        assert gold.user_id == q.user_id and gold.attribute == q.attribute and gold.role == "user"
        if q.kind == "present":
            stale = turns[q.stale or ""]
            assert gold.kind == "update" and stale.kind in ("state", "update") and stale.attribute == q.attribute
            assert stale.observed_at < gold.observed_at and stale.value != gold.value
            assert gold.template.startswith(f"{q.attribute}.{q.update_kind}:")
            assert q.cross_session == (stale.conversation_id != gold.conversation_id)
            if not q.cross_session:  # an update comes 20 to 80 turns after the statement
                assert 20 <= int(gold.event_id[-3:]) - int(stale.event_id[-3:]) <= 82
        elif q.kind == "past":
            assert gold.kind in ("state", "update") and turns[q.current or ""].kind == "update"
        else:
            look = turns[q.lookalike or ""]
            assert gold.kind == "state" and look.kind == "lookalike" and look.attribute == q.attribute
            assert look.subject != gold.subject and look.observed_at > gold.observed_at
        assert (q.conversation_id is None) == (sum(c.user_id == q.user_id for c in data.conversations) > 1)


def test_ranking_helpers() -> None:
    assert rank(["a", "b"], "b") == 1 and rank(["a"], "z") == 1 and rank(["a"], None) == 1
    assert above(["a", "b"], "a", "b") and not above(["b", "a"], "a", "b")
    assert above(["x", "a"], "a", None) and not above(["x"] * 10 + ["a"], "a", None)
    data = generate(3, seed=1)
    pairs = statement_pairs(data)
    q = next(q for q in data.questions if q.kind == "present")
    assert (q.gold, q.stale) in pairs and (q.stale, q.gold) not in pairs


def _check_sane(out: dict[str, object]) -> None:
    figures = out["figures"]
    assert isinstance(figures, dict)
    for key in ("update_at_1", "current_in_top3", "current_first", "stale_flagged", "history_at_10",
                "history_above_current", "stable_at_1", "stable_wrongly_flagged"):
        assert 0.0 <= figures[key] <= 1.0, key
    assert figures["current_first"] <= figures["current_in_top3"]
    assert 0.0 <= figures["stale_flagged_by_update"] <= figures["stale_flagged"]
    assert figures["questions"]["present"] == figures["questions"]["past"] > 0
    assert sum(v["questions"] for v in figures["by_update_kind"].values()) == figures["questions"]["present"]
    assert 0 < figures["query_ms"]["p50"] <= figures["query_ms"]["p95"]
    assert figures["observations_per_second"] > 0 and figures["supersedes_edges"]["edges"] >= 0
    assert set(figures["dense"]) == set(DENSE) and all(0.0 <= v <= 1.0 for v in figures["dense"].values())


async def test_a_tiny_run_on_the_product(embedder: Embedder) -> None:
    out = await run_updates(Settings(), embedder, conversations=3, turns=60)
    assert out["mode"] in ("user_id", "tenant_per_user") and out["config"]["conversations"] == 3
    _check_sane(out)
    assert out["figures"]["observations"] == 180


def test_the_command_prints_json(embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("jevmem.assembly.load_embedder", lambda *_a, **_k: embedder)
    runner = CliRunner()
    res = runner.invoke(app, ["bench", "updates", "--conversations", "3", "--turns", "60", "--wordings", "heldout",
                              "--json"])
    assert res.exit_code == 0, res.output
    out = orjson.loads(res.stdout)
    assert out["config"]["wordings"] == "heldout"
    _check_sane(out)
    assert runner.invoke(app, ["bench", "updates", "--wordings", "test"]).exit_code == 2
    assert runner.invoke(app, ["bench", "updates", "--seeds", "0"]).exit_code == 2


async def test_several_seeds_pool_their_questions(embedder: Embedder) -> None:
    """``seeds`` runs one dataset per seed; the pooled share of a figure is over all their
    questions, each run is kept under ``by_seed``, and the first run is the single-seed run."""
    out = await run_updates(Settings(), embedder, conversations=3, turns=60, seed=4, seeds=2)
    _check_sane(out)
    one, two = out["by_seed"]
    assert out["config"]["seeds"] == 2 and out["figures"]["observations"] == 360
    assert one == (await run_updates(Settings(), embedder, conversations=3, turns=60, seed=4))["figures"] | {
        "ingest_seconds": one["ingest_seconds"], "observations_per_second": one["observations_per_second"],
        "query_ms": one["query_ms"]}
    for kind, keys in SHARES.items():
        n1, n2 = one["questions"][kind], two["questions"][kind]
        assert out["figures"]["questions"][kind] == n1 + n2
        for k in keys:
            assert out["figures"][k] == pytest.approx((one[k] * n1 + two[k] * n2) / (n1 + n2), abs=1e-4)
    for k in DENSE:  # the plain dense pair pools the same way
        n1, n2 = (r["questions"][next(kind for kind, keys in SHARES.items() if k in keys)] for r in (one, two))
        assert out["figures"]["dense"][k] == pytest.approx((one["dense"][k] * n1 + two["dense"][k] * n2) / (n1 + n2),
                                                           abs=1e-4)
    edges = out["figures"]["supersedes_edges"]
    assert edges["edges"] == one["supersedes_edges"]["edges"] + two["supersedes_edges"]["edges"]
    assert out["figures"]["query_ms"]["p95"] == max(one["query_ms"]["p95"], two["query_ms"]["p95"])
    with pytest.raises(ValueError):
        await run_updates(Settings(), embedder, conversations=3, turns=60, seeds=0)


def test_the_attribute_models_activity_wordings_are_training_only() -> None:
    """The attribute model's own activity wordings label their attribute, are never held out,
    and no benchmark conversation says them (whatever the split)."""
    from jevmem.bench.attributes_data import ACTIVITIES, examples

    assert set(ACTIVITIES) <= {a.name for a in ATTRIBUTES}
    rows = [r for r in examples() if r[2] == "activity"]
    assert len(rows) == sum(len(t) for t in ACTIVITIES.values()) * 3
    assert all(not held and label in ACTIVITIES for _, label, _, held in rows)
    said = {t.content for w in ("train", "heldout") for t in generate(6, wordings=w, seed=3).turns()}
    assert not said & {text for text, _, _, _ in rows}
    assert not {t for ts in ACTIVITIES.values() for t in ts} & {t for ts in tables().values() for t in ts}
