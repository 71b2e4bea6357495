"""System One's ``score`` judgments of a batch of retrieval candidates, from feature rows.

The controller computes each candidate's numeric features as a :class:`~query_api.retrieval.features.ScoreRow`.
A :class:`Scorer` asks System One about the batch (one controller request) and returns, per
candidate, the four Nouls the combined score reads. Two scorers give the same answers:

* :class:`AskScorer` (any backend): one ``ask`` with one ``score`` item per candidate whose state
  is ``ScoreState(...).model_dump()``.
* :class:`LocalScorer` (the in-process ``local`` backend, chosen where the deployment is built):
  evaluates the backend's learned model directly on the rows (the same float64 matrix, then the
  same formulas, ``local.score_nouls``, that ``local.score_many`` uses), so answers are
  bit-identical to ``ask``'s without validating and serialising every state twice. The request
  is counted as ``ask`` counts it (:meth:`CountingSystemOne.record`). A unit test compares both.
  For a recall over many conversations (``realm``) it evaluates the backend's realm weights
  (``LocalSystemOne.realm_score_model``), which the ``score`` question does not name: there the
  two differ by design (a remote backend has one set of weights).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from query_api.retrieval.features import ScoreRow
from topology.systemone.catalog import SCORE
from topology.systemone.features import ScoreState
from topology.systemone.learned import ScoreModel
from topology.systemone.local import LocalSystemOne, score_nouls, sigmoid
from topology.systemone.port import CountingSystemOne, Item

#: System One's answers about one candidate, each in [0, 1]:
#: (relevance, relation_useful, new_information, supports).
Judgement = tuple[float, float, float, float]


@dataclass(frozen=True)
class Texts:
    """The text fields of a candidate's score state."""

    memory: str
    speaker: str
    view: str


def state(question: str, texts: Texts, row: ScoreRow) -> ScoreState:
    """The validated score state of one candidate."""
    return ScoreState(question=question, memory=texts.memory, speaker=texts.speaker, view=texts.view, **row.as_dict())


def local_judgements(model: ScoreModel, rows: Sequence[ScoreRow]) -> list[Judgement]:
    """What the local backend's ``ask`` answers, with ``model`` as its score model, for score
    items with these feature rows (same arithmetic)."""
    if not rows:
        return []
    logits = model.logits(np.asarray([r.values() for r in rows], dtype=np.float64)).tolist()
    return [score_nouls(sigmoid(float(z)), r.edge_probability, r.expanded, r.max_evidence_cosine, r.support)
            for r, z in zip(rows, logits, strict=True)]


class Scorer(Protocol):
    async def judge(self, so: CountingSystemOne, question: str, rows: Sequence[ScoreRow],
                    texts: Callable[[], Sequence[Texts]], realm: bool = False) -> list[Judgement]:
        """One controller request (counted by ``so``) scoring every candidate; ``texts()`` gives
        the candidates' text fields, parallel to ``rows`` (called only when the states are sent);
        ``realm``: the pool is a recall over many conversations."""
        ...


class AskScorer:
    """Scores through ``so.ask``: works with every backend."""

    async def judge(self, so: CountingSystemOne, question: str, rows: Sequence[ScoreRow],
                    texts: Callable[[], Sequence[Texts]], realm: bool = False) -> list[Judgement]:
        if not rows:
            return []
        answers = await so.ask([Item(SCORE, state(question, t, r).model_dump()) for t, r in zip(texts(), rows, strict=True)])
        return [(a.p("relevance"), a.p("relation_useful"), a.p("new_information"), a.p("supports")) for a in answers]


class LocalScorer:
    """Scores in-process with ``backend``'s learned model; for a controller whose System One is
    ``backend`` itself (its answers are then exactly :class:`AskScorer`'s)."""

    def __init__(self, backend: LocalSystemOne) -> None:
        self.backend = backend

    async def judge(self, so: CountingSystemOne, question: str, rows: Sequence[ScoreRow],
                    texts: Callable[[], Sequence[Texts]], realm: bool = False) -> list[Judgement]:
        if not rows:
            return []
        so.record([SCORE] * len(rows))
        return local_judgements(self.backend.realm_score_model if realm else self.backend.score_model, rows)
