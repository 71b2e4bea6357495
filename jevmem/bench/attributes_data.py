"""Labelled examples for the learned attribute model (:mod:`topology.systemone.attribute_model`).

Deterministic, from our own generators' wording tables: :mod:`jevmem.bench.updates_data` (a
person's city, employer, manager, car, favourite food, partner, phone, gym and hobby, in every
wording a conversation uses: statements, updates of every kind, restatements, someone else's
value, the partner's acknowledgements and questions) and :mod:`jevmem.bench.users_data`
(allergies, pets, jobs, hometowns, cars, siblings, diets, birthdays and locker codes, stated or
asked about), slots filled from the tables' values, each labelled with its attribute; small talk,
assistant replies and unrelated requests are the class ``none``. Every example records whether
its template is held out (:func:`jevmem.bench.users_data.held_out`), so a model fitted on the
training templates is validated on wordings it never saw.
"""

from __future__ import annotations

import random
import string
from collections.abc import Mapping, Sequence

import numpy as np

from jevmem.bench import updates_data, users_data
from topology.ports import Embedder
from topology.systemone.attribute_model import NONE

SEED = 7
"""Default seed of the fillings."""
REPEATS = 3
"""Fillings of each template (other values in its slots)."""
UPDATES_PARTS = ("state", "explicit", "contrast", "implicit", "restate", "other", "other_update", "ack", "ask")
USERS_PARTS = ("state", "ask", "question")
#: The slots a template may name besides its values, filled with neutral words.
SLOTS = {"who": "My sister", "who_l": "my sister", "name": "Ana", "span": "week", "show": "that new series",
         "when": "yesterday", "water": "river", "day": "Sunday", "friend": "Bo", "t": "Sam"}


class _Slots(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return SLOTS.get(key, "it")


Example = tuple[str, str, str, bool]
"""(text, label, wording part, held out)."""


def examples(seed: int = SEED, repeats: int = REPEATS) -> list[Example]:
    """Every template of every table the model learns from, filled ``repeats`` times."""
    rng = random.Random(f"attributes:{seed}")
    out: list[Example] = []
    fmt = string.Formatter()

    def add(table: Sequence[str], label: str, part: str, values: Sequence[Mapping[str, str]]) -> None:
        for i, template in enumerate(table):
            for _ in range(repeats):
                slots = _Slots(rng.choice(values) if values else {})
                out.append((fmt.vformat(template, (), slots), label, part, users_data.held_out(i)))

    for a in updates_data.ATTRIBUTES:
        values = [{"v": v, "old": rng.choice([o for o in a.values if o != v])} for v in a.values]
        for part in UPDATES_PARTS:
            add(getattr(a, part), a.name, part, values)
    for f in (*users_data.FACTS, users_data.LOCKER):
        for part in USERS_PARTS:
            add(getattr(f, part), f.name, part, [dict(v) for v in f.values])
    for name, table in (("small_talk", users_data.SMALL_TALK_USER), ("small_talk", users_data.SMALL_TALK_ASSISTANT),
                        ("unrelated", users_data.UNRELATED), ("small_talk", updates_data.SMALL_TALK_PERSON),
                        ("small_talk", updates_data.SMALL_TALK_ASSISTANT), ("small_talk", updates_data.SMALL_TALK_FRIEND)):
        add(table, NONE, name, [])
    return out


def before_lines(seed: int = SEED) -> tuple[list[str], list[str]]:
    """Lines a turn is read after in training, from the training templates only: (small talk,
    statements of every attribute)."""
    fmt = string.Formatter()
    chat = [fmt.vformat(t, (), _Slots()) for table in (updates_data.SMALL_TALK_PERSON, updates_data.SMALL_TALK_FRIEND,
                                                       users_data.SMALL_TALK_USER)
            for i, t in enumerate(table) if not users_data.held_out(i)]
    facts = [r[0] for r in examples(seed + 1, 1) if not r[3] and r[1] != NONE and r[2] == "state"]
    return chat, facts


def read_after(texts: Sequence[str], seed: int = SEED, times: int = 1) -> list[tuple[str, str]]:
    """``(before, text)`` for each of ``texts``, ``times`` over (blocks in ``texts`` order): the
    line before drawn from :func:`before_lines`, small talk or a statement at even odds, as a
    conversation puts a turn after small talk or after another fact."""
    rng = random.Random(f"attributes-before:{seed}")
    chat, facts = before_lines(seed)
    return [(rng.choice(chat if rng.random() < 0.5 else facts), t) for _ in range(times) for t in texts]


def embedded_after(texts: Sequence[str], embedder: Embedder, seed: int = SEED,
                   times: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``texts`` read after other lines (:func:`read_after`), as the write path stores a turn,
    and the vectors of those lines, each read after another line in turn: (vectors, the vectors
    they were read after), ``times`` blocks in ``texts`` order."""
    pairs = read_after(texts, seed, times)
    vectors = np.asarray(embedder.embed_after(pairs), dtype=np.float64)
    before = np.asarray(embedder.embed_after(read_after([b for b, _ in pairs], seed + 1)), dtype=np.float64)
    return vectors, before
