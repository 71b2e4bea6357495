"""Relation judgment and edge emission for a batch of candidate sets.

One System One request covers every (new node, candidate) pair of the batch, plus alias questions
for entity pairs whose exact ids differ but whose names may co-refer. Rule edges need no
controller: timestamp order gives temporal edges (gated by temporal proximity), exact shared entity
ids other than the participants' names give entity edges.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from topology import ids
from topology.params import Params
from topology.schemas import CandidateFeatures, CandidateSet, EdgeEvent, MemoryNode, RelationJudgment
from topology.stages.updates import MIN_ABOUT, statement
from topology.systemone.attributes import AttributeSpace, before_rows
from topology.systemone.catalog import ALIAS, RELATION
from topology.systemone.port import Item, SystemOne
from topology.text import alias_plausibility, entity_id

#: Alias questions are asked only for name pairs this plausible by a cheap string test.
ALIAS_PREFILTER = 0.5
#: The label of the edge from a newer memory to an earlier one it updates (the read path ranks the
#: older one below it: ``query_api.retrieval.currency``); consolidation writes the same edge (same id).
SUPERSEDES = "supersedes"


def _edge(node: MemoryNode, view: str, source: str, target: str, p: float, label: str,
          created_by: str, directed: bool) -> EdgeEvent:
    return EdgeEvent.model_validate({
        "id": ids.edge_id(view, source, target, label),
        "tenant_id": node.tenant_id, "conversation_id": node.conversation_id,
        "view": view, "source": source, "target": target,
        "direction": "directed" if directed else "undirected",
        "probability": round(min(1.0, max(0.0, p)), 6), "label": label, "created_by": created_by,
    })


#: A "next" edge (consecutive turns) is certain within a sitting and weaker across a long pause.
NEXT_PAUSE_HOURS = 6.0


def next_probability(prev: MemoryNode, node: MemoryNode) -> float:
    """1.0 for consecutive turns of one sitting; 0.5 after a pause of ``NEXT_PAUSE_HOURS`` or more
    (or when a time is unknown)."""
    if prev.observed_at is None or node.observed_at is None:
        return 0.5
    hours = (node.observed_at - prev.observed_at).total_seconds() / 3600.0
    return 1.0 if hours < NEXT_PAUSE_HOURS else 0.5


def participants(cset: CandidateSet, earlier: Mapping[str, MemoryNode]) -> set[str]:
    """Entity ids that name a participant: the speakers of ``cset``'s node and of its candidates
    (the conversation's participants as far as this node's neighbourhood shows), and the node's
    own entities that the cheap alias test ties to one of them (a nickname: "Mel" for Melanie)."""
    nodes = [cset.node, *(earlier[c.node_id] for c in cset.candidates if c.node_id in earlier)]
    speakers = {n.speaker for n in nodes if n.speaker}
    nicknames = {e.id for e in cset.node.entities
                 if any(alias_plausibility(e.name, s) >= ALIAS_PREFILTER for s in speakers)}
    return {entity_id(s) for s in speakers} | nicknames


def rule_edges(cset: CandidateSet, earlier: Mapping[str, MemoryNode], theta_rel: float) -> list[EdgeEvent]:
    """The edges that need no controller, between ``cset``'s node and its candidates:

    - a temporal ``before`` edge by (event time, seq) order, when the pair's temporal proximity
      is at least ``theta_rel`` (the gate of judged edges; a weaker one is never worth following);
    - a temporal ``next`` edge from the immediately preceding turn (a reply to its question);
    - an entity edge on exact shared entity ids, leaving out the participants' own names
      (:func:`participants`): every turn carries its speaker's name and most address the other
      person, so such a name links nearly every pair and says nothing of what is talked about
      (the read path matches the asked-about person with its own ``speaker_match`` feature).
    """
    node, out = cset.node, []
    mine = {e.id for e in node.entities} - participants(cset, earlier)
    for cand in cset.candidates:
        other = earlier.get(cand.node_id)
        if other is None:
            continue
        if cand.features.temporal >= theta_rel:
            if node.event_time and other.event_time and node.event_time < other.event_time:
                first, second = node, other  # the newer message tells of an earlier event
            else:
                first, second = other, node
            out.append(_edge(node, "temporal", first.id, second.id, cand.features.temporal, "before", "rule", True))
        if other.seq == node.seq - 1:
            out.append(_edge(node, "temporal", other.id, node.id, next_probability(other, node), "next", "rule", True))
        shared = mine & {e.id for e in other.entities}
        if shared:
            out.append(_edge(node, "entity", other.id, node.id, 1.0, "shares:" + ",".join(sorted(shared)),
                             "rule", False))
    return out


def _alias_pairs(node: MemoryNode, other: MemoryNode) -> list[tuple[str, str]]:
    mine, theirs = {e.id: e.name for e in node.entities}, {e.id: e.name for e in other.entities}
    pairs = []
    for a_id, a in sorted(mine.items()):
        for b_id, b in sorted(theirs.items()):
            if a_id != b_id and a_id not in theirs and b_id not in mine and \
                    alias_plausibility(a, b) >= ALIAS_PREFILTER:
                pairs.append((a_id, b_id))
    return pairs


def relation_state(node: MemoryNode, other: MemoryNode, f: CandidateFeatures,
                   attribute: float | None = None, question: str = "") -> dict[str, object]:
    """The relation question's state for the pair (``other`` older, ``node`` newer): the pair's
    features, and for the ``updates`` question each side's speaker and role, the hours from
    the older observation to the newer (None when either time is unknown), ``attribute``, how
    far both are about one attribute of a person (:class:`Attributes`; None: unknown), and the
    ``question`` the pair is judged for at recall (sent only when given)."""
    hours = (None if node.observed_at is None or other.observed_at is None
             else round((node.observed_at - other.observed_at).total_seconds() / 3600.0, 4))
    return {"newer": node.content, "older": other.content, "cosine": f.cosine, "lexical": f.lexical,
            "entity": f.entity, "gap": node.seq - other.seq,
            "same_speaker": bool(node.speaker) and node.speaker == other.speaker,
            "older_speaker": other.speaker or "", "newer_speaker": node.speaker or "",
            "older_role": other.role, "newer_role": node.role, "hours": hours,
            "attribute": attribute, **({"question": question} if question else {})}


class Attributes:
    """Attribute similarities of pairs of nodes: each node's distribution over an
    :class:`AttributeSpace`'s prototypes, from its vector (``vectors``: node id -> embedding) and
    the vector of the turn it was read after (``before``: node id -> that vector; absent: none),
    all computed in one product. Empty: every similarity is None (unknown)."""

    def __init__(self, space: AttributeSpace | None = None, vectors: Mapping[str, Sequence[float]] | None = None,
                 before: Mapping[str, Sequence[float]] | None = None) -> None:
        wanted = {i: v for i, v in (vectors or {}).items() if len(v) and np.any(np.asarray(v))} if space else {}
        self._row = {i: k for k, i in enumerate(wanted)}
        self._profiles = np.zeros((0, 0), dtype=np.float32)
        self._about: np.ndarray | None = None
        if space is not None and wanted:
            rows = np.asarray(list(wanted.values()), dtype=np.float32)
            self._profiles = space.profiles(rows, before_rows(list(wanted), before, rows.shape[1]) if before else None)
            self._about = space.about(self._profiles)

    def similarity(self, a: str, b: str) -> float | None:
        """How far nodes ``a`` and ``b`` (ids) are about the same attribute (0 to 1, rounded to 4
        places), or None when either has no vector here."""
        ra, rb = self._row.get(a), self._row.get(b)
        if ra is None or rb is None:
            return None
        return round(float(self._profiles[ra] @ self._profiles[rb]), 4)

    def about(self, node: str) -> float | None:
        """How far the learned attribute model reads node ``node`` (an id) as about one attribute
        (:meth:`~topology.systemone.attributes.AttributeSpace.about`), or None when it has no
        vector here or the space no learned model."""
        row = self._row.get(node)
        return None if row is None or self._about is None else float(self._about[row])

    def statement(self, node: MemoryNode) -> bool:
        """:func:`topology.stages.updates.statement` of ``node`` with its reading here
        (:meth:`about`): whether it states a fact an update may replace or be."""
        return statement(node, self.about(node.id))


def strongest(judgments: Sequence[RelationJudgment], k: int, floor: float) -> set[tuple[str, str]]:
    """The (source, target) pairs of the ``k`` most probably related candidates of each new turn
    (``target``) with p(semantic) at least ``floor``: p descending, then source id."""
    by_turn: dict[str, list[RelationJudgment]] = {}
    for j in judgments:
        if j.semantic >= floor:
            by_turn.setdefault(j.target, []).append(j)
    return {(j.source, j.target) for js in by_turn.values()
            for j in sorted(js, key=lambda j: (-j.semantic, j.source))[: max(0, k)]}


#: The label of a turn's semantic edge from its most similar candidate (highest cosine): the pair
#: consolidation judges for that turn, whatever the relation judge thinks of it.
NEAREST = "nearest"


def nearest(csets: Sequence[CandidateSet], earlier: Mapping[str, MemoryNode]) -> set[tuple[str, str]]:
    """(source, target): each new turn's most similar candidate by cosine (then highest id)."""
    out = set()
    for cs in csets:
        known = [c for c in cs.candidates if c.node_id in earlier]
        if known:
            best = max(known, key=lambda c: (c.features.cosine, c.node_id))
            out.add((best.node_id, cs.node.id))
    return out


def consolidation_key(e: EdgeEvent) -> tuple[bool, float, str]:
    """How a turn's incoming semantic edges rank as its consolidation pair (the largest is used):
    the edge from its most similar candidate (label :data:`NEAREST`) first, then probability, then
    source id (in a store written before that label: the strongest edge)."""
    return e.label == NEAREST, e.probability, e.source


def closest_incoming(edges: Sequence[EdgeEvent]) -> dict[str, EdgeEvent]:
    """Per target, its largest incoming semantic edge by :func:`consolidation_key`."""
    best: dict[str, EdgeEvent] = {}
    for e in edges:
        if e.view == "semantic":
            cur = best.get(e.target)
            if cur is None or consolidation_key(e) > consolidation_key(cur):
                best[e.target] = e
    return best


#: A new turn supersedes each earlier statement judged an update whose attribute overlap is at
#: least this fraction of the best one's (:func:`same_attribute`).
SAME_ATTRIBUTE = 0.9
#: ... when the learned attribute model reads the new turn as about an attribute it knows
#: (:meth:`Attributes.about` at least :data:`topology.stages.updates.MIN_ABOUT`); below it the
#: overlaps are noise, and the judge's answer alone picks the one statement replaced.


def same_attribute(pairs: Sequence[tuple[tuple[float, float], MemoryNode]],
                   known: bool = True) -> list[tuple[tuple[float, float], MemoryNode]]:
    """Of one new turn's pairs judged updates, ``((attribute overlap, -1 when unknown; p), older
    memory)``, those it supersedes, in ``pairs`` order: each whose overlap is at least
    :data:`SAME_ATTRIBUTE` times the best overlap; when the best overlap is unknown or not
    positive, only the best pair (the highest overlap, then answer, then older id). ``known``
    False (the learned attribute model does not read the new turn as an attribute it knows, so
    the overlaps are noise): only the pair with the highest answer (then overlap, then older id)."""
    if not pairs:
        return []
    if not known:
        return [max(pairs, key=lambda kp: (kp[0][1], kp[0][0], kp[1].id))]
    best = max(pairs, key=lambda kp: (kp[0], kp[1].id))
    top = best[0][0]
    if top <= 0.0:
        return [best]
    return [kp for kp in pairs if kp[0][0] >= SAME_ATTRIBUTE * top]


async def judge(csets: Sequence[CandidateSet], earlier: dict[str, MemoryNode], so: SystemOne,
                params: Params, updates_only: Mapping[str, Sequence[tuple[MemoryNode, CandidateFeatures]]] | None = None,
                attributes: Attributes | None = None) -> tuple[list[RelationJudgment], list[EdgeEvent]]:
    """One System One request for all pairs of the batch; returns judgments and System One edges.

    Each new turn gets a semantic edge to its ``params.semantic_per_turn`` most probably related
    candidates at or above ``params.theta_semantic`` (:func:`strongest`): the view is a
    nearest-neighbour graph under the judge, which expansion needs dense enough to reach a partner
    turn (the ``theta_rel`` gate would leave about 2 edges a turn), and each edge carries the judge's
    probability. The turn's most similar candidate (:func:`nearest`) is linked too, labelled
    :data:`NEAREST`, as consolidation's pair. Causal and alias edges exist at or above
    ``params.theta_rel``. A new turn supersedes the earlier memories about the attribute it
    replaces: a ``supersedes`` edge (temporal, newer -> older) to each pair whose ``updates``
    answer is at or above ``params.theta_update`` and whose attribute overlap (``attributes``) is
    at least :data:`SAME_ATTRIBUTE` times the best such pair's (the judge's answers saturate near
    1 on statements of one person; the attribute tells which of them the new one replaces: every
    earlier value of it, a chain's older links too; without attribute overlaps, or where the
    learned model does not read the new turn as an attribute it knows (:data:`~topology.stages.updates.MIN_ABOUT`), the
    single pair with the highest answer), when both turns are statements
    (:meth:`Attributes.statement`: a question, tool turn, advice or chatter neither
    replaces a fact nor states one to replace, whatever the pair's answer), among its candidates and its
    ``updates_only`` pairs (node id -> the
    update candidates of :mod:`topology.stages.updates`, which may be in other conversations of
    the same user: the edge is kept with the newer turn's conversation; of those pairs only the
    ``updates`` answer is read, and no judgment is returned). Every pair's state carries its
    attribute similarity from ``attributes`` (None when it has no vectors for the pair)."""
    theta_rel = params.theta_rel
    attributes = attributes or Attributes()
    items: list[Item] = []
    keys: list[tuple[str, CandidateSet, MemoryNode, tuple[str, str] | None]] = []
    for cset in csets:
        node = cset.node
        names = {e.id: e.name for e in node.entities}
        for cand in cset.candidates:
            other = earlier.get(cand.node_id)
            if other is None:
                continue
            items.append(Item(RELATION, relation_state(node, other, cand.features, attributes.similarity(other.id, node.id))))
            keys.append(("relation", cset, other, None))
            other_names = {e.id: e.name for e in other.entities}
            for a_id, b_id in _alias_pairs(node, other):
                items.append(Item(ALIAS, {"a": names[a_id], "b": other_names[b_id]}))
                keys.append(("alias", cset, other, (a_id, b_id)))
        for older, features in (updates_only or {}).get(node.id, ()):
            items.append(Item(RELATION, relation_state(node, older, features, attributes.similarity(older.id, node.id))))
            keys.append(("update", cset, older, None))
    if not items:
        return [], []
    answers = await so.ask(items)
    judgments, edges = [], []
    # new turn -> ((attribute similarity, -1 when unknown; p), a memory it may replace), each pair once
    replaced: dict[str, dict[str, tuple[tuple[float, float], MemoryNode]]] = {}
    stating = {cs.node.id for cs in csets if attributes.statement(cs.node)}

    def supersedes(node: MemoryNode, other: MemoryNode, p: float) -> None:
        if p < params.theta_update or node.id not in stating or not attributes.statement(other):
            return
        similarity = attributes.similarity(other.id, node.id)
        key = (-1.0 if similarity is None else similarity, p)
        pairs = replaced.setdefault(node.id, {})
        if other.id not in pairs or key > pairs[other.id][0]:
            pairs[other.id] = (key, other)

    for (kind, cset, other, pair), ans in zip(keys, answers, strict=True):
        node = cset.node
        if kind == "alias":
            assert pair is not None
            if ans.p("alias") >= theta_rel:
                edges.append(_edge(node, "entity", other.id, node.id, ans.p("alias"),
                                   f"alias:{pair[1]}={pair[0]}", "system_one", False))
            continue
        if kind == "update":
            supersedes(node, other, round(ans.p("updates"), 6))
            continue
        j = RelationJudgment(tenant_id=node.tenant_id, conversation_id=node.conversation_id,
                             source=other.id, target=node.id, semantic=round(ans.p("semantic"), 6),
                             caused_by=round(ans.p("caused_by"), 6), causes=round(ans.p("causes"), 6),
                             updates=round(ans.p("updates"), 6))
        judgments.append(j)
        supersedes(node, other, j.updates)  # caught when written: the newer memory supersedes the older
        if j.caused_by >= theta_rel:
            edges.append(_edge(node, "causal", other.id, node.id, j.caused_by, "causes", "system_one", True))
        if j.causes >= theta_rel:
            edges.append(_edge(node, "causal", node.id, other.id, j.causes, "causes", "system_one", True))
    nodes = {cs.node.id: cs.node for cs in csets}
    for target, pairs in sorted(replaced.items()):
        about = attributes.about(target)
        for (_, p), replaced_node in same_attribute(list(pairs.values()), about is None or about >= MIN_ABOUT):
            edges.append(_edge(nodes[target], "temporal", target, replaced_node.id, p, SUPERSEDES, "system_one", True))
    keep = strongest(judgments, params.semantic_per_turn, params.theta_semantic)
    close = nearest(csets, earlier)
    edges += [_edge(nodes[j.target], "semantic", j.source, j.target, j.semantic,
                    NEAREST if (j.source, j.target) in close else "related", "system_one", False)
              for j in judgments if (j.source, j.target) in keep or (j.source, j.target) in close]
    return judgments, edges
