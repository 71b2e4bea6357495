"""Observation files as the CLI reads them: JSONL (one observation a line, kept as raw bytes so an
invalid line can be dead-lettered) or a LoCoMo conversation file, and the Kafka record key of a
raw observation."""

from __future__ import annotations

from pathlib import Path

import orjson

from jevmem import locomo

__all__ = ["partition_key", "read_observation_payloads"]


def read_observation_payloads(path: Path, tenant: str, conversation: str | None) -> list[bytes]:
    """A LoCoMo file becomes observations; a JSONL file is read line by line (raw bytes, so
    invalid lines can be dead-lettered). ``tenant`` fills lines that omit ``tenant_id``."""
    raw = path.read_bytes()
    if path.suffix == ".json":
        data = orjson.loads(raw)
        if locomo.is_locomo(data):
            conv = conversation or f"locomo-{path.stem}"
            return [o.model_dump_json().encode() for o in locomo.observations(data, tenant, conv)]
    out = []
    for line in raw.splitlines():
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            out.append(line)
            continue
        if isinstance(obj, dict):
            obj.setdefault("tenant_id", tenant)
            if conversation:
                obj.setdefault("conversation_id", conversation)
            out.append(orjson.dumps(obj))
        else:
            out.append(line)
    return out


def partition_key(raw: bytes) -> str:
    """The record key of a raw observation (:attr:`Scope.key`, the key the worker and the SDK use,
    unambiguous for any ids), or "invalid" when it has no valid scope (it will be dead-lettered)."""
    from pydantic import ValidationError

    from topology.schemas import Scope

    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return "invalid"
    if not isinstance(obj, dict):
        return "invalid"
    try:
        return Scope(tenant_id=obj.get("tenant_id"), conversation_id=obj.get("conversation_id")).key
    except ValidationError:
        return "invalid"
