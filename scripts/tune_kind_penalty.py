"""Choose how a recall over a user's sessions scores its pool (``Params.realm``: the weight of the
learned relevance against the pooled cosine, and the turn-kind penalties) on ``jevmem bench
users``'s training wordings, with a seed the benchmark does not use.

One store is built (``--users`` users of ``--sessions`` sessions, training wordings only) and every
question is asked under each point of a small grid of penalties; the points are printed best
first by fact@1, then mean reciprocal rank of the stating turn. Validate the chosen point with
``jevmem bench users --wordings heldout`` (wordings no model or penalty saw) and check
per-conversation recall with ``jevmem bench locomo``.

    python scripts/tune_kind_penalty.py [--users 12] [--sessions 16] [--seed 101]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
from typing import Any

from jevmem import assembly
from jevmem.bench.users import TOP_K, _Run
from jevmem.bench.users_data import generate
from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService
from query_api import service as service_api
from topology.params import KindPenalties, RealmRanking

GRID = {"relevance_weight": (0.0, 0.5, 1.0), "question": (0.0, 0.5, 0.9), "tool": (0.0, 0.5, 0.9),
        "advice": (0.0, 0.3, 0.6), "chatter": (0.0, 0.3)}


async def main(users: int, sessions: int, seed: int) -> None:
    settings = Settings()
    embedder = assembly.load_embedder(settings)
    data = generate(users, sessions, 5, "train", seed)
    run = _Run(settings, embedder, data, None, "tune")
    rows: list[tuple[float, float, float, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="jevmem-tune-") as tmp:
        service = EmbeddedService(settings, embedder=embedder, data_dir=tmp)
        await service.start()
        try:
            await run.ingest(service)
            base = service.mem.controller.params
            for point in itertools.product(*GRID.values()):
                got = dict(zip(GRID, point, strict=True))
                weight = got.pop("relevance_weight")
                realm = RealmRanking(relevance_weight=weight, kind_penalty=KindPenalties(**got))
                service.mem.controller.params = base.model_copy(update={"realm": realm})
                first = top5 = 0
                rr = 0.0
                for q in data.questions:
                    res = await service_api.recall_across(service, run.tenant(q.user_id), q.text, TOP_K, None,
                                                          q.user_id)
                    ranked = [e.event_id for e in res.evidence]
                    first += ranked[:1] == [q.gold]
                    top5 += q.gold in ranked[:5]
                    rr += 1.0 / (ranked.index(q.gold) + 1) if q.gold in ranked else 0.0
                n = len(data.questions)
                rows.append((first / n, rr / n, top5 / n, {"relevance_weight": weight, **got}))
        finally:
            await service.stop()
    rows.sort(key=lambda r: (-r[0], -r[1], -r[2], sum(v for k, v in r[3].items() if k != "relevance_weight")))
    print(f"{len(data.questions)} questions, training wordings, seed {seed}")
    for first, mrr, top5, penalty in rows[:15]:
        print(f"fact@1 {first:.3f}  mrr {mrr:.3f}  top5 {top5:.3f}  {penalty}")
    plain = next(r for r in rows if r[3]["relevance_weight"] == 1.0 and not any(v for k, v in r[3].items()
                                                                               if k != "relevance_weight"))
    print(f"relevance alone, no penalty: fact@1 {plain[0]:.3f}  mrr {plain[1]:.3f}  top5 {plain[2]:.3f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--users", type=int, default=12)
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--seed", type=int, default=101)
    a = ap.parse_args()
    asyncio.run(main(a.users, a.sessions, a.seed))
