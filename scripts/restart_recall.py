"""A user's recall across many sessions in a process started afresh, over a store kept between runs.

    python scripts/restart_recall.py build DIR --sessions N
    python scripts/restart_recall.py ask DIR --sessions N
    python scripts/restart_recall.py build PREFIX --sessions N --stores distributed
    python scripts/restart_recall.py ask PREFIX --sessions N --stores distributed
    python scripts/restart_recall.py drop PREFIX --stores distributed

``build`` writes ``jevmem bench users``' scale scenario (one user, N sessions, its seed and
wordings) into a new embedded store in DIR and prints the ingest time. ``ask`` starts an embedded
service over DIR in this process (the model loads first, outside the figures), asks every
question of that scenario once, in order, through recall with the user's id, and prints one JSON
object: the service's start in ms, the first recall's ms (``first``), the later ones' p50 / p95,
and the share with the fact first. Two versions of the code can be compared on one store by
running ``ask`` with each, alternately.

With ``--stores distributed`` the store is the generation PREFIX (ending in ``-``) on the
Elasticsearch and Qdrant servers of ``JEVMEM_ELASTICSEARCH_URL`` and ``JEVMEM_QDRANT_URL``,
written and read as ``bench users --stores distributed`` does (:mod:`jevmem.bench.servers`);
``drop`` removes it.

``ask`` settles the heap after the start, as ``jevmem serve`` does (``jevmem.heap.settle``);
``--no-settle`` leaves it as the start left it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from jevmem import assembly, heap
from jevmem.bench.locomo import percentile
from jevmem.bench.servers import ServerStores
from jevmem.bench.users import BenchService, Deployment, _Run
from jevmem.bench.users_data import generate
from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService


async def main(command: str, where: str, sessions: int, stores: Deployment, settle: bool = True) -> dict[str, float]:
    settings = Settings()
    embedder = assembly.load_embedder(settings)
    service: BenchService
    if stores == "distributed":
        service = ServerStores(settings, embedder, where)
        if command == "drop":
            await service.drop()
            return {}
    else:
        service = EmbeddedService(settings, embedder=embedder, data_dir=Path(where))
    data = generate(1, sessions, 5, "all", 7, gap_hours=(1.0, 6.0), every_wording=True)
    run = _Run(settings, embedder, data, None, "scale", dense=False, stores=stores)
    t0 = time.perf_counter()
    await service.start()
    start_ms = (time.perf_counter() - t0) * 1000
    if settle:
        heap.settle()  # as jevmem serve does after its start
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
    ap.add_argument("command", choices=["build", "ask", "drop"])
    ap.add_argument("where", help="the store's directory (embedded) or generation prefix (distributed)")
    ap.add_argument("--sessions", type=int, default=0)
    ap.add_argument("--stores", choices=["embedded", "distributed"], default="embedded")
    ap.add_argument("--no-settle", action="store_true", help="leave the heap as the start left it (jevmem.heap)")
    args = ap.parse_args()
    if args.command == "drop" and args.stores != "distributed":
        ap.error("drop is for a distributed generation (remove an embedded store's directory)")
    if args.command != "drop" and args.sessions <= 0:
        ap.error("--sessions N is needed")
    print(json.dumps(asyncio.run(main(args.command, args.where, args.sessions, args.stores, not args.no_settle))))
