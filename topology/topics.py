"""The distributed dataflow: topic names, keys, partitions and retention.

Every topic is keyed by ``tenant_id/conversation_id`` (:attr:`Scope.key`), so one conversation is
ordered and owned by one partition end to end. Values are orjson-encoded schema models carrying
``schema_version``. Retention: the observation, memory, edge and consolidation topics are the
system of record (kept forever, ``retention.ms=-1``) so memory can be rebuilt by replay; the
intermediate topics are kept a week for debugging; dead letters a month.

Forgetting: a :class:`~topology.schemas.Forget` travels on the observations topic; the worker logs
a :class:`~topology.schemas.Forgotten` marker on the memories, edges and consolidation topics (see
``streams.forget``). Records carry ``op`` to tell them apart (``decode_input``, ``decode_logged``).
Forgetting deletes from the stores; the topics keep their records, and replay applies the forgets
again. With encryption on (``topology.sealing``), records carry their personal fields sealed under
a key per observation, and a forget destroys those keys, so what it forgot is unreadable in the log
too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

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

    def config(self, min_insync_replicas: int | None = None) -> dict[str, str]:
        """The topic-level configuration it is created with."""
        conf = {"retention.ms": str(self.retention_ms), "cleanup.policy": "delete"}
        if min_insync_replicas is not None:
            conf["min.insync.replicas"] = str(min_insync_replicas)
        return conf


@dataclass(frozen=True)
class TopicLayout:
    """How the pipeline's topics are laid out on the cluster: partitions (the most workers that
    share the load), replication factor and ``min.insync.replicas`` (with ``acks=all``, a write
    is acknowledged once that many replicas have it, so ``replication_factor -
    min_insync_replicas`` brokers may be lost without losing an acknowledged record or stopping
    writes), and retention overrides per role (milliseconds, -1 forever)."""

    partitions: int = 12
    replication_factor: int = 3
    min_insync_replicas: int = 2
    retention_ms: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.partitions < 1 or self.replication_factor < 1 or self.min_insync_replicas < 1:
            raise ValueError("partitions, replication factor and min.insync.replicas must be at least 1")
        if self.min_insync_replicas > self.replication_factor:
            raise ValueError(f"min.insync.replicas {self.min_insync_replicas} exceeds the replication factor "
                             f"{self.replication_factor}: no write could ever be acknowledged")
        unknown = set(self.retention_ms) - set(topics())
        if unknown:
            raise ValueError(f"retention for unknown topic roles {sorted(unknown)}; roles: {sorted(topics())}")

    def specs(self, prefix: str) -> dict[str, TopicSpec]:
        """:func:`topics` with this layout's retention overrides applied."""
        return {role: TopicSpec(s.name, s.schema, self.retention_ms.get(role, s.retention_ms), s.purpose)
                for role, s in topics(prefix).items()}


@dataclass(frozen=True)
class TopicState:
    """An existing topic as the cluster describes it."""

    name: str
    partitions: int
    replication_factor: int  # the smallest replica count of its partitions
    min_insync_replicas: int | None = None


def layout_problems(layout: TopicLayout, state: TopicState) -> tuple[list[str], list[str]]:
    """``(errors, warnings)`` of an existing topic against the configured ``layout``, each a
    sentence that says what to do. Fewer partitions than configured is an error (adding
    partitions moves conversations to other partitions, so it is an operator's decision), as is
    a lower replication factor (the durability configured is not there); more of either is a
    warning, as is a lower ``min.insync.replicas``."""
    errors: list[str] = []
    warnings: list[str] = []
    if state.partitions < layout.partitions:
        errors.append(f"topic {state.name} has {state.partitions} partitions, {layout.partitions} configured: set "
                      f"JEVMEM_PARTITIONS={state.partitions} to use it as it is (adding partitions to a topic moves "
                      "conversations to other partitions: do that only on an empty topic, or with a new topic prefix)")
    elif state.partitions > layout.partitions:
        warnings.append(f"topic {state.name} has {state.partitions} partitions, {layout.partitions} configured: "
                        f"set JEVMEM_PARTITIONS={state.partitions}")
    if state.replication_factor < layout.replication_factor:
        errors.append(f"topic {state.name} has replication factor {state.replication_factor}, "
                      f"{layout.replication_factor} configured: add replicas with kafka-reassign-partitions, or set "
                      f"JEVMEM_KAFKA_REPLICATION_FACTOR={state.replication_factor} to accept it")
    elif state.replication_factor > layout.replication_factor:
        warnings.append(f"topic {state.name} has replication factor {state.replication_factor}, "
                        f"{layout.replication_factor} configured")
    if state.min_insync_replicas is not None and state.min_insync_replicas < layout.min_insync_replicas:
        warnings.append(f"topic {state.name} has min.insync.replicas={state.min_insync_replicas}, "
                        f"{layout.min_insync_replicas} configured: raise it with kafka-configs --alter "
                        f"--add-config min.insync.replicas={layout.min_insync_replicas}")
    return errors, warnings


def topics(prefix: str = "jevmem") -> dict[str, TopicSpec]:
    """All topics of the pipeline, by role, with their default retention."""
    return {spec.name.split(".")[1]: spec for spec in (
        TopicSpec(f"{prefix}.observations.v1", Observation, FOREVER, "observations and forget requests (system of record)"),
        TopicSpec(f"{prefix}.memories.v1", MemoryNode, FOREVER, "typed memory nodes with embeddings, and forget markers"),
        TopicSpec(f"{prefix}.candidates.v1", CandidateSet, WEEK_MS, "candidate sets per new node (its node without embedding)"),
        TopicSpec(f"{prefix}.judgments.v1", RelationJudgment, WEEK_MS, "System One relation judgments"),
        TopicSpec(f"{prefix}.edges.v1", EdgeEvent, FOREVER, "edge events of the four views, and forget markers"),
        TopicSpec(f"{prefix}.consolidation.v1", ConsolidationDecision, FOREVER, "consolidation decisions, and forget markers"),
        TopicSpec(f"{prefix}.deadletters.v1", DeadLetter, 30 * 24 * 3600 * 1000, "rejected input + reason + offset"),
    )}
