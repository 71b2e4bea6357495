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

from collections.abc import Iterable

from topology.schemas import MemoryNode
from topology.stages.updates import statement
from topology.systemone.update_model import KIN_WORDS, analyse, names, subjects


def asked_people(question: str, speakers: Iterable[str]) -> frozenset[str]:
    """The people of ``speakers`` (lowercased) whom ``question`` names."""
    named = names(question) | {w.lower().removesuffix("'s") for w in question.split() if w[:1].isupper()}
    return frozenset(s.lower() for s in speakers if s and s.lower() in named)


def about_someone_else(node: MemoryNode, asked: frozenset[str], question: str) -> bool:
    """Whether ``node`` states a fact of someone other than the ``asked`` people (see the
    module): False when nobody is asked, or the text's subject is unknown."""
    if not asked or not node.speaker:
        return False
    found = subjects(analyse(node.content), node.speaker)
    if not found:
        return False
    people = {s.split(":", 1)[1].split("@", 1)[0] for s in found}
    if people & asked:
        return False
    words = {w.strip("?.,!'\"").lower().removesuffix("'s") for w in question.split()}
    kin = words & KIN_WORDS
    # "Where does Maya's sister live?" is answered by Maya's "My sister Lena lives in Berlin"
    told = {w.strip("?.,!'\"").lower() for w in node.content.split()} & kin
    return not (people & words or (people & KIN_WORDS and kin) or told)


def own_statement(node: MemoryNode, asked: frozenset[str]) -> bool:
    """Whether ``node`` states a fact of its own speaker, one of the ``asked`` people: said by
    them, about them (:func:`~topology.systemone.update_model.subjects`), a statement
    (:func:`topology.stages.updates.statement`), and worded as a fact
    (:attr:`~topology.systemone.update_model.Text.worded_as_fact`)."""
    speaker = (node.speaker or "").lower()
    text = analyse(node.content)
    found = subjects(text, node.speaker or "")
    if speaker not in asked or (found and f"person:{speaker}" not in found):
        return False
    return text.worded_as_fact and statement(node)
