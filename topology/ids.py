"""Deterministic identifiers: the same event always maps to the same node and edge ids.

Ids are UUID-formatted (Qdrant accepts UUIDs and unsigned ints only) and derived with
SHA-256 over length-prefixed parts, so no separator inside a value can forge a collision.
"""

from __future__ import annotations

import hashlib
import uuid


def _digest(*parts: str) -> bytes:
    h = hashlib.sha256()
    for part in parts:
        raw = part.encode("utf-8")
        h.update(len(raw).to_bytes(8, "big"))
        h.update(raw)
    return h.digest()


def stable_uuid(*parts: str) -> str:
    """A UUID string that is a pure function of ``parts``."""
    return str(uuid.UUID(bytes=_digest(*parts)[:16], version=5))


def node_id(tenant_id: str, conversation_id: str, event_id: str) -> str:
    """Canonical node id of one observation."""
    return stable_uuid("node", tenant_id, conversation_id, event_id)


def edge_id(view: str, source: str, target: str, label: str) -> str:
    """Edge id: one edge per (view, source, target, label); re-judging upserts it."""
    return stable_uuid("edge", view, source, target, label)


def decision_id(conversation_key: str, left: str, right: str, run: int) -> str:
    """Consolidation decision id for one pair in one consolidation run."""
    a, b = sorted((left, right))
    return stable_uuid("consolidation", conversation_key, a, b, str(run))


def derived_node_id(left: str, right: str, representation: str) -> str:
    """Id of a System-Two-written derived node (merge/promote) over two source nodes."""
    a, b = sorted((left, right))
    return stable_uuid("derived", a, b, representation)
