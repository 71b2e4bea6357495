"""A binary logistic model over named features, and its class-balanced fit: what the learned
pair judges of the ``local`` backend share (:mod:`topology.systemone.relation_model`,
:mod:`topology.systemone.update_model`).

``p = sigmoid(intercept + coef . ((x - mean) / scale))``; weights are JSON (features, mean, scale,
coef, intercept, meta). A subclass names its features (:attr:`LogisticModel.FEATURES`) and what it
judges (:attr:`LogisticModel.WHAT`, for error messages).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import numpy as np
import orjson

from topology.errors import SystemOneError


@dataclass(frozen=True)
class LogisticModel:
    """``p = sigmoid(intercept + coef . ((x - mean) / scale))`` over :attr:`FEATURES`."""

    #: The feature names, in model order (a model with others is refused).
    FEATURES: ClassVar[tuple[str, ...]] = ()
    #: The name of the features' constant, for error messages.
    FEATURES_NAME: ClassVar[str] = "FEATURES"
    #: What the model judges, for error messages ("relation", "update").
    WHAT: ClassVar[str] = "logistic"

    features: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.features != self.FEATURES:
            raise SystemOneError(f"{self.WHAT} model features {self.features} differ from {self.FEATURES_NAME}")
        n = len(self.features)
        if not (self.mean.shape == self.scale.shape == self.coef.shape == (n,)):
            raise SystemOneError(f"{self.WHAT} model arrays must all have {n} entries")
        if (self.scale <= 0).any() or not np.isfinite(self.coef).all() or not math.isfinite(self.intercept):
            raise SystemOneError(f"{self.WHAT} model has a non-positive scale or a non-finite weight")

    def probabilities(self, rows: np.ndarray) -> np.ndarray:
        """p for feature rows (n, F); a row's answer does not depend on the others (an
        elementwise product summed per row, not a BLAS product whose order may vary with n)."""
        z = (((rows - self.mean) / self.scale) * self.coef).sum(axis=1) + self.intercept
        out: np.ndarray = 0.5 * (1.0 + np.tanh(0.5 * z))  # the logistic function, stable for any z
        return out

    def to_json(self) -> bytes:
        return orjson.dumps({
            "features": list(self.features), "mean": [round(float(v), 8) for v in self.mean],
            "scale": [round(float(v), 8) for v in self.scale], "coef": [round(float(v), 8) for v in self.coef],
            "intercept": round(self.intercept, 8), "meta": self.meta,
        }, option=orjson.OPT_INDENT_2)

    @classmethod
    def from_json(cls, raw: bytes | str) -> Self:
        try:
            d = orjson.loads(raw)
            return cls(features=tuple(d["features"]), mean=np.asarray(d["mean"], dtype=np.float64),
                       scale=np.asarray(d["scale"], dtype=np.float64), coef=np.asarray(d["coef"], dtype=np.float64),
                       intercept=float(d["intercept"]), meta=dict(d.get("meta", {})))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise SystemOneError(f"unreadable {cls.WHAT} model: {exc}") from exc


def fit_balanced(x: np.ndarray, y: np.ndarray, width: int, l2: float, iters: int,
                 one_class: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(mean, scale, coef, intercept) of a class-balanced, L2-regularised logistic regression by
    Newton's method on standardised features (each class weighs half). Deterministic: no sampling,
    a fixed iteration budget. ValueError for rows that are not ``width`` wide, or ``one_class``
    when every label is the same."""
    if x.ndim != 2 or x.shape[1] != width or len(x) != len(y):
        raise ValueError(f"expected rows of {width} features and one label each")
    pos = float(y.sum())
    if pos == 0 or pos == len(y):
        raise ValueError(one_class)
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
    return mean, scale, w[1:], float(w[0])
