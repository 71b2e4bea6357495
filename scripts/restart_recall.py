"""A user's recall across many sessions in a process started afresh, over a store kept between runs.

    python scripts/restart_recall.py build DIR --sessions N
    python scripts/restart_recall.py ask DIR --sessions N

``build`` writes ``jevmem bench users``' scale scenario (one user, N sessions, its seed and
wordings) into a new embedded store in DIR and prints the ingest time. ``ask`` starts an embedded
service over DIR in this process (the model loads first, outside the figures), asks every
question of that scenario once, in order, through recall with the user's id, and prints one JSON
object: the service's start in ms, the first recall's ms (``first``), the later ones' p50 / p95,
and the share with the fact first. Two versions of the code can be compared on one store by
running ``ask`` with each, alternately.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from jevmem import assembly
from jevmem.bench.locomo import percentile
from jevmem.bench.users import _Run
from jevmem.bench.users_data import generate
from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService


async def main(command: str, data_dir: Path, sessions: int) -> dict[str, float]:
    settings = Settings()
    embedder = assembly.load_embedder(settings)
    data = generate(1, sessions, 5, "all", 7, gap_hours=(1.0, 6.0), every_wording=True)
    run = _Run(settings, embedder, data, None, "scale", dense=False)
    service = EmbeddedService(settings, embedder=embedder, data_dir=data_dir)
    t0 = time.perf_counter()
    await service.start()
    start_ms = (time.perf_counter() - t0) * 1000
    try:
        if command == "build":
            return {"turns": len(run.turns), "ingest_s": round(await run.ingest(service), 1)}
        ms: list[float] = []
        first = 0
        for q in data.questions:
            ranked, took, _, _ = await run.ask(service, q)
            ms.append(took)
            first += ranked[:1] == [q.gold]
        later = ms[1:] or ms
        return {"start_ms": round(start_ms), "first": round(ms[0], 1), "p50": round(percentile(later, 50), 1),
                "p95": round(percentile(later, 95), 1), "fact_at_1": round(first / len(ms), 3), "questions": len(ms)}
    finally:
        await service.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["build", "ask"])
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--sessions", type=int, required=True)
    args = ap.parse_args()
    print(json.dumps(asyncio.run(main(args.command, args.data_dir, args.sessions))))
