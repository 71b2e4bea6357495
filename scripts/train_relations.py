"""Train the ``local`` System One's relation judge on LoCoMo-format dev conversations.

    python scripts/train_relations.py ../shared/data/locomo [--out FILE]
    JEVMEM_EMBEDDER=paraphrase-minilm-l3-v2-int8@0.2.1 python scripts/train_relations.py ../shared/data/locomo

Ingests each conversation, labels every candidate pair the write path proposed (related: both
turns are evidence for one question), fits the class-balanced logistic judge (deterministic Newton
fit; see :mod:`jevmem.bench.train_relations`), prints the leave-one-conversation-out ROC AUC of the
hand-set rule and of the learned judge, with the semantic edges per turn each writes at
``theta_rel``, as JSON, and writes the weights to ``--out`` (default: the package file for the
embedding model in use). Labels are used here only; the write path never sees them.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import orjson

from jevmem import assembly
from jevmem.bench.train_relations import train
from jevmem.settings import Settings
from topology.systemone.relation_model import shipped_file


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("directory", type=Path, help="folder of LoCoMo-format *.json conversations")
    ap.add_argument("--out", type=Path, default=None,
                    help="default: the package file for the embedding model in use (JEVMEM_EMBEDDER)")
    ap.add_argument("--l2", type=float, default=1.0)
    args = ap.parse_args()
    settings = Settings()
    files = sorted(args.directory.glob("*.json"))
    if not files:
        sys.exit(f"no *.json conversations in {args.directory}")
    model, report = asyncio.run(train(files, settings, assembly.load_embedder(settings), args.l2))
    out_path = args.out or Path("topology/systemone") / shipped_file(settings.embedder)
    out_path.write_bytes(model.to_json() + b"\n")
    sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")


if __name__ == "__main__":
    main()
