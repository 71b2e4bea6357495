"""Node documents decoded once and kept while unchanged (:mod:`storage.elastic.decoded`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from storage.elastic.decoded import DecodedNodes, encode_vector, full_node, rows_matrix
from topology.schemas import MemoryNode


def _node(i: int, content: str = "I ride a steel commuter bike.") -> MemoryNode:
    return MemoryNode(id=f"n{i}", tenant_id="t", conversation_id="c", event_id=f"e{i}", seq=i, content=content,
                      speaker="ana", role="user")


def _doc(n: MemoryNode, seq_no: int, embedding: list[float] | None, context: list[float] | None = None,
         legacy: bool = False) -> dict[str, Any]:
    src: dict[str, Any] = {"tenant_id": n.tenant_id, "conversation_id": n.conversation_id,
                           "body": orjson.dumps(n.without_embedding().model_dump(mode="json")).decode()}
    if embedding is not None:
        if legacy:  # an early release's JSON list
            src["embedding"] = embedding
        else:
            src["embedding_f32"] = encode_vector(embedding)
            src["context_f16"] = encode_vector(context, "<f2") if context is not None else None
    return {"_id": n.id, "_seq_no": seq_no, "_primary_term": 1, "found": True, "_source": src}


def test_a_documents_row_is_the_retrieval_vector_of_the_node_it_holds() -> None:
    emb, ctx = [0.5, -0.25, 0.125, 1.0], [0.25, 0.5, -1.0, 0.0]
    for doc in (_doc(_node(1), 7, emb), _doc(_node(1), 7, emb, ctx), _doc(_node(1), 7, emb, legacy=True)):
        node, row = DecodedNodes().take("idx", doc)
        full = full_node(doc["_source"], vectors=True)
        assert node == full.without_embedding() and node.embedding is None
        assert row is not None and row.dtype == np.float32
        assert np.array_equal(row, np.asarray(full.retrieval_vector(), dtype=np.float32))
    node, row = DecodedNodes().take("idx", _doc(_node(2), 1, None))
    assert row is None and np.array_equal(rows_matrix([row, np.ones(3, dtype=np.float32)], 4), np.zeros((2, 4)))


def test_a_node_is_decoded_again_only_when_its_document_changed() -> None:
    kept = DecodedNodes(limit=2)
    first, _ = kept.take("idx", _doc(_node(1), 7, [1.0, 0.0]))
    assert kept.take("idx", _doc(_node(1), 7, [1.0, 0.0]))[0] is first  # unchanged: the same object
    bare = {k: v for k, v in _doc(_node(1), 7, [1.0, 0.0]).items() if k != "_source"}  # its version only
    again = kept.take("idx", bare)
    assert kept.held("idx", "n1") is first and again is not None and again[0] is first
    assert kept.take("idx", {**bare, "_seq_no": 8}) is None  # changed since: to be read whole
    moved, _ = kept.take("idx", _doc(_node(1, "I ride a gravel bike now."), 8, [0.0, 1.0]))
    assert moved is not first and moved.content == "I ride a gravel bike now."  # a new version is read anew
    assert kept.take("other", _doc(_node(1), 8, [1.0, 0.0]))[0] is not moved  # another index, another node
    kept.take("idx", _doc(_node(2), 1, [1.0, 0.0]))
    assert len(kept) == 2  # at most its limit: the least recently read goes first
    assert kept.take("idx", _doc(_node(1, "I ride a gravel bike now."), 8, [0.0, 1.0]))[0] is not moved
