"""Which personal attribute a statement is about, learned from worded examples.

The generic prototypes of :mod:`topology.systemone.attributes` are questions; a statement that
states an attribute through an activity ("Ines signed off my holiday request") is no closer to
"Who is the person's manager or boss?" than to the other questions. :class:`AttributeModel` is a
softmax regression over a memory's embedding with one class per attribute it was trained on and
a class ``none`` (small talk, requests, anything else): ``p = softmax(intercept + x @ coef)``. It
is fitted by ``scripts/train_attributes.py`` on the training wordings of our own generators and
validated on the held-out ones; weights are per embedder (``attribute_model.<embedder>.json``),
and an embedder without weights has no learned part.

Each class also carries a *direction* (the unit mean of its training vectors), which
:meth:`topology.systemone.attributes.AttributeSpace.steer` moves a statement towards.

A turn's vector is read after the turn before it and takes some of it in, so a line of small talk
after a fact looks like that fact. The model reads a turn's vector minus :attr:`AttributeModel.context`
times the vector of the turn it was read after (:meth:`AttributeModel.inputs`), as it was trained.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np
import orjson

#: The class of a memory about none of the learned attributes.
NONE = "none"


def shipped_file(embedder: str) -> str:
    """The package file of the weights fitted under ``embedder`` (a model name)."""
    return f"attribute_model.{embedder.replace('@', '-')}.json"


@dataclass(frozen=True)
class AttributeModel:
    """``p = softmax(intercept + x @ coef)`` over :attr:`labels` (one of them :data:`NONE`);
    ``coef`` is (dim, classes), ``directions`` (classes, dim) unit rows."""

    labels: tuple[str, ...]
    coef: np.ndarray
    intercept: np.ndarray
    directions: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)
    #: how much of the vector of the turn a memory was read after is taken off its own
    context: float = 0.0

    def __post_init__(self) -> None:
        k = len(self.labels)
        if NONE not in self.labels or k < 2:
            raise ValueError(f"an attribute model needs at least one attribute and the class {NONE!r}")
        if self.coef.ndim != 2 or self.coef.shape[1] != k or self.intercept.shape != (k,) \
                or self.directions.shape != (k, self.coef.shape[0]):
            raise ValueError("attribute model: coef, intercept and directions do not match the labels")

    @property
    def dim(self) -> int:
        """The embedding width the model reads."""
        return int(self.coef.shape[0])

    @property
    def none(self) -> int:
        """The index of :data:`NONE` in :attr:`labels`."""
        return self.labels.index(NONE)

    def inputs(self, vectors: np.ndarray, before: np.ndarray | None = None) -> np.ndarray:
        """What the model reads of memories' ``vectors``: each minus :attr:`context` times the
        matching row of ``before`` (the vectors of the turns they were read after; a zero row, or
        no ``before``: nothing taken off)."""
        x = np.asarray(vectors, dtype=np.float64)
        return x if before is None or not self.context else x - self.context * np.asarray(before, dtype=np.float64)

    def probabilities(self, vectors: np.ndarray) -> np.ndarray:
        """One distribution over :attr:`labels` per row of ``vectors`` (the model's
        :meth:`inputs`; rows sum to 1)."""
        z = np.asarray(vectors, dtype=np.float64) @ self.coef + self.intercept
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)  # type: ignore[no-any-return]

    def to_json(self) -> bytes:
        """The weights as JSON (rounded to 6 places; read back by :meth:`from_json`)."""
        return orjson.dumps({
            "labels": list(self.labels),
            "coef": np.round(self.coef, 6).tolist(),
            "intercept": np.round(self.intercept, 6).tolist(),
            "directions": np.round(self.directions, 6).tolist(),
            "context": self.context,
            "meta": self.meta,
        })

    @classmethod
    def from_json(cls, data: bytes) -> AttributeModel:
        raw = orjson.loads(data)
        return cls(tuple(raw["labels"]), np.asarray(raw["coef"], dtype=np.float64),
                   np.asarray(raw["intercept"], dtype=np.float64),
                   np.asarray(raw["directions"], dtype=np.float64), dict(raw.get("meta", {})),
                   float(raw.get("context", 0.0)))

    @classmethod
    def shipped(cls, embedder: str) -> AttributeModel | None:
        """The weights shipped for ``embedder``, or None when there are none."""
        own = resources.files("topology.systemone").joinpath(shipped_file(embedder))
        return cls.from_json(own.read_bytes()) if own.is_file() else None


def fit(x: np.ndarray, labels: Sequence[str], classes: Sequence[str], l2: float = 0.01,
        iters: int = 1500, rate: float = 0.5, meta: dict[str, Any] | None = None,
        context: float = 0.0) -> AttributeModel:
    """The class-balanced softmax regression of ``labels`` (one per row of ``x``) on ``x``:
    ``iters`` full-batch gradient steps of size ``rate`` on standardised inputs with an ``l2``
    ridge, from zero weights, so the same inputs give the same weights. ``classes`` fixes the
    label order and must hold :data:`NONE`; ``x`` holds the model's inputs (see
    :meth:`AttributeModel.inputs`), fitted under ``context``."""
    x = np.asarray(x, dtype=np.float64)
    k = len(classes)
    y = np.asarray([list(classes).index(label) for label in labels])
    mu, sd = x.mean(axis=0), x.std(axis=0) + 1e-6
    xs = (x - mu) / sd
    target = np.eye(k)[y]
    weight = 1.0 / np.bincount(y, minlength=k)[y]
    weight /= weight.sum()
    w, b = np.zeros((x.shape[1], k)), np.zeros(k)
    for _ in range(iters):
        z = xs @ w + b
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        g = (p - target) * weight[:, None]
        w -= rate * (xs.T @ g + l2 * w)
        b -= rate * g.sum(axis=0)
    coef = w / sd[:, None]  # back to raw inputs: x @ coef + intercept == xs @ w + b
    directions = np.stack([x[y == j].mean(axis=0) if np.any(y == j) else np.zeros(x.shape[1]) for j in range(k)])
    directions /= np.maximum(np.linalg.norm(directions, axis=1, keepdims=True), 1e-12)
    return AttributeModel(tuple(classes), coef, b - mu @ coef, directions, dict(meta or {}), context)
