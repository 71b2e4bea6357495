"""jevmem's recall in LangChain: a ``BaseRetriever`` (evidence as ``Document``s) and a tool.

Both recall over the given ``conversation_ids``, or all of the key's tenant's, and only
``user_id``'s memory when given (every conversation whose observations carry that user), best
first, ``top_k`` items (at most 50: the API's cap); the API key needs the ``query`` scope. The
user and the conversations are configuration, not something the model chooses.

``JevmemRetriever(base_url=..., api_key=..., conversation_ids=None, user_id=None, top_k=10)``:
``invoke(question)`` (or ``ainvoke``) returns one document per piece of evidence, superseded ones
included, from one ``POST /v1/recall`` request on a client the retriever keeps. ``page_content``
is the memory's text; ``metadata`` carries ``conversation_id``, ``node_id``, ``event_id``,
``seq``, ``speaker``, ``observed_at`` (ISO 8601 or None), ``score``, ``superseded_by`` (the newer
memories' texts), ``valid_from`` and ``valid_until`` (ISO 8601 or None: when it became current,
when it stopped being current) and ``prompt_line``: the line System Two reads for it (recording
date, grounded event dates, speaker, text, what superseded it and when), made from those fields
by the server's own code (:meth:`~query_api.retrieval.controller.Evidence.for_prompt`), so it
equals the line of ``format: "prompt"``.

``JevmemRecallTool(base_url=..., api_key=..., conversation_ids=None, user_id=None, top_k=10)``: a
``BaseTool`` named ``recall_memory`` whose one argument is ``question``; it returns the server's
prompt text (the lines joined by newlines), or :data:`NO_MEMORY` when nothing was found.
"""

from __future__ import annotations

from typing import Any

from jevmem.integrations import missing_extra

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        AsyncCallbackManagerForToolRun,
        CallbackManagerForRetrieverRun,
        CallbackManagerForToolRun,
    )
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.tools import BaseTool
    from langchain_core.tools.base import ArgsSchema
except ModuleNotFoundError as exc:  # pragma: no cover - tested by simulating the missing module
    raise missing_extra(exc, "langchain") from exc

from pydantic import BaseModel, Field, PrivateAttr, SecretStr

from jevmem.client import AsyncMemoryClient, Format, MemoryClient
from query_api.retrieval.controller import Evidence

#: What the tool answers when recall found nothing.
NO_MEMORY = "No memories found."


def documents(recall: dict[str, Any]) -> list[Document]:
    """The documents of a recall's JSON answer, one per piece of evidence, in its order."""
    out = []
    for ev in recall["evidence"]:
        line = Evidence.model_validate(ev).for_prompt()
        out.append(Document(page_content=ev["content"], metadata={
            "conversation_id": ev["conversation_id"], "node_id": ev["node_id"], "event_id": ev["event_id"],
            "seq": ev["seq"], "speaker": ev.get("speaker"), "observed_at": ev.get("observed_at"), "score": ev["score"],
            "superseded_by": list(ev.get("superseded_by") or []), "valid_from": ev.get("valid_from"),
            "valid_until": ev.get("valid_until"), "prompt_line": line}))
    return out


class _Recall(BaseModel):
    """Where recall looks and how much it returns (shared by the retriever and the tool)."""

    base_url: str
    api_key: SecretStr
    conversation_ids: list[str] | None = None
    user_id: str | None = None
    top_k: int = Field(default=10, ge=1, le=50)
    timeout: float = 60.0

    def _recall(self, client: MemoryClient, question: str, format: Format) -> Any:
        return client.recall(question, self.conversation_ids, self.top_k, user_id=self.user_id, format=format)

    async def _arecall(self, client: AsyncMemoryClient, question: str, format: Format) -> Any:
        return await client.recall(question, self.conversation_ids, self.top_k, user_id=self.user_id, format=format)


class JevmemRetriever(BaseRetriever, _Recall):
    """Recall from a running ``jevmem serve`` with an API key that has the ``query`` scope: one
    request per retrieve, on a client made on first use and kept (one for ``invoke``, one for
    ``ainvoke``; ``close``/``aclose`` release them)."""

    _client: MemoryClient | None = PrivateAttr(default=None)
    _aclient: AsyncMemoryClient | None = PrivateAttr(default=None)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        if self._client is None:
            self._client = MemoryClient(self.base_url, self.api_key.get_secret_value(), self.timeout)
        return documents(self._recall(self._client, query, "json"))

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun) -> list[Document]:
        if self._aclient is None:
            self._aclient = AsyncMemoryClient(self.base_url, self.api_key.get_secret_value(), self.timeout)
        return documents(await self._arecall(self._aclient, query, "json"))

    def close(self) -> None:
        """Close the kept synchronous client (a later ``invoke`` opens a new one)."""
        if self._client is not None:
            self._client.close()
            self._client = None

    async def aclose(self) -> None:
        """Close both kept clients."""
        self.close()
        if self._aclient is not None:
            await self._aclient.close()
            self._aclient = None


class RecallArgs(BaseModel):
    """The tool's argument."""

    question: str = Field(min_length=1, description="What to look up: a question about the user or earlier "
                                                    "conversations, in plain words.")


class JevmemRecallTool(BaseTool, _Recall):
    """A LangChain tool that recalls memory and returns the server's prompt lines as text."""

    name: str = "recall_memory"
    description: str = ("Look up what the user said in earlier conversations that bears on a question. Returns "
                        "memory lines, best first, each with the date it was recorded, the dates it speaks of, "
                        "who said it, and what superseded it.")
    args_schema: ArgsSchema | None = RecallArgs

    def _run(self, question: str, run_manager: CallbackManagerForToolRun | None = None) -> str:
        with MemoryClient(self.base_url, self.api_key.get_secret_value(), self.timeout) as client:
            return str(self._recall(client, question, "prompt")["text"]) or NO_MEMORY

    async def _arun(self, question: str, run_manager: AsyncCallbackManagerForToolRun | None = None) -> str:
        async with AsyncMemoryClient(self.base_url, self.api_key.get_secret_value(), self.timeout) as client:
            return str((await self._arecall(client, question, "prompt"))["text"]) or NO_MEMORY
