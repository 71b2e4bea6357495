"""Embeddings from a service that speaks OpenAI's ``POST /v1/embeddings`` wire format (a hosted
API, or a GPU server such as vLLM, TEI or Ollama in their OpenAI-compatible modes).

Contracts (those of :class:`topology.ports.Embedder`, plus):

* ``name`` is ``openai:<model>`` (``openai:<model>:<dimensions>`` when a dimension count is
  requested): what a store records, so a store built with one model refuses another, as with the
  in-process models. The service's URL is not part of it: moving the service keeps the store.
* Vectors are L2-normalised and rounded to 6 decimals like the in-process models'; ``dim`` is the
  requested ``dimensions``, else learned from one call when the embedder is made.
* Texts go in requests of at most ``batch`` inputs, in order; the answer's ``index`` fields put
  each vector back in place.
* Transient failures (transport errors, timeouts, 408, 409, 429, 5xx) are retried with capped
  exponential backoff (``Retry-After`` honoured, up to ``attempts`` tries in all); after the last
  one, or on any other refusal (400, 401, 404, ...), :class:`EmbeddingUnavailable` says what the
  service answered. Nothing falls back to another model.
* What it gives up: the in-process models embed each text on its own, so a vector never depends
  on what else is in its batch and a replay rebuilds the same graph. A service that batches
  (most do, on a GPU) may answer a text slightly differently in different batches; the graph then
  depends on batching to within that difference. What it gains: the write path's cost is then
  the service's, not this machine's CPU.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np

from topology.embedding import rounded
from topology.errors import StoreUnavailable

#: Inputs per request.
BATCH = 64
#: Tries per request, the first included.
ATTEMPTS = 5
#: Backoff before the second try, doubling up to :data:`MAX_BACKOFF_S`.
BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0
_RETRIED = {408, 409, 429}


class EmbeddingUnavailable(StoreUnavailable):
    """The embedding service failed or refused a request (after its retries, where retried)."""


class ServiceEmbedder:
    """An :class:`~topology.ports.Embedder` over ``base_url`` (e.g. ``https://api.openai.com/v1``
    or ``http://gpu-box:8000/v1``). ``query_prefix`` / ``passage_prefix`` are prepended to
    questions and memories (e.g. ``"query: "`` / ``"passage: "`` for the e5 family). Thread-safe
    (httpx's client is); :meth:`close` releases its connections."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, dimensions: int | None = None,
                 batch: int = BATCH, timeout_s: float = 30.0, attempts: int = ATTEMPTS, backoff_s: float = BACKOFF_S,
                 query_prefix: str = "", passage_prefix: str = "", transport: httpx.BaseTransport | None = None) -> None:
        if batch < 1 or attempts < 1:
            raise ValueError("batch and attempts must be at least 1")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=base_url.rstrip("/") + "/", headers=headers, timeout=timeout_s,
                                  transport=transport)
        self.model, self.dimensions, self.batch, self.attempts = model, dimensions, batch, attempts
        self.backoff_s = backoff_s
        self.query_prefix, self.passage_prefix = query_prefix, passage_prefix
        self.name = f"openai:{model}" + (f":{dimensions}" if dimensions else "")
        self.dim = dimensions or len(self._embed(["dimension probe"])[0])

    def close(self) -> None:
        self._http.close()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embed([self.passage_prefix + t for t in texts])

    def embed_query(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embed([self.query_prefix + t for t in texts])

    def _embed(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for i in range(0, len(texts), self.batch):
            part = texts[i: i + self.batch]
            vectors = np.asarray(self._request(part), dtype=np.float32)
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            out += rounded(vectors / np.where(norms == 0, 1, norms))
        return out

    def _request(self, texts: list[str]) -> list[list[float]]:
        body: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.dimensions:
            body["dimensions"] = self.dimensions
        delay, last = self.backoff_s, ""
        for attempt in range(self.attempts):
            if attempt:
                time.sleep(delay)
                delay = min(MAX_BACKOFF_S, delay * 2)
            try:
                r = self._http.post("embeddings", json=body)
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            if r.status_code in _RETRIED or r.status_code >= 500:
                last = f"HTTP {r.status_code}: {r.text[:200]}"
                after = r.headers.get("retry-after", "")
                if after.isdigit():
                    delay = min(MAX_BACKOFF_S, float(after))
                continue
            if not r.is_success:
                raise EmbeddingUnavailable(f"embedding service refused {len(texts)} texts: HTTP {r.status_code}: "
                                           f"{r.text[:200]}")
            return self._vectors(r, len(texts))
        raise EmbeddingUnavailable(f"embedding service failed {self.attempts} times; last: {last}")

    @staticmethod
    def _vectors(r: httpx.Response, n: int) -> list[list[float]]:
        try:
            data = sorted(r.json()["data"], key=lambda d: int(d["index"]))
            vectors = [[float(x) for x in d["embedding"]] for d in data]
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingUnavailable(f"embedding service answered an unreadable body: {exc}") from exc
        if len(vectors) != n or len({len(v) for v in vectors}) > 1:
            raise EmbeddingUnavailable(f"embedding service answered {len(vectors)} vectors for {n} texts")
        return vectors
