"""Event schemas of the pipeline: pydantic v2 models with orjson codecs and a schema version.

Every model that travels on a topic carries ``schema_version``; decoders reject versions they do
not know instead of guessing. Timestamps are timezone-aware UTC ``datetime`` values.
"""

from __future__ import annotations

import functools
from datetime import UTC, date, datetime
from typing import Annotated, Any, Literal, TypeVar

import numpy as np
import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from topology import limits
from topology.errors import InvalidEvent
from topology.vectors import retrieval_rows

SCHEMA_VERSION = 1

View = Literal["semantic", "temporal", "causal", "entity"]
VIEWS: tuple[View, ...] = ("semantic", "temporal", "causal", "entity")
MEMORY_TYPES: tuple[str, ...] = ("episodic", "semantic", "procedural", "preference")


def _ident(value: str) -> str:
    return limits.check_text(value, control=True)


def _text(value: str) -> str:
    return limits.check_text(value)


Ident = Annotated[str, Field(min_length=1, max_length=limits.MAX_ID), AfterValidator(_ident)]
"""A tenant, conversation or event id: 1-200 characters, no control characters or lone surrogates."""


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = SCHEMA_VERSION

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, v: int) -> int:
        if v != SCHEMA_VERSION:
            raise ValueError(f"unsupported schema_version {v} (this build reads {SCHEMA_VERSION})")
        return v


class Scope(BaseModel):
    """Tenant + conversation: every store call and every query is scoped by it."""

    model_config = ConfigDict(frozen=True)

    tenant_id: Ident
    conversation_id: Ident

    @property
    def key(self) -> str:
        """The record/partition key: one conversation is ordered and owned by one partition.

        ``tenant/conversation`` with ``%`` and ``/`` percent-encoded in the tenant, so the first
        ``/`` always separates the two and no two scopes share a key (``a/b`` + ``c`` and ``a`` +
        ``b/c`` differ); unchanged for tenants without those characters."""
        return f"{self.tenant_id.replace('%', '%25').replace('/', '%2F')}/{self.conversation_id}"


@functools.lru_cache(maxsize=4096)
def scope_of(tenant_id: str, conversation_id: str) -> Scope:
    """The validated :class:`Scope` of a tenant and conversation, shared (scopes are frozen): the
    write path asks a node for its scope for every pair it judges. Raises as ``Scope(...)`` does."""
    return Scope(tenant_id=tenant_id, conversation_id=conversation_id)


class Realm(BaseModel):
    """Where a recall across conversations looks: the tenant's nodes, only ``user_id``'s when
    given (the nodes of observations that carried that ``user_id``), and only the conversations
    ``conversation_ids`` when given (both filters apply together)."""

    model_config = ConfigDict(frozen=True)

    tenant_id: Ident
    user_id: Ident | None = None
    conversation_ids: tuple[Ident, ...] | None = None

    def holds(self, node: MemoryNode) -> bool:
        """Whether ``node`` is in this realm."""
        return (node.tenant_id == self.tenant_id and (self.user_id is None or node.user_id == self.user_id)
                and (self.conversation_ids is None or node.conversation_id in self.conversation_ids))


class Observation(_Event):
    """What an agent runtime emits: one chat turn, tool output or event. ``user_id`` names the
    user the agent is talking to (the conversation is one of the user's sessions): recall can
    then search one user's memory across all of their sessions."""

    tenant_id: Ident
    conversation_id: Ident
    event_id: Ident
    user_id: Ident | None = None
    content: Annotated[str, Field(min_length=1, max_length=limits.MAX_CONTENT), AfterValidator(_text)]
    speaker: Annotated[str, Field(max_length=limits.MAX_SPEAKER), AfterValidator(_text)] | None = None
    role: Annotated[str, Field(min_length=1, max_length=limits.MAX_ROLE), AfterValidator(_ident)] = "user"
    observed_at: datetime | None = Field(default=None, description="Naive values are taken as UTC; 1900-2199.")
    provenance: dict[Annotated[str, Field(max_length=limits.MAX_PROVENANCE_KEY), AfterValidator(_text)],
                     Annotated[str, Field(max_length=limits.MAX_PROVENANCE_VALUE), AfterValidator(_text)]] = Field(
        default_factory=dict, max_length=limits.MAX_PROVENANCE)
    entities: list[Annotated[str, Field(min_length=1, max_length=limits.MAX_ID), AfterValidator(_text)]] = Field(
        default_factory=list, max_length=limits.MAX_ENTITIES)
    metadata: dict[str, Any] = Field(default_factory=dict, description=(
        f"Plain JSON, at most {limits.MAX_METADATA_DEPTH} levels deep and {limits.MAX_METADATA_BYTES} bytes."))
    recall: bool = Field(default=True, description=(
        "False: history, not memory. The observation is kept, listed and forgotten like any other, "
        "but recall never returns it (an agent's tool calls and outputs kept for replay)."))

    @field_validator("content")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("content is blank")
        return v

    @field_validator("observed_at")
    @classmethod
    def _utc(cls, v: datetime | None) -> datetime | None:
        return None if v is None else limits.utc_in_range(v)

    @field_validator("metadata")
    @classmethod
    def _plain_json(cls, v: dict[str, Any]) -> dict[str, Any]:
        limits.check_json_value(v)
        if len(orjson.dumps(v)) > limits.MAX_METADATA_BYTES:
            raise ValueError(f"larger than {limits.MAX_METADATA_BYTES} bytes as JSON")
        return v

    @property
    def scope(self) -> Scope:
        return scope_of(self.tenant_id, self.conversation_id)

    def stamped(self, at: datetime) -> Observation:
        """This observation, or, when it has no ``observed_at``, a copy observed ``at`` (the time
        it was accepted) whose provenance says so (``provenance["observed_at"] = "accepted"``)."""
        if self.observed_at is not None:
            return self
        return self.model_copy(update={"observed_at": limits.utc_in_range(at),
                                       "provenance": {**self.provenance, "observed_at": "accepted"}})


class Forget(_Event):
    """A request to forget memory: one observation (``event_id``) or, when ``event_id`` is None,
    the whole conversation. Travels on the observations topic keyed by :attr:`Scope.key`, so it
    lands on the conversation's partition after every event it deletes and is applied in order.

    ``op`` tells it apart from an :class:`Observation` (which forbids unknown fields)."""

    op: Literal["forget"] = "forget"
    tenant_id: Ident
    conversation_id: Ident
    event_id: Ident | None = None
    requested_at: datetime

    @property
    def scope(self) -> Scope:
        return scope_of(self.tenant_id, self.conversation_id)


class Forgotten(_Event):
    """What one :class:`Forget` deleted, exactly (a pure description, see ``streams.forget``).

    The worker logs it on the memories, edges and consolidation topics (key :attr:`Scope.key`)
    *before* deleting, so a rebuild from the derived log deletes the same things at the same point
    of each topic. ``event_id`` None means the whole conversation (``node_ids`` is then empty and
    everything of the scope goes, forgotten-event records included); otherwise ``node_ids`` holds
    the observation's node and every derived node built (transitively) from it, and ``seq`` the
    forgotten event's seq (None when the event was never stored: nothing is recorded then).
    ``relinked``: the next observation after the forgotten one (read after it, so linked again
    once it is gone), and ``replaced_edges``: the ids of the edges it was given when written (to
    earlier memories), which go with the forgotten nodes' edges; the edges it is given again follow
    the marker on the edges topic."""

    op: Literal["forgotten"] = "forgotten"
    tenant_id: str
    conversation_id: str
    event_id: str | None = None
    seq: int | None = Field(default=None, ge=0)
    node_ids: list[str] = Field(default_factory=list)
    relinked: str | None = None
    replaced_edges: list[str] = Field(default_factory=list)
    requested_at: datetime

    @property
    def scope(self) -> Scope:
        return scope_of(self.tenant_id, self.conversation_id)


class Entity(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    name: str


class TemporalRef(BaseModel):
    """A time expression grounded against the observation time ("yesterday" -> a date)."""

    model_config = ConfigDict(frozen=True)

    text: str
    start: date
    end: date
    granularity: Literal["day", "week", "month", "year"]


class TypeScores(BaseModel):
    """System One's typing of a node: the 4 type Nouls, and ``kind``, the typing task's ``kind``
    Choice (label -> probability over statement, question, tool, advice, chatter; sums to 1).
    ``kind`` is empty for nodes typed before that question existed; read it through
    :func:`topology.systemone.turn_kinds.turn_kind`, which answers every label for every node."""

    model_config = ConfigDict(frozen=True)

    episodic: float = 0.0
    semantic: float = 0.0
    procedural: float = 0.0
    preference: float = 0.0
    kind: dict[str, float] = Field(default_factory=dict)
    #: the highest p(statement) of the turn's sentences and clauses read alone
    #: (:func:`topology.systemone.turn_kinds.statement_within`), kept for a memory of a user (read
    #: by recall across their sessions); None: not kept (read on first use)
    states: float | None = None
    #: whose attribute the turn may state, as its text reads (``person:<name>``,
    #: ``kin:<word>@<speaker>``; :func:`topology.systemone.update_model.subjects`), kept for a
    #: memory of a user like ``states``; None: not kept (read on first use)
    subjects: list[str] | None = None


class MemoryNode(_Event):
    """The canonical memory of one observation (or a System-Two-derived abstraction).

    ``seq`` is the node's position in its conversation (0-based, assigned once; a redelivered
    event keeps its seq; a forgotten event's seq is never given to another event), and defines
    "earlier" for candidate discovery.
    """

    id: str
    tenant_id: str
    conversation_id: str
    event_id: str
    #: the user of the observation (None: none was given); what a user-scoped recall filters on
    user_id: str | None = None
    seq: int = Field(ge=0)
    kind: Literal["observation", "derived"] = "observation"
    content: str
    speaker: str | None = None
    role: str = "user"
    #: False: history, not memory (``Observation.recall``): never a recall candidate
    recall: bool = True
    observed_at: datetime | None = None
    event_time: date | None = None
    provenance: dict[str, str] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    entities: list[Entity] = Field(default_factory=list)
    temporal_refs: list[TemporalRef] = Field(default_factory=list)
    tokens: list[str] = Field(default_factory=list)
    types: TypeScores = TypeScores()
    embedding: list[float] | None = None
    #: a second vector of the turn, embedded after the turn before it, kept only by nodes that
    #: stores of an earlier layout wrote (the read path ranks them by :meth:`retrieval_vector`);
    #: nodes written now carry it in ``embedding`` itself (``topology.stages.context``) and None here
    context: list[float] | None = None
    #: the id of the turn this node's embedding was read after (the latest earlier observation of
    #: its conversation, in the same sitting: ``topology.stages.context``); None when it was
    #: embedded alone. A forget of that turn re-embeds this one (``streams.forget``), and a logged
    #: copy is sealed under both turns' keys (``streams.keyring``)
    after: str | None = None
    derived_from: list[str] = Field(default_factory=list)

    @property
    def scope(self) -> Scope:
        return scope_of(self.tenant_id, self.conversation_id)

    def without_embedding(self) -> MemoryNode:
        """The node without its vectors (``embedding`` and ``context``): what stores keep as its body."""
        return self.model_copy(update={"embedding": None, "context": None})

    def retrieval_vector(self) -> list[float] | None:
        """The vector queries rank this node by (:mod:`topology.vectors`): its embedding, or the
        mean of its embedding and its context vector."""
        if self.embedding is None:
            return None
        if self.context is None or len(self.context) != len(self.embedding):
            return self.embedding
        row: list[float] = retrieval_rows(np.asarray([self.embedding], dtype=np.float32),
                                          np.asarray([self.context], dtype=np.float32))[0].astype(np.float64).tolist()
        return row


class CandidateFeatures(BaseModel):
    model_config = ConfigDict(frozen=True)

    cosine: float
    lexical: float
    entity: float
    temporal: float


class Candidate(BaseModel):
    model_config = ConfigDict(frozen=True)

    node_id: str
    seq: int
    score: float
    features: CandidateFeatures


class CandidateSet(_Event):
    """Up to K_w earlier memories of the same conversation proposed for relation judgment."""

    node: MemoryNode
    candidates: list[Candidate]


class RelationJudgment(_Event):
    """System One's answer for one (new node, earlier node) pair."""

    tenant_id: str
    conversation_id: str
    source: str
    target: str
    semantic: float
    caused_by: float
    causes: float
    alias: float | None = None
    #: p(the newer memory replaced what the older one stated as true); 0 from judges before it was asked
    updates: float = 0.0


class EdgeEvent(_Event):
    """One edge of one view; ``id`` is deterministic so materialising it is an upsert."""

    id: str
    tenant_id: str
    conversation_id: str
    view: View
    source: str
    target: str
    direction: Literal["directed", "undirected"]
    probability: float = Field(ge=0.0, le=1.0)
    label: str
    created_by: Literal["rule", "system_one"]


class ConsolidationDecision(_Event):
    id: str
    tenant_id: str
    conversation_id: str
    run: int
    left: str
    right: str
    redundant: float
    contradiction: float
    obsolete: float
    link_useful: float
    representation: dict[str, float]
    chosen: Literal["keep_separate", "merge", "promote", "uncertain"]
    derived_node_id: str | None = None


class DeadLetter(_Event):
    """An input that could not be accepted: a bounded copy of the original's own bytes (at most
    ``limits.DEAD_LETTER_ORIGINAL_BYTES``: as text when they are UTF-8, in base64 otherwise, which
    ``original_encoding`` says; ``truncated`` tells it was cut and ``original_bytes`` gives the full
    size; a record sealed on the topic is kept as it was opened, re-serialised, so an operator can
    read it: the letter is sealed again on its own topic), the reason, where it came from, and the tenant it
    belongs to (from the caller's key over HTTP; read from the payload, when it names one, on a
    topic; None when unknown: such letters are listed to no tenant)."""

    original: str
    reason: str
    source: str = ""
    received_at: datetime
    tenant_id: str | None = None
    #: the conversation and event the payload names, when it names valid ones (a forget of the
    #: conversation, or of the event, deletes the letter too)
    conversation_id: str | None = None
    event_id: str | None = None
    truncated: bool = False
    original_bytes: int | None = None
    original_encoding: Literal["utf-8", "base64"] = "utf-8"

    @classmethod
    def of(cls, original: bytes | str, reason: str, source: str, tenant_id: str | None = None) -> DeadLetter:
        """A dead letter for ``original``; ``tenant_id`` None: taken from the payload when it is a
        JSON object with a valid ``tenant_id`` (its ``conversation_id`` and ``event_id`` are
        always taken from it when valid)."""
        text, cut, size, encoding = limits.bounded_original(original)
        claims = _claims(original)
        return cls(original=text, reason=reason, source=source, received_at=datetime.now(UTC),
                   tenant_id=claims.get("tenant_id") if tenant_id is None else tenant_id,
                   conversation_id=claims.get("conversation_id"), event_id=claims.get("event_id"),
                   truncated=cut, original_bytes=size, original_encoding=encoding)

    @property
    def scope(self) -> Scope | None:
        """The conversation the letter belongs to, when it names one."""
        if self.tenant_id is None or self.conversation_id is None:
            return None
        return Scope(tenant_id=self.tenant_id, conversation_id=self.conversation_id)


def _claims(original: bytes | str) -> dict[str, str]:
    """The valid ``tenant_id``, ``conversation_id`` and ``event_id`` a JSON payload names."""
    try:
        data = orjson.loads(original)
    except orjson.JSONDecodeError:
        return {}
    if not isinstance(data, dict):
        return {}
    out = {}
    for name in ("tenant_id", "conversation_id", "event_id"):
        v = data.get(name)
        if isinstance(v, str) and 0 < len(v) <= limits.MAX_ID and limits.text_problem(v, control=True) is None:
            out[name] = v
    return out


class WriteResult(BaseModel):
    """What one write (one observation through the write path) produced."""

    model_config = ConfigDict(frozen=True)

    node: MemoryNode
    edges: list[EdgeEvent]


M = TypeVar("M", bound=BaseModel)


def encode(model: BaseModel) -> bytes:
    """orjson bytes of a model (JSON mode: dates as ISO strings)."""
    return orjson.dumps(model.model_dump(mode="json"))


def decode(cls: type[M], raw: bytes | str | dict[str, Any]) -> M:
    """Parse (unless ``raw`` is already a JSON object) and validate; raise :class:`InvalidEvent`
    with a readable reason on any failure."""
    return validate(cls, _object(raw))


def _object(raw: bytes | str | dict[str, Any]) -> dict[str, Any]:
    """``raw`` parsed as a JSON object, or :class:`InvalidEvent`."""
    if isinstance(raw, dict):
        return raw
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidEvent(f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidEvent(f"expected a JSON object, got {type(data).__name__}")
    return data


def decode_input(raw: bytes | str | dict[str, Any]) -> Observation | Forget:
    """An observations-topic record: a :class:`Forget` when it says ``"op": "forget"``, else an
    :class:`Observation`; raise :class:`InvalidEvent` with a readable reason on any failure."""
    data = _object(raw)
    return validate(Forget, data) if data.get("op") == "forget" else validate(Observation, data)


def decode_logged(cls: type[M], raw: bytes | str | dict[str, Any]) -> M | Forgotten:
    """A derived-log record (memories, edges, consolidation topics): a :class:`Forgotten` marker
    when it says ``"op": "forgotten"``, else ``cls``."""
    data = _object(raw)
    return validate(Forgotten, data) if data.get("op") == "forgotten" else validate(cls, data)


def validate(cls: type[M], data: dict[str, Any]) -> M:
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise InvalidEvent(describe(exc)) from exc


def describe(exc: ValidationError) -> str:
    """A one-line, human-readable summary of a pydantic validation error."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)
