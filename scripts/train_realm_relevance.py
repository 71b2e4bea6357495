"""Train the ``local`` System One's relevance weights for recall over a user's sessions on
LongMemEval dev haystacks, and print how they do on questions they did not learn from.

    python scripts/train_realm_relevance.py ../shared/data/longmemeval --questions 48 --data-dir BUILD [--out FILE]

Builds (or reuses) each question's haystack as ``jevmem bench longmemeval --data-dir`` does, fits
the weights (see :mod:`jevmem.bench.train_realm`), prints as JSON the share of evidence turns in
the top 10 and turn NDCG@10 of the single-conversation weights (trained on LoCoMo only), of
weights fitted on one half of the questions and asked the other half (``cross_half``), and of the
weights fitted on all of them (in-sample), and writes those weights to ``--out`` (default: the
package file, ``topology/systemone/score_model.realm.json`` for the default embedding model).
Only the dev questions' evidence labels are used, and only here.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import orjson

from jevmem import assembly
from jevmem.bench.train_realm import train_realm
from jevmem.settings import Settings
from topology.systemone.learned import shipped_file


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("directory", type=Path, help="folder of LongMemEval question files (*.json)")
    ap.add_argument("--questions", type=int, default=None, help="a stratified subset (default: every question)")
    ap.add_argument("--data-dir", type=Path, required=True, help="keep the built haystacks here (reused)")
    ap.add_argument("--out", type=Path, default=None, help="default: the package file for the embedding model")
    ap.add_argument("--rounds", type=int, default=2, help="collect/refit iterations")
    ap.add_argument("--l2", type=float, default=100.0,
                    help="L2 penalty (default 100: at 1, the few thousand rows of 48 questions fit artifacts "
                         "of 50-session pools, with the same cross-validated figures)")
    args = ap.parse_args()
    if not list(args.directory.glob("*.json")):
        sys.exit(f"no *.json questions in {args.directory}")
    settings = Settings()
    out = asyncio.run(train_realm(args.directory, settings, assembly.load_embedder(settings), args.questions,
                                  args.data_dir, args.rounds, args.l2))
    out["model"].meta["trained_with"] = settings.embedder
    path = args.out or Path("topology/systemone") / shipped_file(settings.embedder, realm=True)
    path.write_bytes(out["model"].to_json() + b"\n")
    sys.stdout.write(orjson.dumps({k: v for k, v in out.items() if k != "model"}, option=orjson.OPT_INDENT_2).decode()
                     + "\n")


if __name__ == "__main__":
    main()
