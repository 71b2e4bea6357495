"""Validation of submitted observations, shared by the HTTP API and the MCP server.

Each item is validated on its own (``topology.schemas.Observation`` and ``topology.limits``); the
tenant always comes from the caller's key. A bad item becomes a reason and a bounded dead letter
for that tenant; the valid items are returned for writing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from topology.schemas import DeadLetter, Observation, describe


class ItemError(BaseModel):
    index: int
    reason: str


def safe(text: str) -> str:
    """``text`` encodable as UTF-8 (lone surrogates escaped), for error messages."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def dump(raw: Any) -> str:
    """A JSON copy of a parsed item for a dead letter (any parsed value, lone surrogates escaped)."""
    try:
        return orjson.dumps(raw).decode()
    except TypeError:
        return json.dumps(raw, ensure_ascii=True)


def validate_items(items: Sequence[Any], tenant_id: str, source: str,
                   defaults: Mapping[str, Callable[[], str]] | None = None,
                   ) -> tuple[list[Observation], list[ItemError], list[DeadLetter]]:
    """(valid observations, per-item errors, dead letters) of ``items``. ``defaults`` fills fields
    an item lacks (MCP: the call's conversation, a fresh event id); ``tenant_id`` replaces the
    item's (callers refuse an item naming another tenant before this). Dead letters are sourced
    ``{source}#{index}``."""
    good: list[Observation] = []
    errors: list[ItemError] = []
    letters: list[DeadLetter] = []
    for i, raw in enumerate(items):
        try:
            if not isinstance(raw, dict):
                raise ValueError(f"an observation must be a JSON object, got {type(raw).__name__}")
            if not isinstance(raw.get("tenant_id", ""), str):
                raise ValueError("tenant_id: must be a string (or omitted: the key's tenant)")
            item = dict(raw)
            for field, make in (defaults or {}).items():
                if field not in item:
                    item[field] = make()
            good.append(Observation.model_validate({**item, "tenant_id": tenant_id}))
        except (ValidationError, ValueError) as exc:
            reason = safe(describe(exc) if isinstance(exc, ValidationError) else str(exc))
            errors.append(ItemError(index=i, reason=reason))
            letters.append(DeadLetter.of(dump(raw), reason, f"{source}#{i}", tenant_id))
    return good, errors, letters
