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
from dataclasses import dataclass
from importlib import resources
from typing import Any, ClassVar

import numpy as np

from topology.systemone.features import RelationState
from topology.systemone.logistic import LogisticModel, fit_balanced

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
class RelationModel(LogisticModel):
    """p(related) over :data:`RELATION_FEATURES` (:class:`~topology.systemone.logistic.LogisticModel`)."""

    FEATURES: ClassVar[tuple[str, ...]] = RELATION_FEATURES
    FEATURES_NAME: ClassVar[str] = "RELATION_FEATURES"
    WHAT: ClassVar[str] = "relation"

    def probability(self, vector: Sequence[float]) -> float:
        return float(self.probabilities(np.asarray([vector], dtype=np.float64))[0])

    @classmethod
    def shipped(cls, embedder: str) -> RelationModel | None:
        """The weights shipped for ``embedder``, or None when it has none."""
        own = resources.files("topology.systemone").joinpath(shipped_file(embedder))
        return cls.from_json(own.read_bytes()) if own.is_file() else None


def fit(x: np.ndarray, y: np.ndarray, l2: float = 1.0, iters: int = 30,
        meta: dict[str, Any] | None = None) -> RelationModel:
    """:func:`~topology.systemone.logistic.fit_balanced` over :data:`RELATION_FEATURES`."""
    fitted = fit_balanced(x, y, len(RELATION_FEATURES), l2, iters,
                          "training pairs need both related and unrelated examples")
    return RelationModel(RELATION_FEATURES, *fitted, meta or {})
