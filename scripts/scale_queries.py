"""Ask ``jevmem bench scale``'s questions of a store it kept, in this (fresh) process.

    python scripts/scale_queries.py DIR [--conversations N] [--tenants N] [--uncached]

DIR is a store built by ``jevmem bench scale --data-dir DIR`` (with the same ``--conversations``
and ``--tenants``). The benchmark's 200 questions (its seed and template) are asked cold (the
first time this process reads each conversation), then again (warm); prints one JSON object with
each pass's p50 / p95 in milliseconds and the mean of each step the query trace times, and
(``first``) the p50 / p95 of the queries that were the first of their conversation in this
process (what no cache of this process had read before).
``--uncached`` first asks the operating system to drop the store's pages from its cache. Two
stores can be compared by running this for each, alternately.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from jevmem import collector
from jevmem.bench.locomo import percentile
from jevmem.bench.scale import questions
from jevmem.settings import Settings
from jevmem.wiring import build_embedded
from topology.schemas import Scope


def drop_cached(directory: Path) -> None:
    """Advise the kernel to drop the files of ``directory`` from its page cache."""
    for path in directory.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


async def ask(directory: Path, conversations: int, tenants: int) -> dict[str, Any]:
    settings = Settings()
    collector.tune(settings.gc_thresholds)
    mem = build_embedded(settings, data_dir=directory)
    try:
        asked = questions(200, conversations, tenants)
        out: dict[str, Any] = {}
        seen: set[Scope] = set()
        first: list[float] = []
        for kind in ("cold", "warm"):
            latencies: list[float] = []
            steps: dict[str, float] = {}
            for scope, question in asked:
                t0 = time.perf_counter()
                res = await mem.controller.retrieve(scope, question, top_k=10)
                latencies.append((time.perf_counter() - t0) * 1000)
                if scope not in seen:
                    first.append(latencies[-1])
                    seen.add(scope)
                for step, ms in res.trace.timings_ms.items():
                    steps[step] = steps.get(step, 0.0) + ms
            out[kind] = {"p50": round(percentile(latencies, 50), 2), "p95": round(percentile(latencies, 95), 2),
                         "steps_ms": {k: round(v / len(asked), 2) for k, v in steps.items()}}
        out["first"] = {"queries": len(first), "p50": round(percentile(first, 50), 2),
                        "p95": round(percentile(first, 95), 2)}
        return out
    finally:
        await mem.close()


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("directory", type=Path)
    ap.add_argument("--conversations", type=int, default=1000)
    ap.add_argument("--tenants", type=int, default=10)
    ap.add_argument("--uncached", action="store_true")
    args = ap.parse_args(argv)
    if args.uncached:
        drop_cached(args.directory)
    print(json.dumps(asyncio.run(ask(args.directory, args.conversations, args.tenants))))


if __name__ == "__main__":
    main(sys.argv[1:])
