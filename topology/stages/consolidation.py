"""Consolidation: every ``consolidate_every`` writes, judge a bounded set of pairs.

Pairs are each recent node with its best earlier candidate. One System One request asks the four
Nouls and the ``representation`` Choice per pair, and, in the same request, the relation
question whose ``updates`` answer is the learned update judge's
(:mod:`topology.systemone.update_model`). Decisions and links are recorded; raw observations are
never replaced. A summariser (System Two) may add a derived node only behind the gates:
merge/promote >= theta_summary and contradiction < theta_contradiction; it is linked to both
sources by ``summarises`` edges. An update adds a ``supersedes`` temporal edge from the newer
memory to the older one, which the read path shows next to the older memory, when both answers
say so (:func:`superseded`: obsolete >= theta_obsolete, no contradiction, no restatement; and
:func:`replaces`: the update judge at theta_update or more, both memories statements): the
consolidation answer reads change cues, and two chat turns about one pastime carry them without
one replacing the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, cast

from topology import ids
from topology.params import Params
from topology.schemas import CandidateFeatures, CandidateSet, ConsolidationDecision, EdgeEvent, MemoryNode
from topology.stages.candidates import features
from topology.stages.relations import Attributes, relation_state
from topology.systemone.catalog import CONSOLIDATION, RELATION
from topology.systemone.features import ConsolidationState
from topology.systemone.folded import fold
from topology.systemone.local import NEGATION, STATE, UPDATE
from topology.systemone.port import Item, SystemOne

Representation = Literal["keep_separate", "merge", "promote", "uncertain"]


class Summariser(Protocol):
    """Writes one abstraction over two memories (System Two)."""

    async def summarise(self, texts: Sequence[str]) -> str: ...


def due(write_count: int, every: int) -> bool:
    """True when the ``write_count``-th successful write should trigger a run."""
    return write_count > 0 and write_count % every == 0


def select_pairs(recent: Sequence[CandidateSet], limit: int) -> list[tuple[MemoryNode, str]]:
    """(newer node, its best candidate id) for the recent writes, newest first, at most ``limit``."""
    pairs = [(c.node, c.candidates[0].node_id) for c in sorted(recent, key=lambda c: -c.node.seq) if c.candidates]
    return pairs[:limit]


def pair_state(newer: MemoryNode, older: MemoryNode, f: CandidateFeatures | None = None) -> ConsolidationState:
    """The consolidation features of a pair (pure): cosine, entity overlap, whether exactly one
    text is negated, whether the newer one announces a change, same speaker, token overlap.
    ``f``: the pair's :func:`~topology.stages.candidates.features` when already computed."""
    f = f or features(newer, older)
    new, old = fold(newer.content), fold(older.content)  # the cues are case-insensitive
    return ConsolidationState(
        newer=newer.content, older=older.content, cosine=f.cosine, entity=f.entity,
        negation_mix=float(bool(NEGATION.search(new)) != bool(NEGATION.search(old))),
        update_cue=1.0 if UPDATE.search(new) else 0.0,
        same_speaker=1.0 if newer.speaker == older.speaker else 0.0, slot_overlap=f.lexical,
        older_state=1.0 if STATE.search(old) else 0.0)


def superseded(decision: ConsolidationDecision, params: Params) -> bool:
    """Is the older memory of this decision out of date: an update, neither a contradiction nor a
    restatement (a redundant pair merges instead)?"""
    return (decision.obsolete >= params.theta_obsolete and decision.contradiction < params.theta_contradiction
            and decision.redundant < 0.5)


def replaces(newer: MemoryNode, older: MemoryNode, p_update: float, params: Params,
             attributes: Attributes) -> bool:
    """Does the update judge say that ``newer`` replaces ``older``: its ``updates`` answer
    ``p_update`` at ``params.theta_update`` or more, and both memories statements
    (:meth:`~topology.stages.relations.Attributes.statement`), as the write path asks of a
    ``supersedes`` edge?"""
    return p_update >= params.theta_update and attributes.statement(newer) and attributes.statement(older)


def gate(decision: ConsolidationDecision, params: Params) -> bool:
    """May System Two write a derived node for this decision?"""
    best = max(decision.representation.get("merge", 0.0), decision.representation.get("promote", 0.0))
    return best >= params.theta_summary and decision.contradiction < params.theta_contradiction


async def consolidate(
    run: int, pairs: Sequence[tuple[MemoryNode, MemoryNode]], so: SystemOne, params: Params,
    summariser: Summariser | None = None, attributes: Attributes | None = None,
) -> tuple[list[ConsolidationDecision], list[EdgeEvent], list[MemoryNode]]:
    """Judge ``pairs`` (newer, older) in one request (the consolidation question and the relation
    question per pair); return decisions, link and ``supersedes`` edges, derived nodes.
    ``attributes``: the pairs' attribute readings (:class:`~topology.stages.relations.Attributes`;
    default: none, every similarity unknown)."""
    if not pairs:
        return [], [], []
    attributes = attributes or Attributes()
    pair_features = [features(newer, older) for newer, older in pairs]
    items = [Item(CONSOLIDATION, pair_state(newer, older, f).model_dump())
             for (newer, older), f in zip(pairs, pair_features, strict=True)]
    items += [Item(RELATION, relation_state(newer, older, f, attributes.similarity(older.id, newer.id)))
              for (newer, older), f in zip(pairs, pair_features, strict=True)]
    answers = await so.ask(items)
    decided, judged = answers[: len(pairs)], answers[len(pairs):]
    decisions, edges, derived = [], [], []
    for (newer, older), ans, rel in zip(pairs, decided, judged, strict=True):
        dist = {k: round(v, 6) for k, v in ans.choices["representation"].items()}
        chosen = cast(Representation, max(sorted(dist), key=lambda k: dist[k]))
        d = ConsolidationDecision(
            id=ids.decision_id(newer.scope.key, newer.id, older.id, run),
            tenant_id=newer.tenant_id, conversation_id=newer.conversation_id, run=run,
            left=older.id, right=newer.id, redundant=round(ans.p("redundant"), 6),
            contradiction=round(ans.p("contradiction"), 6), obsolete=round(ans.p("obsolete"), 6),
            link_useful=round(ans.p("link_useful"), 6), representation=dist, chosen=chosen,
        )
        if d.link_useful >= params.theta_rel:
            edges.append(EdgeEvent(
                id=ids.edge_id("semantic", older.id, newer.id, "consolidation_link"),
                tenant_id=newer.tenant_id, conversation_id=newer.conversation_id, view="semantic",
                source=older.id, target=newer.id, direction="undirected", probability=d.link_useful,
                label="consolidation_link", created_by="system_one"))
        if superseded(d, params) and replaces(newer, older, rel.p("updates"), params, attributes):
            # the read path shows an obsolete memory together with what superseded it
            edges.append(EdgeEvent(
                id=ids.edge_id("temporal", newer.id, older.id, "supersedes"),
                tenant_id=newer.tenant_id, conversation_id=newer.conversation_id, view="temporal",
                source=newer.id, target=older.id, direction="directed", probability=d.obsolete,
                label="supersedes", created_by="system_one"))
        if summariser is not None and gate(d, params):
            rep = "merge" if dist.get("merge", 0.0) >= dist.get("promote", 0.0) else "promote"
            text = await summariser.summarise([older.content, newer.content])
            nid = ids.derived_node_id(older.id, newer.id, rep)
            derived.append(newer.model_copy(update={
                "id": nid, "event_id": f"derived:{nid}", "kind": "derived", "content": text,
                "derived_from": [older.id, newer.id], "embedding": None, "speaker": None}))
            d = d.model_copy(update={"derived_node_id": nid})
            # the derived summary is reachable from both sources through the semantic view
            edges += [EdgeEvent(
                id=ids.edge_id("semantic", src.id, nid, "summarises"), tenant_id=newer.tenant_id,
                conversation_id=newer.conversation_id, view="semantic", source=nid, target=src.id,
                direction="directed", probability=round(max(dist.get("merge", 0.0), dist.get("promote", 0.0)), 6),
                label="summarises", created_by="system_one") for src in (older, newer)]
        decisions.append(d)
    return decisions, edges, derived
