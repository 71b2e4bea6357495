"""Ports the write-path stages read through. Storage adapters implement them.

``MemoryReader`` is read-your-writes: every method sees every node upserted (and acknowledged)
before the call, and ``before_seq`` restricts results to nodes *earlier* in the conversation,
which makes candidate discovery independent of how events were batched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from topology.schemas import EdgeEvent, MemoryNode, Scope

if TYPE_CHECKING:
    import numpy as np


class Embedder(Protocol):
    """Sentence embeddings, L2-normalised, so a dot product is a cosine. CPU-bound and sync:
    async callers run it in a worker thread. Asymmetric models embed questions differently from
    the memories they search (``embed_query`` vs ``embed``)."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors of memories (passages)."""
        ...

    def embed_query(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors of questions."""
        ...

    def embed_after(self, pairs: Sequence[tuple[str | None, str]]) -> list[list[float]]:
        """Vectors of memories, each ``(before, text)``'s ``text`` read after ``before`` (the end
        of the turn before it in its sitting; ``topology.stages.context``); ``before`` None:
        ``embed([text])``'s vector. What an embedder makes of ``before`` is part of its ``name``."""
        ...


class MemoryReader(Protocol):
    async def similar_before(self, scope: Scope, vector: Sequence[float], before_seq: int, limit: int) -> list[str]:
        """Ids of the nearest earlier nodes by cosine, best first."""
        ...

    async def similar_before_many(self, queries: Sequence[tuple[Scope, Sequence[float], int]],
                                  limit: int) -> list[list[str]]:
        """:meth:`similar_before` for each ``(scope, vector, before_seq)``, as one batch where the
        store can (a batch of writes spans many conversations)."""
        ...

    async def overlapping_before(self, scope: Scope, tokens: Sequence[str], before_seq: int, limit: int) -> list[str]:
        """Ids of earlier nodes sharing the most content tokens, most first."""
        ...

    async def sharing_entities_before(
        self, scope: Scope, entity_ids: Sequence[str], before_seq: int, limit: int
    ) -> list[str]:
        """Ids of the latest earlier nodes mentioning any of ``entity_ids``."""
        ...

    async def preceding(self, scope: Scope, before_seq: int, limit: int) -> list[str]:
        """Ids of the ``limit`` nodes right before ``before_seq`` (temporal proximity)."""
        ...

    async def get_nodes(self, scope: Scope, ids: Sequence[str]) -> list[MemoryNode]:
        """Nodes, with or without their embeddings (:meth:`embeddings` gives them); unknown ids are
        skipped."""
        ...

    async def embeddings(self, scope: Scope, ids: Sequence[str], dim: int) -> np.ndarray:
        """The embeddings of ``ids`` as float64 rows, in order (a zero row for an unknown id or a
        node without one)."""
        ...


class LinkMemory(Protocol):
    """What the process that writes a conversation remembers of its recent links."""

    async def remember_links(self, nodes: Sequence[MemoryNode], edges: Sequence[EdgeEvent]) -> None:
        """``nodes`` were linked; ``edges`` are every edge that linking wrote."""
        ...

    def incoming(self, scope: Scope, ids: Sequence[str]) -> list[EdgeEvent] | None:
        """The strongest semantic edge into each of ``ids`` (highest probability, then highest
        source id; none for a node without one), or None when some id is not remembered."""
        ...
