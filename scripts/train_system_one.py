"""Train the ``local`` System One's relevance model on LoCoMo-format dev conversations.

    python scripts/train_system_one.py ../shared/data/locomo [--out FILE] [--questions FILE]
    JEVMEM_EMBEDDER=paraphrase-minilm-l3-v2-int8@0.2.1 python scripts/train_system_one.py ../shared/data/locomo

Builds one memory per conversation, fits the logistic relevance model (fixed seed, deterministic
Newton fit; see :mod:`jevmem.bench.train`), prints in-sample and leave-one-conversation-out recall@k per
category as JSON, and writes the weights to ``--out`` (default: the package file for the embedding
model in use, ``topology/systemone/score_model.json`` for the default model). Only the dev conversations' evidence labels
are used, and only here; the controller never sees labels at run time.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import orjson

from jevmem import assembly
from jevmem.bench.paired import dump_lines
from jevmem.bench.train import train
from jevmem.settings import Settings
from topology.systemone.learned import shipped_file


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("directory", type=Path, help="folder of LoCoMo-format *.json conversations")
    ap.add_argument("--out", type=Path, default=None,
                    help="default: the package file for the embedding model in use (JEVMEM_EMBEDDER)")
    ap.add_argument("--cache", type=Path, default=None, help="keep built memories here (reused when present)")
    ap.add_argument("--rounds", type=int, default=2, help="collect/refit iterations")
    ap.add_argument("--l2", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--questions", type=Path, default=None,
                    help="also write each question's leave-one-out recall here (JSON lines; "
                         "scripts/compare_recall.py compares two such files)")
    args = ap.parse_args()
    settings = Settings()
    files = sorted(args.directory.glob("*.json"))
    if not files:
        sys.exit(f"no *.json conversations in {args.directory}")
    out = asyncio.run(train(files, settings, assembly.load_embedder(settings), args.cache,
                            args.rounds, args.l2, args.seed))
    out_path = args.out or Path("topology/systemone") / shipped_file(settings.embedder)
    out["model"].meta["trained_with"] = settings.embedder
    out_path.write_bytes(out["model"].to_json() + b"\n")
    if args.questions is not None:
        args.questions.write_bytes(dump_lines(out["loco_questions"]))
    sys.stdout.write(orjson.dumps({k: out[k] for k in ("in_sample", "loco", "loco_relation_judge")},
                                  option=orjson.OPT_INDENT_2).decode() + "\n")


if __name__ == "__main__":
    main()
