"""Whole attributes held out (:mod:`jevmem.bench.folds`): the two folds split every attribute our
generators know; a generator asked for one fold states and asks about that fold's attributes
only; the update judge's pairs and the attribute model's examples follow; the models a user
trains can be given to the product by path."""

from __future__ import annotations

from pathlib import Path

import pytest

from jevmem import assembly
from jevmem.bench import update_pairs, updates_data, users_data
from jevmem.bench.attributes_data import examples
from jevmem.bench.folds import ATTRIBUTE_FOLDS, attributes_of, other
from jevmem.settings import Settings
from topology.systemone.attribute_model import NONE, AttributeModel
from topology.systemone.local import LocalSystemOne
from topology.systemone.update_model import SHIPPED, UpdateModel


def test_the_folds_split_every_attribute_once() -> None:
    a, b = ATTRIBUTE_FOLDS["a"], ATTRIBUTE_FOLDS["b"]
    names = {x.name for x in updates_data.ATTRIBUTES} | {f.name for f in users_data.FACTS} | {users_data.LOCKER.name}
    assert a | b == names and not a & b
    # each generator's attributes are split about evenly
    for known in ({x.name for x in updates_data.ATTRIBUTES}, {f.name for f in (*users_data.FACTS, users_data.LOCKER)}):
        assert abs(len(known & a) - len(known & b)) <= 1
    assert attributes_of("all") is None and other("a") == "b" and other("b") == "a" and other("all") == "all"
    with pytest.raises(ValueError, match="fold"):
        attributes_of("c")  # type: ignore[arg-type]


@pytest.mark.parametrize("fold", ["a", "b"])
def test_a_fold_states_and_asks_about_its_attributes_only(fold: str) -> None:
    names = ATTRIBUTE_FOLDS[fold]
    data = updates_data.generate(6, "heldout", seed=3, attributes=names)
    stated = {t.attribute for t in data.turns() if t.attribute is not None}
    assert stated and stated <= names
    assert {q.kind for q in data.questions} == {"present", "past", "stable"}
    users = users_data.generate(3, 8, 5, attributes=names)
    assert users.questions and {q.fact for q in users.questions} <= names
    pairs = update_pairs.judge_pairs("train", rounds=2, attributes=names)
    assert pairs and {p.attribute for p in pairs} <= names
    assert any(p.label for p in pairs) and any(p.kind == "other_attribute" for p in pairs)
    labels = {e[1] for e in examples(repeats=1, attributes=names)}
    assert labels - {NONE} <= names and NONE in labels


def test_every_attribute_is_the_default() -> None:
    assert updates_data.generate(3, seed=4, attributes=None).questions == updates_data.generate(3, seed=4).questions
    assert len(update_pairs.judge_pairs("train", rounds=1, attributes=None)) == len(update_pairs.judge_pairs("train", rounds=1))
    with pytest.raises(ValueError, match="three attributes"):
        update_pairs.judge_pairs("train", rounds=1, attributes={"city", "car"})


def test_trained_weights_are_given_to_the_product_by_path(tmp_path: Path) -> None:
    shipped = UpdateModel.from_json((Path("topology/systemone") / SHIPPED).read_bytes())
    own = UpdateModel(shipped.features, shipped.mean, shipped.scale, shipped.coef * 0.5, shipped.intercept,
                      {**shipped.meta, "script": "a user's own training"})
    (tmp_path / "judge.json").write_bytes(own.to_json())
    attribute = AttributeModel.from_json(next(Path("topology/systemone").glob("attribute_model.*.json")).read_bytes())
    (tmp_path / "attributes.json").write_bytes(attribute.to_json())
    settings = Settings(update_judge=tmp_path / "judge.json", attribute_model=tmp_path / "attributes.json")
    local, _ = assembly.system_one_and_scorer(settings)
    assert isinstance(local, LocalSystemOne) and local.update_model.meta["script"] == "a user's own training"
    loaded = assembly.attribute_model(settings)
    assert loaded is not None and loaded.labels == attribute.labels
    assert assembly.attribute_model(Settings()) is None
