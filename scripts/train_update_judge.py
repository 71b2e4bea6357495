"""Train the ``local`` System One's update judge (the relation task's ``updates`` Noul).

    python scripts/train_update_judge.py [--out FILE] [--rounds N] [--seed S] [--l2 L] [--wide FOLD]
        [--attributes FOLD --attribute-model FILE]

Builds labelled (older, newer) pairs from our own generator (:func:`jevmem.bench.update_pairs.judge_pairs`):
updates (a statement and its explicit, contrasting or cue-less update by the same person; a
third party's value and that party's update) and non-updates (look-alikes about someone else,
the same wording by another speaker, restatements, another attribute, small talk, the partner's
questions and acknowledgements). Fits the class-balanced logistic model
(:func:`topology.systemone.update_model.fit`, deterministic Newton steps) on the *training*
wordings only, prints precision, recall and accuracy at p >= 0.5 on the training and on the
*held-out* wordings (templates never seen in training), with accuracy per pair family, as JSON,
and writes the weights to ``--out`` (default: the package file,
``topology/systemone/update_model.json``). The pairs' attribute similarities
(:mod:`topology.systemone.attributes`) come from the default embedder, each text read after
another line (small talk or a statement);
the weights record its name (``meta.embedder``), and the write path sends the feature only under
that embedder. About 20 s on two cores, and a minute more for ``heldout_wide``.

``--wide a`` (``b``, ``all``) also fits on that half of the wide pool (:mod:`jevmem.bench.wide`:
36 attributes beyond the tables, with remarks that change nothing), and adds ``heldout_wide``:
its figures on the held-out wordings of the wide attributes it was not fitted on (with the
default ``none``, all of them: how the judge of the tables does on facts of other kinds).

``--attributes a`` (or ``b``) fits the judge on pairs about one fold of the attributes only
(:mod:`jevmem.bench.folds`; ``--out`` is then required), their similarities read by the
attribute model fitted on that fold (``--attribute-model``, from ``scripts/train_attributes.py
--attributes``), and adds ``heldout_attributes``: its figures on pairs about the other fold's
attributes in their held-out wordings, which it never saw.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from jevmem.bench.attributes_data import embedded_after
from jevmem.bench.folds import FOLDS, Fold, attributes_of, other
from jevmem.bench.update_pairs import ROUNDS, SEED, Pair, judge_pairs
from jevmem.bench.wide import WIDE_CHOICES, WideFold, held_out, wide
from topology.embedding import default_embedder
from topology.ports import Embedder
from topology.systemone.attribute_model import AttributeModel
from topology.systemone.attributes import AttributeSpace
from topology.systemone.features import RelationState
from topology.systemone.update_model import SHIPPED, UpdateModel, fit, update_features

L2 = 1.0
"""Ridge penalty on standardised features: the fit is stable and held-out accuracy is flat from 0.3 to 3."""
UNKNOWN_EVERY = 5
"""Every fifth training pair carries no attribute similarity (as from a caller without an embedder)."""
JUDGE_SEED = 11
"""Seed of the lines the pairs' texts are read after (not the attribute model's own)."""
THRESHOLD = 0.5
"""The probability the reported figures call an update (the fit weighs both classes equally)."""


def attributes(pairs: Sequence[Pair], embedder: Embedder, space: AttributeSpace | None = None,
               fold: frozenset[str] | None = None) -> list[float | None]:
    """Each pair's attribute similarity (:class:`AttributeSpace` of ``embedder``, each text read
    after another line as the write path reads a turn after the turn before it:
    :func:`jevmem.bench.attributes_data.embedded_after`, with the vectors of the lines they were read
    after), but None for every :data:`UNKNOWN_EVERY`-th
    pair: the judge also answers states that carry none. ``space``: default the embedder's (its
    shipped attribute model); ``fold``: the attributes the lines before are statements of."""
    space = space or AttributeSpace.of(embedder)
    texts = sorted({t for p in pairs for t in (p.older, p.newer)})
    vectors, before = embedded_after(texts, embedder, seed=JUDGE_SEED, attributes=fold)
    profiles = space.profiles(vectors.astype(np.float32), before.astype(np.float32))
    at = {t: i for i, t in enumerate(texts)}
    return [None if i % UNKNOWN_EVERY == UNKNOWN_EVERY - 1
            else round(float(profiles[at[p.older]] @ profiles[at[p.newer]]), 4) for i, p in enumerate(pairs)]


def matrix(pairs: Sequence[Pair], attribute: Sequence[float | None]) -> tuple[np.ndarray, np.ndarray]:
    """(features, labels) of ``pairs``, through the relation state the write path sends."""
    x = np.asarray([update_features(RelationState.model_validate({**p.state(), "attribute": a}))
                    for p, a in zip(pairs, attribute, strict=True)], dtype=np.float64)
    return x, np.asarray([1.0 if p.label else 0.0 for p in pairs])


def figures(model: UpdateModel, pairs: Sequence[Pair], attribute: Sequence[float | None]) -> dict[str, Any]:
    """Precision, recall and accuracy at :data:`THRESHOLD`, and accuracy per pair family."""
    x, y = matrix(pairs, attribute)
    said = model.probabilities(x) >= THRESHOLD
    truth = y > 0
    tp, fp, fn = int((said & truth).sum()), int((said & ~truth).sum()), int((~said & truth).sum())
    kinds: dict[str, list[bool]] = {}
    for p, s in zip(pairs, said, strict=True):
        kinds.setdefault(p.kind, []).append(bool(s) == p.label)
    return {
        "pairs": len(pairs), "updates": int(truth.sum()),
        "precision": round(tp / (tp + fp), 4) if tp + fp else 0.0,
        "recall": round(tp / (tp + fn), 4) if tp + fn else 0.0,
        "accuracy": round(float((said == truth).mean()), 4),
        "accuracy_by_kind": {k: round(sum(v) / len(v), 4) for k, v in sorted(kinds.items())},
    }


def train(rounds: int = ROUNDS, seed: int = SEED, l2: float = L2, embedder: Embedder | None = None,
          fold: Fold = "all", attribute_model: AttributeModel | None = None,
          wide_fold: WideFold = "none") -> tuple[UpdateModel, dict[str, Any]]:
    """The model fitted on the training wordings (about ``fold``'s attributes and the ``wide_fold``
    of the wide pool), and its figures on the training and held-out ones (for one fold, also on
    the other fold's attributes: ``heldout_attributes``; and on the wide attributes it never saw:
    ``heldout_wide``); attribute similarities under ``embedder`` (default: the default model),
    read by ``attribute_model`` when given (default: the one shipped for the embedder)."""
    embedder = embedder or default_embedder()
    names = attributes_of(fold)
    space = AttributeSpace.with_model(embedder, attribute_model) if attribute_model is not None else None
    train_pairs = judge_pairs("train", seed, rounds, names, wide(wide_fold))
    train_attributes = attributes(train_pairs, embedder, space, names)
    x, y = matrix(train_pairs, train_attributes)
    model = fit(x, y, l2=l2, meta={"script": "scripts/train_update_judge.py", "seed": seed, "rounds": rounds,
                                   "l2": l2, "pairs": len(train_pairs), "updates": int(y.sum()),
                                   "embedder": embedder.name, "attributes": fold,
                                   **({"wide": wide_fold} if wide_fold != "none" else {})})
    held = judge_pairs("heldout", seed, rounds, names)
    report = {"train": figures(model, train_pairs, train_attributes),
              "heldout": figures(model, held, attributes(held, embedder, space, names)),
              "weights": {f: round(float(c), 3) for f, c in zip(model.features, model.coef, strict=True)}}
    model.meta["heldout"] = {k: report["heldout"][k] for k in ("pairs", "precision", "recall", "accuracy")}
    if names is not None:
        unseen = judge_pairs("heldout", seed, rounds, attributes_of(other(fold)))
        report["heldout_attributes"] = figures(model, unseen, attributes(unseen, embedder, space, names))
    if strange := held_out(wide_fold):
        pairs = judge_pairs("heldout", seed, 0, names, strange)
        report["heldout_wide"] = figures(model, pairs, attributes(pairs, embedder, space, names))
    return model, report


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("topology/systemone") / SHIPPED)
    ap.add_argument("--rounds", type=int, default=ROUNDS, help="rounds of pairs per attribute")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--l2", type=float, default=L2)
    ap.add_argument("--attributes", choices=FOLDS, default="all",
                    help="fit on pairs about one fold of the attributes (jevmem.bench.folds); needs --out")
    ap.add_argument("--attribute-model", type=Path, default=None,
                    help="the attribute model that reads the similarities (default: the shipped one)")
    ap.add_argument("--wide", choices=WIDE_CHOICES, default="none",
                    help="also fit on these attributes of the wide pool (jevmem.bench.wide); every wide attribute "
                         "not fitted on is validated as heldout_wide")
    args = ap.parse_args(argv)
    if args.attributes != "all" and args.out == Path("topology/systemone") / SHIPPED:
        ap.error("--attributes a or b writes a judge for validation only: give --out")
    learned = AttributeModel.from_json(args.attribute_model.read_bytes()) if args.attribute_model else None
    model, report = train(args.rounds, args.seed, args.l2, fold=args.attributes, attribute_model=learned,
                          wide_fold=args.wide)
    args.out.write_bytes(model.to_json() + b"\n")
    sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")


if __name__ == "__main__":
    main()
