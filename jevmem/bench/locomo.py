"""``jevmem bench locomo``: build a fresh memory per conversation, run every question with
evidence through the read path (no System Two) and the static baselines on the same indexes."""

from __future__ import annotations

import math
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from jevmem import locomo, tokens
from jevmem.bench.dense import DenseSearch
from jevmem.settings import Settings
from jevmem.wiring import build_embedded
from query_api.recall import PromptEvidence
from query_api.retrieval import baselines
from query_api.retrieval.controller import RetrievalController
from streams.write_path import chunk_size
from topology import observe
from topology.embedding import Embedder
from topology.params import Params
from topology.schemas import MemoryNode, Scope
from topology.stages import context
from topology.stages.memory_nodes import embedding_text

KS = (5, 10, 20)
METHODS = ("jevmem", "dense", "bm25", "vector", "hybrid_rrf")
"""``dense``: each turn embedded alone (:mod:`jevmem.bench.dense`), the floor; ``vector``: the
stored vectors (each turn read after the one before it) through the store's vector index."""
#: The ablation method: the same controller (same System One, same anchors and scoring) with
#: graph expansion rounds off (hard depth limit 0), run on the same memory in the same run.
NO_GRAPH = "jevmem_no_graph"
CATS = ("overall", "multi_hop", "temporal", "open_domain", "single_hop", "adversarial")


def recall(retrieved: Sequence[str], evidence: Sequence[str], k: int) -> float:
    """Fraction of evidence ids among the first ``k`` retrieved ids."""
    top = set(retrieved[:k])
    return sum(1 for e in evidence if e in top) / len(evidence)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100])."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def methods(ablate: bool) -> tuple[str, ...]:
    """The methods a run reports: the baselines, plus ``jevmem_no_graph`` when ablating."""
    return METHODS + ((NO_GRAPH,) if ablate else ())


def no_graph(params: Params) -> Params:
    """``params`` with expansion rounds off: anchors are scored and ranked, no edge is read."""
    return params.model_copy(update={"limits": params.limits.model_copy(update={"depth": 0})})


@dataclass
class _Acc:
    methods: tuple[str, ...] = METHODS
    per: dict[tuple[str, int, str], list[float]] = field(default_factory=dict)

    def add(self, method: str, k: int, category: str, value: float) -> None:
        for cat in ("overall", category):
            self.per.setdefault((method, k, cat), []).append(value)

    def table(self) -> dict[str, dict[str, dict[str, float | None]]]:
        out: dict[str, dict[str, dict[str, float | None]]] = {}
        for m in self.methods:
            out[m] = {}
            for k in KS:
                out[m][str(k)] = {c: (round(statistics.fmean(v), 4) if (v := self.per.get((m, k, c))) else None)
                                  for c in CATS}
        return out


async def run_locomo(directory: Path, settings: Settings, embedder: Embedder,
                     progress: Callable[[str, int, int], None] | None = None, ablate: bool = False) -> dict[str, Any]:
    """Recall@k per method and category over the conversation files of ``directory``.

    ``ablate`` adds :data:`NO_GRAPH` (the controller without expansion rounds) to ``recall``; its
    controller calls and latencies are not counted in the run's figures."""
    files = sorted(directory.glob("*.json"))
    if not files:
        raise FileNotFoundError(f"no conversation files (*.json) in {directory}")
    acc = _Acc(methods(ablate))
    n_obs = n_q = 0
    build_s = 0.0
    loop_cpu_s = process_cpu_s = 0.0  # over the builds: the event loop's thread, and the whole process
    write_calls = consolidation_calls = query_calls = 0
    embed_alone_s = 0.0
    stages: dict[str, float] = {}
    latencies: list[float] = []
    contexts: dict[str, list[str]] = {"json": [], "prompt": []}  # top-10 evidence as each format sends it
    for path in files:
        data = locomo.load(path)
        conv = f"locomo-{path.stem}"
        obs = locomo.observations(data, "bench", conv)
        qs = locomo.questions(data)
        with tempfile.TemporaryDirectory() as tmp:
            mem = build_embedded(settings, embedder=embedder, data_dir=tmp)
            try:
                done = 0

                def built(n: int, conv: str = conv, total: int = len(obs)) -> None:
                    nonlocal done
                    done += n
                    if progress:
                        progress(f"build {conv}", done, total)

                t0, c0, l0 = time.perf_counter(), time.process_time(), time.thread_time()
                with observe.tally() as tally:
                    rep = await mem.pipeline.ingest(obs, on_chunk=built)
                build_s += time.perf_counter() - t0
                loop_cpu_s += time.thread_time() - l0
                process_cpu_s += time.process_time() - c0
                for name, sec in tally.items():
                    stages[name] = stages.get(name, 0.0) + sec
                scope = Scope(tenant_id="bench", conversation_id=conv)
                embed_alone_s += await embedder_alone(mem.embedder, await mem.stores.nodes.scan(scope),
                                                      chunk_size(len(obs), mem.pipeline.chunk))
                write_calls += rep.write_calls
                consolidation_calls += rep.consolidation_calls
                n_obs += len(obs)
                static = baselines.StaticRetriever(mem.embedder, mem.stores.vectors, mem.stores.lexical,
                                                   mem.stores.nodes, settings.params)
                flat = RetrievalController(mem.embedder, mem.controller.so, mem.stores.vectors, mem.stores.lexical,
                                           mem.stores.nodes, mem.stores.edges, no_graph(settings.params),
                                           scorer=mem.controller.scorer)
                dense = await DenseSearch.over(mem.embedder, [o.event_id for o in obs],
                                               [embedding_text(o.speaker, o.content) for o in obs])
                for j, q in enumerate(qs):
                    t1 = time.perf_counter()
                    res = await mem.controller.retrieve(scope, q.question, top_k=max(KS))
                    latencies.append((time.perf_counter() - t1) * 1000)
                    query_calls += res.trace.controller_calls
                    top = res.evidence[:CONTEXT_K]
                    contexts["json"].append(orjson.dumps(
                        [{**e.model_dump(mode="json"), "conversation_id": conv} for e in top]).decode())
                    contexts["prompt"].append(PromptEvidence.of(q.question, top).text)
                    got = {"jevmem": [e.event_id for e in res.evidence]}
                    got.update(await static.all(scope, q.question, max(KS)))
                    got["dense"] = await dense.search(q.question, max(KS))
                    if ablate:
                        got[NO_GRAPH] = [e.event_id for e in
                                         (await flat.retrieve(scope, q.question, top_k=max(KS))).evidence]
                    for method, ids in got.items():
                        for k in KS:
                            acc.add(method, k, q.category, recall(ids, q.evidence, k))
                    if progress:
                        progress(f"query {conv}", j + 1, len(qs))
                n_q += len(qs)
            finally:
                await mem.close()
    return {
        "observations": n_obs,
        "questions": n_q,
        "build_seconds": round(build_s, 3),
        "observations_per_second": round(n_obs / build_s, 2) if build_s else None,
        # the embedding model alone on the texts the build embedded, in the build's batches
        "embedder_alone_per_second": round(n_obs / embed_alone_s, 2) if embed_alone_s else None,
        "build_vs_embedder": round(embed_alone_s / build_s, 3) if build_s and embed_alone_s else None,
        # seconds per write-path stage, summed (the next chunk's embedding overlaps the linking)
        "build_stage_seconds": {k: round(v, 3) for k, v in sorted(stages.items())},
        # CPU seconds of the builds: the event loop's thread (typing, candidates, relations, store
        # writes, consolidation) and every other thread (the model's, mostly); with C cores a
        # build takes at least their sum / C
        "build_cpu_seconds": {"event_loop": round(loop_cpu_s, 3),
                              "other_threads": round(max(0.0, process_cpu_s - loop_cpu_s), 3)},
        "query_ms": {"p50": round(percentile(latencies, 50), 2), "p95": round(percentile(latencies, 95), 2)},
        "controller_calls": {
            "per_write": round(write_calls / n_obs, 4) if n_obs else None,
            "per_write_with_consolidation": round((write_calls + consolidation_calls) / n_obs, 4) if n_obs else None,
            "per_query": round(query_calls / n_q, 3) if n_q else None,
        },
        "context_tokens_per_query": context_tokens(contexts),
        "recall": acc.table(),
    }


async def embedder_alone(embedder: Embedder, nodes: Sequence[MemoryNode], batch: int) -> float:
    """Seconds the embedder takes alone over what the build embedded for ``nodes`` (each
    observation read after the turn its node names, ``MemoryNode.after``, or alone), in calls of
    ``batch`` texts as the build made them."""
    by_id = {n.id: n for n in nodes}
    turns = sorted((n for n in nodes if n.kind == "observation"), key=lambda n: n.seq)
    pairs = [(context.before_text(b) if (b := by_id.get(n.after or "")) is not None else None,
              embedding_text(n.speaker, n.content)) for n in turns]
    t0 = time.perf_counter()
    for i in range(0, len(pairs), max(1, batch)):
        embedder.embed_after(pairs[i: i + batch])
    return time.perf_counter() - t0


#: Evidence items per query whose context cost is counted (the usual top-k of an agent's recall).
CONTEXT_K = 10


def context_tokens(contexts: dict[str, list[str]]) -> dict[str, Any]:
    """Mean, p50 and p95 tokens per query of each format's top-:data:`CONTEXT_K` evidence (the
    JSON items ``/v1/recall`` answers; the ``format=prompt`` text), or why they were not counted."""
    try:
        out: dict[str, Any] = {"tokenizer": tokens.TOKENIZER, "top_k": CONTEXT_K}
        for name, texts in contexts.items():
            counts = [float(c) for c in tokens.count(texts)]
            out[name] = {"mean": round(statistics.fmean(counts), 1) if counts else None,
                         "p50": percentile(counts, 50), "p95": percentile(counts, 95)}
        return out
    except tokens.TokenizerUnavailable as exc:
        return {"unavailable": str(exc)}
