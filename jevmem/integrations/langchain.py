"""jevmem's recall in LangChain: a ``BaseRetriever`` (evidence as ``Document``s) and a tool.

Both recall over the given ``conversation_ids``, or all of the key's tenant's, and only
``user_id``'s memory when given (every conversation whose observations carry that user), best
first, ``top_k`` items (at most 50: the API's cap); the API key needs the ``query`` scope. The
user and the conversations are configuration, not something the model chooses.

``JevmemRetriever(base_url=..., api_key=..., conversation_ids=None, user_id=None, top_k=10)``:
``invoke(question)`` (or ``ainvoke``) returns one document per piece of evidence.
``page_content`` is the memory's text; ``metadata`` carries ``conversation_id``, ``node_id``,
``event_id``, ``seq``, ``speaker``, ``observed_at`` (ISO 8601 or None), ``score``,
``superseded_by`` (the newer memories' texts) and ``prompt_line``: the server's own line for it
(``POST /v1/recall`` with ``format: "prompt"``: recording date, grounded event dates, speaker,
text, what superseded it), the line System Two reads. The retriever asks for both answers (two
requests, concurrent with ``ainvoke``) and pairs each piece of evidence with its line; if memory
changed between the two, it asks once more, and a piece still without a line is left out, so
every document has a ``prompt_line``.

``JevmemRecallTool(base_url=..., api_key=..., conversation_ids=None, user_id=None, top_k=10)``: a
``BaseTool`` named ``recall_memory`` whose one argument is ``question``; it returns the server's
prompt text (the lines joined by newlines), or :data:`NO_MEMORY` when nothing was found.
"""

from __future__ import annotations

import asyncio
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

from pydantic import BaseModel, Field, SecretStr

from jevmem.client import AsyncMemoryClient, Format, MemoryClient

#: What the tool answers when recall found nothing.
NO_MEMORY = "No memories found."
_SUPERSEDED = " (superseded by: "


def is_line_of(line: str, evidence: dict[str, Any]) -> bool:
    """Whether ``line`` is the server's prompt line of ``evidence``: ``[dates] `` (optional), the
    speaker and the text, then `` (superseded by: ...)`` (optional)."""
    body = f"{evidence['speaker']}: {evidence['content']}" if evidence.get("speaker") else evidence["content"]
    at = line.find(body)
    while at >= 0:
        head, tail = line[:at], line[at + len(body):]
        if (not head or (head.startswith("[") and head.endswith("] "))) and \
                (not tail or (tail.startswith(_SUPERSEDED) and tail.endswith(")"))):
            return True
        at = line.find(body, at + 1)
    return False


def pair_lines(evidence: list[dict[str, Any]], lines: list[str]) -> list[str | None]:
    """Each piece of evidence's line: the line at its own position when it fits, else the first
    unused line that does, else None."""
    used: set[int] = set()
    out: list[str | None] = []
    for i, ev in enumerate(evidence):
        order = [i, *range(len(lines))] if i < len(lines) else range(len(lines))
        pick = next((j for j in order if j not in used and is_line_of(lines[j], ev)), None)
        if pick is not None:
            used.add(pick)
        out.append(None if pick is None else lines[pick])
    return out


def _docs(evidence: list[dict[str, Any]], lines: list[str | None]) -> list[Document]:
    return [Document(page_content=ev["content"], metadata={
        "conversation_id": ev["conversation_id"], "node_id": ev["node_id"], "event_id": ev["event_id"],
        "seq": ev["seq"], "speaker": ev.get("speaker"), "observed_at": ev.get("observed_at"), "score": ev["score"],
        "superseded_by": list(ev.get("superseded_by") or []), "prompt_line": line})
        for ev, line in zip(evidence, lines, strict=True) if line is not None]


def documents(recall: dict[str, Any], prompt: dict[str, Any], partial: bool = False) -> list[Document] | None:
    """The documents of a recall's ``json`` and ``prompt`` answers. When some evidence has no
    line in the prompt answer (memory changed between the two): None, or with ``partial`` the
    documents of the evidence that has one."""
    lines = pair_lines(recall["evidence"], list(prompt["lines"]))
    if not partial and any(line is None for line in lines):
        return None
    return _docs(recall["evidence"], lines)


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
    """Recall from a running ``jevmem serve`` with an API key that has the ``query`` scope."""

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        with MemoryClient(self.base_url, self.api_key.get_secret_value(), self.timeout) as client:
            for _ in range(2):
                both = self._recall(client, query, "json"), self._recall(client, query, "prompt")
                if (docs := documents(*both)) is not None:
                    return docs
            return documents(*both, partial=True) or []

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun) -> list[Document]:
        async with AsyncMemoryClient(self.base_url, self.api_key.get_secret_value(), self.timeout) as client:
            for _ in range(2):
                both = await asyncio.gather(self._arecall(client, query, "json"), self._arecall(client, query, "prompt"))
                if (docs := documents(*both)) is not None:
                    return docs
            return documents(*both, partial=True) or []


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
