"""A small Python client of the jevmem HTTP API, for agent code that is not an MCP client.

``MemoryClient`` (blocking) and ``AsyncMemoryClient`` (asyncio) wrap the endpoints an agent needs:
``remember`` (``POST /v1/observations``), ``recall`` (``POST /v1/recall``, one question over
several or all of the key's conversations, or one user's), ``query`` (``POST /v1/query``, one
conversation, with the full trace), ``forget`` (``DELETE``), ``conversations``, ``nodes`` (a
conversation's memories in order). The tenant comes from the API key.

``recall`` and ``query`` take ``format``: ``"json"`` (default: every field of every item) or
``"prompt"`` (the server's compact lines, ``{question, lines, text, ...}``, ready for a prompt).
``user_id`` (``remember``: stamped on items without one; ``recall``: search only that user's
memory) is sent only when given, so a server without user scopes sees the requests it knows.

Contract: results are the API's JSON as plain dicts. ``remember`` returns the per-item report
(``accepted``, ``rejected``, ``errors``) whether or not some items were refused (HTTP 422 with a
report is not an error here); ``forget`` returns the API's result, ``{"status": "not_found"}``
included. Every other non-2xx answer raises :class:`MemoryApiError` carrying the status, the
API's ``detail`` and, for 502/503, the ``Retry-After`` seconds; ``nodes`` of a conversation the
tenant does not have is an empty list. Observations may be dicts or
:class:`~topology.schemas.Observation` models; ``tenant_id`` is dropped from them (the key decides).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal
from urllib.parse import quote

import httpx

from topology.schemas import Observation


class MemoryApiError(Exception):
    """A refused or failed request: ``status``, ``detail`` and ``retry_after`` (seconds or None)."""

    def __init__(self, status: int, detail: Any, retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status, self.detail, self.retry_after = status, detail, retry_after


Format = Literal["json", "prompt"]
"""How ``recall`` and ``query`` answer: every field (``json``) or the prompt lines (``prompt``)."""


def _items(observations: Sequence[Observation | dict[str, Any]], conversation_id: str | None,
           user_id: str | None = None) -> list[dict[str, Any]]:
    out = []
    for o in observations:
        item = o.model_dump(mode="json", exclude={"tenant_id"}) if isinstance(o, Observation) else dict(o)
        item.pop("tenant_id", None)
        if item.get("user_id") is None:
            item.pop("user_id", None)  # sent only when there is one
        if conversation_id is not None:
            item.setdefault("conversation_id", conversation_id)
        if user_id is not None:
            item.setdefault("user_id", user_id)
        out.append(item)
    return out


def _result(r: httpx.Response, ok: tuple[int, ...] = ()) -> Any:
    if r.is_success or r.status_code in ok:
        return r.json()
    try:
        detail = r.json().get("detail", r.text)
    except ValueError:
        detail = r.text
    retry = r.headers.get("retry-after")
    raise MemoryApiError(r.status_code, detail, float(retry) if retry and retry.isdigit() else None)


def _nodes(r: httpx.Response) -> list[dict[str, Any]]:
    if r.status_code == 404:
        return []
    out: list[dict[str, Any]] = _result(r)
    return out


def _conv(conversation_id: str) -> str:
    return quote(conversation_id, safe="")


def _recall_body(question: str, conversation_ids: Sequence[str] | None, top_k: int, user_id: str | None,
                 format: Format) -> dict[str, Any]:
    body: dict[str, Any] = {"question": question, "top_k": top_k, "format": format}
    if conversation_ids is not None:
        body["conversation_ids"] = list(conversation_ids)
    if user_id is not None:
        body["user_id"] = user_id
    return body


def _query_body(conversation_id: str, question: str, top_k: int, answer: bool, format: Format) -> dict[str, Any]:
    return {"conversation_id": conversation_id, "question": question, "top_k": top_k, "answer": answer,
            "format": format}


def _forget_path(conversation_id: str, event_id: str | None) -> str:
    path = f"/v1/conversations/{_conv(conversation_id)}"
    return path if event_id is None else f"{path}/observations/{quote(event_id, safe='')}"


class MemoryClient:
    """Blocking client. ``base_url`` like ``http://127.0.0.1:8080``; use as a context manager or
    call :meth:`close`."""

    def __init__(self, base_url: str, api_key: str, timeout: float = 60.0, **httpx_options: Any) -> None:
        self._http = httpx.Client(base_url=base_url, timeout=timeout,
                                  headers={"Authorization": f"Bearer {api_key}"}, **httpx_options)

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def remember(self, observations: Sequence[Observation | dict[str, Any]], conversation_id: str | None = None,
                 user_id: str | None = None) -> Any:
        """Write observations (each needs ``event_id`` and ``content``; ``conversation_id`` and
        ``user_id`` fill items without one). Returns ``{"accepted", "rejected", "errors"}``."""
        return _result(self._http.post("/v1/observations", json=_items(observations, conversation_id, user_id)),
                       ok=(422,))

    def recall(self, question: str, conversation_ids: Sequence[str] | None = None, top_k: int = 10,
               user_id: str | None = None, format: Format = "json") -> Any:
        """Evidence from the given conversations, or all of the key's (only ``user_id``'s memory
        when given); merged, best first. ``format="prompt"``: ``{question, lines, text}``."""
        return _result(self._http.post("/v1/recall", json=_recall_body(question, conversation_ids, top_k, user_id,
                                                                        format)))

    def query(self, conversation_id: str, question: str, top_k: int = 10, answer: bool = False,
              format: Format = "json") -> Any:
        """Evidence from one conversation with the full trace (and an answer with System Two);
        ``format="prompt"``: ``{question, lines, text, answer, trace_id}``."""
        return _result(self._http.post("/v1/query", json=_query_body(conversation_id, question, top_k, answer, format)))

    def forget(self, conversation_id: str, event_id: str | None = None) -> Any:
        """Forget one observation or a whole conversation (admin key)."""
        return _result(self._http.delete(_forget_path(conversation_id, event_id)), ok=(404,))

    def conversations(self) -> Any:
        """``[{"conversation_id", "nodes"}]`` of the key's tenant."""
        return _result(self._http.get("/v1/conversations"))

    def nodes(self, conversation_id: str) -> list[dict[str, Any]]:
        """The conversation's memory nodes by seq (without embeddings); [] when it has none."""
        return _nodes(self._http.get(f"/v1/conversations/{_conv(conversation_id)}/nodes"))


class AsyncMemoryClient:
    """The asyncio twin of :class:`MemoryClient` (same methods, awaited)."""

    def __init__(self, base_url: str, api_key: str, timeout: float = 60.0, **httpx_options: Any) -> None:
        self._http = httpx.AsyncClient(base_url=base_url, timeout=timeout,
                                       headers={"Authorization": f"Bearer {api_key}"}, **httpx_options)

    async def __aenter__(self) -> AsyncMemoryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def remember(self, observations: Sequence[Observation | dict[str, Any]], conversation_id: str | None = None,
                       user_id: str | None = None) -> Any:
        return _result(await self._http.post("/v1/observations", json=_items(observations, conversation_id, user_id)),
                       ok=(422,))

    async def recall(self, question: str, conversation_ids: Sequence[str] | None = None, top_k: int = 10,
                     user_id: str | None = None, format: Format = "json") -> Any:
        return _result(await self._http.post("/v1/recall", json=_recall_body(question, conversation_ids, top_k,
                                                                              user_id, format)))

    async def query(self, conversation_id: str, question: str, top_k: int = 10, answer: bool = False,
                    format: Format = "json") -> Any:
        return _result(await self._http.post("/v1/query", json=_query_body(conversation_id, question, top_k, answer,
                                                                            format)))

    async def forget(self, conversation_id: str, event_id: str | None = None) -> Any:
        return _result(await self._http.delete(_forget_path(conversation_id, event_id)), ok=(404,))

    async def conversations(self) -> Any:
        return _result(await self._http.get("/v1/conversations"))

    async def nodes(self, conversation_id: str) -> list[dict[str, Any]]:
        return _nodes(await self._http.get(f"/v1/conversations/{_conv(conversation_id)}/nodes"))
