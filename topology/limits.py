"""Input limits and text rules, enforced wherever input enters (HTTP, topics, files).

Every limit here is part of the public contract (docs/security.md). An input that breaks
one is rejected with a reason naming the field; nothing is silently truncated except the copy of
the original kept in a dead letter (``DEAD_LETTER_ORIGINAL_BYTES``).
"""

from __future__ import annotations

import base64
import math
from datetime import UTC, datetime
from typing import Any, Literal

MAX_ID = 200  # tenant, conversation and event ids (characters)
MAX_CONTENT = 100_000  # observation content (characters)
MAX_SPEAKER = 200
MAX_ROLE = 64
MAX_ENTITIES = 64
MAX_PROVENANCE = 32
MAX_PROVENANCE_KEY = 100
MAX_PROVENANCE_VALUE = 1_000
MAX_METADATA_BYTES = 16_384  # metadata as compact JSON
MAX_METADATA_DEPTH = 8
MAX_QUESTION = 4_000
MAX_BATCH_ITEMS = 1_000  # observations per HTTP request (413 above)
MAX_BODY_BYTES = 8 * 1024 * 1024  # any HTTP request body (413 above)
DEAD_LETTER_ORIGINAL_BYTES = 65_536  # a dead letter keeps at most this much of the original (UTF-8)
EARLIEST = datetime(1900, 1, 1, tzinfo=UTC)
LATEST = datetime(2200, 1, 1, tzinfo=UTC)
_INT64 = 2**63


def text_problem(value: str, *, control: bool) -> str | None:
    """Why ``value`` is not acceptable text, or None. Lone surrogates (not encodable as UTF-8) and
    NUL are never accepted; with ``control`` every other C0 control character and DEL are refused
    too (ids), otherwise tab, newline and carriage return are allowed (free text)."""
    for ch in value:
        o = ord(ch)
        if 0xD800 <= o <= 0xDFFF:
            return "contains a lone surrogate (not valid unicode)"
        if o == 0:
            return "contains a NUL character"
        if (o < 0x20 or o == 0x7F) and (control or ch not in "\t\n\r"):
            return f"contains the control character U+{o:04X}"
    return None


def check_text(value: str, *, control: bool = False) -> str:
    """``value`` unchanged, or ValueError with the reason (for pydantic validators)."""
    problem = text_problem(value, control=control)
    if problem is not None:
        raise ValueError(problem)
    return value


def check_json_value(value: Any, *, depth: int = 0, path: str = "metadata") -> None:
    """Raise ValueError unless ``value`` is plain JSON within the depth limit: dict keys are text,
    strings are valid unicode without NUL, numbers are finite and fit in 64 bits."""
    if depth > MAX_METADATA_DEPTH:
        raise ValueError(f"{path}: nested deeper than {MAX_METADATA_DEPTH} levels")
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{path}: keys must be strings")
            check_text(k)
            check_json_value(v, depth=depth + 1, path=f"{path}.{k[:40]}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            check_json_value(v, depth=depth + 1, path=f"{path}[{i}]")
    elif isinstance(value, str):
        problem = text_problem(value, control=False)
        if problem:
            raise ValueError(f"{path}: {problem}")
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise ValueError(f"{path}: integer outside the 64-bit range")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path}: numbers must be finite")
    else:
        raise ValueError(f"{path}: {type(value).__name__} is not a JSON value")


def utc_in_range(value: datetime) -> datetime:
    """``value`` as an aware UTC datetime (naive values are taken as UTC), or ValueError when it
    lies outside [``EARLIEST``, ``LATEST``)."""
    aware = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if not EARLIEST <= aware < LATEST:
        raise ValueError(f"must lie between {EARLIEST.date()} and {LATEST.date()}")
    return aware


def bounded_original(original: bytes | str) -> tuple[str, bool, int, Literal["utf-8", "base64"]]:
    """What a dead letter keeps of ``original``: its bytes as they came, at most
    ``DEAD_LETTER_ORIGINAL_BYTES`` of them, as text when they are UTF-8 (without NUL) and in
    base64 otherwise; whether they were cut, their full size, and which of the two it is."""
    raw = original if isinstance(original, bytes) else original.encode("utf-8", "surrogatepass")
    cut = len(raw) > DEAD_LETTER_ORIGINAL_BYTES
    kept = raw[:DEAD_LETTER_ORIGINAL_BYTES]
    try:
        text = kept.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not (cut and exc.start >= len(kept) - 3 and exc.reason == "unexpected end of data"):
            return base64.b64encode(kept).decode("ascii"), cut, len(raw), "base64"
        text = kept[:exc.start].decode("utf-8")  # the cut fell inside one character
    if "\x00" in text:
        return base64.b64encode(kept).decode("ascii"), cut, len(raw), "base64"
    return text, cut, len(raw), "utf-8"
