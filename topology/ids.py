"""Deterministic identifiers: the same event always maps to the same node and edge ids.

Ids are UUID-formatted (Qdrant accepts UUIDs and unsigned ints only) and derived with
SHA-256 over length-prefixed parts, so no separator inside a value can forge a collision.
"""

from __future__ import annotations

import hashlib


def _digest(*parts: str) -> bytes:
    buf = bytearray()
    for part in parts:
        raw = part.encode("utf-8")
        buf += len(raw).to_bytes(8, "big")
        buf += raw
    return hashlib.sha256(buf).digest()


def stable_uuid(*parts: str) -> str:
    """A UUID string that is a pure function of ``parts``: the first 16 bytes of the digest with
    the version-5 and RFC 4122 variant bits set, formatted as ``str(uuid.UUID(bytes=..., version=5))``
    would (built directly: edge ids are minted for every judged pair, and ``uuid.UUID`` is slow)."""
    d = bytearray(_digest(*parts)[:16])
    d[6] = (d[6] & 0x0F) | 0x50
    d[8] = (d[8] & 0x3F) | 0x80
    h = d.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


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
