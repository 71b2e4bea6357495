"""The body of an Elasticsearch edge group: the table :func:`encode_body` writes reads back as the
edges it was given, an earlier release's body (a JSON array of edge objects) reads as the same
edges, and anything else is refused."""

from __future__ import annotations

import orjson
import pytest

from storage.elastic.edges import _Edge, decode_body, encode_body
from topology import ids
from topology.schemas import VIEWS, EdgeEvent

TENANT, CONVERSATION = "tenant-a", "conv-1"


def group(n: int = 12) -> list[EdgeEvent]:
    """A conversation's edges as the write path makes them: each turn linked to the three before
    it, in several views and labels, with probabilities that are not round."""
    nodes = [ids.node_id(TENANT, CONVERSATION, f"ev-{i}") for i in range(n)]
    out = []
    for i in range(1, n):
        for j in range(max(0, i - 3), i):
            view = VIEWS[(i + j) % len(VIEWS)]
            label = ["consolidation_link", "supersedes", "follows"][(i * j) % 3]
            out.append(EdgeEvent(id=ids.edge_id(view, nodes[i], nodes[j], label), tenant_id=TENANT,
                                 conversation_id=CONVERSATION, view=view, source=nodes[i], target=nodes[j],
                                 direction="directed" if view == "causal" else "undirected",
                                 probability=round(0.1 + ((i * 7 + j * 3) % 90) / 100.0, 4), label=label,
                                 created_by="system_one" if j % 2 else "rule"))
    return out


def test_a_group_reads_back_as_the_edges_written() -> None:
    edges = group()
    read = decode_body(encode_body([_Edge.of(e) for e in edges]))
    assert [e.event(TENANT, CONVERSATION) for e in read] == edges


def test_a_body_of_an_earlier_release_reads_as_the_same_edges() -> None:
    edges = group()
    legacy = orjson.dumps([e.model_dump(mode="json") for e in edges])
    assert decode_body(legacy) == decode_body(encode_body([_Edge.of(e) for e in edges]))


def test_the_table_says_each_endpoint_and_word_once() -> None:
    """What a read parses: the scope, field names, endpoints and words are not repeated per edge."""
    edges = group(40)
    table = encode_body([_Edge.of(e) for e in edges])
    legacy = orjson.dumps([e.model_dump(mode="json") for e in edges])
    assert len(table) < 0.4 * len(legacy)
    doc = orjson.loads(table)
    assert len(doc["n"]) == 40 and sorted(doc["k"]) == sorted(
        {e.view for e in edges} | {e.label for e in edges} | {e.direction for e in edges} | {e.created_by for e in edges})


@pytest.mark.parametrize("body", ['{"v": 3, "n": [], "k": [], "e": []}', '{"edges": []}', '"text"', "7"])
def test_a_body_of_an_unknown_format_is_refused(body: str) -> None:
    with pytest.raises(ValueError, match="unknown format"):
        decode_body(body)
