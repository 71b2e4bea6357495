"""Whole attributes held out: two folds of the attributes our generators know.

The learned parts that read attributes (the attribute model, the update judge) are fitted on the
attributes of one fold (``scripts/train_attributes.py --attributes a``,
``scripts/train_update_judge.py --attributes a``), and the benches are asked about the other
fold's only (``jevmem bench updates --attributes b``, ``jevmem bench users --attributes b``), so
that a figure measures facts of a kind the models never saw, not new wordings of known ones.

The folds split each generator's attributes about evenly, sorted by name and taken in turn; a
name both generators use ("car") is in one fold for both.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

Fold = Literal["a", "b", "all"]
FOLDS: tuple[Fold, ...] = ("a", "b", "all")

#: fold -> the attribute names in it (:mod:`jevmem.bench.updates_data`'s and
#: :mod:`jevmem.bench.users_data`'s; ``locker`` is the many-sessions fact)
ATTRIBUTE_FOLDS: dict[str, frozenset[str]] = {
    "a": frozenset({"car", "employer", "gym", "manager", "phone", "allergy", "diet", "job", "pet"}),
    "b": frozenset({"city", "food", "hobby", "partner", "birthday", "hometown", "locker", "sibling"}),
}


def attributes_of(fold: Fold) -> frozenset[str] | None:
    """The attribute names of ``fold`` (None for ``all``: every attribute); ValueError for another."""
    if fold == "all":
        return None
    if fold not in ATTRIBUTE_FOLDS:
        raise ValueError(f"fold must be one of {FOLDS}, not {fold!r}")
    return ATTRIBUTE_FOLDS[fold]


def other(fold: Fold) -> Fold:
    """The fold held out from ``fold`` (``all`` holds none out: ``all``)."""
    return {"a": "b", "b": "a"}.get(fold, "all")  # type: ignore[return-value]


def keep(names: Collection[str], attributes: frozenset[str] | None) -> list[str]:
    """``names`` in ``attributes`` (all of them when None), in order."""
    return [n for n in names if attributes is None or n in attributes]
