"""Fingerprints of what the embedded pipeline builds and answers, to show a change leaves both alone.

    python scripts/fingerprint.py DEV_DIR [--store DIR]

For every LoCoMo conversation file of ``DEV_DIR``: ingest it embedded into a fresh store, then
sha256 of every node (with its embedding), edge and consolidation decision, and sha256 of the
answers to all of its questions (evidence ids, scores, relevances, how each was reached, and the
trace without its timings). With ``--store DIR`` (a store kept by ``jevmem bench scale --data-dir``,
read, never written), also the sha256 of the answers to that benchmark's 200 questions. Prints
one JSON object; two runs of the same code print the same object.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

from jevmem import assembly, locomo
from jevmem.bench.scale import questions
from jevmem.settings import Settings
from jevmem.wiring import build_embedded
from query_api.retrieval.controller import Retrieval
from topology.schemas import Scope


def _answer(r: Retrieval) -> bytes:
    trace = r.trace.model_dump(mode="json")
    trace.pop("timings_ms")
    return orjson.dumps({"evidence": [e.model_dump(mode="json") for e in r.evidence], "trace": trace},
                        option=orjson.OPT_SORT_KEYS)


async def dev(directory: Path, settings: Settings) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in sorted(directory.glob("*.json")):
        data = locomo.load(path)
        conv = f"locomo-{path.stem}"
        scope = Scope(tenant_id="bench", conversation_id=conv)
        with tempfile.TemporaryDirectory() as tmp:
            mem = build_embedded(settings, data_dir=tmp)
            try:
                await mem.pipeline.ingest(locomo.observations(data, "bench", conv))
                graph = hashlib.sha256()
                for n in sorted(await mem.stores.nodes.scan(scope), key=lambda n: n.id):
                    graph.update(orjson.dumps(n.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS))
                for e in sorted(await mem.stores.edges.scan(scope), key=lambda e: e.id):
                    graph.update(orjson.dumps(e.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS))
                for d in sorted(await mem.stores.edges.decisions(scope), key=lambda d: d.id):
                    graph.update(orjson.dumps(d.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS))
                answers = hashlib.sha256()
                for q in locomo.questions(data):
                    answers.update(_answer(await mem.controller.retrieve(scope, q.question, top_k=10)))
                out[conv] = {"graph": graph.hexdigest(), "answers": answers.hexdigest()}
            finally:
                await mem.close()
    return out


async def scale_answers(store: Path, settings: Settings) -> str:
    """The answers to ``bench scale``'s questions (its seed and question template, 1,000
    conversations of 10 tenants) over a kept store."""
    mem = build_embedded(settings, data_dir=store)
    try:
        h = hashlib.sha256()
        for scope, question in questions():
            h.update(_answer(await mem.controller.retrieve(scope, question, top_k=10)))
        return h.hexdigest()
    finally:
        await mem.close()


async def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("dev_dir", type=Path)
    ap.add_argument("--store", type=Path)
    args = ap.parse_args(argv)
    settings = Settings()
    report: dict[str, Any] = {"embedder": assembly.load_embedder(settings).name, "dev": await dev(args.dev_dir, settings)}
    if args.store is not None:
        report["scale_answers"] = await scale_answers(args.store, settings)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
