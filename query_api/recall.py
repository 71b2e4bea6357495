"""Recall across a tenant's conversations (user-level memory): one question, one search.

An agent remembers a *user* across sessions: :func:`recall` answers a question from a realm (the
tenant's conversations, only one user's when ``user_id`` is given, only some when
``conversation_ids`` is given) with *one* retrieval
(:meth:`query_api.retrieval.controller.RetrievalController.retrieve_realm`): anchors from one vector and one
lexical search over the whole realm, one ranker over one pool, expansion inside each
candidate's conversation. Scores are therefore comparable across conversations, and no
conversation is skipped however many the realm holds.

Contract:

- One tenant per call; every node considered belongs to ``tenant_id`` (and to ``user_id`` when
  given, and to one of ``conversation_ids`` when given); ids in ``conversation_ids`` are scoped
  under the tenant, so another tenant's conversation is simply not found.
- Evidence is best first, each item naming its conversation; ``conversations`` lists every
  conversation whose memories entered the pool, with how many of the returned items came from it.
- A store or System One failure fails the whole call (no silent partial answer); a realm with
  no memory answers no evidence.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime
from typing import Literal, Protocol

from pydantic import BaseModel, Field, field_validator

from query_api.retrieval.controller import Evidence, Retrieval
from topology import limits
from topology.schemas import Ident, Realm

MAX_CONVERSATIONS = 1000
"""The most conversations an explicit ``conversation_ids`` list may name (a request size bound;
without a list the whole realm is searched, whatever its size)."""


class Recaller(Protocol):
    """What recall needs from a deployment (a subset of :class:`query_api.service.MemoryService`)."""

    async def recall(self, realm: Realm, question: str, top_k: int, as_of: datetime | None = None) -> Retrieval: ...


class TooManyConversations(ValueError):
    """An explicit list names more than :data:`MAX_CONVERSATIONS` conversations."""


EvidenceFormat = Literal["json", "prompt"]
"""How evidence is answered: ``json`` (every field of every item) or ``prompt`` (:class:`PromptEvidence`)."""
AS_OF_HELP = ("Answer with what was true at this time (ISO 8601; naive is UTC): only memories observed by then "
              "count, and a memory superseded only later is current.")
FORMAT_HELP = ("json: every field of every item; prompt: the compact lines System Two reads (date, grounded "
               "event dates, speaker, text, what superseded it), best first, for an agent's context.")


class PromptEvidence(BaseModel):
    """Evidence as the lines System Two reads (:meth:`Evidence.for_prompt`), best first; ``text``
    is the lines joined by newlines, ready for a prompt."""

    question: str
    lines: list[str]
    text: str
    answer: str | None = None
    trace_id: str | None = None

    @classmethod
    def of(cls, question: str, evidence: Sequence[Evidence], **extra: str | None) -> PromptEvidence:
        lines = [e.for_prompt() for e in evidence]
        return cls(question=question, lines=lines, text="\n".join(lines), **extra)


class RecallRequest(BaseModel):
    """Body of ``POST /v1/recall`` (the tenant comes from the API key)."""

    question: str = Field(min_length=1, max_length=limits.MAX_QUESTION)
    user_id: Ident | None = Field(default=None, description=(
        "Search only this user's memory (the observations that carried this user_id); default: every "
        "conversation of the tenant."))
    conversation_ids: list[Ident] | None = Field(
        default=None, max_length=MAX_CONVERSATIONS,
        description=f"Search only these conversations (at most {MAX_CONVERSATIONS}); default: all of them.")
    top_k: int = Field(default=10, ge=1, le=50)
    format: EvidenceFormat = Field(default="json", description=FORMAT_HELP)
    as_of: datetime | None = Field(default=None, description=AS_OF_HELP)

    @field_validator("as_of")
    @classmethod
    def _utc(cls, v: datetime | None) -> datetime | None:
        return None if v is None else limits.utc_in_range(v)


RecallEvidence = Evidence
"""One piece of evidence (it names its conversation)."""


class ConversationShare(BaseModel):
    """A conversation whose memories entered the pool, and how many of the returned items it gave."""

    conversation_id: str
    evidence: int


class RecallTrace(BaseModel):
    """A short trace of the retrieval."""

    route: dict[str, float] = Field(description="The router's view probabilities (2 decimals).")
    active_views: list[str]
    depth: int
    stop_reason: str
    controller_calls: int
    visited: int


class Recall(BaseModel):
    """Evidence, best first, the conversations that contributed, and a short trace."""

    question: str
    user_id: str | None = None
    evidence: list[Evidence]
    conversations: list[ConversationShare] = Field(
        description="Every conversation whose memories entered the pool, first seen first.")
    searched: int = Field(description="How many conversations contributed candidates.")
    trace: RecallTrace
    ms: float


def shares(res: Retrieval) -> list[ConversationShare]:
    """The conversations of the pool with how many of the returned items each gave."""
    given: dict[str, int] = {}
    for e in res.evidence:
        given[e.conversation_id] = given.get(e.conversation_id, 0) + 1
    return [ConversationShare(conversation_id=c, evidence=given.get(c, 0)) for c in res.trace.conversations]


def realm_of(tenant_id: str, user_id: str | None, conversation_ids: Sequence[str] | None) -> Realm:
    """The realm of a recall (validates the ids). Raises :class:`TooManyConversations` for an
    explicit list over :data:`MAX_CONVERSATIONS`."""
    convs = None if conversation_ids is None else tuple(dict.fromkeys(conversation_ids))
    if convs is not None and len(convs) > MAX_CONVERSATIONS:
        raise TooManyConversations(f"{len(convs)} conversations in one recall; the limit is {MAX_CONVERSATIONS}")
    return Realm(tenant_id=tenant_id, user_id=user_id, conversation_ids=convs)


async def recall(service: Recaller, tenant_id: str, question: str, top_k: int = 10,
                 conversation_ids: Sequence[str] | None = None, user_id: str | None = None,
                 as_of: datetime | None = None) -> Recall:
    """Retrieve evidence for ``question`` from the realm of ``tenant_id`` (``user_id``'s memory
    when given; ``conversation_ids`` only when given): see the module docstring for the contract.
    Raises ValueError (pydantic) for an invalid id, :class:`TooManyConversations` over the cap."""
    t0 = time.perf_counter()
    res = await service.recall(realm_of(tenant_id, user_id, conversation_ids), question, top_k, as_of)
    tr = res.trace
    got = shares(res)
    return Recall(question=question, user_id=user_id, evidence=res.evidence, conversations=got, searched=len(got),
                  trace=RecallTrace(route={k: round(v, 2) for k, v in tr.route.items()}, active_views=tr.active_views,
                                    depth=tr.depth, stop_reason=tr.stop_reason, controller_calls=tr.controller_calls,
                                    visited=tr.visited),
                  ms=round((time.perf_counter() - t0) * 1000, 1))
