"""The HTTP API (FastAPI; OpenAPI at /docs and /openapi.json).

Every endpoint except ``GET /healthz`` needs ``Authorization: Bearer <api key>``: 401 without a
valid key, 403 when the key lacks the endpoint's scope or the request names another tenant. The
tenant always comes from the key; bodies may omit ``tenant_id``.

- ``POST /v1/observations`` (``ingest``): a JSON array of observations, at most
  ``limits.MAX_BATCH_ITEMS`` (413 above). Each item is validated on its own: valid items are
  written, invalid ones go to the tenant's dead letters with their reason, and the response is 422
  listing the per-item reasons whenever any item was invalid (200 otherwise). A body that is not
  JSON (400) or not an array (422) is dead-lettered whole. Accepted items are never lost.
- ``POST /v1/query`` (``query``): evidence (and an answer when System Two is configured) with the
  trace; 404 for a conversation the tenant has no memory of.
- ``POST /v1/recall`` (``query``): evidence from all of the tenant's conversations, one user's
  (``user_id``) or a list, ranked in one search, each item with its conversation (:mod:`query_api.recall`).
- ``/mcp``: the Model Context Protocol tools over streamable HTTP (:mod:`query_api.mcp_server`).
- ``GET /v1/conversations`` (``query``): the tenant's conversations with node counts.
- ``GET /v1/conversations/{conversation}/nodes|edges|decisions`` (``query``; nodes and edges also under
  ``/v1/tenants/{tenant}/...``, 403 for another tenant); 404 for a conversation the tenant has no
  memory of, naming ``GET /v1/conversations``.
- ``DELETE /v1/conversations/{conversation}`` and ``.../observations/{event_id}`` (``admin``):
  200 with what was removed (embedded), 202 once the request is on the log (distributed), 404
  when there was nothing to forget.
- ``GET /v1/dead-letters`` (``admin``): the key's tenant's dead letters only.
- ``GET /ui/`` (no key): the memory page (:mod:`query_api.ui`); its API calls need a key.

Any request body is capped at ``limits.MAX_BODY_BYTES`` (413). A store or broker outage answers
503 with ``Retry-After``; a System One or System Two service failure answers 502 (with
``Retry-After``); no input yields a 500. Errors are answered from one table
(:data:`query_api.service.ERRORS`), the MCP server's too. Every answer is in the OpenAPI
document: a failure's body is :class:`Problem` (``detail``: a message), a 422's is
:class:`ValidationProblem` (``detail``: the fields at fault), except the per-item 422 of
``POST /v1/observations`` (:class:`IngestResponse`).
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Path, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field, ValidationError, field_validator
from starlette.types import ASGIApp, Message, Receive, Send
from starlette.types import Scope as AsgiScope

from query_api import mcp_server
from query_api import service as svc
from query_api.auth import Authenticator, Principal, require
from query_api.items import ItemError, safe
from query_api.recall import AS_OF_HELP, FORMAT_HELP, EvidenceFormat, PromptEvidence, Recall, RecallRequest
from query_api.retrieval.controller import Retrieval
from query_api.service import ForgetAccepted, ForgetApplied, ForgetResult, MemoryService
from query_api.ui import mount_ui
from topology import limits, observe
from topology.errors import InvalidRequest, JevMemError
from topology.schemas import ConsolidationDecision, DeadLetter, EdgeEvent, Ident, MemoryNode, Observation

__all__ = ["MemoryService", "create_app", "routes"]  # MemoryService: the port, from query_api.service

log = logging.getLogger("jevmem.api")
LISTING = "GET /v1/conversations"
"""How an HTTP caller lists its conversations (named in the 404 for an unknown one)."""
ConvId = Annotated[str, Path(min_length=1, max_length=limits.MAX_ID)]
TenantId = Annotated[str, Path(min_length=1, max_length=limits.MAX_ID)]
EventId = Annotated[str, Path(min_length=1, max_length=limits.MAX_ID)]


class Problem(BaseModel):
    """The body of every failure but a 422: what went wrong, for a person."""

    detail: str


class FieldError(BaseModel):
    """One field at fault: where (``loc``: "body", "path", "query", then names and indexes), why,
    and the kind of error (pydantic's error type)."""

    loc: list[str | int]
    msg: str
    type: str


class ValidationProblem(BaseModel):
    """The body of a 422 (FastAPI's validation error shape)."""

    detail: list[FieldError]


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
    format: EvidenceFormat = Field(default="json", description=FORMAT_HELP)
    as_of: datetime | None = Field(default=None, description=AS_OF_HELP)

    @field_validator("as_of")
    @classmethod
    def _utc(cls, v: datetime | None) -> datetime | None:
        return None if v is None else limits.utc_in_range(v)


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


#: Where OAuth clients (MCP clients among them) discover the token issuer (RFC 9728).
RESOURCE_METADATA = "/.well-known/oauth-protected-resource"


class Challenge:
    """ASGI middleware: every 401 names the protected-resource metadata in its
    ``WWW-Authenticate`` header, so an OAuth client learns where to get a token."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        host = headers.get(b"host", b"localhost").decode("latin-1")
        url = f"{scope.get('scheme', 'http')}://{host}{RESOURCE_METADATA}"

        async def challenged(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 401:
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"www-authenticate"]
                message = {**message, "headers": [*kept, (b"www-authenticate", f'Bearer resource_metadata="{url}"'.encode())]}
            await send(message)

        await self.app(scope, receive, challenged)


def _json(model: BaseModel) -> Response:
    """``model`` as the 200 answer, serialised once by pydantic (the body FastAPI would make of it
    through the route's ``response_model``, without validating and converting it again)."""
    return Response(model.model_dump_json(), media_type="application/json")


def _too_large(limit: int) -> JSONResponse:
    return JSONResponse({"detail": f"request body larger than {limit} bytes"}, status_code=413)


def _parse(body: bytes) -> Any:
    """JSON body; lone-surrogate escapes and out-of-range numbers parse (the items holding them are
    then refused one by one). Raises ValueError for anything that is not JSON."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return json.loads(body)  # ValueError (JSONDecodeError, UnicodeDecodeError) when not JSON


_WHY: dict[int, str] = {
    400: "The body is not JSON.",
    401: "No valid API key (`Authorization: Bearer <key>`).",
    403: "The key lacks this endpoint's scope, or the request names another tenant.",
    404: "The tenant has no memory of this conversation; `GET /v1/conversations` lists the known ones.",
    413: "The body is over the byte limit, or holds too many items.",
    422: "The request is invalid: `detail` lists the fields at fault.",
    502: "System One or System Two failed; retry after `Retry-After` seconds.",
    503: "A store or the broker is unavailable; retry after `Retry-After` seconds.",
}
_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"schema": {"type": "string"}}},
    502: {"Retry-After": {"schema": {"type": "integer"}}},
    503: {"Retry-After": {"schema": {"type": "integer"}}},
}


def documented(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for failure ``codes`` (bodies :class:`Problem`, or
    :class:`ValidationProblem` for 422)."""
    return {c: {"model": ValidationProblem if c == 422 else Problem, "description": _WHY[c],
                **({"headers": _HEADERS[c]} if c in _HEADERS else {})} for c in codes}


def _field_errors(errors: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"loc": [str(p) for p in e.get("loc", ())], "msg": safe(str(e.get("msg", ""))),
             "type": str(e.get("type", "value_error"))} for e in errors]


def invalid(message: str, where: Sequence[str | int] = ("body",), kind: str = "value_error") -> JSONResponse:
    """A 422 in the :class:`ValidationProblem` shape for one field at fault."""
    return JSONResponse({"detail": [{"loc": [str(p) for p in where], "msg": safe(message), "type": kind}]},
                        status_code=422)


def error_response(exc: JevMemError) -> JSONResponse:
    """The response to ``exc``, from :func:`query_api.service.answer_for` (a 500 for an error
    outside the table: a misconfiguration, not the caller's to fix)."""
    answer = svc.answer_for(exc, LISTING)
    if answer is None:
        log.error("unanswerable error: %s", exc, exc_info=exc)
        return JSONResponse({"detail": "internal error"}, status_code=500)
    if answer.status >= 500:
        log.warning("%s", answer.message)
    if answer.status == 422:
        where = exc.where if isinstance(exc, InvalidRequest) and exc.where else ("body",)
        return invalid(answer.message, where)
    return JSONResponse({"detail": answer.message}, status_code=answer.status, headers=dict(answer.headers))


def _forget_status(result: ForgetResult) -> int:
    if isinstance(result, ForgetAccepted):
        return 202
    return 200 if result.found else 404


def routes(service: MemoryService, auth: Authenticator) -> APIRouter:
    """The ``/v1`` endpoints over ``service``; ``auth`` checks every request's key."""
    bearer = HTTPBearer(auto_error=False, description="An API key from `jevmem keys create`.")
    router = APIRouter(prefix="/v1", responses=documented(401, 403, 503))

    def caller(scope: str) -> Callable[..., Awaitable[Principal]]:
        async def dependency(cred: HTTPAuthorizationCredentials | None = Security(bearer)) -> Principal:
            who = await auth.principal(f"Bearer {cred.credentials}" if cred is not None else None)
            require(who, scope)  # type: ignore[arg-type]
            return who
        return dependency

    ingest_key = Depends(caller("ingest"))
    query_key = Depends(caller("query"))
    admin_key = Depends(caller("admin"))


    async def refuse_body(body: bytes, who: Principal, status: int, reason: str) -> JSONResponse:
        await svc.dead_letter(service, [DeadLetter.of(body, reason, "http:body", who.tenant_id)], "http")
        return invalid(reason, kind="list_type") if status == 422 else JSONResponse({"detail": reason}, status)

    @router.post("/observations", response_model=IngestResponse, openapi_extra={
        "requestBody": {"required": True, "content": {"application/json": {"schema": _observation_schema()}}}},
        responses={**documented(400, 413), 422: {
            "description": "Some items were invalid (the rest were accepted), or the body is not an array.",
            "content": {"application/json": {"schema": {"anyOf": [
                {"$ref": "#/components/schemas/IngestResponse"},
                {"$ref": "#/components/schemas/ValidationProblem"}]}}}}})
    async def ingest(request: Request, who: Principal = ingest_key) -> JSONResponse:
        body = await request.body()
        try:
            items = _parse(body)
        except ValueError as exc:
            return await refuse_body(body, who, 400, f"body is not JSON: {safe(str(exc))[:300]}")
        if not isinstance(items, list):
            return await refuse_body(body, who, 422, f"body must be a JSON array of observations, got {type(items).__name__}")
        done = await svc.ingest(service, who, items, source="http", whole="http:body", raw=body)
        trace_id = observe.TRACE_ID.get()
        log.info("ingest", extra={"accepted": len(done.accepted), "rejected": len(done.errors),
                                  "events": [o.event_id for o in done.accepted[:50]]})
        out = IngestResponse(accepted=len(done.accepted), rejected=len(done.errors), errors=done.errors,
                             trace_id=trace_id)
        return JSONResponse(out.model_dump(), status_code=422 if done.errors else 200)

    @router.post("/query", response_model=QueryResponse | PromptEvidence, responses=documented(400, 404, 413, 422, 502))
    async def query(req: QueryRequest, who: Principal = query_key) -> Response:
        asked = await svc.ask(service, who, req.conversation_id, req.question, req.top_k, tenant_id=req.tenant_id,
                              as_of=req.as_of, answer=req.answer)
        res, answer = asked.found, asked.answer
        log.info("query", extra={"evidence": len(res.evidence), "controller_calls": res.trace.controller_calls,
                                 "stop": res.trace.stop_reason})
        if req.format == "prompt":
            return _json(PromptEvidence.of(req.question, res.evidence, answer=answer, trace_id=observe.TRACE_ID.get()))
        return _json(QueryResponse(question=res.question, evidence=res.evidence, trace=res.trace, answer=answer,
                                   trace_id=observe.TRACE_ID.get()))

    @router.post("/recall", response_model=Recall | PromptEvidence, responses=documented(400, 413, 422, 502))
    async def recall_all(req: RecallRequest, who: Principal = query_key) -> Response:
        found = (await svc.ask_across(service, who, req.question, req.top_k, req.conversation_ids, req.user_id,
                                      req.as_of, answer=False)).found
        return _json(PromptEvidence.of(req.question, found.evidence) if req.format == "prompt" else found)

    @router.get("/conversations", response_model=list[Conversation])
    async def conversations(who: Principal = query_key) -> list[Conversation]:
        return [Conversation(conversation_id=c, nodes=n) for c, n in await svc.listed(service, who)]

    reads = documented(404, 422)

    @router.get("/conversations/{conversation_id}/decisions", response_model=list[ConsolidationDecision],
                responses=reads)
    async def decisions(conversation_id: ConvId, who: Principal = query_key) -> list[ConsolidationDecision]:
        return await svc.decisions(service, await svc.scope_for(service, who, conversation_id), who)

    @router.get("/conversations/{conversation_id}/nodes", response_model=list[MemoryNode], responses=reads)
    async def nodes(conversation_id: ConvId, who: Principal = query_key) -> list[MemoryNode]:
        return await svc.nodes(service, await svc.scope_for(service, who, conversation_id), who)

    @router.get("/conversations/{conversation_id}/edges", response_model=list[EdgeEvent], responses=reads)
    async def edges(conversation_id: ConvId, who: Principal = query_key) -> list[EdgeEvent]:
        return await svc.edges(service, await svc.scope_for(service, who, conversation_id), who)

    @router.get("/tenants/{tenant_id}/conversations/{conversation_id}/nodes", response_model=list[MemoryNode],
                responses=reads)
    async def tenant_nodes(tenant_id: TenantId, conversation_id: ConvId, who: Principal = query_key) -> list[MemoryNode]:
        return await svc.nodes(service, await svc.scope_for(service, who, conversation_id, tenant_id), who)

    @router.get("/tenants/{tenant_id}/conversations/{conversation_id}/edges", response_model=list[EdgeEvent],
                responses=reads)
    async def tenant_edges(tenant_id: TenantId, conversation_id: ConvId, who: Principal = query_key) -> list[EdgeEvent]:
        return await svc.edges(service, await svc.scope_for(service, who, conversation_id, tenant_id), who)

    forget_responses: dict[int | str, dict[str, Any]] = {
        200: {"model": ForgetApplied, "description": "Forgotten (embedded): what was removed."},
        202: {"model": ForgetAccepted, "description": "Accepted (distributed mode): applied by the conversation's "
                                                      "worker, in order."},
        404: {"model": ForgetApplied, "description": "Nothing to forget (`status` is `not_found`)."},
        **documented(422)}

    def forgotten(result: ForgetResult) -> JSONResponse:
        return JSONResponse(result.model_dump(), status_code=_forget_status(result))

    @router.delete("/conversations/{conversation_id}", response_model=None, responses=forget_responses)
    async def forget_conversation(conversation_id: ConvId, who: Principal = admin_key) -> JSONResponse:
        return forgotten(await svc.forget(service, who, conversation_id, None))

    @router.delete("/conversations/{conversation_id}/observations/{event_id}", response_model=None,
                   responses=forget_responses)
    async def forget_observation(conversation_id: ConvId, event_id: EventId, who: Principal = admin_key) -> JSONResponse:
        problem = limits.text_problem(event_id, control=True)
        if problem is not None:
            raise InvalidRequest(f"event_id {problem}", where=("path", "event_id"))
        return forgotten(await svc.forget(service, who, conversation_id, event_id))

    @router.get("/dead-letters", response_model=list[DeadLetter], responses=documented(422))
    async def dead_letters(limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                           who: Principal = admin_key) -> list[DeadLetter]:
        return await svc.dead_letters(service, who, limit)

    return router


def create_app(service: MemoryService, auth: Authenticator, started: Callable[[], None] | None = None) -> FastAPI:
    """The API over ``service`` (the ``/v1`` :func:`routes`, ``/healthz``, the MCP tools at
    ``/mcp`` and the memory page at ``/ui/``); ``auth`` checks every request's key. ``started``
    is called once the service has started, before the first request (``jevmem serve``:
    ``jevmem.heap.settle``)."""
    @asynccontextmanager
    async def lifespan(_: FastAPI):  # type: ignore[no-untyped-def]
        await service.start()
        if started is not None:
            started()
        try:
            yield
        finally:
            await service.stop()
            await auth.store.close()

    app = FastAPI(title="jevmem", version="0.1.0", lifespan=lifespan,
                  description="Streaming System-One memory for AI agents.")
    app.add_middleware(BodyLimit)
    app.add_middleware(TraceIds)
    tokens = auth.tokens
    if tokens is not None:  # bearer tokens from an issuer: say where to get one
        app.add_middleware(Challenge)
        metadata = tokens.resource_metadata()

        @app.get(RESOURCE_METADATA, include_in_schema=False)
        @app.get(RESOURCE_METADATA + "/mcp", include_in_schema=False)
        async def resource_metadata() -> dict[str, Any]:
            return metadata

    @app.exception_handler(JevMemError)
    async def _answer(_: Request, exc: JevMemError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _422(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _field_errors(exc.errors())}, status_code=422)

    @app.exception_handler(ValidationError)
    async def _422_ids(_: Request, exc: ValidationError) -> JSONResponse:
        return JSONResponse({"detail": _field_errors(exc.errors())}, status_code=422)

    app.include_router(routes(service, auth))

    @app.get("/healthz")
    async def health() -> dict[str, Any]:
        return await service.health()

    mcp_server.mount(app, service, auth)
    mount_ui(app)  # the memory page at /ui/ (query_api/ui)
    return app
