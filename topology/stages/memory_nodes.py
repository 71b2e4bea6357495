"""Node building and typing: entities, grounded dates, tokens, embedding, 4 type Nouls and the turn kind.

One embedding call and one System One request per batch, whatever its size.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from topology import ids, text
from topology.ports import Embedder
from topology.schemas import MemoryNode, Observation, TypeScores
from topology.systemone.catalog import TYPING
from topology.systemone.port import Item, SystemOne
from topology.systemone.turn_kinds import kind_distribution, statement_within
from topology.systemone.update_model import analyse, subjects


def embedding_text(speaker: str | None, content: str) -> str:
    """What gets embedded: the speaker matters to questions about people."""
    return f"{speaker}: {content}" if speaker else content


def describe(obs: Observation, seq: int) -> MemoryNode:
    """The untyped node of an observation (pure; no embedding yet)."""
    observed = obs.observed_at.date() if obs.observed_at else None
    refs = text.temporal_refs(obs.content, observed)
    # The speaker is a field, not an entity: "same speaker" would link half the conversation.
    extra = list(obs.entities)
    event_time = refs[0].start if refs else observed
    return MemoryNode(
        id=ids.node_id(obs.tenant_id, obs.conversation_id, obs.event_id),
        tenant_id=obs.tenant_id,
        conversation_id=obs.conversation_id,
        event_id=obs.event_id,
        user_id=obs.user_id,
        seq=seq,
        content=obs.content,
        speaker=obs.speaker,
        role=obs.role,
        recall=obs.recall,
        observed_at=obs.observed_at,
        event_time=event_time,
        provenance=obs.provenance,
        metadata=obs.metadata,
        entities=text.entities(obs.content, extra),
        temporal_refs=refs,
        tokens=text.tokens(obs.content),
    )


async def embed_texts(texts: Sequence[str], embedder: Embedder) -> list[list[float]]:
    """One embedding call, run off the event loop."""
    return await asyncio.to_thread(embedder.embed, list(texts)) if texts else []


def with_vectors(nodes: Sequence[MemoryNode], vectors: Sequence[list[float]]) -> list[MemoryNode]:
    """The nodes with their embeddings (``vectors`` in the same order)."""
    return [n.model_copy(update={"embedding": v}) for n, v in zip(nodes, vectors, strict=True)]


async def embed_nodes(nodes: Sequence[MemoryNode], embedder: Embedder) -> list[MemoryNode]:
    """The nodes with their embeddings: one embedding call, run off the event loop."""
    return with_vectors(nodes, await embed_texts([embedding_text(n.speaker, n.content) for n in nodes], embedder))


async def type_only(nodes: Sequence[MemoryNode], so: SystemOne) -> list[MemoryNode]:
    """The nodes with their 4 type scores and their turn kind (the ``kind`` Choice's distribution
    over statement, question, tool, advice, chatter, summing to 1): one System One request.
    A kind answer lacking a label is a :class:`~topology.errors.SystemOneError`."""
    if not nodes:
        return []
    items = [Item(TYPING, {"text": n.content, "speaker": n.speaker or "", "role": n.role}) for n in nodes]
    answers = await so.ask(items)
    out = []
    for node, ans in zip(nodes, answers, strict=True):
        kind = kind_distribution(ans.choices.get("kind", {}))
        kept = node.user_id is not None
        types = TypeScores(**{k: round(ans.p(k), 6) for k in ("episodic", "semantic", "procedural", "preference")},
                           kind={k: round(v, 6) for k, v in kind.items()},
                           states=statement_within(node.content, node.role) if kept else None,
                           subjects=sorted(subjects(analyse(node.content), node.speaker or "")) if kept else None)
        out.append(node.model_copy(update={"types": types}))
    return out


async def type_nodes(nodes: Sequence[MemoryNode], embedder: Embedder, so: SystemOne) -> list[MemoryNode]:
    """Embed and type a batch of nodes: one embedding call, one System One request."""
    return await type_only(await embed_nodes(nodes, embedder), so)
