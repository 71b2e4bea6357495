"""The update judge's wide pool: attributes beyond the benches' tables.

The benches (:mod:`jevmem.bench.updates_data`, :mod:`jevmem.bench.users_data`) ask about a few
attributes; a user's history holds facts of any kind. These tables (the services a person uses
and what they own, their habits and tastes, their circles and places) are written in the same
:class:`jevmem.bench.updates_data.Attribute` format, each with ``remark`` wordings (the same thing
spoken of again, unchanged), and serve only to fit and validate the update judge
(``scripts/train_update_judge.py --wide``): no bench asks about them, and no attribute model
learns them, so to every reader but the judge they are attributes it does not know, as a
stranger's facts are.

Contract: names are unique and none is a bench attribute's; :data:`WIDE_FOLDS` splits them in two
(sorted by name, taken in turn) so the judge can be fitted on one half and validated on the other.
"""

from __future__ import annotations

from typing import Literal

from jevmem.bench.updates_data import Attribute
from jevmem.bench.wide import circles, habits, services

WideFold = Literal["none", "a", "b", "all"]
WIDE_CHOICES: tuple[WideFold, ...] = ("none", "a", "b", "all")

WIDE: tuple[Attribute, ...] = services.ATTRIBUTES + habits.ATTRIBUTES + circles.ATTRIBUTES
"""Every attribute of the wide pool."""

_NAMES = sorted(a.name for a in WIDE)
WIDE_FOLDS: dict[str, frozenset[str]] = {"a": frozenset(_NAMES[0::2]), "b": frozenset(_NAMES[1::2])}
"""fold -> the names in it."""


def wide(fold: WideFold) -> tuple[Attribute, ...]:
    """The wide attributes of ``fold`` (``none``: no attribute, ``all``: every one); ValueError for another."""
    if fold not in WIDE_CHOICES:
        raise ValueError(f"wide fold must be one of {WIDE_CHOICES}, not {fold!r}")
    if fold == "none":
        return ()
    return WIDE if fold == "all" else tuple(a for a in WIDE if a.name in WIDE_FOLDS[fold])


def held_out(fold: WideFold) -> tuple[Attribute, ...]:
    """The wide attributes a judge fitted with ``fold`` never saw (``a`` <-> ``b``; none for ``all``,
    every one for ``none``)."""
    return {"a": wide("b"), "b": wide("a"), "none": WIDE}.get(fold, ())

