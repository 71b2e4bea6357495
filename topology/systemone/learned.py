"""The learned relevance model of the ``local`` backend: logistic regression in pure numpy/JSON.

A model is a JSON document: the base feature names (must equal
:data:`~topology.systemone.features.SCORE_FEATURES`, so a model trained on other features is
rejected at load), pairwise ``interactions`` (products of two base features), a standardisation
(``mean``, ``scale``) and the logistic ``coef``/``intercept``. ``meta`` records how it was trained
(script, seed, data, regularisation). The shipped weights live next to this module:
``score_model.json`` (a recall inside one conversation, written by ``scripts/train_system_one.py``
from LoCoMo dev) and ``score_model.realm.json`` (a recall over many conversations, written by
``scripts/train_realm_relevance.py`` from LongMemEval dev realm pools).
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
from topology.systemone.features import SCORE_FEATURES

SHIPPED = "score_model.json"
#: The weights for a recall over many conversations (a user's sessions), trained on realm pools
#: (``scripts/train_realm_relevance.py``): what is evidence among a user's 50 sessions is not what
#: is evidence among one conversation's turns (cross-validated in docs/benchmarks.md).
REALM_SHIPPED = "score_model.realm.json"
#: The embedding model the weights in :data:`SHIPPED` were trained with (its cosine features).
SHIPPED_EMBEDDER = "e5-small-v2-int8@0.36.2"


def shipped_file(embedder: str = SHIPPED_EMBEDDER, realm: bool = False) -> str:
    """The package file holding the weights trained with ``embedder``'s vectors:
    :data:`SHIPPED` (:data:`REALM_SHIPPED` with ``realm``) for the default model,
    ``score_model[.realm].<embedder>.json`` for another."""
    if embedder == SHIPPED_EMBEDDER:
        return REALM_SHIPPED if realm else SHIPPED
    return f"score_model{'.realm' if realm else ''}.{embedder.replace('@', '-')}.json"

#: The hand-set relevance prior used before any training (bootstrap of the training script):
#: fused-rank strength, BM25, cosine within the anchor pool, query-token coverage, entity match,
#: temporal/causal answer cues and being the reply to a matching question turn.
PRIOR = {"cosine_in_pool": 2.5, "lexical": 1.6, "entity": 1.0, "anchor": 1.5, "bm25": 2.5,
         "temporal_match": 0.6, "causal_match": 0.8, "reply_to_match": 1.5}
PRIOR_INTERCEPT = -3.5


@dataclass(frozen=True)
class ScoreModel:
    """P(candidate is evidence) = sigmoid(intercept + coef . ((x - mean) / scale)), where x is the
    base features followed by the listed interaction products."""

    features: tuple[str, ...]
    interactions: tuple[tuple[str, str], ...]
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.features != SCORE_FEATURES:
            raise SystemOneError(f"score model features {self.features} differ from SCORE_FEATURES")
        n = len(self.features) + len(self.interactions)
        if not (self.mean.shape == self.scale.shape == self.coef.shape == (n,)):
            raise SystemOneError(f"score model arrays must all have {n} entries")
        if (self.scale <= 0).any() or not np.isfinite(self.coef).all():
            raise SystemOneError("score model has a non-positive scale or a non-finite weight")
        unknown = {a for pair in self.interactions for a in pair} - set(self.features)
        if unknown:
            raise SystemOneError(f"score model interactions name unknown features {sorted(unknown)}")

    def expand(self, x: np.ndarray) -> np.ndarray:
        """Rows of base features (n, F) -> rows with the interaction products appended."""
        idx = {name: i for i, name in enumerate(self.features)}
        cols = [x[:, idx[a]] * x[:, idx[b]] for a, b in self.interactions]
        return np.column_stack([x, *cols]) if cols else x

    def logits(self, rows: np.ndarray) -> np.ndarray:
        """Logits for base-feature rows (n, F)."""
        z = (self.expand(rows) - self.mean) / self.scale
        return z @ self.coef + self.intercept  # type: ignore[no-any-return]

    def probability(self, vector: Sequence[float]) -> float:
        """P(relevant) for one candidate's base features (in SCORE_FEATURES order)."""
        v = float(self.logits(np.asarray([vector], dtype=np.float64))[0])
        return 1.0 / (1.0 + math.exp(-v)) if v >= 0 else math.exp(v) / (1.0 + math.exp(v))

    def to_json(self) -> bytes:
        return orjson.dumps({
            "features": list(self.features), "interactions": [list(p) for p in self.interactions],
            "mean": [round(float(v), 8) for v in self.mean], "scale": [round(float(v), 8) for v in self.scale],
            "coef": [round(float(v), 8) for v in self.coef], "intercept": round(self.intercept, 8), "meta": self.meta,
        }, option=orjson.OPT_INDENT_2)

    @classmethod
    def from_json(cls, raw: bytes | str) -> ScoreModel:
        try:
            d = orjson.loads(raw)
            return cls(features=tuple(d["features"]), interactions=tuple((a, b) for a, b in d["interactions"]),
                       mean=np.asarray(d["mean"], dtype=np.float64), scale=np.asarray(d["scale"], dtype=np.float64),
                       coef=np.asarray(d["coef"], dtype=np.float64), intercept=float(d["intercept"]),
                       meta=dict(d.get("meta", {})))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise SystemOneError(f"unreadable score model: {exc}") from exc

    @classmethod
    def shipped(cls, embedder: str = SHIPPED_EMBEDDER, realm: bool = False) -> ScoreModel:
        """The weights shipped in the package for ``embedder`` (cosine features depend on the
        model); for a model without its own weights, the default model's, marked in ``meta``
        (``trained_with``) so a caller can tell they are untuned for it. With ``realm``, the
        weights for recall over many conversations, where ``embedder`` has them; else the
        single-conversation weights (``meta["realm"]`` False)."""
        pkg = resources.files("topology.systemone")
        if realm:
            own = pkg.joinpath(shipped_file(embedder, realm=True))
            if own.is_file():
                model = cls.from_json(own.read_bytes())
                model.meta.setdefault("trained_with", embedder)
                return model
            single = cls.shipped(embedder)
            single.meta["realm"] = False
            return single
        own = pkg.joinpath(shipped_file(embedder))
        model = cls.from_json((own if own.is_file() else pkg.joinpath(SHIPPED)).read_bytes())
        model.meta.setdefault("trained_with", embedder if own.is_file() else SHIPPED_EMBEDDER)
        return model

    @classmethod
    def prior(cls) -> ScoreModel:
        """The hand-set prior (no interactions, no standardisation)."""
        n = len(SCORE_FEATURES)
        return cls(SCORE_FEATURES, (), np.zeros(n), np.ones(n),
                   np.asarray([PRIOR.get(f, 0.0) for f in SCORE_FEATURES]), PRIOR_INTERCEPT, {"source": "prior"})
