"""Reading LoCoMo conversation files: turns become observations, questions stay separate.

Only the dialogue (turns, speakers, session dates, shared-image captions) becomes memory; the
files' ``observation``/``summary``/``events`` annotations and the QA labels never do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from topology.schemas import Observation

CATEGORIES = {1: "multi_hop", 2: "temporal", 3: "open_domain", 4: "single_hop", 5: "adversarial"}


@dataclass(frozen=True)
class Question:
    question: str
    evidence: tuple[str, ...]
    category: str


def is_locomo(data: Any) -> bool:
    return isinstance(data, dict) and "speaker_a" in data and any(k.startswith("session_") for k in data)


def _session_time(raw: str) -> datetime | None:
    try:
        return datetime.strptime(raw.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    except ValueError:
        return None


def observations(data: dict[str, Any], tenant: str, conversation: str) -> list[Observation]:
    """Turns in session order; a turn's time is its session's start plus one second per turn."""
    sessions = sorted((int(m.group(1)), k) for k in data if (m := re.fullmatch(r"session_(\d+)", k)))
    out = []
    for num, key in sessions:
        turns = data[key]
        if not isinstance(turns, list):
            continue
        start = _session_time(str(data.get(f"{key}_date_time", "")))
        for i, turn in enumerate(turns):
            content = str(turn.get("text", ""))
            if turn.get("blip_caption"):
                content += f" [shares an image: {turn['blip_caption']}]"
            out.append(Observation(
                tenant_id=tenant, conversation_id=conversation, event_id=str(turn["dia_id"]),
                content=content, speaker=turn.get("speaker"), role="user",
                observed_at=start + timedelta(seconds=i) if start else None,
                provenance={"source": "locomo", "session": str(num), "dia_id": str(turn["dia_id"])},
            ))
    return out


def questions(data: dict[str, Any]) -> list[Question]:
    """Questions that have evidence; evidence ids normalised ("D8:6; D9:17" -> two ids)."""
    out = []
    for qa in data.get("qa", []):
        ev = tuple(e for raw in qa.get("evidence", []) for e in re.split(r"[;,\s]+", str(raw)) if e)
        if ev:
            out.append(Question(str(qa["question"]), ev, CATEGORIES.get(int(qa["category"]), "other")))
    return out


def load(path: Path) -> dict[str, Any]:
    data = orjson.loads(path.read_bytes())
    if not is_locomo(data):
        raise ValueError(f"{path} is not a LoCoMo conversation file")
    return data  # type: ignore[no-any-return]
