"""The HTTP API (FastAPI; OpenAPI at /docs and /openapi.json).

- ``POST /v1/observations``: a batch. Each item is validated on its own; valid items are written,
  invalid ones go to the dead-letter sink with their reason, and the response is 422 listing the
  per-item reasons whenever any item was invalid (200 otherwise). Accepted items are never lost.
- ``POST /v1/query``: evidence (and an answer when System Two is configured) with the trace.
- ``GET /v1/tenants/{tenant}/conversations/{conversation}/nodes|edges``, ``GET /v1/dead-letters``,
  ``GET /healthz``.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, Protocol

import orjson
from fastapi import Body, FastAPI, Path
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError

from query_api.controller import Retrieval
from topology.schemas import DeadLetter, EdgeEvent, MemoryNode, Observation, Scope, describe


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

    async def dead_letters(self, limit: int) -> list[DeadLetter]: ...

    async def health(self) -> dict[str, Any]: ...


class ItemError(BaseModel):
    index: int
    reason: str


class IngestResponse(BaseModel):
    accepted: int
    rejected: int
    errors: list[ItemError] = Field(default_factory=list)


class QueryRequest(BaseModel):
    tenant_id: str = Field(min_length=1)
    conversation_id: str = Field(min_length=1)
    question: str = Field(min_length=1, max_length=4000)
    top_k: int = Field(default=10, ge=1, le=50)
    answer: bool = False


class QueryResponse(Retrieval):
    answer: str | None = None


def create_app(service: MemoryService) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI):  # type: ignore[no-untyped-def]
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    app = FastAPI(title="jevmem", version="0.1.0", lifespan=lifespan,
                  description="Streaming System-One memory for AI agents.")

    @app.post("/v1/observations", response_model=IngestResponse,
              responses={422: {"model": IngestResponse, "description": "Some items were invalid; the rest were accepted."}})
    async def ingest(items: list[dict[str, Any]] = Body(..., description="Observation objects.")) -> JSONResponse:
        good: list[Observation] = []
        errors: list[ItemError] = []
        letters: list[DeadLetter] = []
        now = datetime.now(UTC)
        for i, raw in enumerate(items):
            try:
                good.append(Observation.model_validate(raw))
            except ValidationError as exc:
                reason = describe(exc)
                errors.append(ItemError(index=i, reason=reason))
                letters.append(DeadLetter(original=orjson.dumps(raw).decode(), reason=reason,
                                          source=f"http#{i}", received_at=now))
        if letters:
            await service.reject(letters)
        if good:
            await service.submit(good)
        body = IngestResponse(accepted=len(good), rejected=len(errors), errors=errors)
        return JSONResponse(body.model_dump(), status_code=422 if errors else 200)

    @app.post("/v1/query", response_model=QueryResponse)
    async def query(req: QueryRequest) -> QueryResponse:
        res = await service.retrieve(Scope(tenant_id=req.tenant_id, conversation_id=req.conversation_id),
                                     req.question, req.top_k)
        answer = await service.answer(req.question, [e.content for e in res.evidence]) if req.answer else None
        return QueryResponse(**res.model_dump(), answer=answer)

    @app.get("/v1/tenants/{tenant_id}/conversations/{conversation_id}/nodes", response_model=list[MemoryNode])
    async def nodes(tenant_id: str = Path(min_length=1), conversation_id: str = Path(min_length=1)) -> list[MemoryNode]:
        return await service.nodes(Scope(tenant_id=tenant_id, conversation_id=conversation_id))

    @app.get("/v1/tenants/{tenant_id}/conversations/{conversation_id}/edges", response_model=list[EdgeEvent])
    async def edges(tenant_id: str = Path(min_length=1), conversation_id: str = Path(min_length=1)) -> list[EdgeEvent]:
        return await service.edges(Scope(tenant_id=tenant_id, conversation_id=conversation_id))

    @app.get("/v1/dead-letters", response_model=list[DeadLetter])
    async def dead_letters(limit: int = 100) -> list[DeadLetter]:
        return await service.dead_letters(limit)

    @app.get("/healthz")
    async def health() -> dict[str, Any]:
        return await service.health()

    return app
