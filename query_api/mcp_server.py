"""The Model Context Protocol server: jevmem's memory as tools for agents (stdio and HTTP).

Tools (each calls the same :class:`~query_api.service.MemoryService`, through the same
:mod:`query_api.service` functions, as the HTTP API):

- ``remember`` (scope ``ingest``): write observations. Items are validated one by one exactly as
  ``POST /v1/observations`` validates them (:class:`~topology.schemas.Observation`,
  :mod:`topology.limits`): valid items are written, invalid ones go to the tenant's dead letters
  and are listed with their reasons in the result. Before validation the tool fills two fields an
  agent rarely has: ``conversation_id`` (from the argument, for items without one) and
  ``event_id`` (a fresh ``mcp-<uuid>`` for items without one; the ids are returned, since an
  event id is the idempotency key: a retried call without ids writes the items again).
- ``recall`` (``query``): evidence for a question from one user's memory, one conversation,
  several, or all of the tenant's (:func:`query_api.recall.recall`: one search, one ranking, each
  item with its ``conversation_id``), with the contributing conversations and a short trace. The
  text the model reads is compact JSON, or, with ``format: "prompt"``, the prompt lines alone
  (``{"text": ...}`` as structured content).
- ``forget`` (``admin``): one observation (``event_id``) or a whole conversation.
- ``graph`` (``query``): a conversation's memory graph, compact (the latest ``limit`` nodes with
  content cut to :data:`CONTENT_CHARS` characters, and the edges among them); an error result
  naming the ``conversations`` tool for a conversation the tenant has no memory of.
- ``conversations`` (``query``): the tenant's conversations with node counts.

Identity: the tenant always comes from an API key (``jevmem keys create``). Over streamable HTTP
(:func:`mount`, at ``/mcp`` of ``jevmem serve``) every request needs ``Authorization: Bearer
<key>``, checked by the API's :class:`~query_api.auth.Authenticator` (401 without a valid key,
before any MCP processing). Over stdio (:func:`serve_stdio`) the key is given once, verified at
startup, and re-checked on each call through the same authenticator (so a revocation takes
effect within ``auth_cache_seconds``). A key lacking a tool's scope gets an error result naming
the scope; nothing of another tenant is ever readable.

Failures reach the agent as tool error results (``isError``), never as crashes: invalid
arguments (with the field), a missing scope, an unknown conversation, an unavailable store or
broker ("retry later"), a System One/Two failure; the text is the HTTP API's for the same error
(:func:`query_api.service.answer_for`).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime
from typing import Annotated, Any

import orjson
from fastapi import FastAPI
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Send
from starlette.types import Scope as AsgiScope

from query_api import service as svc
from query_api.auth import ApiScope, Authenticator, Principal, Unauthenticated, require
from query_api.items import ItemError
from query_api.recall import FORMAT_HELP, MAX_CONVERSATIONS, EvidenceFormat, PromptEvidence
from query_api.service import MemoryService
from topology import limits
from topology.errors import JevMemError
from topology.schemas import EdgeEvent, MemoryNode, Observation, describe

PRINCIPAL_KEY = "jevmem.principal"
"""Where the HTTP guard leaves the verified :class:`Principal` in the ASGI scope of an MCP request."""
CONTENT_CHARS = 280
"""``graph`` cuts each node's content to this many characters."""
MAX_GRAPH_NODES = 1000
INSTRUCTIONS = (
    "Long-term memory of conversations. Call `remember` with new observations (chat turns, facts, tool "
    "output) of a conversation; call `recall` with a question to get evidence (omit conversation_ids to "
    "search all of your conversations); `forget` deletes; `graph` and `conversations` inspect.")

LISTING = "the `conversations` tool"
"""How an agent lists its conversations (named in the error for an unknown one)."""

PrincipalOf = Callable[[Context[Any, Any]], Awaitable[Principal]]
"""How a tool call finds its caller (from the HTTP request, or the stdio key)."""


class Remembered(BaseModel):
    """What ``remember`` did: counts, the per-item reasons of refused items (dead-lettered), and
    the event ids of the accepted items (including those the tool assigned)."""

    accepted: int
    rejected: int
    errors: list[ItemError] = Field(default_factory=list)
    event_ids: list[str] = Field(default_factory=list)


class GraphNode(BaseModel):
    id: str
    event_id: str
    seq: int
    kind: str
    speaker: str | None
    content: str
    observed_at: datetime | None
    entities: list[str]


class GraphEdge(BaseModel):
    source: str
    target: str
    view: str
    probability: float
    label: str


class Graph(BaseModel):
    conversation_id: str
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    total_nodes: int
    total_edges: int
    truncated: bool


class ConversationInfo(BaseModel):
    conversation_id: str
    nodes: int


class Conversations(BaseModel):
    conversations: list[ConversationInfo]


@contextmanager
def tool_errors() -> Iterator[None]:
    """Expected failures become :class:`ToolError` (an ``isError`` result with the reason): the
    product's errors answered from :data:`query_api.service.ERRORS`, invalid arguments with the
    field. Others propagate (the SDK reports them as an error result too)."""
    try:
        yield
    except JevMemError as exc:
        answer = svc.answer_for(exc, LISTING)
        if answer is None:
            raise
        raise ToolError(answer.message) from exc
    except ValidationError as exc:
        raise ToolError(f"invalid arguments: {describe(exc)}") from exc


def _item_schema() -> dict[str, Any]:
    """The advertised schema of one ``remember`` item: an observation whose tenant, conversation
    and event ids may be omitted (validation itself happens per item, in :func:`validate_items`)."""
    item = Observation.model_json_schema()
    item["required"] = [f for f in item.get("required", []) if f not in {"tenant_id", "conversation_id", "event_id"}]
    return item


def compact_graph(conversation_id: str, nodes: Sequence[MemoryNode], edges: Sequence[EdgeEvent], limit: int) -> Graph:
    """The latest ``limit`` nodes (by seq, returned oldest first, content cut to
    :data:`CONTENT_CHARS`) and the edges whose both ends are among them."""
    ordered = sorted(nodes, key=lambda n: n.seq)
    kept = ordered[-limit:] if limit > 0 else []
    ids = {n.id for n in kept}
    out_edges = [GraphEdge(source=e.source, target=e.target, view=e.view, probability=round(e.probability, 4), label=e.label)
                 for e in edges if e.source in ids and e.target in ids]
    return Graph(conversation_id=conversation_id, total_nodes=len(nodes), total_edges=len(edges),
                 truncated=len(kept) < len(nodes) or len(out_edges) < len(edges), edges=out_edges,
                 nodes=[GraphNode(id=n.id, event_id=n.event_id, seq=n.seq, kind=n.kind, speaker=n.speaker,
                                  content=n.content if len(n.content) <= CONTENT_CHARS else n.content[:CONTENT_CHARS] + "…",
                                  observed_at=n.observed_at, entities=[e.name for e in n.entities])
                        for n in kept])


ConvArg = Annotated[str, Field(min_length=1, max_length=limits.MAX_ID, description="Conversation id.")]


def build_server(service: MemoryService, principal_of: PrincipalOf) -> MCPServer:
    """An MCP server whose tools act on ``service`` for the caller ``principal_of`` returns
    (checked against each tool's scope). Transport-agnostic: see :func:`serve_stdio`, :func:`mount`."""
    server: MCPServer = MCPServer("jevmem", instructions=INSTRUCTIONS, version="0.1.0", log_level="WARNING")

    async def caller(ctx: Context[Any, Any], scope: ApiScope) -> Principal:
        who = await principal_of(ctx)
        require(who, scope)
        return who

    @server.tool(description=(
        "Store observations (chat turns, facts, tool output) in long-term memory. Each item needs `content`; "
        "`speaker`, `role`, `observed_at` (ISO 8601), `entities`, `provenance`, `metadata` are optional. Items "
        "without `event_id` get one (returned). Invalid items are refused one by one with a reason; the rest are stored."),
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False))
    async def remember(
        observations: Annotated[list[Any], Field(description="Observations to store.",
                                                 json_schema_extra={"items": _item_schema()})],
        ctx: Context[Any, Any],
        conversation_id: Annotated[str | None, Field(description="Conversation of items that name none.")] = None,
    ) -> Remembered:
        with tool_errors():
            who = await caller(ctx, "ingest")
            defaults = {"event_id": lambda: f"mcp-{uuid.uuid4().hex}"}
            if conversation_id is not None:
                defaults["conversation_id"] = lambda: conversation_id
            done = await svc.ingest(service, who, observations, source="mcp", whole="mcp:call", defaults=defaults)
            return Remembered(accepted=len(done.accepted), rejected=len(done.errors), errors=done.errors,
                              event_ids=[o.event_id for o in done.accepted])

    @server.tool(name="recall", description=(
        "Recall evidence for a question from memory, best first, each item with its conversation_id. Give user_id "
        "to search one user's memory across all their conversations; omit conversation_ids to search them all. "
        "A memory a newer one replaced carries superseded_by and valid_until (its prompt line ends "
        "'(superseded on DATE by: ...)') and ranks below its replacement for a question about the present; "
        "as_of answers with what was true then."),
        annotations=ToolAnnotations(read_only_hint=True))
    async def recall_tool(
        question: Annotated[str, Field(min_length=1, max_length=limits.MAX_QUESTION, description="What to recall.")],
        ctx: Context[Any, Any],
        conversation_ids: Annotated[list[str] | None, Field(
            max_length=MAX_CONVERSATIONS, description="Only these conversations (default: all).")] = None,
        user_id: Annotated[str | None, Field(min_length=1, max_length=limits.MAX_ID, description=(
            "Only this user's memory (default: every conversation of yours)."))] = None,
        top_k: Annotated[int, Field(ge=1, le=50, description="How many pieces of evidence.")] = 10,
        format: Annotated[EvidenceFormat, Field(description=FORMAT_HELP)] = "json",
        as_of: Annotated[datetime | None, Field(description=(
            "ISO 8601 time: only memories observed by then, each current unless replaced by then."))] = None,
    ) -> CallToolResult:
        # what the model reads is the text content: the prompt lines alone for the prompt format,
        # compact JSON for the json one (the structured content carries the same for programs)
        with tool_errors():
            who = await caller(ctx, "query")
            found = (await svc.ask_across(service, who, question, top_k, conversation_ids, user_id,
                                          None if as_of is None else limits.utc_in_range(as_of), answer=False)).found
            if format == "prompt":
                text = PromptEvidence.of(question, found.evidence).text
                return CallToolResult(content=[TextContent(type="text", text=text)], structured_content={"text": text})
            out = found.model_dump(mode="json")
            return CallToolResult(content=[TextContent(type="text", text=orjson.dumps(out).decode())],
                                  structured_content=out)

    @server.tool(description="Forget one observation (event_id) or, without event_id, a whole conversation: its "
                             "nodes, edges and derived memories. Needs an admin key.",
                 annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True))
    async def forget(conversation_id: ConvArg, ctx: Context[Any, Any],
                     event_id: Annotated[str | None, Field(min_length=1, max_length=limits.MAX_ID,
                                                           description="Only this observation.")] = None) -> dict[str, Any]:
        with tool_errors():
            who = await caller(ctx, "admin")
            if event_id is not None and (problem := limits.text_problem(event_id, control=True)) is not None:
                raise ToolError(f"event_id {problem}")
            result = await svc.forget(service, who, conversation_id, event_id)
            return result.model_dump()

    @server.tool(description=f"A conversation's memory graph: its latest nodes (content cut to {CONTENT_CHARS} "
                             "characters) and the edges among them (view, probability, label).",
                 annotations=ToolAnnotations(read_only_hint=True))
    async def graph(conversation_id: ConvArg, ctx: Context[Any, Any],
                    limit: Annotated[int, Field(ge=1, le=MAX_GRAPH_NODES, description="Most nodes returned.")] = 200,
                    ) -> Graph:
        with tool_errors():
            who = await caller(ctx, "query")
            scope = await svc.scope_for(service, who, conversation_id)
            return compact_graph(conversation_id, await svc.nodes(service, scope, who), await svc.edges(service, scope, who),
                                 limit)

    @server.tool(description="Your conversations in memory, with their node counts.",
                 annotations=ToolAnnotations(read_only_hint=True))
    async def conversations(ctx: Context[Any, Any]) -> Conversations:
        with tool_errors():
            who = await caller(ctx, "query")
            return Conversations(conversations=[ConversationInfo(conversation_id=c, nodes=n)
                                                for c, n in await svc.listed(service, who)])

    return server


async def serve_stdio(service: MemoryService, auth: Authenticator, key: str,
                      started: Callable[[], None] | None = None) -> None:
    """Serve the tools over stdio (stdin/stdout) for the tenant of ``key`` until stdin closes.
    Raises :class:`Unauthenticated` before starting anything when ``key`` is not valid.
    ``started`` is called once the service has started (``jevmem mcp``: ``jevmem.heap.settle``)."""
    header = f"Bearer {key}"
    await auth.principal(header)

    async def who(_: Context[Any, Any]) -> Principal:
        return await auth.principal(header)

    server = build_server(service, who)
    await service.start()
    if started is not None:
        started()
    try:
        await server.run_stdio_async()
    finally:
        await service.stop()


async def _from_request(ctx: Context[Any, Any]) -> Principal:
    """The principal the HTTP guard verified for the request carrying this tool call."""
    request = ctx.request_context.request
    who = getattr(request, "scope", {}).get(PRINCIPAL_KEY)
    if not isinstance(who, Principal):
        raise Unauthenticated("missing Authorization: Bearer <api key>")
    return who


class _Guard:
    """ASGI app: verifies the request's bearer key (401 as the HTTP API answers it), then hands
    the request, with the principal in its scope, to the MCP session manager."""

    def __init__(self, app: Callable[[AsgiScope, Receive, Send], Awaitable[None]], auth: Authenticator) -> None:
        self.app, self.auth = app, auth

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        header = next((v.decode("latin-1") for k, v in scope.get("headers") or [] if k == b"authorization"), None)
        try:
            scope[PRINCIPAL_KEY] = await self.auth.principal(header)
        except Unauthenticated as exc:
            answer = svc.answer_for(exc, LISTING)
            assert answer is not None  # in the table
            await JSONResponse({"detail": answer.message}, status_code=answer.status, headers=dict(answer.headers))(
                scope, receive, send)
            return
        await self.app(scope, receive, send)


def mount(app: FastAPI, service: MemoryService, auth: Authenticator, path: str = "/mcp") -> None:
    """Serve the tools over streamable HTTP at ``path`` of ``app`` (stateless: every request
    stands alone and carries its key, so any replica can answer it; JSON responses). The MCP
    session manager runs inside ``app``'s lifespan, after ``service`` started.

    DNS-rebinding protection (Host/Origin allow-list) is off: every request needs a bearer key,
    which a rebound browser page does not have, and ``jevmem serve`` may sit behind any host name."""
    server = build_server(service, _from_request)
    server.streamable_http_app(stateless_http=True, json_response=True, max_request_body_size=limits.MAX_BODY_BYTES,
                               transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    manager = server.session_manager
    app.router.routes.append(Route(path, endpoint=_Guard(manager.handle_request, auth),
                                   methods=["GET", "POST", "DELETE"], include_in_schema=False))
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        async with inner(a) as state, manager.run():
            yield state

    app.router.lifespan_context = lifespan
