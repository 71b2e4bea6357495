"""The HTTP API (FastAPI; OpenAPI at /docs and /openapi.json).

Every endpoint except ``GET /healthz`` needs ``Authorization: Bearer <api key>``: 401 without a
valid key, 403 when the key lacks the endpoint's scope or the request names another tenant. The
tenant always comes from the key; bodies may omit ``tenant_id``.

- ``POST /v1/observations`` (``ingest``): a JSON array of observations, at most
  ``limits.MAX_BATCH_ITEMS`` (413 above). Each item is validated on its own: valid items are
  written, invalid ones go to the tenant's dead letters with their reason, and the response is 422
  listing the per-item reasons whenever any item was invalid (200 otherwise). A body that is not
  JSON (400) or not an array (422) is dead-lettered whole. Accepted items are never lost.
- ``POST /v1/query`` (``query``): evidence (and an answer when System Two is configured) with the trace.
- ``POST /v1/recall`` (``query``): evidence from several or all of the tenant's conversations, merged
  by score, each item with its conversation (:mod:`query_api.recall`; 422 over its cap).
- ``/mcp``: the Model Context Protocol tools over streamable HTTP (:mod:`query_api.mcp_server`).
- ``GET /v1/conversations`` (``query``): the tenant's conversations with node counts.
- ``GET /v1/conversations/{conversation}/nodes|edges|decisions`` (``query``; nodes and edges also under
  ``/v1/tenants/{tenant}/...``, 403 for another tenant).
- ``DELETE /v1/conversations/{conversation}`` and ``.../observations/{event_id}`` (``admin``):
  200 with what was removed (embedded), 202 once the request is on the log (distributed), 404
  when there was nothing to forget.
- ``GET /v1/dead-letters`` (``admin``): the key's tenant's dead letters only.
- ``GET /ui/`` (no key): the memory page (:mod:`query_api.ui`); its API calls need a key.

Any request body is capped at ``limits.MAX_BODY_BYTES`` (413). A store or broker outage answers
503 with ``Retry-After``; a System One or System Two service failure answers 502 (with
``Retry-After``); no input yields a 500.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Annotated, Any, Protocol

import orjson
from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field, ValidationError
from starlette.types import ASGIApp, Message, Receive, Send
from starlette.types import Scope as AsgiScope

from query_api.auth import Authenticator, Forbidden, Principal, Unauthenticated, require, same_tenant
from query_api.controller import Retrieval
from query_api.items import ItemError, safe, validate_items
from query_api.recall import Recall, RecallRequest, recall
from query_api.ui import mount_ui
from topology import limits, observe
from topology.errors import BrokerUnavailable, StoreUnavailable, SystemOneError, SystemTwoError
from topology.schemas import ConsolidationDecision, DeadLetter, EdgeEvent, Ident, MemoryNode, Observation, Scope, describe

log = logging.getLogger("jevmem.api")
RETRY_AFTER_S = 5
_FORGET_STATUS = {"deleted": 200, "accepted": 202, "not_found": 404}
ConvId = Annotated[str, Path(min_length=1, max_length=limits.MAX_ID)]
TenantId = Annotated[str, Path(min_length=1, max_length=limits.MAX_ID)]
EventId = Annotated[str, Path(min_length=1, max_length=limits.MAX_ID)]


class MemoryService(Protocol):
    """What the API needs from a deployment (embedded or distributed)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def submit(self, observations: Sequence[Observation]) -> None:
        """Durably accept valid observations (written, or acknowledged by the broker)."""
        ...

    async def reject(self, letters: Sequence[DeadLetter]) -> None: ...

    async def retrieve(self, scope: Scope, question: str, top_k: int) -> Retrieval: ...

    async def answer(self, question: str, evidence: Sequence[str]) -> str | None: ...

    async def nodes(self, scope: Scope) -> list[MemoryNode]: ...

    async def edges(self, scope: Scope) -> list[EdgeEvent]: ...

    async def conversations(self, tenant_id: str) -> list[tuple[str, int]]:
        """The tenant's conversations with their node counts."""
        ...

    async def decisions(self, scope: Scope) -> list[ConsolidationDecision]: ...

    async def forget(self, scope: Scope, event_id: str | None) -> dict[str, Any]:
        """Delete one observation (``event_id``) or the whole conversation from every store."""
        ...

    async def dead_letters(self, tenant_id: str, limit: int) -> list[DeadLetter]: ...

    async def health(self) -> dict[str, Any]: ...


class IngestResponse(BaseModel):
    accepted: int
    rejected: int
    errors: list[ItemError] = Field(default_factory=list)
    trace_id: str | None = Field(default=None, description="Follows the accepted observations into the logs.")


class Conversation(BaseModel):
    conversation_id: str
    nodes: int


class QueryRequest(BaseModel):
    tenant_id: Ident | None = Field(default=None, description="Optional; must be the key's tenant.")
    conversation_id: Ident
    question: str = Field(min_length=1, max_length=limits.MAX_QUESTION)
    top_k: int = Field(default=10, ge=1, le=50)
    answer: bool = False


class QueryResponse(Retrieval):
    answer: str | None = None
    trace_id: str | None = Field(default=None, description="This query's trace id (also the X-Trace-Id header).")


_TRACE_ID = re.compile(r"[0-9a-f]{16,32}")


class TraceIds:
    """ASGI middleware: each request gets a trace id (the caller's ``X-Trace-Id`` when it is 16-32
    lowercase hex characters, else a new one), set in :data:`topology.observe.TRACE_ID` while the
    request is served and returned in the ``X-Trace-Id`` response header."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(b"x-trace-id", b"").decode("latin-1")
        trace_id = given if _TRACE_ID.fullmatch(given) else uuid.uuid4().hex
        token = observe.TRACE_ID.set(trace_id)

        async def with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"x-trace-id", trace_id.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, with_header)
        finally:
            observe.TRACE_ID.reset(token)


def _observation_schema() -> dict[str, Any]:
    """The request body schema of ``POST /v1/observations``: an array of observations whose
    ``tenant_id`` may be omitted."""
    item = Observation.model_json_schema()
    item["required"] = [f for f in item.get("required", []) if f != "tenant_id"]
    return {"type": "array", "maxItems": limits.MAX_BATCH_ITEMS, "items": item}


class BodyLimit:
    """ASGI middleware: 413 for a request body over ``limit`` bytes (declared or streamed)."""

    def __init__(self, app: ASGIApp, limit: int = limits.MAX_BODY_BYTES) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await _too_large(self.limit)(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise HTTPException(413, f"request body larger than {self.limit} bytes")
            return message

        await self.app(scope, counted, send)


def _too_large(limit: int) -> JSONResponse:
    return JSONResponse({"detail": f"request body larger than {limit} bytes"}, status_code=413)


def _parse(body: bytes) -> Any:
    """JSON body; lone-surrogate escapes and out-of-range numbers parse (the items holding them are
    then refused one by one). Raises ValueError for anything that is not JSON."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return json.loads(body)  # ValueError (JSONDecodeError, UnicodeDecodeError) when not JSON


def create_app(service: MemoryService, auth: Authenticator) -> FastAPI:
    """The API over ``service``; ``auth`` checks every request's key."""
    @asynccontextmanager
    async def lifespan(_: FastAPI):  # type: ignore[no-untyped-def]
        await service.start()
        try:
            yield
        finally:
            await service.stop()
            await auth.store.close()

    app = FastAPI(title="jevmem", version="0.1.0", lifespan=lifespan,
                  description="Streaming System-One memory for AI agents.")
    app.add_middleware(BodyLimit)
    app.add_middleware(TraceIds)
    bearer = HTTPBearer(auto_error=False, description="An API key from `jevmem keys create`.")

    def caller(scope: str) -> Callable[..., Awaitable[Principal]]:
        async def dependency(cred: HTTPAuthorizationCredentials | None = Security(bearer)) -> Principal:
            who = await auth.principal(f"Bearer {cred.credentials}" if cred is not None else None)
            require(who, scope)  # type: ignore[arg-type]
            return who
        return dependency

    ingest_key = Depends(caller("ingest"))
    query_key = Depends(caller("query"))
    admin_key = Depends(caller("admin"))

    @app.exception_handler(Unauthenticated)
    async def _401(_: Request, exc: Unauthenticated) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=401, headers={"WWW-Authenticate": "Bearer"})

    @app.exception_handler(Forbidden)
    async def _403(_: Request, exc: Forbidden) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=403)

    @app.exception_handler(StoreUnavailable)
    @app.exception_handler(BrokerUnavailable)
    async def _503(_: Request, exc: Exception) -> JSONResponse:
        observe.count("store_error", 1, "broker" if isinstance(exc, BrokerUnavailable) else "store")
        log.warning("unavailable: %s", exc)
        return JSONResponse({"detail": f"temporarily unavailable: {safe(str(exc))[:500]}"}, status_code=503,
                            headers={"Retry-After": str(RETRY_AFTER_S)})

    @app.exception_handler(SystemOneError)
    @app.exception_handler(SystemTwoError)
    async def _502(_: Request, exc: Exception) -> JSONResponse:
        which = "System One" if isinstance(exc, SystemOneError) else "System Two"
        return JSONResponse({"detail": f"{which} failed: {safe(str(exc))[:500]}"}, status_code=502,
                            headers={"Retry-After": str(RETRY_AFTER_S)})

    @app.exception_handler(RequestValidationError)
    async def _422(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"loc": [str(p) for p in e.get("loc", ())], "msg": safe(str(e.get("msg", "")))} for e in exc.errors()]
        return JSONResponse({"detail": errors}, status_code=422)

    @app.exception_handler(ValidationError)
    async def _422_ids(_: Request, exc: ValidationError) -> JSONResponse:
        return JSONResponse({"detail": safe(describe(exc))}, status_code=422)

    def scope_of(who: Principal, conversation_id: str, tenant_id: str | None = None) -> Scope:
        return Scope(tenant_id=same_tenant(who, tenant_id), conversation_id=conversation_id)

    @app.post("/v1/observations", response_model=IngestResponse, openapi_extra={
        "requestBody": {"required": True, "content": {"application/json": {"schema": _observation_schema()}}}},
        responses={422: {"model": IngestResponse, "description": "Some items were invalid; the rest were accepted."},
                   400: {"description": "The body is not JSON."}, 413: {"description": "Too many items or bytes."}})
    async def ingest(request: Request, who: Principal = ingest_key) -> JSONResponse:
        body = await request.body()
        letter = None
        try:
            items = _parse(body)
        except ValueError as exc:
            letter = (400, f"body is not JSON: {safe(str(exc))[:300]}")
        else:
            if not isinstance(items, list):
                letter = (422, f"body must be a JSON array of observations, got {type(items).__name__}")
            elif len(items) > limits.MAX_BATCH_ITEMS:
                letter = (413, f"{len(items)} items in one request; the limit is {limits.MAX_BATCH_ITEMS}")
        if letter is not None:
            await service.reject([DeadLetter.of(body, letter[1], "http:body", who.tenant_id)])
            observe.count("dead_letter", 1, "http")
            return JSONResponse({"detail": letter[1]}, status_code=letter[0])
        for raw in items:
            if isinstance(raw, dict):
                same_tenant(who, raw.get("tenant_id") if isinstance(raw.get("tenant_id"), str) else None)
        good, errors, letters = validate_items(items, who.tenant_id, "http")
        if letters:
            await service.reject(letters)
            observe.count("dead_letter", len(letters), "http")
        if good:
            await service.submit(good)
        trace_id = observe.TRACE_ID.get()
        log.info("ingest", extra={"accepted": len(good), "rejected": len(errors),
                                  "events": [o.event_id for o in good[:50]]})
        out = IngestResponse(accepted=len(good), rejected=len(errors), errors=errors, trace_id=trace_id)
        return JSONResponse(out.model_dump(), status_code=422 if errors else 200)

    @app.post("/v1/query", response_model=QueryResponse)
    async def query(req: QueryRequest, who: Principal = query_key) -> QueryResponse:
        with observe.timed("query"):
            res = await service.retrieve(scope_of(who, req.conversation_id, req.tenant_id), req.question, req.top_k)
        observe.measure("controller_requests_per_query", res.trace.controller_calls)
        answer = await service.answer(req.question, [e.for_prompt() for e in res.evidence]) if req.answer else None
        log.info("query", extra={"evidence": len(res.evidence), "controller_calls": res.trace.controller_calls,
                                 "stop": res.trace.stop_reason})
        return QueryResponse(**res.model_dump(), answer=answer, trace_id=observe.TRACE_ID.get())

    @app.post("/v1/recall", response_model=Recall)
    async def recall_all(req: RecallRequest, who: Principal = query_key) -> Recall:
        return await recall(service, who.tenant_id, req.question, req.top_k, req.conversation_ids)

    @app.get("/v1/conversations", response_model=list[Conversation])
    async def conversations(who: Principal = query_key) -> list[Conversation]:
        return [Conversation(conversation_id=c, nodes=n) for c, n in await service.conversations(who.tenant_id)]

    @app.get("/v1/conversations/{conversation_id}/decisions", response_model=list[ConsolidationDecision])
    async def decisions(conversation_id: ConvId, who: Principal = query_key) -> list[ConsolidationDecision]:
        return await service.decisions(scope_of(who, conversation_id))

    @app.get("/v1/conversations/{conversation_id}/nodes", response_model=list[MemoryNode])
    async def nodes(conversation_id: ConvId, who: Principal = query_key) -> list[MemoryNode]:
        return await service.nodes(scope_of(who, conversation_id))

    @app.get("/v1/conversations/{conversation_id}/edges", response_model=list[EdgeEvent])
    async def edges(conversation_id: ConvId, who: Principal = query_key) -> list[EdgeEvent]:
        return await service.edges(scope_of(who, conversation_id))

    @app.get("/v1/tenants/{tenant_id}/conversations/{conversation_id}/nodes", response_model=list[MemoryNode])
    async def tenant_nodes(tenant_id: TenantId, conversation_id: ConvId, who: Principal = query_key) -> list[MemoryNode]:
        return await service.nodes(scope_of(who, conversation_id, tenant_id))

    @app.get("/v1/tenants/{tenant_id}/conversations/{conversation_id}/edges", response_model=list[EdgeEvent])
    async def tenant_edges(tenant_id: TenantId, conversation_id: ConvId, who: Principal = query_key) -> list[EdgeEvent]:
        return await service.edges(scope_of(who, conversation_id, tenant_id))

    def forgotten(result: dict[str, Any]) -> JSONResponse:
        return JSONResponse(result, status_code=_FORGET_STATUS.get(str(result.get("status")), 200))

    forget_responses: dict[int | str, dict[str, Any]] = {
        202: {"description": "Accepted (distributed mode): applied by the conversation's worker, in order."},
        404: {"description": "Nothing to forget."}}

    @app.delete("/v1/conversations/{conversation_id}", responses=forget_responses)
    async def forget_conversation(conversation_id: ConvId, who: Principal = admin_key) -> JSONResponse:
        return forgotten(await service.forget(scope_of(who, conversation_id), None))

    @app.delete("/v1/conversations/{conversation_id}/observations/{event_id}", responses=forget_responses)
    async def forget_observation(conversation_id: ConvId, event_id: EventId, who: Principal = admin_key) -> JSONResponse:
        problem = limits.text_problem(event_id, control=True)
        if problem is not None:
            raise HTTPException(422, f"event_id {problem}")
        return forgotten(await service.forget(scope_of(who, conversation_id), event_id))

    @app.get("/v1/dead-letters", response_model=list[DeadLetter])
    async def dead_letters(limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                           who: Principal = admin_key) -> list[DeadLetter]:
        return await service.dead_letters(who.tenant_id, limit)

    @app.get("/healthz")
    async def health() -> dict[str, Any]:
        return await service.health()

    from query_api import mcp_server  # imports this module

    mcp_server.mount(app, service, auth)
    mount_ui(app)  # the memory page at /ui/ (query_api/ui)
    return app
