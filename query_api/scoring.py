"""System One's ``score`` judgments of a batch of retrieval candidates, from feature rows.

The controller computes each candidate's numeric features as a row in
:data:`~topology.systemone.features.SCORE_FEATURES` order. :func:`judge` asks System One about
the batch in one controller request and returns, per candidate, the four Nouls the combined
score reads.

Contracts:

* Remote (and any other) backends get exactly what they got before: one ``ask`` with one
  ``score`` item per candidate whose state is ``ScoreState(...).model_dump()``.
* The in-process ``local`` backend (exactly :class:`LocalSystemOne`, not a subclass, which could
  answer differently) is evaluated directly on the rows: the same learned model on the same
  float64 matrix, then the same formulas (``local.score_nouls``, which ``local.score_many`` uses
  too), so answers are bit-identical
  to ``ask``'s, without validating and serialising every state twice. The request is counted
  as ``ask`` counts it (:meth:`CountingSystemOne.record`). A unit test compares both paths.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from topology.systemone.catalog import SCORE
from topology.systemone.features import SCORE_FEATURES, ScoreState
from topology.systemone.local import LocalSystemOne, score_nouls, sigmoid
from topology.systemone.port import CountingSystemOne, Item

_EDGE = SCORE_FEATURES.index("edge_probability")
_EXPANDED = SCORE_FEATURES.index("expanded")
_MAX_COS = SCORE_FEATURES.index("max_evidence_cosine")
_SUPPORT = SCORE_FEATURES.index("support")


#: System One's answers about one candidate, each in [0, 1]:
#: (relevance, relation_useful, new_information, supports).
Judgement = tuple[float, float, float, float]


@dataclass(frozen=True)
class Texts:
    """The text fields of a candidate's score state."""

    memory: str
    speaker: str
    view: str


def state(question: str, texts: Texts, row: Sequence[float]) -> ScoreState:
    """The validated score state of one candidate (``row`` in SCORE_FEATURES order)."""
    return ScoreState(question=question, memory=texts.memory, speaker=texts.speaker, view=texts.view,
                      **dict(zip(SCORE_FEATURES, row, strict=True)))


def local_judgements(so: LocalSystemOne, rows: Sequence[Sequence[float]]) -> list[Judgement]:
    """What ``so.ask`` answers for score items with these feature rows (same arithmetic)."""
    if not rows:
        return []
    logits = so.score_model.logits(np.asarray(rows, dtype=np.float64)).tolist()
    out: list[Judgement] = []
    for row, z in zip(rows, logits, strict=True):
        out.append(score_nouls(sigmoid(float(z)), row[_EDGE], row[_EXPANDED], row[_MAX_COS], row[_SUPPORT]))
    return out


async def judge(so: CountingSystemOne, question: str, rows: Sequence[Sequence[float]],
                texts: Callable[[], Sequence[Texts]]) -> list[Judgement]:
    """One controller request scoring every candidate; ``texts()`` gives the candidates' text
    fields, parallel to ``rows`` (called only when a backend needs the full states)."""
    if not rows:
        return []
    if type(so.inner) is LocalSystemOne:
        so.record([SCORE] * len(rows))
        return local_judgements(so.inner, rows)
    answers = await so.ask([Item(SCORE, state(question, t, r).model_dump())
                            for t, r in zip(texts(), rows, strict=True)])
    return [(a.p("relevance"), a.p("relation_useful"), a.p("new_information"), a.p("supports")) for a in answers]
