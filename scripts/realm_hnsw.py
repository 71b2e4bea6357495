"""How far Qdrant's HNSW index finds a realm's exact ranking on real turns (``JEVMEM_QDRANT_REALM_EF``).

    python scripts/realm_hnsw.py BUILD_DIR LONGMEMEVAL_DIR [--ef 64 --ef 128 ...]

A realm search in the distributed mode is an exact scan of the realm's points unless
``JEVMEM_QDRANT_REALM_EF`` sends it through the collection's HNSW index
(:class:`storage.qdrant.index.QdrantVectorIndex`). This measures what that costs on real text: the
turns of a LongMemEval build (``jevmem bench longmemeval --data-dir BUILD_DIR`` keeps each
haystack's turn vectors in ``plain/``), every distinct vector once, written as one user's points
into a new collection on the server of ``JEVMEM_QDRANT_URL``, then each question of
LONGMEMEVAL_DIR searched with the user filter for its 50 best points (what a recall's anchor
search asks), exactly and through HNSW at each ``--ef``. Prints one JSON object: the points, and
per search the server's own time (p50 / p95 ms, Qdrant's ``time``) and, for HNSW, the share of
the exact 50 and of the exact 10 it found and the share of questions whose first 10 are the exact
first 10 in order. The collection is dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from jevmem import assembly
from jevmem.bench import longmemeval as lme
from jevmem.settings import Settings

LIMIT = 50


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("build", type=Path, help="a jevmem bench longmemeval --data-dir build")
    ap.add_argument("questions", type=Path, help="the LongMemEval question files")
    ap.add_argument("--ef", type=int, action="append", help="hnsw_ef values (default 64, 128, 256, 512)")
    args = ap.parse_args(argv)
    settings = Settings()
    if not settings.qdrant_url:
        ap.error("set JEVMEM_QDRANT_URL")
    files = sorted((args.build / "plain").glob("*.npy"))
    if not files:
        ap.error(f"no turn vectors under {args.build / 'plain'}")
    vectors = np.unique(np.concatenate([np.load(f) for f in files]).astype(np.float32), axis=0)
    embedder = assembly.load_embedder(settings)
    asked = [lme.load_question(p).question for p in sorted(args.questions.glob("*.json"))]
    queries = np.asarray(embedder.embed_query(asked), dtype=np.float32)
    name = f"realm_hnsw_{uuid.uuid4().hex[:8]}"
    qd = httpx.Client(base_url=settings.qdrant_url.split(",")[0], timeout=120)
    where = {"must": [{"key": "user_id", "match": {"value": "u"}}]}
    report: dict[str, Any] = {"points": len(vectors), "questions": len(asked), "limit": LIMIT}
    try:
        qd.put(f"/collections/{name}", json={"vectors": {"size": vectors.shape[1], "distance": "Dot"}}).raise_for_status()
        qd.put(f"/collections/{name}/index", json={"field_name": "user_id", "field_schema": "keyword"}).raise_for_status()
        for at in range(0, len(vectors), 1000):
            points = [{"id": at + j, "vector": v.tolist(), "payload": {"user_id": "u"}}
                      for j, v in enumerate(vectors[at: at + 1000])]
            qd.put(f"/collections/{name}/points", params={"wait": "true"}, json={"points": points}).raise_for_status()
        for _ in range(300):  # the index is built in the background
            info = qd.get(f"/collections/{name}").json()["result"]
            if info["status"] == "green" and info["indexed_vectors_count"] >= len(vectors):
                break
            time.sleep(1)

        def search(params: dict[str, Any]) -> tuple[list[list[int]], list[float]]:
            found, took = [], []
            for q in queries:
                r = qd.post(f"/collections/{name}/points/query", json={
                    "query": q.tolist(), "filter": where, "limit": LIMIT, "params": params}).json()
                took.append(r["time"] * 1000)
                found.append([p["id"] for p in r["result"]["points"]])
            return found, took

        def ms(took: list[float]) -> dict[str, float]:
            return {"p50_ms": round(float(np.median(took)), 2), "p95_ms": round(float(np.percentile(took, 95)), 2)}

        def share(got: list[list[int]], k: int) -> float:
            """The mean share of each question's exact first ``k`` that ``got`` holds in its first ``k``."""
            return round(float(np.mean([len(set(a[:k]) & set(b[:k])) / len(a[:k]) for a, b in zip(exact, got, strict=True)])), 4)

        exact, took = search({"exact": True})
        report["exact"] = ms(took)
        for ef in args.ef or [64, 128, 256, 512]:
            got, took = search({"hnsw_ef": ef})
            report[f"hnsw_ef_{ef}"] = ms(took) | {
                "exact_50_found": share(got, LIMIT), "exact_10_found": share(got, 10),
                "first_10_as_exact": round(float(np.mean([a[:10] == b[:10] for a, b in zip(exact, got, strict=True)])), 3)}
    finally:
        qd.delete(f"/collections/{name}")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
