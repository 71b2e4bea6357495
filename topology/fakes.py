"""Small in-package fakes for tests and examples that do not need the real embedding model.

:class:`HashingEmbedder` implements :class:`topology.ports.Embedder` with feature hashing: each
content token (:func:`topology.text.tokens`) of a text adds a fixed pseudo-random unit direction
(from a SHA-256 of the token), and the sum is L2-normalised and rounded as the real models' vectors
are (:func:`topology.embedding.rounded`). It is deterministic across processes and machines,
batch-invariant, loads nothing, and texts that share words are close: enough for the write path's
candidate discovery and the read path's anchors to behave, not to judge retrieval quality.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from topology import text
from topology.embedding import rounded

#: Dimensions of a hashing embedding (small: the fakes exist to be fast).
HASHING_DIM = 64


@lru_cache(maxsize=65536)
def _direction(token: str, dim: int) -> np.ndarray:
    """The token's fixed unit direction: signs and magnitudes from its SHA-256 stream."""
    raw = b"".join(hashlib.sha256(f"{token}#{i}".encode()).digest() for i in range((dim * 2 + 31) // 32))
    v = np.frombuffer(raw[: dim * 2], dtype=np.uint16).astype(np.float64) - 32767.5
    return v / np.linalg.norm(v)


class HashingEmbedder:
    """A deterministic :class:`~topology.ports.Embedder` without a model (see the module). A text
    without content tokens embeds as its lowercased words, and a text without words as the zero
    vector's stand-in, one fixed direction, so every vector is unit length."""

    def __init__(self, dim: int = HASHING_DIM, name: str = "hashing-v1", after: bool = False) -> None:
        self.dim, self.name, self.after = dim, f"{name}-{dim}" + ("+after" if after else ""), after

    def _one(self, t: str) -> np.ndarray:
        words = text.tokens(t) or t.lower().split() or ["<empty>"]
        v = np.sum([_direction(w, self.dim) for w in words], axis=0)
        norm = float(np.linalg.norm(v))
        return v / norm if norm > 0 else _direction("<empty>", self.dim)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors of memories; the same text always gets the same vector."""
        return rounded(np.asarray([self._one(t) for t in texts], dtype=np.float64).reshape(len(texts), self.dim))

    def embed_after(self, pairs: Sequence[tuple[str | None, str]]) -> list[list[float]]:
        """Each text alone (:meth:`embed`), or with ``after``, a text read after another as its
        own direction plus a third of the other's (normalised): a vector that changes with the
        turn before it, as the real models' does."""
        if not self.after:
            return self.embed([t for _, t in pairs])
        rows = [self._one(t) if b is None else self._one(t) + self._one(b) / 3 for b, t in pairs]
        m = np.asarray(rows, dtype=np.float64).reshape(len(pairs), self.dim)
        return rounded(m / np.linalg.norm(m, axis=1, keepdims=True).clip(1e-12))

    def embed_query(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors of questions (symmetric: the same as :meth:`embed`)."""
        return self.embed(texts)
