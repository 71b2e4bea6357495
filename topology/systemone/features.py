"""Typed item states, one model per catalog task: what each stage sends System One.

Stages build these models and send ``model_dump()`` as the item state (remote backends read the
JSON); the ``local`` backend parses the state back with :func:`parse`, so a feature that a stage
never sends, or one it misspells, is an error (:class:`~topology.errors.SystemOneError`) instead of
a silent default. Numeric features are plain floats; texts travel for models that read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from topology.errors import SystemOneError


class _State(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TypingState(_State):
    text: str
    speaker: str
    role: str


class RelationState(_State):
    """An (older -> newer) pair: cosine, lexical (Dice), entity (Jaccard), turn gap, and whether
    one speaker said both (False when unknown). For the ``updates`` question: each side's
    speaker and role ("" when unknown), ``hours`` from the older to the newer observation
    (None when a time is unknown) and ``attribute``, how far the two are about the same attribute
    of a person (:meth:`topology.systemone.attributes.AttributeSpace.similarity`, 0 to 1; None
    when unknown); ``question``: the question the pair is judged for at recall ("" on the write
    path), whose words name what both statements are about, so the judge reads them as no value."""

    newer: str
    older: str
    cosine: float
    lexical: float
    entity: float
    gap: int
    same_speaker: bool = False
    older_speaker: str = ""
    newer_speaker: str = ""
    older_role: str = ""
    newer_role: str = ""
    hours: float | None = None
    attribute: float | None = None
    question: str = ""


class AliasState(_State):
    a: str
    b: str


class ConsolidationState(_State):
    """An (older, newer) pair. ``negation_mix``: exactly one of the two texts is negated (0/1);
    ``update_cue``: the newer text announces a change ("moved", "now", "no longer", ...);
    ``same_speaker``: both were said by the same speaker (0/1); ``slot_overlap``: Dice overlap of
    the two texts' tokens; ``older_state``: the older text states a current fact about its
    speaker ("I live", "I work", "I have", ...) that an update could replace."""

    newer: str
    older: str
    cosine: float
    entity: float
    negation_mix: float
    update_cue: float
    same_speaker: float
    slot_overlap: float
    older_state: float


class RouteState(_State):
    question: str


class AssessState(_State):
    """The evidence so far: best relevance, count of strong items, gain of the last round, the
    round, the route's multi-hop probability, and ``negation_mix`` (fraction of the top evidence
    pairs where exactly one side is negated and both share content words)."""

    question: str
    round: int
    best_relevance: float
    strong: int
    last_gain: float
    multi_hop: float
    negation_mix: float
    evidence: list[str]


class ScoreFeatures(NamedTuple):
    """The numeric features of one retrieval candidate, declared once: their names, types and
    order (the order the learned scorer reads them). A row of them is this tuple (the read path's
    :class:`query_api.retrieval.features.ScoreRow` adds its rounding), :data:`SCORE_FEATURES` is its field
    names, and :class:`ScoreState` carries them by name. Graph features (``graph_*``,
    ``adjacent_anchor``, ``*_neighbours``, ``graph_degree``) are computed only from edges the
    controller examined in expansion rounds and are 0 without them; every feature is in [0, 1] or
    a small count. ``statement``: the memory's p(statement) as a turn kind
    (:func:`topology.systemone.turn_kinds.turn_kind`; a question, a tool turn, advice or chatter
    states less)."""

    cosine: float
    cosine_in_pool: float
    lexical: float
    entity: float
    speaker_match: float
    anchor: float
    bm25: float
    vector_rank: float
    lexical_rank: float
    temporal_match: float
    date_match: float
    causal_match: float
    reply_to_match: float
    is_question: float
    route_temporal: float
    route_causal: float
    route_multi_hop: float
    expanded: float
    view_probability: float
    edge_probability: float
    max_evidence_cosine: float
    support: float
    graph_degree: float
    graph_anchor: float
    graph_cosine: float
    graph_relevance: float
    adjacent_anchor: float
    entity_neighbours: float
    semantic_neighbours: float
    length: float
    statement: float


#: The names of :class:`ScoreFeatures`, in its order.
SCORE_FEATURES: tuple[str, ...] = ScoreFeatures._fields


class _ScoreTexts(_State):
    question: str
    memory: str
    speaker: str
    view: str


if TYPE_CHECKING:  # the feature fields are read typed through ScoreState.features()
    _ScoreFields = _ScoreTexts
else:  # the texts, then every field of ScoreFeatures in its order, each a float
    _ScoreFields = create_model("_ScoreFields", __base__=_ScoreTexts,
                                **{name: (float, ...) for name in SCORE_FEATURES})


class ScoreState(_ScoreFields):
    """One candidate for a query: the question, the memory's text, speaker and view, then every
    field of :class:`ScoreFeatures` by name (a flat JSON object, as remote backends read it)."""

    def features(self) -> ScoreFeatures:
        """The numeric features, typed."""
        return ScoreFeatures._make(self.vector())

    def vector(self) -> list[float]:
        """The numeric features in :data:`SCORE_FEATURES` order."""
        return [float(getattr(self, name)) for name in SCORE_FEATURES]


S = TypeVar("S", bound=_State)


def parse(model: type[S], state: Mapping[str, Any]) -> S:
    """``state`` as ``model``; a missing, unknown or mistyped feature raises SystemOneError."""
    try:
        return model.model_validate(dict(state))
    except ValidationError as exc:
        raise SystemOneError(f"{model.__name__}: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}") from exc
