"""The ``typesafe`` System One backend over the official ``typesafe-sdk`` async client.

The SDK sends one state per request, so a batch is packed into one request: the state lists the
items (``{"items": [...]}``) and every question is namespaced by its item index (``"3.relevance"``).
Batches with more than ``max_questions`` questions are split into chunks sent concurrently; each
chunk is one controller request (``requests_for`` tells the counting wrapper how many).
``base_url`` may point at any Jev-compatible server (POST /v1/systemone).

Errors: an HTTP refusal of the request's content (4xx other than 408, 429 and the configuration
statuses, ``topology.errors.status_kind``) is :class:`~topology.errors.SystemOneRefused`
(permanent), a refusal of this deployment (401, 403, 404, ...)
:class:`~topology.errors.ServiceMisconfigured`, anything else :class:`~topology.errors.SystemOneError`
(transient).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from typesafe_sdk import AsyncTypeSafeClient, Choice, Noul
from typesafe_sdk import TypeSafeAPIError as _SdkStatusError
from typesafe_sdk import TypeSafeError as _SdkError

from topology.errors import ServiceMisconfigured, SystemOneError, SystemOneRefused, status_kind
from topology.systemone.port import Answer, Item
from topology.systemone.port import Choice as CatalogChoice


def _questions(index: int, item: Item) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for q in item.task.questions:
        name = f"{index}.{q.key}"
        instructions = f"About items[{index}] ({item.task.name}): {q.text}"
        if isinstance(q, CatalogChoice):
            out[name] = Choice(instructions=instructions, criteria={label: None for label in q.labels})
        else:
            out[name] = Noul(instructions=instructions)
    return out


class TypeSafeSystemOne:
    """Remote backend; ``client`` is an :class:`AsyncTypeSafeClient` built at the edge."""

    name = "typesafe"

    def __init__(self, client: AsyncTypeSafeClient, *, model: str | None = None, max_questions: int = 200) -> None:
        self._client = client
        self._model = model
        self._max_questions = max_questions

    def chunks(self, sizes: Sequence[int]) -> list[list[int]]:
        """Item indices per HTTP request for items with ``sizes`` questions each (pure): items in
        order, a new request whenever the next item would pass ``max_questions``."""
        chunks: list[list[int]] = [[]]
        count = 0
        for i, n in enumerate(sizes):
            if chunks[-1] and count + n > self._max_questions:
                chunks.append([])
                count = 0
            chunks[-1].append(i)
            count += n
        return chunks if chunks[0] else []

    def requests_for(self, sizes: Sequence[int]) -> int:
        """How many HTTP requests a batch of items with ``sizes`` questions each takes."""
        return len(self.chunks(sizes))

    async def ask(self, items: Sequence[Item]) -> list[Answer]:
        chunks = self.chunks([len(item.task.questions) for item in items])
        parts = await asyncio.gather(*(self._ask_chunk(items, idx) for idx in chunks))
        answers: dict[int, Answer] = {}
        for part in parts:
            answers.update(part)
        return [answers[i] for i in range(len(items))]

    async def _ask_chunk(self, items: Sequence[Item], indices: list[int]) -> dict[int, Answer]:
        questions: dict[str, Any] = {}
        for i in indices:
            questions.update(_questions(i, items[i]))
        state = {"items": [{"index": i, "task": items[i].task.name, **items[i].state} for i in indices]}
        try:
            resp = await self._client.system_one(state=state, questions=questions, model=self._model)
        except _SdkStatusError as exc:
            kind, message = status_kind(exc.status), f"typesafe system_one failed: HTTP {exc.status}: {exc}"
            if kind == "permanent":
                raise SystemOneRefused(message, exc.status) from exc
            if kind == "configuration":
                raise ServiceMisconfigured(message, exc.status) from exc
            raise SystemOneError(message) from exc
        except _SdkError as exc:
            raise SystemOneError(f"typesafe system_one failed: {exc}") from exc
        out: dict[int, Answer] = {}
        for i in indices:
            nouls: dict[str, float] = {}
            choices: dict[str, dict[str, float]] = {}
            for q in items[i].task.questions:
                name = f"{i}.{q.key}"
                try:
                    if isinstance(q, CatalogChoice):
                        choices[q.key] = dict(resp.choices[name].probabilities)
                    else:
                        nouls[q.key] = float(resp.nouls[name].noul)
                except KeyError as exc:
                    raise SystemOneError(f"typesafe answer lacks {name!r}") from exc
            out[i] = Answer(nouls=nouls, choices=choices)
        return out

    async def aclose(self) -> None:
        await self._client.aclose()
