"""Documents as a read takes them: decoded once, kept while unchanged.

A user's recalls read the same documents again and again, and decoding one costs more than
fetching it. :class:`Kept` keeps what was decoded from the most recently read documents and hands
it back for as long as the document is the version it was decoded from: Elasticsearch gives
every version of a document a new ``_seq_no`` under its ``_primary_term``, which a read asks for
(``mget`` returns them; a search with ``seq_no_primary_term``) and checks. So a read never
answers an older version, and an unchanged document comes back as the same objects, which lets
the read path reuse what it derived from them. Edge-group documents (:mod:`storage.elastic.edges`)
are kept so, and node documents (:class:`DecodedNodes`).

A node document holds its JSON body and its vectors as base64 (``embedding_f32``: the float32
embedding, exact; ``context_f16``: the context vector; an index written by an early release holds
``embedding`` as a JSON list instead). The read path takes a node without its vectors and with
its retrieval row (float32, :func:`topology.vectors.retrieval_rows`), as the embedded store gives
it (:class:`storage.ports.NodeRowReads`).
"""

from __future__ import annotations

import base64
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import numpy as np
import orjson

from topology.schemas import MemoryNode
from topology.vectors import retrieval_rows

#: Nodes kept decoded (each without its vectors, with its float32 retrieval row: about 6 KB at
#: 384 dimensions), as many as the embedded store keeps.
NODE_CACHE = 4096
T = TypeVar("T")

#: The stored fields a read of vectors takes besides the body.
VECTOR_FIELDS = ("embedding_f32", "embedding", "context_f16")


def encode_vector(vector: Sequence[float], dtype: str = "<f4") -> str:
    """A vector as base64 of its little-endian float32 values (``dtype``; what the models produce):
    exact, and a quarter of the bytes of a JSON float list, which Elasticsearch also parses."""
    return base64.b64encode(np.asarray(vector, dtype=dtype).tobytes()).decode("ascii")


def decode_array(text: str, dtype: str = "<f4") -> np.ndarray:
    """The float32 values of a vector :func:`encode_vector` wrote (as ``dtype``)."""
    return np.frombuffer(base64.b64decode(text), dtype=dtype).astype(np.float32)


def decode_vector(text: str, dtype: str = "<f4") -> list[float]:
    """:func:`decode_array` as a list of floats (what :class:`MemoryNode` holds)."""
    values: list[float] = decode_array(text, dtype).tolist()
    return values


def full_node(src: Mapping[str, Any], vectors: bool) -> MemoryNode:
    """The node a document's ``_source`` holds; with ``vectors``, with its embedding and context."""
    body = orjson.loads(src["body"])
    if not vectors:
        return MemoryNode.model_validate(body)
    vector = decode_vector(src["embedding_f32"]) if "embedding_f32" in src else src.get("embedding")
    context = decode_vector(src["context_f16"], "<f2") if src.get("context_f16") else None
    return MemoryNode.model_validate({**body, "embedding": vector, "context": context})


def retrieval_row(src: Mapping[str, Any]) -> np.ndarray | None:
    """The float32 retrieval row of a document's vectors (:meth:`MemoryNode.retrieval_vector`);
    None without an embedding."""
    if "embedding_f32" in src:
        emb = decode_array(src["embedding_f32"])
    elif src.get("embedding"):
        emb = np.asarray(src["embedding"], dtype=np.float32)
    else:
        return None
    ctx = decode_array(src["context_f16"], "<f2") if src.get("context_f16") else None
    if ctx is None or len(ctx) != len(emb):
        return emb
    row: np.ndarray = retrieval_rows(emb[None, :], ctx[None, :])[0]
    return row


class Kept(Generic[T]):
    """What was decoded from recently read documents, keyed by index and id, handed back while the
    document is the version it was decoded from (its ``_seq_no`` and ``_primary_term``, which a
    read asks for); at most ``limit`` in weight (each value's ``weight``), the least recently
    read dropped first."""

    def __init__(self, limit: int, weight: Callable[[T], int] = lambda _: 1) -> None:
        self._limit, self._weight, self._total = limit, weight, 0
        #: (index, id) -> (seq_no, primary_term, the decoded value, its weight)
        self._held: OrderedDict[tuple[str, str], tuple[int, int, T, int]] = OrderedDict()

    def held(self, index: str, doc_id: str) -> T | None:
        """The value kept for a document, whatever its version now (None: none kept)."""
        held = self._held.get((index, doc_id))
        return None if held is None else held[2]

    def unchanged(self, index: str, doc: Mapping[str, Any]) -> T | None:
        """The value kept for ``doc`` (read with or without its ``_source``) when the document is
        the version it was decoded from, else None."""
        key = (index, str(doc["_id"]))
        held = self._held.get(key)
        if held is None or (held[0], held[1]) != (doc.get("_seq_no"), doc.get("_primary_term")):
            return None
        self._held.move_to_end(key)
        return held[2]

    def take(self, index: str, doc: Mapping[str, Any], decode: Callable[[Mapping[str, Any]], T]) -> T:
        """``decode(doc["_source"])``, or the kept value when the document is unchanged since."""
        key, seq_no, term = (index, str(doc["_id"])), doc.get("_seq_no"), doc.get("_primary_term")
        held = self._held.get(key)
        if held is not None and (held[0], held[1]) == (seq_no, term):
            self._held.move_to_end(key)
            return held[2]
        value = decode(doc["_source"])
        if held is not None:
            del self._held[key]
            self._total -= held[3]
        if isinstance(seq_no, int) and isinstance(term, int):
            w = self._weight(value)
            self._held[key] = (seq_no, term, value, w)
            self._total += w
            while self._total > self._limit and self._held:
                self._total -= self._held.popitem(last=False)[1][3]
        return value

    def __len__(self) -> int:
        return len(self._held)


def _node_and_row(src: Mapping[str, Any]) -> tuple[MemoryNode, np.ndarray | None]:
    return full_node(src, vectors=False), retrieval_row(src)


class DecodedNodes:
    """The decoded form of recently read node documents (see the module)."""

    def __init__(self, limit: int = NODE_CACHE) -> None:
        self._kept: Kept[tuple[MemoryNode, np.ndarray | None]] = Kept(limit)

    def held(self, index: str, doc_id: str) -> MemoryNode | None:
        """The node kept for a document (whatever its version now), or None."""
        got = self._kept.held(index, doc_id)
        return None if got is None else got[0]

    def take(self, index: str, doc: Mapping[str, Any]) -> tuple[MemoryNode, np.ndarray | None] | None:
        """The node of a found ``mget`` document read with its vectors (:data:`VECTOR_FIELDS`),
        without them, and its retrieval row (None without an embedding): the kept ones when the
        document's ``_seq_no`` and ``_primary_term`` are those they were decoded from; None for a
        document read without its ``_source`` (its version only) that changed since."""
        if "_source" not in doc:
            return self._kept.unchanged(index, doc)
        return self._kept.take(index, doc, _node_and_row)

    def __len__(self) -> int:
        return len(self._kept)


def rows_matrix(rows: Sequence[np.ndarray | None], dim: int) -> np.ndarray:
    """A float32 ``(len(rows), dim)`` matrix of retrieval rows, zeros for a row that is None or
    not ``dim`` wide."""
    out = np.zeros((len(rows), dim), dtype=np.float32)
    for j, r in enumerate(rows):
        if r is not None and len(r) == dim:
            out[j] = r
    return out
