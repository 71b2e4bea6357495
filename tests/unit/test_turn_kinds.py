"""The turn-kind model: the typing task's ``kind`` Choice (statement, question, tool, advice,
chatter), its validation on wordings held out of training, the shipped weights, the training
script, and the node's kind on the write path and for the read path."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import orjson
import pytest

from jevmem.bench import turn_kinds_data as data
from topology.errors import SystemOneError
from topology.schemas import MemoryNode, Observation, TypeScores
from topology.stages.memory_nodes import describe, type_only
from topology.systemone.catalog import TYPING
from topology.systemone.local import LocalSystemOne
from topology.systemone.port import Answer, Item
from topology.systemone.turn_kinds import (
    TURN_FEATURES,
    TURN_KINDS,
    UNTYPED_KIND,
    TurnKindModel,
    fit,
    kind_distribution,
    turn_features,
    turn_kind,
)

ROOT = Path(__file__).resolve().parents[2]

#: Overall accuracy the shipped model must reach on wordings it never saw: chance is 0.2 and the
#: measured figures are 0.98 (held out) and 0.95 (fresh); 0.90 leaves room for platform noise
#: and still fails when a group of cues stops working.
MIN_ACCURACY = 0.90
#: Per-kind floor on the same wordings: the weakest kind measures 0.87 (advice, fresh); a kind
#: that collapses onto another (tool read as statement, advice as chatter) falls well below 0.75.
MIN_KIND_ACCURACY = 0.75

#: Clear examples of each kind, in wordings of none of the templates.
CLEAR: tuple[tuple[str, str, str], ...] = (
    ("I'm allergic to peanuts, by the way.", "user", "statement"),
    ("My brother Arjun teaches maths in Leeds.", "user", "statement"),
    ("what am I allergic to again?", "user", "question"),
    ("Where did Arjun grow up?", "user", "question"),
    ("search_memory(query='allergy')", "assistant", "tool"),
    ("Tool result: 3 items found", "tool", "tool"),
    ('{"matches": [{"id": 7, "text": "Arjun teaches maths"}], "total": 1}', "user", "tool"),
    ("You should try to avoid peanuts when eating out.", "assistant", "advice"),
    ("I'd suggest keeping antihistamines in your bag.", "assistant", "advice"),
    ("haha nice, have a good one!", "user", "chatter"),
    ("thanks!", "user", "chatter"),
    ("how's your day going?", "user", "chatter"),
)


@pytest.fixture(scope="module")
def turns() -> tuple[list[data.Turn], np.ndarray, np.ndarray, np.ndarray]:
    """The generator's turns, their features and labels, and each one's split (computed once)."""
    all_turns = data.generate()
    x, y = data.matrix(all_turns)
    return all_turns, x, y, np.asarray([data.split(t.template) for t in all_turns])


def test_shipped_weights_load_and_match_the_features() -> None:
    model = TurnKindModel.shipped()
    assert model.labels == TURN_KINDS and model.features == TURN_FEATURES
    assert model.coef.shape == (len(TURN_KINDS), len(TURN_FEATURES))
    assert model.meta["script"] == "scripts/train_turn_kinds.py" and model.meta["seed"] == data.SEED
    assert TurnKindModel.from_json(model.to_json()).to_json() == model.to_json()


def test_the_shipped_weights_are_what_the_training_reproduces(turns: tuple[list[data.Turn], np.ndarray, np.ndarray,
                                                                                np.ndarray]) -> None:
    """Refitting the training wordings with the shipped penalty gives the shipped weights."""
    _, x, y, split = turns
    shipped = TurnKindModel.shipped()
    on = split == "train"
    model = fit(x[on], y[on], l2=float(shipped.meta["l2"]))
    np.testing.assert_allclose(model.coef, shipped.coef, atol=1e-6)
    np.testing.assert_allclose(model.intercept, shipped.intercept, atol=1e-6)
    np.testing.assert_allclose(model.mean, shipped.mean, atol=1e-6)


@pytest.mark.parametrize("name", ["held_out", "fresh"])
def test_held_out_wordings_are_typed_right(name: str, turns: tuple[list[data.Turn], np.ndarray, np.ndarray,
                                                                     np.ndarray]) -> None:
    all_turns, x, y, split = turns
    assert not ({t.template for t in all_turns if data.split(t.template) == name}
                & {t.template for t in all_turns if data.split(t.template) == "train"})
    report = data.accuracy(TurnKindModel.shipped(), x[split == name], y[split == name])
    assert report["accuracy"] >= MIN_ACCURACY, report
    assert set(report["per_kind"]) == set(TURN_KINDS)
    assert min(report["per_kind"].values()) >= MIN_KIND_ACCURACY, report


def test_every_kind_has_held_out_and_fresh_wordings_and_several_roles() -> None:
    for kind in TURN_KINDS:
        mine = [i for i, (k, _, _) in enumerate(data.ALL_TEMPLATES) if k == kind]
        assert {data.split(i) for i in mine} == {"train", "held_out", "fresh"}
        roles = {r for i in mine for r, _ in data.ALL_TEMPLATES[i][2]}
        assert len(roles) >= 2, (kind, roles)  # the role is a feature, never the answer


def test_the_generator_is_deterministic() -> None:
    assert data.generate(3) == data.generate(3)
    assert data.generate(3) != data.generate(3, seed=data.SEED + 1)


def test_clear_examples_of_each_kind() -> None:
    model = TurnKindModel.shipped()
    for (text, _, kind), dist in zip(CLEAR, model.answer([(t, r) for t, r, _ in CLEAR]), strict=True):
        assert max(dist, key=lambda k: dist[k]) == kind, (text, dist)


def test_a_relative_clause_asks_nothing() -> None:
    """A question word after a comma in a text with no question mark opens a relative clause:
    the turn states a fact; the same word after a comma of a request still asks."""
    model = TurnKindModel.shipped()
    told, asked = model.answer([("I answer to Claire, who heads our team.", "user"),
                                ("Remind me, where did we park", "user")])
    assert max(told, key=lambda k: told[k]) == "statement", told
    assert max(asked, key=lambda k: asked[k]) == "question", asked


def test_the_role_is_a_feature_not_the_answer() -> None:
    model = TurnKindModel.shipped()
    pasted, chatty, told = model.answer([
        ('{"results": [{"id": 3, "text": "Keiko lives in Osaka"}], "count": 1}', "user"),
        ("haha nice, have a good one!", "assistant"),
        ("You should try to avoid peanuts when eating out.", "user"),
    ])
    assert max(pasted, key=lambda k: pasted[k]) == "tool"
    assert max(chatty, key=lambda k: chatty[k]) == "chatter"
    assert max(told, key=lambda k: told[k]) == "advice"
    # ... and it still counts: the same tool syntax is surer from the tool
    by_tool, by_user = model.answer([("Returned 4 rows", "tool"), ("Returned 4 rows", "user")])
    assert by_tool["tool"] > by_user["tool"]


def test_a_turn_is_typed_alike_alone_and_in_a_batch() -> None:
    model = TurnKindModel.shipped()
    texts = [(t, r) for t, r, _ in CLEAR]
    assert model.answer(texts[3:4]) == model.answer(texts)[3:4]
    assert len(turn_features("x" * 50_000, "user")) == len(TURN_FEATURES)


def test_a_model_for_other_features_or_labels_is_rejected() -> None:
    d = orjson.loads(TurnKindModel.shipped().to_json())
    with pytest.raises(SystemOneError):
        TurnKindModel.from_json(orjson.dumps({**d, "labels": list(reversed(d["labels"]))}))
    with pytest.raises(SystemOneError):
        TurnKindModel.from_json(orjson.dumps({**d, "features": d["features"][:-1]}))
    with pytest.raises(SystemOneError):
        TurnKindModel.from_json(b"{}")


def test_the_training_script_runs_and_writes_loadable_weights(tmp_path: Path) -> None:
    out = tmp_path / "model.json"
    run = subprocess.run([sys.executable, "scripts/train_turn_kinds.py", "--per-template", "4", "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    report = orjson.loads(run.stdout)
    assert set(report) >= {"train", "held_out", "fresh", "l2", "cv_accuracy_by_l2"}
    assert set(report["held_out"]["per_kind"]) == set(TURN_KINDS)
    model = TurnKindModel.from_json(out.read_bytes())
    assert model.meta["l2"] == report["l2"] and model.meta["per_template"] == 4
    assert set(orjson.loads(out.read_bytes())) == set(orjson.loads(TurnKindModel.shipped().to_json()))


async def test_every_typed_node_gets_a_kind_distribution() -> None:
    texts = [(t, r) for t, r, _ in CLEAR]
    nodes = [describe(Observation(tenant_id="t", conversation_id="c", event_id=f"e{i}", content=t, role=r), i)
             for i, (t, r) in enumerate(texts)]
    typed = await type_only(nodes, LocalSystemOne())
    for node, (_, _, kind) in zip(typed, CLEAR, strict=True):
        assert list(node.types.kind) == list(TURN_KINDS)
        assert sum(node.types.kind.values()) == pytest.approx(1.0, abs=1e-5)
        p = turn_kind(node.types)
        assert max(p, key=lambda k: p[k]) == kind
    restored = MemoryNode.model_validate_json(typed[0].model_dump_json())
    assert restored.types == typed[0].types


def test_a_node_stored_before_the_kind_question_still_decodes() -> None:
    node = describe(Observation(tenant_id="t", conversation_id="c", event_id="e", content="hi"), 0)
    body = orjson.loads(node.model_dump_json())
    body["types"] = {"episodic": 0.1, "semantic": 0.2, "procedural": 0.3, "preference": 0.4}
    old = MemoryNode.model_validate(body)
    assert old.types.kind == {} and turn_kind(old.types) == UNTYPED_KIND
    assert sum(turn_kind(TypeScores()).values()) == pytest.approx(1.0)


def test_a_kind_answer_is_normalised_or_rejected() -> None:
    assert kind_distribution({"statement": 2.0, "question": 1.0, "tool": 1.0, "advice": 0.0, "chatter": -0.1}) == {
        "statement": 0.5, "question": 0.25, "tool": 0.25, "advice": 0.0, "chatter": 0.0}
    with pytest.raises(SystemOneError, match="lacks"):
        kind_distribution({"statement": 1.0})
    with pytest.raises(SystemOneError):
        kind_distribution(dict.fromkeys(TURN_KINDS, 0.0))


async def test_a_backend_without_the_kind_answer_is_an_error() -> None:
    class NoKind:
        async def ask(self, items: Sequence[Item]) -> list[Answer]:
            return [Answer(nouls=dict.fromkeys(("episodic", "semantic", "procedural", "preference"), 0.5))
                    for _ in items]

        async def aclose(self) -> None:
            return None

    node = describe(Observation(tenant_id="t", conversation_id="c", event_id="e", content="hi"), 0)
    with pytest.raises(SystemOneError):
        await type_only([node], NoKind())
    assert [q.key for q in TYPING.choices()] == ["kind"] and TYPING.choices()[0].labels == TURN_KINDS
