"""Update candidates: the earlier statements a new statement may replace, chosen for that question.

Candidate discovery (:mod:`topology.stages.candidates`) proposes a turn's most related earlier
turns of its conversation; a fact often changes much later, or in another session of the same
user, where nothing links the two but who said them and what they are about. So the write path
also asks, for each new statement (a :func:`person_turn` that is a :func:`statement`), about a
bounded set chosen for the update question alone: at most ``Params.k_update`` earlier memories
**of the same speaker** in the node's realm (its user's conversations when the observation named
a user, else its own conversation): of the ``Params.update_pool`` most similar (:class:`SpeakerFacts`) to the
statement's vector moved towards the attributes it is about (``Params.update_steer``,
:meth:`topology.systemone.attributes.AttributeSpace.steer`), those most about its attribute
(:func:`by_attribute`, in turns with the most similar; without a learned attribute model, the
most similar). Those pairs join
the relation request that already judges the node's candidates, and only its ``updates`` answer
is read from them (:func:`topology.stages.relations.judge`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from topology.schemas import CandidateFeatures, CandidateSet, MemoryNode
from topology.systemone.turn_kinds import turn_kind

#: A turn asks the update question when p(statement) of its turn kind is at least this (an
#: untyped node always asks): questions, tool calls and chatter state no fact to replace one.
MIN_STATEMENT = 0.5
#: A turn typed neither a question, a tool turn nor advice (their p together under one half) still
#: states a fact when the learned attribute model reads it as about one attribute of a person with
#: at least this probability (:meth:`topology.systemone.attributes.AttributeSpace.about`): the
#: turn kind reads cues, and a fact worded as an exclamation ("Meeting Mateo's parents this
#: weekend, nervous!") has the cues of chatter.
MIN_ABOUT = 0.5
#: Roles whose turns state facts about a person (an assistant's advice is no fact of the user's).
PERSON_ROLES = frozenset({"user", "human", "customer"})


class SpeakerFacts(Protocol):
    """Earlier memories of the same speaker, across the conversations of the node's user."""

    async def earlier_by_speaker(self, nodes: Sequence[MemoryNode], limit: int,
                                 queries: Sequence[Sequence[float]] | None = None) -> list[list[tuple[MemoryNode, float]]]:
        """For each of ``nodes`` (same order): at most ``limit`` observation nodes of its realm
        (tenant and ``user_id`` when it has one, else its own conversation) said by its speaker
        before it (an earlier observation time, or a lower seq in its conversation), with their
        similarity to its query (dot product with ``queries[i]``, default its own vector), most
        similar first; ties by node id."""
        ...


def statement(node: MemoryNode, about: float | None = None) -> bool:
    """Whether ``node`` is typed a statement (p(statement) of its turn kind at least
    :data:`MIN_STATEMENT`), or untyped; or, given ``about`` (how far the learned attribute model
    reads it as about one attribute; None: not read), typed no question, tool turn or advice and
    ``about`` at least :data:`MIN_ABOUT`."""
    if not node.types.kind:
        return True
    kind = turn_kind(node.types)
    if kind["statement"] >= MIN_STATEMENT:
        return True
    return about is not None and about >= MIN_ABOUT and kind["question"] + kind["tool"] + kind["advice"] < 0.5


def person_turn(node: MemoryNode) -> bool:
    """Whether ``node`` may ask the update question: an observation by a named person in a user
    role, with an embedding."""
    return node.kind == "observation" and bool(node.speaker) and node.role.lower() in PERSON_ROLES \
        and bool(node.embedding)


def earlier(older: MemoryNode, node: MemoryNode) -> bool:
    """``older`` was said before ``node``: a lower seq in the same conversation, else an earlier
    observation time (unknown times: never)."""
    if older.conversation_id == node.conversation_id and older.tenant_id == node.tenant_id:
        return older.seq < node.seq
    return older.observed_at is not None and node.observed_at is not None and older.observed_at < node.observed_at


def by_attribute(found: Sequence[tuple[MemoryNode, float]], overlaps: Sequence[float]) -> list[tuple[MemoryNode, float]]:
    """``found`` (a statement's update candidates with their similarity) in turns: the one most
    about the statement's attribute (``overlaps``, one per candidate: the overlap of the two
    attribute distributions, :meth:`topology.systemone.attributes.AttributeSpace.similarity`,
    rounded to 4 places; then similarity, then node id), then the most similar not taken yet
    (then node id), and so on. A
    speaker's small talk is often as similar to a statement as their earlier value of its
    attribute is, and what it is about tells them apart; for an attribute no model knows, what
    it is about is read poorly, and the earlier value is among the most similar."""
    keyed = sorted(zip(found, overlaps, strict=True), key=lambda fo: (-round(fo[1], 4), -fo[0][1], fo[0][0].id))
    by_overlap = [f for f, _ in keyed]
    by_similarity = sorted(found, key=lambda f: (-f[1], f[0].id))
    out: list[tuple[MemoryNode, float]] = []
    taken: set[str] = set()
    for pair in zip(by_overlap, by_similarity, strict=True):
        for f in pair:
            if f[0].id not in taken:
                taken.add(f[0].id)
                out.append(f)
    return out


def pairs(csets: Sequence[CandidateSet], found: Mapping[str, Sequence[tuple[MemoryNode, float]]],
          limit: int, about: Mapping[str, float] | None = None) -> dict[str, list[tuple[MemoryNode, CandidateFeatures]]]:
    """Per new node id: the update candidates ``found`` for it (in the order given: most about
    its attribute first, :func:`by_attribute`, or most similar first) that are
    not among its candidates already (those are asked anyway), said before it, and
    :func:`statement` s (a question or chatter states no fact to replace; ``about``: node id ->
    how far the learned attribute model reads it as about one attribute), a text said again
    counting once (its first copy in that order), at most ``limit``, with the pair's features (the
    similarity; no word, entity or time proximity: only the ``updates`` answer is read)."""
    out: dict[str, list[tuple[MemoryNode, CandidateFeatures]]] = {}
    for cs in csets:
        known = {c.node_id for c in cs.candidates} | {cs.node.id}
        texts: set[str] = set()
        extra: list[tuple[MemoryNode, CandidateFeatures]] = []
        for n, s in found.get(cs.node.id, ()):
            if len(extra) >= limit:
                break
            if n.id in known or n.content in texts or not earlier(n, cs.node) \
                    or not statement(n, (about or {}).get(n.id)):
                continue
            texts.add(n.content)
            extra.append((n, CandidateFeatures(cosine=round(max(-1.0, min(1.0, s)), 6), lexical=0.0, entity=0.0,
                                               temporal=0.0)))
        if extra:
            out[cs.node.id] = extra
    return out
