"""Whose fact a memory states, for a question about one person.

"Who is Priya's boss?" is not answered by Priya's "Apparently my mum has Marisol as a manager too"
(a fact about her mother), nor by Olu's "I answer to Agnieszka" (a fact about Olu), however alike
the words. The update judge's text analysis (:func:`topology.systemone.update_model.analyse`,
:func:`~topology.systemone.update_model.subjects`) says whose attribute a text may state; a
memory whose subjects are known, none of them the asked person, and none named in the question
itself ("What does Priya's mum do?") nor named by a relation the question asks about ("Where does
Maya's sister live?" and "My sister Lena lives in Berlin"), is about someone else. Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from topology.schemas import MemoryNode
from topology.stages.updates import PERSON_ROLES, statement
from topology.systemone.turn_kinds import ASSISTANT_ROLES
from topology.systemone.update_model import KIN_WORDS, analyse, names, subjects

#: "you" as the subject of a verb in the past: "the list you provided", "you mentioned that",
#: "you've recommended" (regular past forms, and the irregular ones a report of speech takes),
#: "what did you suggest?"
_YOU_SAID = re.compile(
    r"\bdid you\b|\byou(?:'ve|'d| have| had)?\s+(?:(?:also|just|once|already|\w+ly)\s+)?"
    r"(?:\w{3,}ed|told|said|gave|given|wrote|written|made|sent|showed|shown|came up with|chose|chosen|"
    r"drew|drawn|found|taught|brought up|put together|did)\b", re.IGNORECASE)


_FIRST = re.compile(r"\b(?:i|i'm|i've|i'd|i'll|me|my|mine|myself)\b", re.IGNORECASE)


def asked_people(question: str, speakers: Iterable[str]) -> frozenset[str]:
    """The people of ``speakers`` (lowercased) whom ``question`` names."""
    named = names(question) | {w.lower().removesuffix("'s") for w in question.split() if w[:1].isupper()}
    return frozenset(s.lower() for s in speakers if s and s.lower() in named)


def the_asker(question: str, nodes: Iterable[MemoryNode]) -> frozenset[str]:
    """Whom ``question``, put to a user's memory, asks about when it speaks of its asker ("my",
    "I", "me"): the one speaker (lowercased) of the person-role ``nodes``; empty when it is not in
    the first person, or when more than one person speaks (then "my" could be any of them)."""
    if not _FIRST.search(question):
        return frozenset()
    people = frozenset(n.speaker.lower() for n in nodes if n.speaker and n.role.lower() in PERSON_ROLES)
    return people if len(people) == 1 else frozenset()


def asked_roles(question: str) -> frozenset[str]:
    """The roles (lowercased) of the speaker whose words ``question`` asks about, as far as its
    grammar says: a user's question whose "you" is the subject of a verb in the past ("what was
    the 7th job in the list you provided?", "you mentioned two companies", "which names did you
    suggest?") asks what the one it is put to said, so
    :data:`~topology.systemone.turn_kinds.ASSISTANT_ROLES`; otherwise none."""
    return ASSISTANT_ROLES if _YOU_SAID.search(question) else frozenset()


def kind_for(kind: Mapping[str, float], role: str, roles: frozenset[str]) -> dict[str, float]:
    """``kind`` (p(kind) of a turn of ``role``) as a question asking about the words of ``roles``
    reads it: a turn of one of those roles holds what was asked for when it advises, so its
    p(advice) counts as p(statement) (what it states is not cut by the advice penalty, and its
    ``statement`` feature says so); any other turn's kind is unchanged."""
    out = dict(kind)
    if role.lower() in roles:
        out["statement"] = out.get("statement", 0.0) + out.get("advice", 0.0)
        out["advice"] = 0.0
    return out


def read_subjects(node: MemoryNode) -> frozenset[str]:
    """Whose attribute ``node`` may state (:func:`~topology.systemone.update_model.subjects` of its
    text and speaker): the reading kept at write (``types.subjects``), else read now."""
    kept = node.types.subjects
    return frozenset(kept) if kept is not None else subjects(analyse(node.content), node.speaker or "")


def about_someone_else(node: MemoryNode, asked: frozenset[str], question: str) -> bool:
    """Whether ``node`` states a fact of someone other than the ``asked`` people (see the
    module): False when nobody is asked, or the text's subject is unknown."""
    if not asked or not node.speaker:
        return False
    found = read_subjects(node)
    if not found:
        return False
    people = {s.split(":", 1)[1].split("@", 1)[0] for s in found}
    if people & asked:
        return False
    words = {w.strip("?.,!'\"").lower().removesuffix("'s") for w in question.split()}
    kin = words & KIN_WORDS
    # "Where does Maya's sister live?" is answered by Maya's "My sister Lena lives in Berlin",
    # not by her "My friend Marta's sister lives in Vienna" (Marta's sister)
    return not (people & words or (people & KIN_WORDS and kin) or own_kin(node.content) & kin)


def own_kin(text: str) -> set[str]:
    """The kin words (lowercased) of ``text`` that name its speaker's relative: each one not
    owned by someone else's possessive just before it ("my sister", "our mum", "Lena, my sister";
    not "Marta's sister", "my friend's mum")."""
    tokens = [w.strip("?.,!\"").lower() for w in text.split()]
    return {w for i, w in enumerate(tokens)
            if w in KIN_WORDS and not (i > 0 and tokens[i - 1].endswith(("'s", "s'", "\u2019s")))}


def own_statement(node: MemoryNode, asked: frozenset[str]) -> bool:
    """Whether ``node`` states a fact of its own speaker, one of the ``asked`` people: said by
    them, about them (:func:`~topology.systemone.update_model.subjects`), a statement
    (:func:`topology.stages.updates.statement`), and worded as a fact
    (:attr:`~topology.systemone.update_model.Text.worded_as_fact`)."""
    speaker = (node.speaker or "").lower()
    if speaker not in asked:  # before reading the text: most of a pool is someone else's
        return False
    found = read_subjects(node)
    if found and f"person:{speaker}" not in found:
        return False
    return analyse(node.content).worded_as_fact and statement(node)
