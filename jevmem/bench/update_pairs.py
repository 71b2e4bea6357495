"""The update judge's labelled (older, newer) pairs, from the wording tables of
:mod:`jevmem.bench.updates_data` (and the wide pool's, :mod:`jevmem.bench.wide`): what
``scripts/train_update_judge.py`` fits the judge on (the training wordings) and validates it on
(the held-out wordings, and attributes it never saw). Deterministic for a seed."""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from jevmem.bench.updates_data import (
    ASSISTANT,
    FRIENDS,
    PEOPLE,
    SMALL_TALK_ASSISTANT,
    SMALL_TALK_FRIEND,
    SMALL_TALK_PERSON,
    UPDATE_KINDS,
    Attribute,
    _Filler,
    _pool,
    who,
)
from jevmem.bench.users_data import WORDINGS, Wordings

SEED = 11
"""Seed of the update judge's training and validation pairs."""
ROUNDS = 30
"""Rounds of pairs per attribute (each round: 7 updates and 25 non-updates)."""
WIDE_ROUNDS = 10
"""Rounds of pairs per attribute of the wide pool (each also has 9 more non-updates: remarks,
the assistant after itself, the person's own questions)."""


@dataclass(frozen=True, slots=True)
class Pair:
    """One labelled (older, newer) pair for the update judge: does the newer turn replace what
    the older one stated as currently true of the same person and attribute (``label``)?
    ``kind`` names the family (``update:explicit``, ``lookalike``, ``other_speaker``, ...)."""

    older: str
    newer: str
    older_speaker: str
    newer_speaker: str
    older_role: str
    newer_role: str
    gap: int
    hours: float
    label: bool
    kind: str
    attribute: str

    def state(self) -> dict[str, object]:
        """The pair as the relation question's state (cosine, lexical and entity are 0: the
        update judge reads the texts, speakers, roles and times, not the embedder's cosine)."""
        return {"newer": self.newer, "older": self.older, "cosine": 0.0, "lexical": 0.0, "entity": 0.0,
                "gap": self.gap, "same_speaker": self.older_speaker == self.newer_speaker,
                "older_speaker": self.older_speaker, "newer_speaker": self.newer_speaker,
                "older_role": self.older_role, "newer_role": self.newer_role, "hours": self.hours}


def judge_pairs(wordings: Wordings, seed: int = SEED, rounds: int = ROUNDS,
                attributes: Collection[str] | None = None, extra: Sequence[Attribute] = (),
                extra_rounds: int = WIDE_ROUNDS) -> list[Pair]:
    """Labelled pairs from the ``wordings`` templates of every table (deterministic), about
    ``attributes`` only (names; None: all; another attribute of a pair is one of them too),
    then ``extra_rounds`` rounds about each of ``extra`` (attributes beyond the tables,
    :mod:`jevmem.bench.wide`; they join the pool another attribute is drawn from).

    Updates: a statement and its update by the same person in each wording kind; a restatement
    and an update; someone else's value and that same person's update (told by the person, or
    told of them by name by another speaker and updated by them). Non-updates: a look-alike about
    someone else after or before the statement; the same wording by another speaker; a
    restatement of the same value; another attribute of the same person; two different third
    parties; small talk, the partner's question or acknowledgement on either side; for a table
    with remarks (the wide pool's), also the assistant after itself, the person's own questions,
    and remarks on the same thing that change nothing (after the statement, a restatement, an
    update). Every pair
    draws its turn gap and hours from one distribution, whatever its label."""
    if wordings not in WORDINGS:
        raise ValueError(f"wordings must be one of {WORDINGS}, not {wordings!r}")
    tables = _pool(attributes)
    pool = tables + tuple(extra)
    out: list[Pair] = []
    for a in pool:
        for r in range(rounds if a in tables else extra_rounds):
            out += _Round(random.Random(f"{seed}:{wordings}:{a.name}:{r}"), wordings, a, pool).pairs()
    return out


Said = tuple[str, str, str]
"""(text, speaker, role) of one side of a pair."""


class _Round:
    """One round of pairs about one attribute: a person, a friend, two values, another attribute."""

    def __init__(self, rng: random.Random, wordings: Wordings, a: Attribute, pool: tuple[Attribute, ...]) -> None:
        self.rng, self.f, self.a, self.pool = rng, _Filler(rng, wordings), a, pool
        self.person, self.friend = rng.choice(PEOPLE), rng.choice(FRIENDS)
        self.out: list[Pair] = []

    def text(self, attr: Attribute, part: str, **slots: str) -> str:
        return self.f.pick(f"{attr.name}.{part}", getattr(attr, part), slots)[0]

    def add(self, older: Said, newer: Said, label: bool, kind: str) -> None:
        gap = self.rng.randint(1, 90)
        hours = gap * self.rng.uniform(0.4, 1.8) / 60 + (self.rng.uniform(24, 720) if self.rng.random() < 0.3 else 0.0)
        self.out.append(Pair(older[0], newer[0], older[1], newer[1], older[2], newer[2], gap, round(hours, 3), label,
                             kind, self.a.name))

    def mine(self, t: str) -> Said:
        return t, self.person, "user"

    def theirs(self, t: str) -> Said:
        return t, self.friend, "user"

    def bot(self, t: str) -> Said:
        return t, ASSISTANT, "assistant"

    def update(self, new: str, old: str) -> str:
        return self.text(self.a, self.rng.choice(UPDATE_KINDS), v=new, old=old)

    def small(self) -> str:
        return self.f.pick("small_talk.person", SMALL_TALK_PERSON, {})[0]

    def pairs(self) -> list[Pair]:
        a, rng, add, mine, theirs, bot = self.a, self.rng, self.add, self.mine, self.theirs, self.bot
        v0, v1 = rng.sample(a.values, 2)
        b = rng.choice([x for x in self.pool if x is not a])
        vb0, vb1 = rng.sample(b.values, 2)
        state = mine(self.text(a, "state", v=v0))
        for kind in UPDATE_KINDS:
            add(state, mine(self.text(a, kind, v=v1, old=v0)), True, f"update:{kind}")
        add(mine(self.text(a, "restate", v=v0)), mine(self.update(v1, v0)), True, "update_after_restate")
        start, mid, _ = who(rng)
        add(mine(self.text(a, "other", v=v0, who=start, who_l=mid)),
            mine(self.text(a, "other_update", v=v1, who=start, who_l=mid)), True, "update_third")
        add(theirs(self.text(a, "other", v=v0, who=self.person, who_l=self.person)), mine(self.update(v1, v0)), True,
            "update_named")
        add(state, mine(self.text(a, "explicit", v=v1, old=v0)), True, "update:explicit")
        start, mid, key = who(rng)
        add(state, mine(self.text(a, "other", v=rng.choice((v0, v1)), who=start, who_l=mid)), False, "lookalike")
        add(mine(self.text(a, "other", v=v0, who=start, who_l=mid)), mine(self.update(v1, v0)), False,
            "lookalike_before")
        add(state, mine(self.text(a, "other_update", v=v1, who=start, who_l=mid)), False, "lookalike_update")
        add(state, theirs(self.update(v1, v0)), False, "other_speaker")
        add(theirs(self.text(a, "state", v=v0)), mine(self.update(v1, v0)), False, "other_speaker")
        add(state, theirs(self.text(a, "state", v=rng.choice((v0, v1)))), False, "other_speaker")
        add(state, mine(self.text(a, "restate", v=v0)), False, "restate")
        add(state, mine(self.text(a, "state", v=v0)), False, "restate")
        add(state, mine(self.text(b, rng.choice(UPDATE_KINDS), v=vb1, old=vb0)), False, "other_attribute")
        add(mine(self.text(b, "state", v=vb0)), mine(self.update(v1, v0)), False, "other_attribute")
        c = rng.choice([x for x in self.pool if x is not a and x is not b])
        add(state, mine(self.text(c, "implicit", v=rng.choice(c.values))), False, "other_attribute")
        add(mine(self.text(c, "restate", v=rng.choice(c.values))), mine(self.text(a, "implicit", v=v1)), False,
            "other_attribute")
        start2, mid2, key2 = who(rng)
        if key2 != key:
            add(mine(self.text(a, "other", v=v0, who=start, who_l=mid)),
                mine(self.text(a, "other_update", v=v1, who=start2, who_l=mid2)), False, "other_subject")
        add(state, mine(self.small()), False, "small_talk")
        add(mine(self.small()), mine(self.small()), False, "small_talk")  # most candidate pairs: chat and chat
        add(mine(self.small()), mine(self.small()), False, "small_talk")
        add(mine(self.small()), state, False, "small_talk")
        add(theirs(self.f.pick("small_talk.friend", SMALL_TALK_FRIEND, {})[0]), theirs(self.text(a, "state", v=v1)),
            False, "small_talk")
        add(theirs(self.text(a, "ack", v=v0)), theirs(self.text(b, "state", v=vb0)), False, "ack")
        add(mine(self.small()), mine(self.update(v1, v0)), False, "small_talk")
        add(mine(self.text(a, "restate", v=v0)), mine(self.small()), False, "small_talk")
        add(mine(self.small()), mine(self.text(a, "implicit", v=v1)), False, "small_talk")
        add(state, bot(self.text(a, "ask")), False, "question")
        add(bot(self.text(a, "ask")), mine(self.update(v1, v0)), False, "question")
        add(state, bot(self.text(a, "ack", v=v0)), False, "ack")
        add(bot(self.text(a, "ack", v=v0)), mine(self.update(v1, v0)), False, "ack")
        if a.remark:  # a table with remarks (the wide pool's): the pairs the tables' rounds leave out
            # outside the gate, as the write path also asks them: the assistant after itself, the
            # person's own questions (a question states nothing to replace, nor replaces a statement)
            said = self.f.pick("small_talk.assistant", SMALL_TALK_ASSISTANT, {})[0]
            add(bot(said), bot(self.f.pick("small_talk.assistant", SMALL_TALK_ASSISTANT, {})[0]), False, "assistant")
            add(bot(self.text(a, "ack", v=v0)), bot(self.text(a, "ack", v=v1)), False, "assistant")
            add(bot(self.text(a, "ask")), bot(self.text(b, "ask")), False, "assistant")
            add(state, mine(self.text(a, "ask")), False, "own_question")
            add(mine(self.text(a, "ask")), mine(self.update(v1, v0)), False, "own_question")
            add(mine(self.text(a, "ask")), mine(self.text(b, "ask")), False, "own_question")
            # the same thing spoken of again, unchanged: after its statement, a restatement, an update
            add(state, mine(self.text(a, "remark", v=v0)), False, "remark")
            add(mine(self.text(a, "restate", v=v0)), mine(self.text(a, "remark", v=v0)), False, "remark")
            add(mine(self.update(v1, v0)), mine(self.text(a, "remark", v=v1)), False, "remark")
        return self.out
