"""The use cases every front end calls: the deployment port (:class:`MemoryService`), its typed
results, and the functions over it: :func:`ingest` (per-item validation), :func:`ask` (retrieve
from one conversation, known-conversation check, System Two's answer), :func:`ask_across` and
:func:`recall_across` (one search over a realm), :func:`forget`, the reads that say when a
conversation is unknown, and the one table that turns the product's errors into answers.

The HTTP API, the MCP server and the CLI call the functions here with the caller's
:class:`~query_api.auth.Principal` already checked for scope (a local command acts as
:func:`operator`); each keeps only its transport (parsing a body, naming a tool, printing a
table) and renders an :class:`ErrorAnswer` or an error its own way.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel, Field

from query_api.auth import SCOPES, Principal, same_tenant, user_of, whole_tenant
from query_api.items import ItemError, dump, safe, validate_items
from query_api.recall import Recall, TooManyConversations, recall
from query_api.retrieval.controller import Evidence, Retrieval
from topology import limits, observe
from topology.errors import (
    BrokerUnavailable,
    Forbidden,
    InvalidRequest,
    JevMemError,
    NotFound,
    Refused,
    RequestError,
    ServiceMisconfigured,
    SystemOneError,
    SystemTwoError,
    Unauthenticated,
    Unavailable,
    UnknownConversation,
)
from topology.schemas import ConsolidationDecision, DeadLetter, EdgeEvent, MemoryNode, Observation, Realm, Scope

RETRY_AFTER_S = 5
"""Seconds a caller is told to wait after an outage (503) or a model service failure (502)."""
MESSAGE_CHARS = 500
"""An error answer quotes at most this many characters of the underlying error."""


class ForgetApplied(BaseModel):
    """A forget applied before the call returned (embedded): counts of what existed and was
    removed. ``status`` is "deleted" when anything was, else "not_found"."""

    status: Literal["deleted", "not_found"]
    nodes: int
    edges: int
    decisions: int
    seq: int | None = Field(default=None, description="The forgotten observation's seq (kept: never reused).")

    @classmethod
    def counted(cls, nodes: int, edges: int, decisions: int, seq: int | None) -> ForgetApplied:
        return cls(status="deleted" if nodes or edges or decisions else "not_found", nodes=nodes, edges=edges,
                   decisions=decisions, seq=seq)

    @property
    def found(self) -> bool:
        return self.status == "deleted"


class ForgetAccepted(BaseModel):
    """A forget durably queued (distributed): the conversation's worker applies it after the
    events sent before it."""

    status: Literal["accepted"] = "accepted"


ForgetResult = ForgetApplied | ForgetAccepted


class MemoryService(Protocol):
    """What the API and the MCP server need from a deployment (embedded or distributed).

    Every method is scoped by the tenant it is given (the caller's key's) and raises only
    :class:`~topology.errors.JevMemError`\\ s for what it cannot do (a store outage is
    :class:`~topology.errors.StoreUnavailable`, a broker's :class:`~topology.errors.BrokerUnavailable`)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def submit(self, observations: Sequence[Observation]) -> Sequence[ItemError]:
        """Durably accept valid observations (written, or acknowledged by the broker). Returns
        those that failed permanently (``index`` into ``observations``, ``reason``), each already
        dead-lettered; the rest are accepted. An outage raises
        :class:`~topology.errors.Unavailable` (send the call again: event ids make it safe)."""
        ...

    async def reject(self, letters: Sequence[DeadLetter]) -> None: ...

    async def retrieve(self, scope: Scope, question: str, top_k: int, as_of: datetime | None = None) -> Retrieval:
        """The best ``top_k`` memories of one conversation (as of ``as_of``, when given)."""
        ...

    async def recall(self, realm: Realm, question: str, top_k: int, as_of: datetime | None = None) -> Retrieval:
        """One retrieval over a realm (a tenant's conversations, one user's, or a list of them)."""
        ...

    async def answer(self, question: str, evidence: Sequence[str]) -> str | None: ...

    async def nodes(self, scope: Scope) -> list[MemoryNode]: ...

    async def edges(self, scope: Scope) -> list[EdgeEvent]: ...

    async def conversations(self, tenant_id: str, users: Collection[str] | None = None) -> list[tuple[str, int]]:
        """The tenant's conversations with their node counts (with ``users``: those holding a
        node that carries one of them as its ``user_id``, with the count of those nodes)."""
        ...

    async def decisions(self, scope: Scope) -> list[ConsolidationDecision]: ...

    async def forget(self, scope: Scope, event_id: str | None) -> ForgetResult:
        """Delete one observation (``event_id``) or the whole conversation from every store."""
        ...

    async def dead_letters(self, tenant_id: str, limit: int) -> list[DeadLetter]: ...

    async def health(self) -> dict[str, Any]: ...


class TooManyItems(RequestError):
    """More observations in one call than :data:`topology.limits.MAX_BATCH_ITEMS` (HTTP 413)."""


@dataclass
class Ingested:
    """What :func:`ingest` did: the observations written and the per-item reasons of the refused."""

    accepted: list[Observation]
    errors: list[ItemError] = field(default_factory=list)


async def ingest(service: MemoryService, who: Principal, items: Sequence[Any], *, source: str, whole: str,
                 raw: str | bytes | None = None, defaults: Mapping[str, Callable[[], str]] | None = None) -> Ingested:
    """Validate ``items`` one by one (:func:`query_api.items.validate_items`), dead-letter the
    invalid ones (sourced ``{source}#{index}``) and submit the valid ones. An item the deployment
    fails permanently (e.g. a refusal by the embedding service) is an error of that item too
    (dead-lettered by the deployment); the others are accepted.

    Raises, before anything is written: :class:`TooManyItems` over the cap (the whole call is then
    dead-lettered, sourced ``whole``, holding ``raw`` or a JSON copy of ``items``);
    :class:`~topology.errors.Forbidden` when an item names another tenant, or, for a key limited to
    users, a user not among them (or none, when the key has several: a key of one user gives its
    user to the items that name none)."""
    if len(items) > limits.MAX_BATCH_ITEMS:
        reason = f"{len(items)} items in one request; the limit is {limits.MAX_BATCH_ITEMS}"
        await dead_letter(service, [DeadLetter.of(raw if raw is not None else dump(list(items)), reason, whole,
                                                  who.tenant_id)], source)
        raise TooManyItems(reason)
    for item in items:
        if isinstance(item, dict):
            same_tenant(who, item.get("tenant_id") if isinstance(item.get("tenant_id"), str) else None)
            if who.users is not None:
                user = item.get("user_id")
                user_of(who, user if isinstance(user, str) else None)
    if who.users is not None and len(who.users) == 1:  # a key of one user: its observations are that user's
        only = next(iter(who.users))
        defaults = {**(defaults or {}), "user_id": lambda: only}
    good, errors, letters = validate_items(items, who.tenant_id, source, defaults)
    await dead_letter(service, letters, source)
    if not good:
        return Ingested(good, errors)
    refused = await service.submit(good)
    if not refused:
        return Ingested(good, errors)
    invalid = {e.index for e in errors}
    at = [i for i in range(len(items)) if i not in invalid]  # the item index of each of ``good``
    dropped = {r.index for r in refused}
    errors = sorted(errors + [ItemError(index=at[r.index], reason=r.reason) for r in refused], key=lambda e: e.index)
    return Ingested([o for j, o in enumerate(good) if j not in dropped], errors)


async def dead_letter(service: MemoryService, letters: Sequence[DeadLetter], source: str) -> None:
    """Store ``letters`` (none: nothing) and count them under ``source``."""
    if letters:
        await service.reject(letters)
        observe.count("dead_letter", len(letters), source)


async def listed(service: MemoryService, who: Principal) -> list[tuple[str, int]]:
    """The caller's conversations with node counts: the tenant's, or, for a key limited to users,
    those holding any memory of its users, with the count of those memories."""
    return await service.conversations(who.tenant_id, who.users)


async def scope_for(service: MemoryService, who: Principal, conversation_id: str, tenant_id: str | None = None) -> Scope:
    """The scope of a call addressed to a conversation; :class:`~topology.errors.Forbidden` when
    ``tenant_id`` names another tenant. A key limited to users sees only its users' memories
    there (:func:`theirs`): a conversation holding none of them reads as empty, whether it holds
    someone else's or nothing, so the key learns nothing of conversations that are not its users'."""
    return Scope(tenant_id=same_tenant(who, tenant_id), conversation_id=conversation_id)


def theirs(who: Principal | None, nodes: Sequence[MemoryNode]) -> list[MemoryNode]:
    """``nodes`` the caller may see: all of them, or, for a key limited to users, its users'."""
    if who is None or who.users is None:
        return list(nodes)
    return [n for n in nodes if n.user_id is not None and n.user_id in who.users]


async def _their_ids(service: MemoryService, scope: Scope, who: Principal) -> set[str]:
    """The ids of the conversation's nodes a key limited to users may see."""
    return {n.id for n in theirs(who, await service.nodes(scope))}


async def own_part(service: MemoryService, who: Principal, scope: Scope) -> Realm | None:
    """Where a key limited to users queries a conversation: None (the conversation itself) for a
    key of the whole tenant or a conversation that holds its users' memories only; else the
    realm of its one user's memories there (empty when it holds none of theirs).
    :class:`~topology.errors.Forbidden` when it holds memories of several of the key's users and
    of someone else: the key then names one (``POST /v1/recall`` with ``user_id``)."""
    if who.users is None:
        return None
    every = await service.nodes(scope)
    mine = theirs(who, every)
    if mine and len(mine) == len(every):
        return None
    users = sorted({n.user_id for n in mine if n.user_id is not None}) or sorted(who.users)[:1]
    if len(users) > 1:
        raise Forbidden(f"this key is limited to users {', '.join(sorted(who.users))}: conversation "
                        f"{scope.conversation_id!r} also holds someone else's memories; recall one user's "
                        "with POST /v1/recall, user_id and conversation_ids")
    return Realm(tenant_id=scope.tenant_id, user_id=users[0], conversation_ids=(scope.conversation_id,))


def operator(tenant_id: str) -> Principal:
    """The caller of a local command (the CLI): the whole tenant, every scope; whoever runs it
    can read the store itself."""
    return Principal(key_id="local", tenant_id=tenant_id, scopes=frozenset(SCOPES))


async def require_known(service: MemoryService, tenant_id: str, conversation_ids: Sequence[str]) -> None:
    """:class:`~topology.errors.UnknownConversation` for the first of ``conversation_ids`` the
    tenant has no memory of (only the tenant's own conversations are consulted)."""
    known = {c for c, _ in await service.conversations(tenant_id)}
    missing = next((c for c in conversation_ids if c not in known), None)
    if missing is not None:
        raise UnknownConversation(missing)


async def retrieve(service: MemoryService, scope: Scope, question: str, top_k: int,
                   as_of: datetime | None = None) -> Retrieval:
    """``service.retrieve``; an empty answer from a conversation the tenant does not have raises
    :class:`~topology.errors.UnknownConversation` (a known one may answer empty)."""
    res = await service.retrieve(scope, question, top_k, as_of)
    if not res.evidence:
        await require_known(service, scope.tenant_id, [scope.conversation_id])
    return res


F = TypeVar("F", Retrieval, Recall)


@dataclass(frozen=True)
class Asked(Generic[F]):
    """What :func:`ask` or :func:`ask_across` found, and System Two's answer from it (None when
    no answer was asked for or no System Two is configured)."""

    found: F
    answer: str | None


async def _answered(service: MemoryService, question: str, evidence: Sequence[Evidence]) -> str | None:
    return await service.answer(question, [e.for_prompt() for e in evidence])


async def ask(service: MemoryService, who: Principal, conversation_id: str, question: str, top_k: int, *,
              tenant_id: str | None = None, as_of: datetime | None = None, answer: bool = True) -> Asked[Retrieval]:
    """Retrieve the best ``top_k`` memories of one conversation (:func:`scope_for`, then
    :func:`retrieve`: timed as stage ``query``, :class:`~topology.errors.UnknownConversation` for
    a conversation the tenant does not have; for a key limited to users, its users' memories
    there: :func:`own_part`), then, with ``answer``, System Two's answer from them."""
    with observe.timed("query"):
        scope = await scope_for(service, who, conversation_id, tenant_id)
        realm = await own_part(service, who, scope)
        res = (await retrieve(service, scope, question, top_k, as_of) if realm is None
               else await service.recall(realm, question, top_k, as_of))
    observe.measure("controller_requests_per_query", res.trace.controller_calls)
    return Asked(res, await _answered(service, question, res.evidence) if answer else None)


async def recall_across(service: MemoryService, tenant_id: str, question: str, top_k: int,
                        conversation_ids: Sequence[str] | None, user_id: str | None = None,
                        as_of: datetime | None = None) -> Recall:
    """:func:`query_api.recall.recall`, with a list over its cap refused as
    :class:`~topology.errors.InvalidRequest`."""
    try:
        return await recall(service, tenant_id, question, top_k, conversation_ids, user_id, as_of)
    except TooManyConversations as exc:
        raise InvalidRequest(str(exc)) from exc


async def ask_across(service: MemoryService, who: Principal, question: str, top_k: int,
                     conversation_ids: Sequence[str] | None, user_id: str | None = None,
                     as_of: datetime | None = None, *, answer: bool = True) -> Asked[Recall]:
    """:func:`recall_across` over the caller's tenant (``user_id`` checked against the key's
    users), then, with ``answer``, System Two's answer from its evidence."""
    found = await recall_across(service, who.tenant_id, question, top_k, conversation_ids, user_of(who, user_id), as_of)
    return Asked(found, await _answered(service, question, found.evidence) if answer else None)


async def forget(service: MemoryService, who: Principal, conversation_id: str, event_id: str | None) -> ForgetResult:
    """Forget one observation (``event_id``) or the whole conversation (None) of the caller's
    (:func:`scope_for`): what was removed (embedded) or that it was queued (distributed). A key
    limited to users forgets only its users' memories: an observation of someone else, or a
    conversation holding none of theirs, is not found; a whole conversation that also holds
    someone else's is :class:`~topology.errors.Forbidden` (forget its events one by one)."""
    scope = await scope_for(service, who, conversation_id)
    if who.users is not None:
        every = await service.nodes(scope)
        mine = theirs(who, every)
        if event_id is None:
            if not mine:
                return ForgetApplied(status="not_found", nodes=0, edges=0, decisions=0)
            if len(mine) != len(every):
                raise Forbidden(f"this key is limited to users {', '.join(sorted(who.users))}: conversation "
                                f"{conversation_id!r} also holds someone else's memories; forget its events one by one")
        elif not any(n.event_id == event_id and n.kind == "observation" for n in mine):
            return ForgetApplied(status="not_found", nodes=0, edges=0, decisions=0)
    return await service.forget(scope, event_id)


async def dead_letters(service: MemoryService, who: Principal, limit: int) -> list[DeadLetter]:
    """The caller's tenant's newest ``limit`` dead letters; :class:`~topology.errors.Forbidden`
    for a key limited to users (a dead letter is not any one user's)."""
    whole_tenant(who)
    return await service.dead_letters(who.tenant_id, limit)


async def nodes(service: MemoryService, scope: Scope, who: Principal | None = None) -> list[MemoryNode]:
    """The conversation's nodes; :class:`~topology.errors.UnknownConversation` when it has none.
    For a key limited to users (``who``), its users' nodes there, never an error (:func:`scope_for`)."""
    out = await service.nodes(scope)
    if who is not None and who.users is not None:
        return theirs(who, out)
    if not out:
        raise UnknownConversation(scope.conversation_id)
    return out


async def edges(service: MemoryService, scope: Scope, who: Principal | None = None) -> list[EdgeEvent]:
    """The conversation's edges; :class:`~topology.errors.UnknownConversation` for an unknown one.
    For a key limited to users, the edges between its users' nodes there."""
    out = await service.edges(scope)
    if who is not None and who.users is not None:
        seen = await _their_ids(service, scope, who)
        return [e for e in out if e.source in seen and e.target in seen]
    if not out:
        await require_known(service, scope.tenant_id, [scope.conversation_id])
    return out


async def decisions(service: MemoryService, scope: Scope, who: Principal | None = None) -> list[ConsolidationDecision]:
    """The conversation's consolidation decisions; :class:`~topology.errors.UnknownConversation`
    for an unknown one. For a key limited to users, those between its users' nodes there."""
    out = await service.decisions(scope)
    if who is not None and who.users is not None:
        seen = await _their_ids(service, scope, who)
        return [d for d in out if d.left in seen and d.right in seen]
    if not out:
        await require_known(service, scope.tenant_id, [scope.conversation_id])
    return out


@dataclass(frozen=True)
class ErrorAnswer:
    """How the API answers an error: an HTTP ``status``, the ``message`` a caller reads (the MCP
    server's error result carries the same text) and the response ``headers``."""

    status: int
    message: str
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Row:
    error: type[JevMemError]
    status: int
    label: str
    retry: bool = False


ERRORS: tuple[_Row, ...] = (
    _Row(Unauthenticated, 401, "unauthenticated"),
    _Row(Forbidden, 403, "forbidden"),
    _Row(NotFound, 404, "not found"),
    _Row(TooManyItems, 413, "too large"),
    _Row(InvalidRequest, 422, "invalid request"),
    _Row(Refused, 422, "refused"),  # before the System One and Two rows: their refusals are permanent
    _Row(ServiceMisconfigured, 502, "a model service refused this deployment's configuration"),
    _Row(Unavailable, 503, "temporarily unavailable, retry later", retry=True),
    _Row(SystemOneError, 502, "System One failed, retry later", retry=True),
    _Row(SystemTwoError, 502, "System Two failed, retry later", retry=True),
)
"""The error table, first match wins: every status the API answers for an error it raised on
purpose. Errors outside it (a misconfigured store: ``IncompatibleStore``, ``ModelMismatch``) are
not the caller's to fix and surface as server errors."""


def answer_for(exc: JevMemError, listing: str) -> ErrorAnswer | None:
    """The answer to ``exc`` from :data:`ERRORS` (None: not an error a caller can act on).
    ``listing`` is how this adapter's callers list their conversations (named when one is unknown)."""
    row = next((r for r in ERRORS if isinstance(exc, r.error)), None)
    if row is None:
        return None
    if isinstance(exc, Unavailable):
        observe.count("store_error", 1, "broker" if isinstance(exc, BrokerUnavailable) else "store")
    text = safe(str(exc))[:MESSAGE_CHARS]
    if isinstance(exc, UnknownConversation):
        text += f"; list the known ones with {listing}"
    headers = {"Retry-After": str(RETRY_AFTER_S)} if row.retry else {}
    if row.status == 401:
        headers = {"WWW-Authenticate": "Bearer"}
    return ErrorAnswer(row.status, f"{row.label}: {text}", headers)
