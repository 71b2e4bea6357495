"""An OpenAI Agents SDK ``Session`` backed by jevmem: the agent's conversation history is memory.

``JevmemSession(session_id, base_url=..., api_key=..., user_id=None, searchable_tool_items=False)``
keeps the session's items as observations of the API key's tenant (the key needs the ``ingest``
and ``query`` scopes, and ``admin`` for ``pop_item`` and ``clear_session``). Each item is one
observation whose metadata keeps the item whole (``metadata["openai_item"]``, at most 16 KB as
JSON: a larger item is refused with ``ValueError``) and its place in the session
(``metadata["openai_order"]``, microseconds, increasing).

Contract:

* Messages (items of type ``message``, or with no type) are observations of the conversation
  ``session_id`` whose content is the message text, so recall finds what was said.
* Every other item (function calls and their outputs, other tool calls, reasoning) is history,
  not memory: it is kept in the companion conversation ``"<session_id>:tools"`` as observations
  with ``recall: false``, which no recall returns (an agent's own memory-search call cannot come
  back as the answer to itself), whatever the key: one of the whole tenant or one limited to the
  session's user (which stamps its user on them). ``searchable_tool_items=True`` keeps them with
  the messages instead, searchable (content: a call's name and arguments, an output).
* ``get_items`` returns every item, messages and tool items, in the order they were added;
  ``pop_item`` forgets the latest; ``clear_session`` forgets both conversations.
* ``user_id``: stamped on every observation the session writes, tool items included, so a
  user's memory spans all of their sessions; :meth:`JevmemSession.recall` searches that user's
  memory, or only this session's without a ``user_id``.

Consistency: embedded, an added item is readable when ``add_items`` returns; distributed, once a
worker wrote it. Event loops: a client per running loop, so one session serves several
``asyncio.run`` calls; :meth:`JevmemSession.close` closes the running loop's client.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from jevmem.integrations import missing_extra

try:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit
except ModuleNotFoundError as exc:  # pragma: no cover - tested by simulating the missing module
    raise missing_extra(exc, "openai-agents") from exc

from jevmem.client import Format
from jevmem.integrations._calls import LoopClients

_META = "openai_item"
_ORDER = "openai_order"
#: The suffix of the conversation that keeps a session's tool items.
TOOLS_SUFFIX = ":tools"
#: The longest session id (the API's 200-character ids, less the suffix).
MAX_SESSION_ID = 200 - len(TOOLS_SUFFIX)
#: The largest item kept (the API's metadata limit, less the envelope).
MAX_ITEM_BYTES = 16_000


def text_of(item: dict[str, Any]) -> str:
    """The searchable text of an item: its message text, else its call or output, else its JSON."""
    content = item.get("content")
    if isinstance(content, str) and content.strip():
        return content
    if isinstance(content, list):
        parts = [p.get("text") or p.get("refusal") or "" for p in content if isinstance(p, dict)]
        if any(s.strip() for s in parts):
            return "\n".join(s for s in parts if s)
    if item.get("type") == "function_call":
        return f"{item.get('name', 'tool')}({item.get('arguments', '')})"
    output = item.get("output")
    if isinstance(output, str) and output.strip():
        return output
    return json.dumps(item, ensure_ascii=False, sort_keys=True)


def is_message(item: dict[str, Any]) -> bool:
    """Whether ``item`` is a message (what was said) rather than a tool call, output or reasoning."""
    return item.get("type") in (None, "message")


def observation_of(item: dict[str, Any], order: int) -> dict[str, Any]:
    """The observation that keeps ``item`` at place ``order`` (a new event id; role from the item)."""
    if len(json.dumps(item, ensure_ascii=False).encode()) > MAX_ITEM_BYTES:
        raise ValueError(f"a session item larger than {MAX_ITEM_BYTES} bytes as JSON cannot be kept")
    role = str(item.get("role") or item.get("type") or "item")
    return {"event_id": uuid.uuid4().hex, "content": text_of(item), "role": role,
            "speaker": role if item.get("role") else None,
            "observed_at": datetime.now(UTC).isoformat(), "metadata": {_META: item, _ORDER: order}}


def _place(node: dict[str, Any]) -> tuple[int, int]:
    order = (node.get("metadata") or {}).get(_ORDER)
    if not isinstance(order, int):  # written before the order was kept: its write time
        when = node.get("observed_at")
        order = int(datetime.fromisoformat(when).timestamp() * 1_000_000) if when else 0
    return order, int(node["seq"])


def items_of(nodes: list[dict[str, Any]]) -> list[tuple[str, str, TResponseInputItem]]:
    """(conversation id, event id, item) of every node this adapter wrote, in the order added."""
    out = []
    for n in sorted(nodes, key=_place):
        item = (n.get("metadata") or {}).get(_META)
        if n.get("kind") == "observation" and isinstance(item, dict):
            out.append((n["conversation_id"], n["event_id"], item))
    return out  # type: ignore[return-value]


class JevmemSession:
    """The SDK's ``Session`` protocol over a running ``jevmem serve`` (module contract)."""

    session_settings: SessionSettings | None = None

    def __init__(self, session_id: str, base_url: str, api_key: str, timeout: float = 60.0, *,
                 user_id: str | None = None, searchable_tool_items: bool = False,
                 session_settings: SessionSettings | dict[str, Any] | None = None) -> None:
        if not session_id or len(session_id) > MAX_SESSION_ID:
            raise ValueError(f"session_id must be 1 to {MAX_SESSION_ID} characters (its tool items' conversation "
                             f"adds {TOOLS_SUFFIX!r})")
        self.session_id, self.user_id, self.searchable_tool_items = session_id, user_id, searchable_tool_items
        #: as the SDK's own sessions: ``limit`` is how many of the latest items ``get_items()`` gives
        self.session_settings = coerce_session_settings(session_settings) if session_settings is not None \
            else SessionSettings()
        self.tools_conversation = session_id + TOOLS_SUFFIX
        self._clients = LoopClients(base_url, api_key, timeout)
        self._last = 0
        self._lock = threading.Lock()

    async def close(self) -> None:
        """Close the running loop's client (others close when their ``asyncio.run`` ends)."""
        await self._clients.aclose()

    def _orders(self, n: int) -> list[int]:
        with self._lock:
            first = max(self._last + 1, time.time_ns() // 1000)
            self._last = first + n - 1
        return list(range(first, first + n))

    async def _items(self) -> list[tuple[str, str, TResponseInputItem]]:
        client = await self._clients.get()
        said, tools = await asyncio.gather(client.nodes(self.session_id), client.nodes(self.tools_conversation))
        return items_of(said + tools)

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """All items in order, or the latest ``limit`` of them (still in order); without ``limit``,
        ``session_settings.limit`` (None: all)."""
        limit = resolve_session_limit(limit, self.session_settings)
        items = [i for _, _, i in await self._items()]
        return items[-limit:] if limit is not None and limit > 0 else ([] if limit == 0 else items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Keep ``items`` after the ones already kept (messages searchable, tool items not unless
        ``searchable_tool_items``). Raises ValueError for an item over 16 KB or one jevmem refused."""
        if not items:
            return
        said: list[dict[str, Any]] = []
        tools: list[dict[str, Any]] = []
        for item, order in zip(items, self._orders(len(items)), strict=True):
            plain = dict(item)
            if self.searchable_tool_items or is_message(plain):
                said.append(observation_of(plain, order))
            else:
                tools.append({**observation_of(plain, order), "recall": False})
        client = await self._clients.get()
        for obs, conversation in ((said, self.session_id), (tools, self.tools_conversation)):
            if obs:
                report = await client.remember(obs, conversation, self.user_id)
                if report.get("rejected"):
                    raise ValueError(f"jevmem refused session items: {report.get('errors')}")

    async def pop_item(self) -> TResponseInputItem | None:
        found = await self._items()
        if not found:
            return None
        conversation, event_id, item = found[-1]
        await (await self._clients.get()).forget(conversation, event_id)
        return item

    async def clear_session(self) -> None:
        client = await self._clients.get()
        await client.forget(self.session_id)
        await client.forget(self.tools_conversation)

    async def recall(self, question: str, top_k: int = 10, format: Format = "json") -> Any:
        """Recall for ``question``: the user's memory (every conversation whose observations
        carry ``user_id``) when the session has a ``user_id``, else this session's messages. The
        API's answer: evidence (``json``) or ``{question, lines, text}`` (``prompt``)."""
        client = await self._clients.get()
        if self.user_id is not None:
            return await client.recall(question, None, top_k, user_id=self.user_id, format=format)
        return await client.recall(question, [self.session_id], top_k, format=format)
