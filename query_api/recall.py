"""Recall across a tenant's conversations (user-level memory): one question, many conversations.

The retrieval controller answers a question about *one* conversation. :func:`recall` fans the
question out to several conversations of one tenant (all of them, or a given list), runs the same
per-conversation retrieval for each (``service.retrieve``, at most :data:`CONCURRENCY` at once),
and merges the evidence by score, each item keeping its ``conversation_id``.

Contract:

- One tenant per call; every conversation searched belongs to ``tenant_id`` (ids in
  ``conversation_ids`` are scoped under the tenant, so another tenant's conversation is
  simply not found: it yields no evidence).
- At most :data:`MAX_CONVERSATIONS` conversations per call. An explicit list longer than that is
  refused (:class:`TooManyConversations`, HTTP 422); without a list, the tenant's
  :data:`MAX_CONVERSATIONS` largest conversations (most nodes, then id) are searched and the
  result says how many were ``skipped``, so a caller can name the rest explicitly.
- Scores come from the same scoring for every conversation, so the merged order is by
  ``score`` (then ``relevance``); ties keep a stable order. ``top_k`` bounds the merged list
  and each conversation's own retrieval.
- A store or System One failure in any conversation fails the whole call (no silent partial
  answer); a conversation with no memory simply contributes nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Literal, Protocol

from pydantic import BaseModel, Field

from query_api.controller import Evidence, Retrieval
from topology import limits
from topology.schemas import Ident, Scope

MAX_CONVERSATIONS = 50
"""The most conversations one recall call fans out to (documented in docs/api.md)."""
CONCURRENCY = 4
"""How many per-conversation retrievals run at once."""


class Retriever(Protocol):
    """What recall needs from a deployment (a subset of :class:`query_api.http.MemoryService`)."""

    async def retrieve(self, scope: Scope, question: str, top_k: int) -> Retrieval: ...

    async def conversations(self, tenant_id: str) -> list[tuple[str, int]]: ...


class TooManyConversations(ValueError):
    """An explicit list names more than :data:`MAX_CONVERSATIONS` conversations."""


EvidenceFormat = Literal["json", "prompt"]
"""How evidence is answered: ``json`` (every field of every item) or ``prompt`` (:class:`PromptEvidence`)."""
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
    conversation_ids: list[Ident] | None = Field(
        default=None, max_length=MAX_CONVERSATIONS,
        description=f"Search only these conversations (at most {MAX_CONVERSATIONS}); default: all of the tenant's.")
    top_k: int = Field(default=10, ge=1, le=50)
    format: EvidenceFormat = Field(default="json", description=FORMAT_HELP)


class RecallEvidence(Evidence):
    """One piece of evidence and the conversation it came from."""

    conversation_id: str


class ConversationTrace(BaseModel):
    """A short trace of one conversation's retrieval."""

    conversation_id: str
    route: dict[str, float] = Field(description="The router's view probabilities (2 decimals).")
    active_views: list[str]
    depth: int
    stop_reason: str
    controller_calls: int
    ms: float
    evidence: int = Field(description="How many of this conversation's items made the merged top-k.")


class Recall(BaseModel):
    """Merged evidence, best first, with one short trace per searched conversation."""

    question: str
    evidence: list[RecallEvidence]
    conversations: list[ConversationTrace]
    searched: int
    skipped: int = Field(description=f"Conversations not searched because of the cap of {MAX_CONVERSATIONS}.")
    ms: float


def short_trace(conversation_id: str, res: Retrieval, kept: int) -> ConversationTrace:
    """The compact trace of one retrieval (route, depth, stop reason, controller calls, ms)."""
    tr = res.trace
    return ConversationTrace(conversation_id=conversation_id, route={k: round(v, 2) for k, v in tr.route.items()},
                             active_views=tr.active_views, depth=tr.depth, stop_reason=tr.stop_reason,
                             controller_calls=tr.controller_calls, ms=round(tr.timings_ms.get("total", 0.0), 1),
                             evidence=kept)


async def targets(service: Retriever, tenant_id: str, conversation_ids: Sequence[str] | None) -> tuple[list[str], int]:
    """(conversations to search, how many were skipped by the cap). Raises
    :class:`TooManyConversations` for an explicit list over the cap."""
    if conversation_ids is not None:
        unique = list(dict.fromkeys(conversation_ids))
        if len(unique) > MAX_CONVERSATIONS:
            raise TooManyConversations(f"{len(unique)} conversations in one recall; the limit is {MAX_CONVERSATIONS}")
        return unique, 0
    owned = sorted(await service.conversations(tenant_id), key=lambda cn: (-cn[1], cn[0]))
    return [c for c, _ in owned[:MAX_CONVERSATIONS]], max(0, len(owned) - MAX_CONVERSATIONS)


async def recall(service: Retriever, tenant_id: str, question: str, top_k: int = 10,
                 conversation_ids: Sequence[str] | None = None) -> Recall:
    """Retrieve evidence for ``question`` from the tenant's conversations (all, or
    ``conversation_ids``) and merge it by score; see the module docstring for the contract.
    Raises ValueError (pydantic) for an invalid id, :class:`TooManyConversations` over the cap."""
    t0 = time.perf_counter()
    convs, skipped = await targets(service, tenant_id, conversation_ids)
    scopes = [Scope(tenant_id=tenant_id, conversation_id=c) for c in convs]  # validates the ids
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(scope: Scope) -> Retrieval:
        async with gate:
            return await service.retrieve(scope, question, top_k)

    results = await asyncio.gather(*(one(s) for s in scopes))
    pooled = [(i, RecallEvidence(**e.model_dump(), conversation_id=convs[i]))
              for i, res in enumerate(results) for e in res.evidence]
    pooled.sort(key=lambda ie: (-ie[1].score, -ie[1].relevance, ie[0], ie[1].seq))
    top = pooled[:top_k]
    kept = [sum(1 for i, _ in top if i == n) for n in range(len(convs))]
    return Recall(question=question, evidence=[e for _, e in top],
                  conversations=[short_trace(c, r, kept[i]) for i, (c, r) in enumerate(zip(convs, results, strict=True))],
                  searched=len(convs), skipped=skipped, ms=round((time.perf_counter() - t0) * 1000, 1))
