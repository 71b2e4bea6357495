"""Compare two leave-one-out runs question by question (a paired bootstrap, :mod:`jevmem.bench.paired`).

    python scripts/train_system_one.py ../shared/data/locomo --out A.json --questions A.jsonl
    (change something)
    python scripts/train_system_one.py ../shared/data/locomo --out B.json --questions B.jsonl
    python scripts/compare_recall.py A.jsonl B.jsonl [--k 10] [--json]

Prints, per category, the mean recall@k of each run, the difference (B - A) and its 95% interval
over 2,000 resamples of the questions (seed 0: the same figures every time). An interval that
holds 0 is a difference the questions cannot tell from chance.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from jevmem.bench.paired import compare, load_lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", type=Path, help="the baseline run's --questions file")
    ap.add_argument("b", type=Path, help="the other run's --questions file")
    ap.add_argument("--k", type=int, default=None, help="only this k (default: every k in both files)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    try:
        out = compare(load_lines(args.a.read_bytes()), load_lines(args.b.read_bytes()), only_k=args.k)
    except ValueError as exc:
        sys.exit(f"compare_recall: {exc}")
    if args.json:
        sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    for k, cats in out.items():
        print(f"recall@{k}")
        for cat, r in cats.items():
            print(f"  {cat:12s} n={int(r['n']):4d}  A {r['a']:.3f}  B {r['b']:.3f}  "
                  f"B-A {r['diff']:+.3f}  95% [{r['low']:+.3f}, {r['high']:+.3f}]")


if __name__ == "__main__":
    main()
