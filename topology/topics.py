"""The distributed dataflow: topic names, keys, partitions and retention.

Every topic is keyed by ``tenant_id/conversation_id`` (:attr:`Scope.key`), so one conversation is
ordered and owned by one partition end to end. Values are orjson-encoded schema models carrying
``schema_version``. Retention: the observation, memory, edge and consolidation topics are the
system of record (kept forever, ``retention.ms=-1``) so memory can be rebuilt by replay; the
intermediate topics are kept a week for debugging; dead letters a month.

Forgetting: a :class:`~topology.schemas.Forget` travels on the observations topic; the worker logs
a :class:`~topology.schemas.Forgotten` marker on the memories, edges and consolidation topics (see
``streams.forget``). Records carry ``op`` to tell them apart (``decode_input``, ``decode_logged``).
Note that forgetting deletes from the stores, not from the topics: the log keeps the original
records (retention forever), and replay applies the forgets again.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from topology.schemas import (
    CandidateSet,
    ConsolidationDecision,
    DeadLetter,
    EdgeEvent,
    MemoryNode,
    Observation,
    RelationJudgment,
)

WEEK_MS = 7 * 24 * 3600 * 1000
FOREVER = -1


@dataclass(frozen=True)
class TopicSpec:
    name: str
    schema: type[BaseModel]
    retention_ms: int
    purpose: str

    def config(self) -> dict[str, str]:
        return {"retention.ms": str(self.retention_ms), "cleanup.policy": "delete"}


def topics(prefix: str = "jevmem") -> dict[str, TopicSpec]:
    """All topics of the pipeline, by role."""
    return {spec.name.split(".")[1]: spec for spec in (
        TopicSpec(f"{prefix}.observations.v1", Observation, FOREVER, "observations and forget requests (system of record)"),
        TopicSpec(f"{prefix}.memories.v1", MemoryNode, FOREVER, "typed memory nodes with embeddings, and forget markers"),
        TopicSpec(f"{prefix}.candidates.v1", CandidateSet, WEEK_MS, "candidate sets per new node"),
        TopicSpec(f"{prefix}.judgments.v1", RelationJudgment, WEEK_MS, "System One relation judgments"),
        TopicSpec(f"{prefix}.edges.v1", EdgeEvent, FOREVER, "edge events of the four views, and forget markers"),
        TopicSpec(f"{prefix}.consolidation.v1", ConsolidationDecision, FOREVER, "consolidation decisions, and forget markers"),
        TopicSpec(f"{prefix}.deadletters.v1", DeadLetter, 30 * 24 * 3600 * 1000, "rejected input + reason + offset"),
    )}
