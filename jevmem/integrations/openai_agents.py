"""An OpenAI Agents SDK ``Session`` backed by jevmem: the agent's conversation history is memory.

``JevmemSession(session_id, base_url=..., api_key=...)`` keeps the session's items as observations
of the conversation ``session_id`` (of the API key's tenant; the key needs the ``ingest``, ``query``
and ``admin`` scopes): each item is one observation whose content is the item's text (message
text, a tool call's name and arguments, a tool's output), so the same history is searchable with
recall, and whose metadata keeps the item whole (``metadata["openai_item"]``, at most 16 KB as
JSON: a larger item is refused with ``ValueError``). Items come back in the order they were added.
``pop_item`` forgets the latest item; ``clear_session`` forgets the conversation.

Consistency: embedded, an added item is readable when ``add_items`` returns; distributed, once a
worker wrote it.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from agents.items import TResponseInputItem
from agents.memory.session_settings import SessionSettings

from jevmem.client import AsyncMemoryClient

_META = "openai_item"
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


def observation_of(item: dict[str, Any]) -> dict[str, Any]:
    """The observation that keeps ``item`` (a new event id; role from the item)."""
    if len(json.dumps(item, ensure_ascii=False).encode()) > MAX_ITEM_BYTES:
        raise ValueError(f"a session item larger than {MAX_ITEM_BYTES} bytes as JSON cannot be kept")
    role = str(item.get("role") or item.get("type") or "item")
    return {"event_id": uuid.uuid4().hex, "content": text_of(item), "role": role,
            "speaker": role if item.get("role") else None,
            "observed_at": datetime.now(UTC).isoformat(), "metadata": {_META: item}}


def items_of(nodes: list[dict[str, Any]]) -> list[tuple[str, TResponseInputItem]]:
    """(event id, item) of every node this adapter wrote, in write order."""
    out = []
    for n in sorted(nodes, key=lambda n: n["seq"]):
        item = (n.get("metadata") or {}).get(_META)
        if n.get("kind") == "observation" and isinstance(item, dict):
            out.append((n["event_id"], item))
    return out  # type: ignore[return-value]


class JevmemSession:
    """The SDK's ``Session`` protocol over a running ``jevmem serve``."""

    session_settings: SessionSettings | None = None

    def __init__(self, session_id: str, base_url: str, api_key: str, timeout: float = 60.0) -> None:
        self.session_id = session_id
        self._client = AsyncMemoryClient(base_url, api_key, timeout)

    async def close(self) -> None:
        await self._client.close()

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """All items in order, or the latest ``limit`` of them (still in order)."""
        items = [i for _, i in items_of(await self._client.nodes(self.session_id))]
        return items[-limit:] if limit is not None and limit > 0 else ([] if limit == 0 else items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        if not items:
            return
        report = await self._client.remember([observation_of(dict(i)) for i in items], self.session_id)
        if report.get("rejected"):
            raise ValueError(f"jevmem refused session items: {report.get('errors')}")

    async def pop_item(self) -> TResponseInputItem | None:
        found = items_of(await self._client.nodes(self.session_id))
        if not found:
            return None
        event_id, item = found[-1]
        await self._client.forget(self.session_id, event_id)
        return item

    async def clear_session(self) -> None:
        await self._client.forget(self.session_id)
