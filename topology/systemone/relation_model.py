"""The learned relation judge of the ``local`` backend: p(semantic) for an (older, newer) pair.

A logistic regression over :data:`RELATION_FEATURES` (pure numpy, JSON weights), trained by
``scripts/train_relations.py`` on candidate pairs of the dev conversations: a pair is *related*
when both turns are evidence for one question. The fit weighs the two classes equally, so the
answer is the posterior under even prior odds: 0.5 means the pair's features are as likely for a
related pair as for another candidate, 0.6 (``theta_rel``) a likelihood ratio of 1.5. Cosines
depend on the embedding model, so weights are per model (``relation_model.<embedder>.json``);
a model without weights of its own gets none (:meth:`RelationModel.shipped` returns None) and
the backend answers with its hand-set rule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np
import orjson

from topology.errors import SystemOneError
from topology.systemone.features import RelationState

#: The pair features, in model order.
RELATION_FEATURES: tuple[str, ...] = (
    "cosine", "lexical", "entity", "log_gap", "same_speaker", "log_len_older", "log_len_newer",
)


def relation_features(st: RelationState) -> list[float]:
    """The feature vector of one pair (order of :data:`RELATION_FEATURES`)."""
    return [st.cosine, st.lexical, st.entity, math.log1p(max(0, st.gap)), 1.0 if st.same_speaker else 0.0,
            math.log1p(len(st.older)), math.log1p(len(st.newer))]


def shipped_file(embedder: str) -> str:
    """The package file holding the relation weights trained with ``embedder``'s vectors."""
    return f"relation_model.{embedder.replace('@', '-')}.json"


@dataclass(frozen=True)
class RelationModel:
    """p(related) = sigmoid(intercept + coef . ((x - mean) / scale)) over the base features."""

    features: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.features != RELATION_FEATURES:
            raise SystemOneError(f"relation model features {self.features} differ from RELATION_FEATURES")
        n = len(self.features)
        if not (self.mean.shape == self.scale.shape == self.coef.shape == (n,)):
            raise SystemOneError(f"relation model arrays must all have {n} entries")
        if (self.scale <= 0).any() or not np.isfinite(self.coef).all() or not math.isfinite(self.intercept):
            raise SystemOneError("relation model has a non-positive scale or a non-finite weight")

    def probabilities(self, rows: np.ndarray) -> np.ndarray:
        """p(related) for feature rows (n, F); a row's answer does not depend on the others (an
        elementwise product summed per row, not a BLAS product whose order may vary with n)."""
        z = (((rows - self.mean) / self.scale) * self.coef).sum(axis=1) + self.intercept
        out: np.ndarray = 0.5 * (1.0 + np.tanh(0.5 * z))  # the logistic function, stable for any z
        return out

    def probability(self, vector: Sequence[float]) -> float:
        return float(self.probabilities(np.asarray([vector], dtype=np.float64))[0])

    def to_json(self) -> bytes:
        return orjson.dumps({
            "features": list(self.features), "mean": [round(float(v), 8) for v in self.mean],
            "scale": [round(float(v), 8) for v in self.scale], "coef": [round(float(v), 8) for v in self.coef],
            "intercept": round(self.intercept, 8), "meta": self.meta,
        }, option=orjson.OPT_INDENT_2)

    @classmethod
    def from_json(cls, raw: bytes | str) -> RelationModel:
        try:
            d = orjson.loads(raw)
            return cls(features=tuple(d["features"]), mean=np.asarray(d["mean"], dtype=np.float64),
                       scale=np.asarray(d["scale"], dtype=np.float64), coef=np.asarray(d["coef"], dtype=np.float64),
                       intercept=float(d["intercept"]), meta=dict(d.get("meta", {})))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise SystemOneError(f"unreadable relation model: {exc}") from exc

    @classmethod
    def shipped(cls, embedder: str) -> RelationModel | None:
        """The weights shipped for ``embedder``, or None when it has none."""
        own = resources.files("topology.systemone").joinpath(shipped_file(embedder))
        return cls.from_json(own.read_bytes()) if own.is_file() else None


def fit(x: np.ndarray, y: np.ndarray, l2: float = 1.0, iters: int = 30,
        meta: dict[str, Any] | None = None) -> RelationModel:
    """Class-balanced, L2-regularised logistic regression by Newton's method on standardised
    features (each class weighs half). Deterministic: no sampling, a fixed iteration budget."""
    if x.ndim != 2 or x.shape[1] != len(RELATION_FEATURES) or len(x) != len(y):
        raise ValueError(f"expected rows of {len(RELATION_FEATURES)} features and one label each")
    pos = float(y.sum())
    if pos == 0 or pos == len(y):
        raise ValueError("training pairs need both related and unrelated examples")
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    z = np.column_stack([np.ones(len(x)), (x - mean) / scale])
    weight = np.where(y > 0, 0.5 * len(y) / pos, 0.5 * len(y) / (len(y) - pos))
    w = np.zeros(z.shape[1])
    reg = np.full(z.shape[1], l2)
    reg[0] = 0.0
    for _ in range(iters):
        p = 0.5 * (1.0 + np.tanh(0.5 * (z @ w)))
        grad = z.T @ (weight * (p - y)) + reg * w
        hess = (z * (weight * p * (1 - p))[:, None]).T @ z + np.diag(reg) + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return RelationModel(RELATION_FEATURES, mean, scale, w[1:], float(w[0]), meta or {})
