"""Train the learned attribute model (:mod:`topology.systemone.attribute_model`).

    python scripts/train_attributes.py [--out FILE] [--seed S] [--repeats N] [--contexts N] [--l2 L] [--attributes FOLD]

Examples come from :func:`jevmem.bench.attributes_data.examples` (our generators' wording
tables, labelled with their attribute; small talk and unrelated requests are ``none``). Each text
is embedded by the default model alone, and read after another line, small talk or a statement
(as the write path embeds a turn after the turn before it), less half that line's vector. The model is fitted on the
*training* templates only; the script prints its accuracy on the training and on the *held-out*
templates, per wording part, as JSON, and writes the weights to ``--out`` (default: the package
file for the default model). The same arguments give the same weights. About 15 s on two cores.

``--attributes a`` (or ``b``) fits the model on one fold of the attributes only
(:mod:`jevmem.bench.folds`; ``--out`` is then required) and adds ``heldout_attributes``: how the
model reads statements and questions of the other fold's attributes, which it never saw, in
every wording: the share it reads as one attribute it knows with at least
:data:`~topology.stages.updates.MIN_ABOUT` (``read_as_known``: what would make the read path act
on a wrong attribute), beside that share on its own attributes' held-out wordings.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from jevmem.bench.attributes_data import REPEATS, SEED, Example, embedded_after, examples
from jevmem.bench.folds import FOLDS, Fold, attributes_of, other
from topology.embedding import default_embedder
from topology.ports import Embedder
from topology.stages.updates import MIN_ABOUT
from topology.systemone.attribute_model import AttributeModel, fit, shipped_file

CONTEXTS = 1
"""Times each example is also read after another line (:func:`vectors`)."""
CONTEXT = 0.5
"""How much of the vector of the line a turn was read after the model takes off (the model records
it: :attr:`~topology.systemone.attribute_model.AttributeModel.context`)."""
L2 = 0.01
"""Ridge on standardised inputs; held-out accuracy is flat from 0.003 to 0.03."""


def vectors(rows: Sequence[Example], embedder: Embedder, seed: int = SEED, contexts: int = CONTEXTS,
            context: float = CONTEXT, attributes: frozenset[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The model's inputs for each row: its text embedded alone, and ``contexts`` times read after
    another line minus ``context`` times that line's vector
    (:func:`~jevmem.bench.attributes_data.embedded_after`), so that the model learns what a turn
    itself is about whatever came before it: (alone, after: ``contexts`` blocks in ``rows`` order)."""
    texts = [r[0] for r in rows]
    alone = np.asarray(embedder.embed(texts), dtype=np.float64)
    after, before = embedded_after(texts, embedder, seed, contexts, attributes)
    return alone, after - context * before


def accuracy(model: AttributeModel, x: np.ndarray, rows: Sequence[Example]) -> dict[str, Any]:
    """Share of ``rows`` whose most probable class is their label, overall and per part."""
    guess = model.probabilities(x).argmax(axis=1)
    hits: dict[str, list[bool]] = defaultdict(list)
    for g, (_, label, part, _) in zip(guess, rows, strict=True):
        hits[part].append(model.labels[g] == label)
    every = [h for v in hits.values() for h in v]
    return {"examples": len(every), "accuracy": round(float(np.mean(every)), 4),
            "by_part": {p: round(float(np.mean(v)), 4) for p, v in sorted(hits.items())}}


def read_as_known(model: AttributeModel, x: np.ndarray) -> float:
    """Share of rows of ``x`` that ``model`` reads as one attribute it knows with p >= MIN_ABOUT."""
    p = model.probabilities(x)
    known = np.delete(p, model.none, axis=1)
    return round(float((known.max(axis=1) >= MIN_ABOUT).mean()), 4) if len(x) else 0.0


def train(seed: int = SEED, repeats: int = REPEATS, l2: float = L2, contexts: int = CONTEXTS,
          fold: Fold = "all") -> tuple[AttributeModel, dict[str, Any]]:
    """The model fitted on the training templates (of ``fold``'s attributes), and its accuracy
    on both splits (and, for one fold, its reading of the other fold's attributes)."""
    embedder = default_embedder()
    attributes = attributes_of(fold)
    rows = examples(seed, repeats, attributes)
    alone, after = vectors(rows, embedder, seed, contexts, attributes=attributes)
    held = np.asarray([r[3] for r in rows])
    held_after = np.tile(held, contexts)
    classes = sorted({r[1] for r in rows})
    train_rows = [r for r, h in zip(rows, held, strict=True) if not h]
    held_rows = [r for r, h in zip(rows, held, strict=True) if h]
    model = fit(np.concatenate([alone[~held], after[~held_after]]), [r[1] for r in train_rows] * (1 + contexts),
                classes, l2=l2, meta={"script": "scripts/train_attributes.py", "seed": seed, "repeats": repeats,
                                      "contexts": contexts, "l2": l2, "examples": (1 + contexts) * len(train_rows),
                                      "embedder": embedder.name, "attributes": fold}, context=CONTEXT)
    report = {"train": accuracy(model, alone[~held], train_rows),
              "heldout": accuracy(model, alone[held], held_rows),
              "heldout_after_a_line": accuracy(model, after[held_after], held_rows * contexts)}
    model.meta["heldout_accuracy"] = {"alone": report["heldout"]["accuracy"],
                                      "after_a_line": report["heldout_after_a_line"]["accuracy"]}
    if attributes is not None:
        unseen = [r for r in examples(seed, repeats, attributes_of(other(fold))) if r[1] != "none"]
        x = np.asarray(embedder.embed([r[0] for r in unseen]), dtype=np.float64)
        own = alone[held & np.asarray([r[1] != "none" for r in rows])]
        report["heldout_attributes"] = {
            "attributes": sorted({r[1] for r in unseen}), "examples": len(unseen),
            "read_as_known": read_as_known(model, x),
            "by_part": {part: read_as_known(model, x[[i for i, r in enumerate(unseen) if r[2] == part]])
                        for part in sorted({r[2] for r in unseen})},
            "own_heldout_wordings_read_as_known": read_as_known(model, own)}
    return model, report


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="default: the package file for the default model")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--repeats", type=int, default=REPEATS)
    ap.add_argument("--l2", type=float, default=L2)
    ap.add_argument("--contexts", type=int, default=CONTEXTS)
    ap.add_argument("--attributes", choices=FOLDS, default="all",
                    help="fit on one fold of the attributes (jevmem.bench.folds); needs --out")
    args = ap.parse_args(argv)
    if args.attributes != "all" and args.out is None:
        ap.error("--attributes a or b writes a model for validation only: give --out")
    model, report = train(args.seed, args.repeats, args.l2, args.contexts, args.attributes)
    out = args.out or Path("topology/systemone") / shipped_file(model.meta["embedder"])
    out.write_bytes(model.to_json() + b"\n")
    sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")


if __name__ == "__main__":
    main()
