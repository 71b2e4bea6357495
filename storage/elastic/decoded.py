"""Nodes as a read takes them from a tenant's memories index: decoded once, kept while unchanged.

A node document holds its JSON body and its vectors as base64 (``embedding_f32``: the float32
embedding, exact; ``context_f16``: the context vector; an index written by an early release holds
``embedding`` as a JSON list instead). Decoding one (the body through the schema, the vectors into
Python lists) costs more than fetching it, and a user's recalls read the same nodes again and
again. :class:`DecodedNodes` keeps, for the most recently read nodes, the node without its
vectors and its retrieval row (float32, :func:`topology.vectors.retrieval_rows`), and hands them
back for as long as the document is the one they were decoded from: Elasticsearch gives every
version of a document a new ``_seq_no`` under its ``_primary_term``, which every ``mget``
returns, and a read checks both. So a read never answers an older version, and an unchanged
node comes back as the same object, which lets the read path reuse what it derived from it.
"""

from __future__ import annotations

import base64
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import orjson

from topology.schemas import MemoryNode
from topology.vectors import retrieval_rows

#: Nodes kept decoded (each without its vectors, with its float32 retrieval row: about 6 KB at
#: 384 dimensions), as many as the embedded store keeps.
NODE_CACHE = 4096
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
    values: list[float] = np.frombuffer(base64.b64decode(text), dtype=dtype).astype(float).tolist()
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


class DecodedNodes:
    """The decoded form of recently read node documents, keyed by index and id (see module)."""

    def __init__(self, limit: int = NODE_CACHE) -> None:
        self._limit = limit
        #: (index, id) -> (seq_no, primary_term, the node without its vectors, its retrieval row)
        self._held: OrderedDict[tuple[str, str], tuple[int, int, MemoryNode, np.ndarray | None]] = OrderedDict()

    def take(self, index: str, doc: Mapping[str, Any]) -> tuple[MemoryNode, np.ndarray | None]:
        """The node of a found ``mget`` document read with its vectors (:data:`VECTOR_FIELDS`),
        without them, and its retrieval row (None without an embedding): the kept ones when the
        document's ``_seq_no`` and ``_primary_term`` are those they were decoded from."""
        key, version = (index, str(doc["_id"])), (doc.get("_seq_no"), doc.get("_primary_term"))
        held = self._held.get(key)
        if held is not None and (held[0], held[1]) == version:
            self._held.move_to_end(key)
            return held[2], held[3]
        src = doc["_source"]
        node, row = full_node(src, vectors=False), retrieval_row(src)
        if isinstance(version[0], int) and isinstance(version[1], int):
            self._held[key] = (version[0], version[1], node, row)
            self._held.move_to_end(key)
            while len(self._held) > self._limit:
                self._held.popitem(last=False)
        return node, row

    def __len__(self) -> int:
        return len(self._held)


def rows_matrix(rows: Sequence[np.ndarray | None], dim: int) -> np.ndarray:
    """A float32 ``(len(rows), dim)`` matrix of retrieval rows, zeros for a row that is None or
    not ``dim`` wide."""
    out = np.zeros((len(rows), dim), dtype=np.float32)
    for j, r in enumerate(rows):
        if r is not None and len(r) == dim:
            out[j] = r
    return out
