"""What the Elasticsearch adapter tests share: scopes, a chat with its nodes, edges and decisions,
the adapters, and the reads compared with the SQLite adapters. The fixtures on a fresh store
generation (``es``, ``stores``) are in this folder's conftest."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import pairwise

from storage.elastic.edges import ElasticEdgeStore
from storage.elastic.store import ElasticLexicalIndex, ElasticNodeStore
from storage.sqlite.store import SqliteEdgeStore, SqliteLexicalIndex, SqliteNodeStore
from topology import ids
from topology.schemas import VIEWS, ConsolidationDecision, EdgeEvent, MemoryNode, Observation, Scope
from topology.stages.memory_nodes import describe

A = Scope(tenant_id="tenant-a", conversation_id="conv-1")
B = Scope(tenant_id="tenant-b", conversation_id="conv-1")
A2 = Scope(tenant_id="tenant-a", conversation_id="conv-2")

CHAT = [
    ("Ana", "I adopted a puppy named Biscuit last week, he is a golden retriever."),
    ("Ben", "That's wonderful! How is Biscuit settling in?"),
    ("Ana", "He chews everything, so I bought him chew toys yesterday."),
    ("Ben", "I started training for the Berlin marathon because my doctor told me to exercise more."),
    ("Ana", "Good luck with the marathon! When is it?"),
    ("Ben", "It is on 24 September 2023. I run every morning before work."),
    ("Ana", "I love hiking in the Alps with my sister Clara."),
    ("Ben", "My favourite food is ramen, I cook it every Sunday."),
    ("Ana", "Biscuit learned to sit today, I am so proud of him."),
    ("Ben", "I hurt my knee while running, so I had to pause the training."),
    ("Ana", "Clara and I are planning a trip to Lisbon next month with Biscuit."),
    ("Ben", "My knee is better now and I am back to running the Berlin marathon training."),
]


def make_nodes(scope: Scope, chat: list[tuple[str, str]] = CHAT) -> list[MemoryNode]:
    """Observation nodes (seq 0..n-1, with embeddings that are not float32-exact) plus one derived node."""
    rng = random.Random(f"{scope.tenant_id}/{scope.conversation_id}")
    start = datetime(2023, 5, 1, 9, tzinfo=UTC)
    nodes = []
    for i, (speaker, content) in enumerate(chat):
        obs = Observation(tenant_id=scope.tenant_id, conversation_id=scope.conversation_id, event_id=f"ev-{i}",
                          content=content, speaker=speaker, observed_at=start + timedelta(hours=i),
                          metadata={"turn": i}, provenance={"source": "test"})
        node = describe(obs, i)
        nodes.append(node.model_copy(update={"embedding": [round(rng.uniform(-1, 1), 3) for _ in range(8)]}))
    derived = nodes[0].model_copy(update={
        "id": ids.stable_uuid("derived", nodes[0].id, nodes[8].id), "event_id": "derived-0-8", "kind": "derived",
        "seq": len(chat), "content": "Ana's puppy Biscuit is a golden retriever who learned to sit.",
        "derived_from": [nodes[0].id, nodes[8].id], "embedding": None})
    return [*nodes, derived]


def make_edges(nodes: list[MemoryNode]) -> list[EdgeEvent]:
    """Edges of every view, with tied probabilities (so the id tie-break matters)."""
    out = []
    for i, n in enumerate(nodes):
        for j in range(max(0, i - 3), i):
            view = VIEWS[(i + j) % len(VIEWS)]
            p = [0.5, 0.9, 0.5, 0.25][(i * j) % 4]
            label = f"{view}:{j}"
            out.append(EdgeEvent(id=ids.edge_id(view, n.id, nodes[j].id, label), tenant_id=n.tenant_id,
                                 conversation_id=n.conversation_id, view=view, source=n.id, target=nodes[j].id,
                                 direction="directed", probability=p, label=label, created_by="rule"))
    return out


def make_decisions(nodes: list[MemoryNode]) -> list[ConsolidationDecision]:
    return [ConsolidationDecision(id=ids.stable_uuid("consolidation", n.scope.key, n.id, m.id), tenant_id=n.tenant_id,
                                  conversation_id=n.conversation_id, run=1, left=n.id, right=m.id, redundant=0.1,
                                  contradiction=0.0, obsolete=0.2, link_useful=0.7,
                                  representation={"episodic": 0.5, "semantic": 0.5}, chosen="keep_separate")
            for n, m in pairwise(nodes)][:5]


@dataclass
class Stores:
    lex: ElasticLexicalIndex
    nodes: ElasticNodeStore
    edges: ElasticEdgeStore


async def write_all(s: Stores | tuple[SqliteLexicalIndex, SqliteNodeStore, SqliteEdgeStore],
                    nodes: list[MemoryNode], edges: list[EdgeEvent], decisions: list[ConsolidationDecision],
                    lexical_first: bool = True) -> None:
    lex, ns, es_ = (s.lex, s.nodes, s.edges) if isinstance(s, Stores) else s
    if lexical_first:
        await lex.upsert(nodes)
        await ns.upsert(nodes)
    else:
        await ns.upsert(nodes)
        await lex.upsert(nodes)
    await es_.upsert(edges)
    await es_.upsert_decisions(decisions)


async def snapshot(lex: object, ns: object, edges: object, scope: Scope, nodes: list[MemoryNode]) -> dict[str, object]:
    """Every deterministic read of the ports, keyed by a description of the call."""
    out: dict[str, object] = {}
    node_ids = [n.id for n in nodes]
    for n in nodes:
        ents = [e.id for e in n.entities]
        for limit in (1, 3, 50):
            out[f"overlapping {n.seq} {limit}"] = await lex.overlapping(scope, n.tokens, n.seq + 1, limit)  # type: ignore[attr-defined]
            out[f"entities {n.seq} {limit}"] = await ns.sharing_entities_before(scope, ents, n.seq + 1, limit)  # type: ignore[attr-defined]
            out[f"preceding {n.seq} {limit}"] = await ns.preceding(scope, n.seq + 1, limit)  # type: ignore[attr-defined]
        for views in (["semantic"], ["temporal", "causal"], list(VIEWS)):
            out[f"neighbours {n.seq} {views}"] = await edges.neighbours(scope, [n.id, *node_ids[:1]], views, 4)  # type: ignore[attr-defined]
    all_tokens = sorted({t for n in nodes for t in n.tokens})
    out["overlapping all"] = await lex.overlapping(scope, all_tokens, 10**6, 100)  # type: ignore[attr-defined]
    out["neighbours all"] = await edges.neighbours(scope, node_ids, list(VIEWS), 1000)  # type: ignore[attr-defined]
    out["seqs"] = await ns.seqs(scope, [n.event_id for n in nodes] + ["missing"])  # type: ignore[attr-defined]
    out["next_seq"] = await ns.next_seq(scope)  # type: ignore[attr-defined]
    out["observation_count"] = await ns.observation_count(scope)  # type: ignore[attr-defined]
    out["used_seqs"] = await ns.used_seqs(scope)  # type: ignore[attr-defined]
    out["get"] = await ns.get(scope, [*reversed(node_ids), "missing", node_ids[0]])  # type: ignore[attr-defined]
    out["list"] = await ns.scan(scope)  # type: ignore[attr-defined]
    out["edges"] = await edges.scan(scope)  # type: ignore[attr-defined]
    out["decisions"] = await edges.decisions(scope)  # type: ignore[attr-defined]
    return out
