"""``jevmem bench edges``: do the graph's edges mean something?

For each LoCoMo conversation file, the embedded write path ingests the conversation (every stage
on) and this benchmark keeps what it proposed and judged: every candidate pair (a new turn and an
earlier turn discovery proposed for it), System One's relation probabilities for the pair, and
the edges written. A pair is *related* when both turns are evidence for one question (labels read
only here, after the build: the write path never sees them). For each view, the ROC AUC of the
pair's probability in that view (0 when the view has no edge or judgment for it) says how well
the view separates related pairs from the other candidates; the edges per turn say how selective
the view is, and the share of related pairs that an edge links says what expansion can reach.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from jevmem import locomo
from jevmem.settings import Settings
from jevmem.wiring import build_embedded
from streams.write_path import Written, write_batch
from topology.pipeline import dedupe
from topology.ports import Embedder
from topology.schemas import Observation

VIEWS = ("semantic", "causal", "entity", "temporal")


def roc_auc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """The probability that a random positive scores above a random negative (ties count half);
    None without both classes."""
    pos = sum(1 for y in labels if y)
    neg = len(labels) - pos
    if not pos or not neg:
        return None
    ranked = sorted(zip(scores, labels, strict=True), key=lambda t: t[0])
    rank_sum = 0.0
    i = 0
    while i < len(ranked):  # average ranks over ties
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            j += 1
        mid = (i + j + 1) / 2  # ranks i+1 .. j
        rank_sum += mid * sum(1 for k in range(i, j) if ranked[k][1])
        i = j
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg)


def related_pairs(questions: Iterable[locomo.Question]) -> set[frozenset[str]]:
    """Pairs of event ids that are evidence for one question."""
    out: set[frozenset[str]] = set()
    for q in questions:
        ev = sorted(set(q.evidence))
        out.update(frozenset((a, b)) for i, a in enumerate(ev) for b in ev[i + 1:])
    return out


def pair_scores(written: Sequence[Written]) -> tuple[dict[frozenset[str], dict[str, float]], Counter[str], int]:
    """Per candidate pair (node ids), the probability in each view; edges written by view; turns."""
    scores: dict[frozenset[str], dict[str, float]] = {}
    for w in written:
        for cs in w.candidates:
            for c in cs.candidates:
                scores.setdefault(frozenset((cs.node.id, c.node_id)), dict.fromkeys(VIEWS, 0.0))
        for j in w.judgments:
            got = scores.get(frozenset((j.source, j.target)))
            if got is not None:
                got["semantic"] = max(got["semantic"], j.semantic)
                got["causal"] = max(got["causal"], j.causes, j.caused_by)
    edges: Counter[str] = Counter()
    turns = 0
    for w in written:
        turns += sum(1 for n in w.nodes if n.kind == "observation")
        for e in w.edges:
            edges[e.view] += 1
            got = scores.get(frozenset((e.source, e.target)))
            if got is not None and e.view in ("entity", "temporal"):
                got[e.view] = max(got[e.view], e.probability)
    return scores, edges, turns


async def ingest_written(observations: list[Observation], settings: Settings,
                         embedder: Embedder) -> list[Written]:
    """Ingest ``observations`` into a fresh temporary embedded store (every stage on) and return
    what the write path produced for each chunk: nodes, candidate sets, judgments, edges."""
    written: list[Written] = []
    with tempfile.TemporaryDirectory() as tmp:
        mem = build_embedded(settings, embedder=embedder, data_dir=tmp)
        try:
            await write_batch(mem.stores, mem.pipeline.write_path, observations, chunk=settings.write_batch,
                              on_chunk=written.append)
        finally:
            await mem.close()
    return written


async def run_edges(directory: Path, settings: Settings, embedder: Embedder) -> dict[str, Any]:
    """The edge-quality figures of every conversation file of ``directory``, and over all of them."""
    files = sorted(directory.glob("*.json"))
    if not files:
        raise FileNotFoundError(f"no conversation files (*.json) in {directory}")
    pooled: dict[str, tuple[list[float], list[bool]]] = {v: ([], []) for v in VIEWS}
    per: dict[str, Any] = {}
    all_edges: Counter[str] = Counter()
    all_turns = linked = related_total = 0
    for path in files:
        data = locomo.load(path)
        obs = dedupe(locomo.observations(data, "bench", f"locomo-{path.stem}"))
        related = related_pairs(locomo.questions(data))
        written = await ingest_written(obs, settings, embedder)
        event_of = {n.id: n.event_id for w in written for n in w.nodes}
        scores, edges, turns = pair_scores(written)
        labels = {pair: frozenset(event_of.get(i, "") for i in pair) in related for pair in scores}
        edge_pairs = {frozenset((e.source, e.target)) for w in written for e in w.edges}
        node_of = {ev: nid for nid, ev in event_of.items()}
        related_nodes = {frozenset(node_of[e] for e in pair) for pair in related if all(e in node_of for e in pair)}
        linked += len(related_nodes & edge_pairs)
        related_total += len(related_nodes)
        out: dict[str, Any] = {"turns": turns, "candidate_pairs": len(scores),
                               "related_candidate_pairs": sum(labels.values()),
                               "edges_per_turn": {v: round(edges[v] / max(1, turns), 2) for v in sorted(edges)}}
        for v in VIEWS:
            xs = [s[v] for s in scores.values()]
            ys = [labels[p] for p in scores]
            pooled[v][0].extend(xs)
            pooled[v][1].extend(ys)
            auc = roc_auc(xs, ys)
            out[f"auc_{v}"] = None if auc is None else round(auc, 3)
        per[path.stem] = out
        all_edges.update(edges)
        all_turns += turns
    total: dict[str, Any] = {"turns": all_turns,
                             "edges_per_turn": {v: round(all_edges[v] / max(1, all_turns), 2) for v in sorted(all_edges)},
                             "related_pairs_linked_by_an_edge": round(linked / max(1, related_total), 3)}
    for v in VIEWS:
        auc = roc_auc(*pooled[v])
        total[f"auc_{v}"] = None if auc is None else round(auc, 3)
    return {"embedder": embedder.name, "conversations": per, "all": total}
