"""The update judge's wide pool: attributes beyond the benches' tables, and their pairs."""

from __future__ import annotations

import string

from jevmem.bench.folds import ATTRIBUTE_FOLDS
from jevmem.bench.update_pairs import judge_pairs
from jevmem.bench.updates_data import ATTRIBUTES, PARTS
from jevmem.bench.wide import WIDE, WIDE_FOLDS, held_out, wide

SLOTS = {"v", "old", "who", "who_l", "name"}


def test_the_wide_pool_names_no_bench_attribute_and_splits_in_two_halves() -> None:
    names = [a.name for a in WIDE]
    assert len(names) == len(set(names)) >= 30
    bench = {a.name for a in ATTRIBUTES} | set().union(*ATTRIBUTE_FOLDS.values())
    assert not set(names) & bench
    assert WIDE_FOLDS["a"] | WIDE_FOLDS["b"] == set(names) and not WIDE_FOLDS["a"] & WIDE_FOLDS["b"]
    assert {a.name for a in held_out("a")} == WIDE_FOLDS["b"] and held_out("all") == () and held_out("none") == WIDE
    assert wide("none") == () and wide("all") == WIDE


def test_every_wide_table_has_three_wordings_and_fills_with_its_slots() -> None:
    for a in WIDE:
        assert len(a.values) >= 10 and len(set(a.values)) == len(a.values), a.name
        for part in (*PARTS, "remark"):
            table = getattr(a, part)
            assert len(table) >= 3, (a.name, part)
            for text in table:
                used = {f for _, f, _, _ in string.Formatter().parse(text) if f}
                assert used <= SLOTS, (a.name, part, text)
                assert "{old}" not in text or part in ("explicit", "contrast"), (a.name, part, text)


def test_wide_rounds_add_remarks_and_pairs_outside_the_gate_and_leave_the_tables_pairs_alone() -> None:
    tables = judge_pairs("train", rounds=2)
    with_wide = judge_pairs("train", rounds=2, extra=WIDE[:3], extra_rounds=1)
    assert {p.attribute for p in with_wide} >= {a.name for a in WIDE[:3]}
    wide_pairs = [p for p in with_wide if p.attribute in {a.name for a in WIDE[:3]}]
    kinds = {p.kind for p in wide_pairs}
    assert {"remark", "assistant", "own_question"} <= kinds
    assert not any(p.label for p in wide_pairs if p.kind in ("remark", "assistant", "own_question"))
    assert not {"remark", "assistant", "own_question"} & {p.kind for p in tables}
    # the tables' rounds hold as many updates whatever else is in the pool
    table_pairs = [p for p in with_wide if p.attribute not in {a.name for a in WIDE[:3]}]
    assert sum(p.label for p in table_pairs) == sum(p.label for p in tables) == 7 * 2 * len(ATTRIBUTES)
