"""A LangChain ``BaseRetriever`` over jevmem's recall: evidence as ``Document``s.

``JevmemRetriever(base_url=..., api_key=..., conversation_ids=None, top_k=10)``: ``invoke(question)``
(or ``ainvoke``) recalls over the given conversations, or all of the key's tenant's (at most 50
per call: the API's cap), best first. Each document's ``page_content`` is the memory's text;
``metadata`` carries ``conversation_id``, ``node_id``, ``event_id``, ``seq``, ``speaker``,
``observed_at`` (ISO 8601 or None), ``score`` and ``prompt_line`` (the compact line System Two
reads: dates, speaker, text, what superseded it).
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import Field, SecretStr

from jevmem.client import AsyncMemoryClient, MemoryClient


def _documents(recall: dict[str, Any]) -> list[Document]:
    out = []
    for ev in recall["evidence"]:
        when = ev.get("observed_at")
        head = f"[recorded {when[:10]}] " if when else ""
        who = f"{ev['speaker']}: " if ev.get("speaker") else ""
        out.append(Document(page_content=ev["content"], metadata={
            "conversation_id": ev["conversation_id"], "node_id": ev["node_id"], "event_id": ev["event_id"],
            "seq": ev["seq"], "speaker": ev.get("speaker"), "observed_at": when, "score": ev["score"],
            "prompt_line": f"{head}{who}{ev['content']}"}))
    return out


class JevmemRetriever(BaseRetriever):
    """Recall from a running ``jevmem serve`` with an API key that has the ``query`` scope."""

    base_url: str
    api_key: SecretStr
    conversation_ids: list[str] | None = None
    top_k: int = Field(default=10, ge=1, le=50)
    timeout: float = 60.0

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        with MemoryClient(self.base_url, self.api_key.get_secret_value(), self.timeout) as client:
            return _documents(client.recall(query, self.conversation_ids, self.top_k))

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun) -> list[Document]:
        async with AsyncMemoryClient(self.base_url, self.api_key.get_secret_value(), self.timeout) as client:
            return _documents(await client.recall(query, self.conversation_ids, self.top_k))
