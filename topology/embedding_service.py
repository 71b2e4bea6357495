"""Embeddings from a service that speaks OpenAI's ``POST /v1/embeddings`` wire format (a hosted
API, or a GPU server such as vLLM, TEI or Ollama in their OpenAI-compatible modes).

Contracts (those of :class:`topology.ports.Embedder`, plus):

* ``name`` is ``openai:<model>`` (``openai:<model>:<dimensions>`` when a dimension count is
  requested), then ``+joined`` when turns are embedded joined to the turn before them (below):
  what a store records, so a store built with one model (or one way of embedding a turn)
  refuses another, as with the in-process models. The service's URL is not part of it: moving
  the service keeps the store.
* **A turn after the turn before it** (:meth:`ServiceEmbedder.embed_after`): a service returns
  pooled vectors, not token states, so it cannot read a turn in its context and describe it by
  its own words as the in-process models do (``topology.embedding``). It embeds either the turn
  alone (``joined=False``, the default: the name has no suffix), or the two turns as one text,
  ``<before> <turn>`` (``joined=True``, name suffix ``+joined``), the start of ``before`` cut so
  that the text fits ``max_tokens`` whole turn first.
* Vectors are L2-normalised and rounded to 6 decimals like the in-process models'; ``dim`` is the
  requested ``dimensions``, else learned from one call when the embedder is made.
* **Inputs fit the model.** Each input (prefix included) is cut to ``max_tokens`` UTF-8 bytes,
  at a character boundary, before it is sent: a token of a byte-level BPE (OpenAI's) or WordPiece
  (BERT's) tokenizer spans at least one byte, so the cut text never exceeds the model's limit,
  which a hosted API would refuse with HTTP 400. The cut keeps the start of the text (about
  ``max_tokens / 4`` to ``max_tokens / 5`` English words); the node keeps its whole content, and
  lexical search reads all of it. ``max_tokens`` defaults to the model's limit when known
  (:data:`KNOWN_LIMITS`), else :data:`DEFAULT_MAX_TOKENS`.
* Texts go in requests of at most ``batch`` inputs, in order; the answer's ``index`` fields put
  each vector back in place.
* Transient failures (transport errors, timeouts, 408, 429, 5xx: ``topology.errors.status_kind``)
  are retried with capped exponential backoff (``Retry-After`` honoured, up to ``attempts`` tries
  in all); after the last one :class:`EmbeddingUnavailable` (an outage) says what the service
  answered. A refusal of the input (400, 413, 422, ...) is :class:`EmbeddingRefused` (permanent:
  the write path dead-letters the observation), one of the deployment (401, 403, 404, ...)
  :class:`EmbeddingMisconfigured`; neither is retried. Nothing falls back to another model.
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
from topology.errors import Refused, ServiceMisconfigured, StoreUnavailable, status_kind

#: Inputs per request.
BATCH = 64
#: Tries per request, the first included.
ATTEMPTS = 5
#: Backoff before the second try, doubling up to :data:`MAX_BACKOFF_S`.
BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0
#: Input limits in tokens of models whose limit is published (OpenAI's embedding models).
KNOWN_LIMITS = {"text-embedding-3-small": 8191, "text-embedding-3-large": 8191, "text-embedding-ada-002": 8191}
#: Input limit of a model not in :data:`KNOWN_LIMITS`: BERT-family encoders (e5, bge, MiniLM), the
#: usual models behind TEI or vLLM, take 512 tokens.
DEFAULT_MAX_TOKENS = 512


class EmbeddingUnavailable(StoreUnavailable):
    """The embedding service did not answer, or failed, after every retry (transient)."""


class EmbeddingRefused(Refused):
    """The embedding service refused the texts it was sent (permanent: e.g. an input over the
    model's limit; resending it cannot help)."""


class EmbeddingMisconfigured(ServiceMisconfigured):
    """The embedding service refused this deployment: its key, URL or model (configuration)."""


def cut(text: str, max_bytes: int) -> str:
    """The longest start of ``text`` whose UTF-8 encoding has at most ``max_bytes`` bytes (never
    half a character)."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= max_bytes:
        return text
    return raw[:max_bytes].decode("utf-8", "ignore")


def joined(before: str, text: str, max_bytes: int) -> str:
    """``before`` and ``text`` as one text of at most ``max_bytes`` UTF-8 bytes: the end of
    ``before`` that fits (never half a character), a space, then ``text`` (which :func:`cut`
    shortens when it alone does not fit)."""
    room = max_bytes - len(text.encode("utf-8", "surrogatepass")) - 1
    if room <= 0:
        return text
    raw = before.encode("utf-8", "surrogatepass")
    tail = raw[max(0, len(raw) - room):].decode("utf-8", "ignore")
    return f"{tail} {text}" if tail else text


class ServiceEmbedder:
    """An :class:`~topology.ports.Embedder` over ``base_url`` (e.g. ``https://api.openai.com/v1``
    or ``http://gpu-box:8000/v1``). ``query_prefix`` / ``passage_prefix`` are prepended to
    questions and memories (e.g. ``"query: "`` / ``"passage: "`` for the e5 family); ``max_tokens``
    is the model's input limit (see the module's docstring). Thread-safe
    (httpx's client is); :meth:`close` releases its connections."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, dimensions: int | None = None,
                 batch: int = BATCH, timeout_s: float = 30.0, attempts: int = ATTEMPTS, backoff_s: float = BACKOFF_S,
                 query_prefix: str = "", passage_prefix: str = "", transport: httpx.BaseTransport | None = None,
                 max_tokens: int | None = None, joined: bool = False) -> None:
        if batch < 1 or attempts < 1:
            raise ValueError("batch and attempts must be at least 1")
        self.max_tokens = max_tokens or KNOWN_LIMITS.get(model, DEFAULT_MAX_TOKENS)
        if self.max_tokens < 16:
            raise ValueError(f"max_tokens must be at least 16, got {self.max_tokens}")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=base_url.rstrip("/") + "/", headers=headers, timeout=timeout_s,
                                  transport=transport)
        self.model, self.dimensions, self.batch, self.attempts = model, dimensions, batch, attempts
        self.backoff_s = backoff_s
        self.query_prefix, self.passage_prefix = query_prefix, passage_prefix
        self.joined = joined
        self.name = f"openai:{model}" + (f":{dimensions}" if dimensions else "") + ("+joined" if joined else "")
        self.dim = dimensions or len(self._embed(["dimension probe"])[0])

    def close(self) -> None:
        self._http.close()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embed([self.passage_prefix + t for t in texts])

    def embed_query(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embed([self.query_prefix + t for t in texts])

    def embed_after(self, pairs: Sequence[tuple[str | None, str]]) -> list[list[float]]:
        """Each turn alone, or (``joined``) after the turn before it as one text (see the module)."""
        if not self.joined:
            return self.embed([t for _, t in pairs])
        room = self.max_tokens - len(self.passage_prefix.encode("utf-8", "surrogatepass"))
        return self._embed([self.passage_prefix + (t if b is None else joined(b, t, room)) for b, t in pairs])

    def _embed(self, texts: list[str]) -> list[list[float]]:
        texts = [cut(t, self.max_tokens) for t in texts]
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
            if r.is_success:
                return self._vectors(r, len(texts))
            kind = status_kind(r.status_code)
            if kind == "transient":
                last = f"HTTP {r.status_code}: {r.text[:200]}"
                after = r.headers.get("retry-after", "")
                if after.isdigit():
                    delay = min(MAX_BACKOFF_S, float(after))
                continue
            refused = EmbeddingRefused if kind == "permanent" else EmbeddingMisconfigured
            raise refused(f"embedding service refused {len(texts)} texts: HTTP {r.status_code}: {r.text[:200]}",
                          r.status_code)
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
