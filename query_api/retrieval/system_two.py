"""System Two: an OpenAI-compatible chat endpoint that writes answers (and approved abstractions)
from selected evidence. Optional: without it the API returns evidence only."""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from topology.errors import ServiceMisconfigured, SystemTwoError, SystemTwoRefused, status_kind

ANSWER_PROMPT = (
    "Answer the question using only the numbered memories. In brackets: when each memory was "
    "recorded and, as 'event', the date of what it tells (use the event date for 'when' questions). "
    "A memory marked superseded is out of date. If the memories do not contain the answer, say you do not know."
)
SUMMARY_PROMPT = "Write one sentence that states what both memories say, without adding anything."


class OpenAICompatibleSystemTwo:
    """POST {base_url}/chat/completions with ``model`` and ``messages``; reads choices[0]."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None,
                 transport: httpx.AsyncBaseTransport | None = None, timeout: float = 60.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout,
                                         transport=transport)
        self.model = model

    async def _chat(self, system: str, user: str) -> str:
        try:
            resp = await self._client.post("/chat/completions", json={
                "model": self.model, "temperature": 0,
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]})
            resp.raise_for_status()
            return str(resp.json()["choices"][0]["message"]["content"]).strip()
        except httpx.HTTPStatusError as exc:
            status = exc.response.status_code
            kind, message = status_kind(status), f"system two failed: HTTP {status}: {exc.response.text[:200]}"
            if kind == "permanent":  # the request's content: resending it cannot help
                raise SystemTwoRefused(message, status) from exc
            if kind == "configuration":
                raise ServiceMisconfigured(message, status) from exc
            raise SystemTwoError(message) from exc
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
            raise SystemTwoError(f"system two failed: {exc}") from exc

    async def answer(self, question: str, evidence: Sequence[str]) -> str:
        numbered = "\n".join(f"{i}. {e}" for i, e in enumerate(evidence, start=1))
        return await self._chat(ANSWER_PROMPT, f"Memories:\n{numbered}\n\nQuestion: {question}")

    async def summarise(self, texts: Sequence[str]) -> str:
        return await self._chat(SUMMARY_PROMPT, "\n".join(f"- {t}" for t in texts))

    async def aclose(self) -> None:
        await self._client.aclose()
