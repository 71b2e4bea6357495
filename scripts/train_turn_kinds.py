"""Train the ``local`` System One's turn-kind model (the typing task's ``kind`` Choice).

    python scripts/train_turn_kinds.py [--out FILE] [--per-template N] [--seed S] [--l2 L]

Generates labelled turns from our own templates (:mod:`jevmem.bench.turn_kinds_data`: statement,
question, tool, advice, chatter; several wordings each, several roles), picks the L2 penalty by
template-grouped cross-validation on the training wordings (unless ``--l2`` is given), fits the
class-balanced multinomial logistic model (deterministic Newton fit,
:func:`topology.systemone.turn_kinds.fit`) on the training wordings only, prints accuracy overall
and per kind on the training wordings, on the held-out wordings and on the fresh wordings, as JSON,
and writes the weights to ``--out`` (default: the package file,
``topology/systemone/turn_kind_model.json``). Numpy only; no download; about a second.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from jevmem.bench.turn_kinds_data import PER_TEMPLATE, SEED, train
from topology.systemone.turn_kinds import SHIPPED


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("topology/systemone") / SHIPPED)
    ap.add_argument("--per-template", type=int, default=PER_TEMPLATE, help="turns drawn per template")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--l2", type=float, default=None, help="default: chosen by grouped cross-validation")
    args = ap.parse_args(argv)
    model, report = train(args.per_template, args.seed, args.l2)
    args.out.write_bytes(model.to_json() + b"\n")
    sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")


if __name__ == "__main__":
    main()
