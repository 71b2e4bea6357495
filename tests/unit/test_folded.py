"""Cue patterns on folded text match as case-insensitive patterns do (topology.systemone.folded)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology.systemone import turn_kinds, update_model
from topology.systemone.folded import cue, fold

PATTERNS = [p.pattern for p in (update_model.CUE, update_model.FACT, update_model.NEGATION, update_model.QUESTION,
                                *update_model.SLOTS.values())]
WORDS = ["I", "MY", "Now", "moved", "NOT", "don't", "Lisbon", "in", "a", "Manager", "is", "?", "who", "LIVE",
         "split up", "Work", "ſ", "é", "İ", ".", ","]


@given(st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join))
def test_a_cue_on_folded_text_finds_what_ignorecase_finds(text: str) -> None:
    folded = fold(text)
    assert len(folded) == len(text)
    for pattern in PATTERNS:
        want = re.compile(pattern, re.IGNORECASE).search(text.replace("ſ", "_").replace("İ", "_"))
        got = cue(pattern).search(folded.replace("ſ", "_").replace("İ", "_"))
        assert (got and got.span()) == (want and want.span()), (pattern, text)


def test_a_cue_written_with_an_upper_case_letter_is_refused() -> None:
    with pytest.raises(ValueError, match="lower case"):
        cue(r"\bin\s+[A-Z]")
    assert cue(r"\S+\B").search("ab")  # escapes are not letters of the pattern


def test_turn_features_read_cues_whatever_the_case() -> None:
    assert turn_kinds.turn_features("THANKS SO MUCH, SEE YOU!", "user") == \
        turn_kinds.turn_features("thanks so much, see you!", "user")
    shout = update_model.analyse("I MOVED TO LISBON, NOT PORTO")
    assert shout.first and shout.cue and shout.negated and "residence" in shout.slots
