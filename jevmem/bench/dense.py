"""Plain dense search, the floor every bench compares jevmem's ranking with: each turn embedded
alone by the same embedder (no turn before it, the model's window keeping a long turn's start),
ranked by cosine with the question embedded as a query, ties by the order the turns were given."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from topology.ports import Embedder


def dense_order(vectors: np.ndarray, qvec: Sequence[float], ids: Sequence[str], depth: int) -> list[str]:
    """``ids`` (one per row of ``vectors``, unit rows) by dot product with ``qvec``, best first,
    ties by position; at most ``depth``."""
    if not len(ids):
        return []
    scores = vectors @ np.asarray(qvec, dtype=np.float32)
    order = np.lexsort((np.arange(len(scores)), -scores))[:depth]
    return [ids[i] for i in order]


class DenseSearch:
    """Plain dense search over a fixed set of turns (``texts``, keyed by ``ids``)."""

    def __init__(self, embedder: Embedder, ids: Sequence[str], vectors: np.ndarray) -> None:
        self.embedder, self.ids, self.vectors = embedder, list(ids), vectors

    @classmethod
    async def over(cls, embedder: Embedder, ids: Sequence[str], texts: Sequence[str]) -> DenseSearch:
        """Embed ``texts`` (off the event loop) and search them."""
        if not texts:
            return cls(embedder, [], np.zeros((0, embedder.dim), dtype=np.float32))
        vectors = await asyncio.to_thread(embedder.embed, list(texts))
        return cls(embedder, ids, np.asarray(vectors, dtype=np.float32).reshape(len(ids), embedder.dim))

    async def search(self, question: str, depth: int, among: Sequence[str] | None = None) -> list[str]:
        """The ids best first for ``question`` (only those of ``among`` when given)."""
        qvec = (await asyncio.to_thread(self.embedder.embed_query, [question]))[0]
        if among is None:
            return dense_order(self.vectors, qvec, self.ids, depth)
        keep = set(among)
        rows = [i for i, x in enumerate(self.ids) if x in keep]
        return dense_order(self.vectors[rows], qvec, [self.ids[i] for i in rows], depth)
