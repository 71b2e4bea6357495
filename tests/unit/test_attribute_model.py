"""The learned attribute model (:mod:`topology.systemone.attribute_model`) and how an
:class:`~topology.systemone.attributes.AttributeSpace` uses it: a deterministic fit that
separates what it was shown, distributions that sum to 1, weights that survive JSON, and a
memory's distribution made of the known attributes and the generic prototypes for the rest."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from topology.ports import Embedder
from topology.systemone.attribute_model import NONE, AttributeModel, fit, shipped_file
from topology.systemone.attributes import AttributeSpace

ROOT = Path(__file__).resolve().parents[2]


def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _examples(seed: int = 0) -> tuple[np.ndarray, list[str]]:
    """Three classes around three directions of an 8-dimensional space."""
    rng = np.random.default_rng(seed)
    centres = {"home": np.eye(8)[0], "car": np.eye(8)[1], NONE: np.eye(8)[2]}
    x, y = [], []
    for label, c in centres.items():
        for _ in range(20):
            x.append(c + 0.3 * rng.standard_normal(8))
            y.append(label)
    return _unit(np.asarray(x)), y


def test_the_fit_is_deterministic_and_separates_its_classes() -> None:
    x, y = _examples()
    a, b = fit(x, y, ("car", "home", NONE)), fit(x, y, ("car", "home", NONE))
    assert np.array_equal(a.coef, b.coef) and np.array_equal(a.intercept, b.intercept)
    p = a.probabilities(x)
    assert np.allclose(p.sum(axis=1), 1.0)
    assert [a.labels[i] for i in p.argmax(axis=1)] == y
    assert np.allclose(np.linalg.norm(a.directions, axis=1), 1.0)
    assert float(a.directions[a.labels.index("home")] @ np.eye(8)[0]) > 0.9


def test_weights_survive_json() -> None:
    x, y = _examples()
    model = fit(x, y, ("car", "home", NONE), meta={"embedder": "test"}, context=0.5)
    again = AttributeModel.from_json(model.to_json())
    assert again.labels == model.labels and again.meta == {"embedder": "test"} and again.context == 0.5
    assert np.allclose(again.probabilities(x), model.probabilities(x), atol=1e-5)


def test_a_model_needs_the_none_class_and_matching_shapes() -> None:
    with pytest.raises(ValueError):
        AttributeModel(("car", "home"), np.zeros((8, 2)), np.zeros(2), np.zeros((2, 8)))
    with pytest.raises(ValueError):
        AttributeModel(("car", NONE), np.zeros((8, 3)), np.zeros(2), np.zeros((2, 8)))


def test_an_embedder_without_weights_has_none() -> None:
    assert AttributeModel.shipped("no-such-model@0") is None
    assert shipped_file("e5-small-v2-int8@0.36.2") == "attribute_model.e5-small-v2-int8-0.36.2.json"


def test_a_memory_distribution_is_the_known_attributes_then_the_prototypes_for_the_rest() -> None:
    x, y = _examples()
    model = fit(x, y, ("car", "home", NONE))
    prototypes = _unit(np.eye(8)[3:8] + 0.1)
    plain, space = AttributeSpace(prototypes), AttributeSpace(prototypes, learned=model)
    rows = x[[0, 20, 40]]  # a home, a car, a none example
    got = space.profiles(rows)
    assert got.shape == (3, 2 + len(prototypes)) and np.allclose(got.sum(axis=1), 1.0)
    p = model.probabilities(rows)
    known = [model.labels.index("car"), model.labels.index("home")]
    assert np.allclose(got[:, :2], p[:, known], atol=1e-6)
    assert np.allclose(got[:, 2:], p[:, [model.none]] * plain.profiles(rows), atol=1e-6)
    # questions read the prototypes alone, as without a model
    assert np.allclose(space.question_profiles(rows), plain.profiles(rows))
    # two memories of one known attribute overlap; of two, hardly
    assert space.similarity(x[0], x[1]) > 0.8 and space.similarity(x[0], x[20]) < 0.1
    # steering moves a memory towards its attribute's direction
    moved = space.steer(x[[0]], 1.0)[0]
    assert float(moved @ np.eye(8)[0]) > float(x[0] @ np.eye(8)[0])
    assert np.allclose(space.steer(x[[0]], 1.0, space.question_profiles(x[[0]])), plain.steer(x[[0]], 1.0))


def test_the_turn_read_before_is_taken_off_as_trained() -> None:
    """A memory read after another turn carries some of it: the model reads the memory's vector
    less ``context`` times that turn's vector (nothing off without one), so a line of chatter
    read after a statement about a car is not about the car."""
    x, y = _examples()
    model = fit(x, y, ("car", "home", NONE), context=0.5)
    car, chat = x[[20]], x[[40]]
    blurred = _unit(chat + 0.8 * car)  # chatter that took in the car statement it was read after
    assert np.allclose(model.inputs(blurred), blurred) and np.allclose(model.inputs(blurred, np.zeros_like(car)), blurred)
    assert np.allclose(model.inputs(blurred, car), blurred - 0.5 * car)
    p_plain, p_taken = model.probabilities(model.inputs(blurred)), model.probabilities(model.inputs(blurred, car))
    assert p_taken[0, model.labels.index("car")] < p_plain[0, model.labels.index("car")]
    assert p_taken[0, model.none] > p_plain[0, model.none]
    space = AttributeSpace(_unit(np.eye(8)[3:8] + 0.1), learned=model)
    assert not np.allclose(space.profiles(blurred, car), space.profiles(blurred))
    assert np.allclose(AttributeModel(model.labels, model.coef, model.intercept, model.directions).inputs(blurred, car),
                       blurred)  # a model fitted without context takes nothing off


def test_a_model_of_another_width_is_refused() -> None:
    x, y = _examples()
    with pytest.raises(ValueError):
        AttributeSpace(_unit(np.ones((4, 6))), learned=fit(x, y, ("car", "home", NONE)))


def test_the_shipped_weights_are_what_the_training_reproduces(model_embedder: Embedder) -> None:
    """``scripts/train_attributes.py`` (in-process, about 15 s) gives the shipped model for the
    default embedder, which names most held-out wordings' attribute right."""
    spec = importlib.util.spec_from_file_location("train_attributes", ROOT / "scripts" / "train_attributes.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    model, report = script.train()
    shipped = AttributeModel.shipped(model_embedder.name)
    assert shipped is not None and model.meta["embedder"] == shipped.meta["embedder"] == model_embedder.name
    assert shipped.labels == model.labels and shipped.meta["script"] == "scripts/train_attributes.py"
    # the inputs come from the int8 model, whose kernels differ between CPUs (with and without
    # AVX-512 VNNI: up to 0.009 apart on these probes, the held-out accuracies the same)
    probe = np.asarray(model_embedder.embed(["I report to Marco.", "The soup was salty.", "I drive a Kia."]))
    assert np.allclose(shipped.probabilities(probe), model.probabilities(probe), atol=0.02)
    assert report["heldout"]["accuracy"] >= 0.9 and report["heldout_after_a_line"]["accuracy"] >= 0.8
