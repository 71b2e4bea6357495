"""Case-insensitive cue patterns, matched on folded text.

Python's ``re.IGNORECASE`` costs about three times a case-sensitive search on the same pattern,
and System One's judges run dozens of cue patterns over every turn on the write path. A cue here
is written in lower case and compiled case-sensitive; it is matched on :func:`fold` of the text,
which lowercases the ASCII letters only, so every position in the folded text is the same
character's position in the text (a cased pattern's match and a cue's can be compared).

Contract: for a pattern whose letters are ASCII, ``cue(p).search(fold(t))`` finds what
``re.compile(p, re.IGNORECASE).search(t)`` finds, at the same positions, except for the four
non-ASCII letters Unicode case folding pairs with ASCII ones (the Kelvin sign, the long s and the
dotted and dotless i), which a cue does not match.
"""

from __future__ import annotations

import re
import string

_FOLD = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_ESCAPE = re.compile(r"\\.")


def fold(text: str) -> str:
    """``text`` with its ASCII letters in lower case (same length, same positions)."""
    return text.translate(_FOLD)


def cue(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled to match :func:`fold`-ed text. Raises ValueError for a pattern with an
    upper-case letter outside an escape (``\\S``, ``\\B``): it could never match folded text."""
    if any(c.isupper() for c in _ESCAPE.sub("", pattern)):
        raise ValueError(f"a cue pattern is written in lower case: {pattern!r}")
    return re.compile(pattern)
