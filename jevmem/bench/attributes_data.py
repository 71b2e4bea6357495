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
from collections.abc import Collection, Mapping, Sequence

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


#: Training-only wordings: what people do with an attribute's value rather than what they say it
#: is ("Took the {v} for its service this morning" of a car). Never drawn by a benchmark
#: conversation and never held out; they widen what the model has seen of each attribute.
ACTIVITIES: dict[str, tuple[str, ...]] = {
    "city": ("The tram from my place to the centre of {v} takes ten minutes.",
             "I finally registered with a doctor here in {v}.", "I got a parking permit for my street in {v}.",
             "Winters in {v} are milder than I expected.", "The post office near my flat in {v} is always packed.",
             "My commute across {v} is mostly by bus.", "Rent in {v} is steep, but I like my neighbourhood."),
    "employer": ("Our team at {v} ships a release every Friday.", "The office at {v} has a rooftop terrace.",
                 "I got my {v} badge and laptop on Monday.", "{v} pays for my train pass, which is nice.",
                 "My colleagues at {v} are a friendly bunch.", "The all-hands at {v} ran over again today.",
                 "I'm presenting at the {v} quarterly review next week."),
    "manager": ("{v} gave me really useful feedback on my report.", "{v} put me forward for a promotion.",
                "I have to run the budget past {v} before I spend anything.",
                "{v} assigns our tasks every Monday morning.", "{v} called me in to talk about my targets.",
                "My goals for the year were set by {v}.", "{v} sat in on my client call and took notes."),
    "car": ("Filled up the {v} on the way home, fuel is pricey.", "The {v} needs new tyres before winter.",
            "Took the {v} for its service this morning.", "My {v} barely fits in the garage.",
            "I washed the {v} on Sunday, it looks brand new.", "The boot of my {v} fits all our camping gear.",
            "Insurance on the {v} went up this year."),
    "food": ("I order {v} every time we eat out.", "Made {v} from scratch for dinner tonight.",
             "Payday means {v} at my favourite spot.", "Found a place near me that does amazing {v}.",
             "I'm learning to cook {v} properly.", "My fridge is always stocked for {v} night.",
             "Nothing cheers me up like a plate of {v}."),
    "partner": ("{v} and I just got back from a weekend away.", "{v} surprised me with flowers at work today.",
                "Date night with {v} at the new Thai place.", "{v} is moving in with me next month.",
                "I'm cooking {v}'s favourite dinner for our anniversary.",
                "{v} held my hand through the whole horror film.", "{v} and I are saving up for a flat together."),
    "phone": ("The battery on my {v} lasts two days.", "I dropped my {v} in the sink, it survived.",
              "Just updated the software on my {v}.", "My {v} is always running out of storage.",
              "I bought a case for my {v} today.", "Face unlock on my {v} is so fast.",
              "I charge my {v} every night by the bed."),
    "gym": ("Leg day at {v} wrecked me.", "I renewed my {v} card for another year.",
            "{v} opens at six, so I train before work.", "I do my stretching in the studio at {v} after work.",
            "The squat racks at {v} are always busy after work.", "I swim laps in the {v} pool twice a week.",
            "I left my water bottle in a locker at {v} again."),
    "hobby": ("I spent the evening on {v} and lost track of time.", "I bought new gear for {v} this week.",
              "Watching {v} videos every night to get better.", "My weekend plan is just {v}, nothing else.",
              "I'm getting better at {v} every week.", "{v} is my way to switch off after work.",
              "My friends tease me about how much {v} I do."),
}


class _Slots(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return SLOTS.get(key, "it")


Example = tuple[str, str, str, bool]
"""(text, label, wording part, held out)."""


def examples(seed: int = SEED, repeats: int = REPEATS, attributes: Collection[str] | None = None) -> list[Example]:
    """Every template of every table the model learns from, filled ``repeats`` times: of the
    attributes named in ``attributes`` only (None: all; :mod:`jevmem.bench.folds`) and ``none``."""
    rng = random.Random(f"attributes:{seed}")
    out: list[Example] = []
    fmt = string.Formatter()

    def add(table: Sequence[str], label: str, part: str, values: Sequence[Mapping[str, str]],
            training_only: bool = False) -> None:
        for i, template in enumerate(table):
            for _ in range(repeats):
                slots = _Slots(rng.choice(values) if values else {})
                out.append((fmt.vformat(template, (), slots), label, part, not training_only and users_data.held_out(i)))

    for a in updates_data.ATTRIBUTES:
        if attributes is not None and a.name not in attributes:
            continue
        values = [{"v": v, "old": rng.choice([o for o in a.values if o != v])} for v in a.values]
        for part in UPDATES_PARTS:
            add(getattr(a, part), a.name, part, values)
        add(ACTIVITIES.get(a.name, ()), a.name, "activity", values, training_only=True)
    for f in (*users_data.FACTS, users_data.LOCKER):
        if attributes is not None and f.name not in attributes:
            continue
        for part in USERS_PARTS:
            add(getattr(f, part), f.name, part, [dict(v) for v in f.values])
    for name, table in (("small_talk", users_data.SMALL_TALK_USER), ("small_talk", users_data.SMALL_TALK_ASSISTANT),
                        ("unrelated", users_data.UNRELATED), ("small_talk", updates_data.SMALL_TALK_PERSON),
                        ("small_talk", updates_data.SMALL_TALK_ASSISTANT), ("small_talk", updates_data.SMALL_TALK_FRIEND)):
        add(table, NONE, name, [])
    return out


def before_lines(seed: int = SEED, attributes: Collection[str] | None = None) -> tuple[list[str], list[str]]:
    """Lines a turn is read after in training, from the training templates only: (small talk,
    statements of every attribute, or of ``attributes`` only)."""
    fmt = string.Formatter()
    chat = [fmt.vformat(t, (), _Slots()) for table in (updates_data.SMALL_TALK_PERSON, updates_data.SMALL_TALK_FRIEND,
                                                       users_data.SMALL_TALK_USER)
            for i, t in enumerate(table) if not users_data.held_out(i)]
    facts = [r[0] for r in examples(seed + 1, 1, attributes) if not r[3] and r[1] != NONE and r[2] == "state"]
    return chat, facts


def read_after(texts: Sequence[str], seed: int = SEED, times: int = 1,
               attributes: Collection[str] | None = None) -> list[tuple[str, str]]:
    """``(before, text)`` for each of ``texts``, ``times`` over (blocks in ``texts`` order): the
    line before drawn from :func:`before_lines`, small talk or a statement at even odds, as a
    conversation puts a turn after small talk or after another fact."""
    rng = random.Random(f"attributes-before:{seed}")
    chat, facts = before_lines(seed, attributes)
    return [(rng.choice(chat if rng.random() < 0.5 else facts), t) for _ in range(times) for t in texts]


def embedded_after(texts: Sequence[str], embedder: Embedder, seed: int = SEED, times: int = 1,
                   attributes: Collection[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``texts`` read after other lines (:func:`read_after`), as the write path stores a turn,
    and the vectors of those lines, each read after another line in turn: (vectors, the vectors
    they were read after), ``times`` blocks in ``texts`` order; the lines before are statements
    of ``attributes`` only when given (a model fitted on some attributes sees no other)."""
    pairs = read_after(texts, seed, times, attributes)
    vectors = np.asarray(embedder.embed_after(pairs), dtype=np.float64)
    before = np.asarray(embedder.embed_after(read_after([b for b, _ in pairs], seed + 1, 1, attributes)),
                        dtype=np.float64)
    return vectors, before
