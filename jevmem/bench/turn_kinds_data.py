"""Labelled turns for the turn-kind model, from a deterministic generator of our own wordings.

Each kind (statement, question, tool, advice, chatter) has several templates: a wording with slots
(:data:`PEOPLE`, :data:`FOODS`, :data:`CITIES`, ...) and the roles that say it (user, assistant,
tool; a user may paste tool output, an assistant may chat), so the role is a feature but never the
answer. Every :data:`HELD_OUT_EVERY`-th template of a kind is held out, and :data:`FRESH_TEMPLATES`
are never trained on: the model is fitted on the other templates and validated on wordings it
never saw (:func:`train`). Light noise (lower case, a dropped final punctuation mark, a filler
word, an emoji, an attachment note) keeps the cues from leaning on one spelling; some turns with
content get small talk around them ("Thanks, Ana! ...") and keep their content's kind: facts
before chatter. ``scripts/train_turn_kinds.py`` fits and reports.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from topology.systemone.turn_kinds import TURN_FEATURES, TURN_KINDS, TurnKindModel, fit, turn_features

#: The generator's seed; the shipped weights were trained with it.
SEED = 20240611
#: Turns drawn per template: 140 templates give 5,600 turns (3,600 to fit), a fit of about a second.
PER_TEMPLATE = 40
#: Every 4th template of a kind (positions 1, 5, 9, ...) is held out: a quarter of the wordings.
HELD_OUT_EVERY = 4
#: L2 penalties tried; the one with the best template-grouped cross-validated accuracy on the
#: training wordings is used (:func:`select_l2`), so the held-out wordings never choose it.
L2_GRID: tuple[float, ...] = (0.1, 1.0, 10.0, 100.0, 1000.0)

PEOPLE = ("Ana", "Ben", "Priya", "Tomasz", "Keiko", "Luis", "Fatima", "Oskar", "Mei", "Jonah", "Leila", "Rafael",
          "Ingrid", "Kwame", "Sofia", "Dmitri", "Noor", "Hugo")
RELATIVES = ("sister", "brother", "mum", "dad", "cousin", "partner", "son", "daughter", "boss", "roommate")
FOODS = ("peanuts", "shellfish", "gluten", "dairy", "sesame", "strawberries", "eggs", "soy", "kiwi", "mustard",
         "walnuts", "penicillin")
DISHES = ("ramen", "lasagna", "pho", "tacos", "paella", "dumplings", "curry", "falafel")
CITIES = ("Lisbon", "Denver", "Osaka", "Nairobi", "Toronto", "Krakow", "Melbourne", "Austin", "Bergen", "Porto",
          "Valparaiso", "Tbilisi")
JOBS = ("nurse", "carpenter", "data analyst", "teacher", "pilot", "pharmacist", "architect", "baker", "paramedic",
        "translator", "welder", "vet")
COMPANIES = ("Northwind", "Bluefin Labs", "Acme Logistics", "Harbor Clinic", "Greenleaf", "Orbit Media", "Tallis & Co")
PETS = ("Biscuit", "Miso", "Pepper", "Juniper", "Waffles", "Nala", "Ziggy")
PET_KINDS = ("dog", "cat", "rabbit", "parrot", "hamster", "tortoise", "gecko")
HOBBIES = ("rock climbing", "pottery", "chess", "sailing", "birdwatching", "salsa dancing", "trail running",
           "baking sourdough", "the cello", "woodworking")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = ("January", "March", "April", "June", "August", "October", "November")
TIMES = ("9am", "10:30", "3 pm", "noon", "6:15pm", "8 in the morning")
EVENTS = ("dentist appointment", "flight", "yoga class", "team dinner", "job interview", "parent-teacher meeting",
          "eye exam", "piano recital")
PLACES = ("the farmers market", "a concert", "university", "the climbing gym", "a wedding", "a hiking trip",
          "the book club", "a conference")
TOOLS = ("search_memory", "get_weather", "lookup_contact", "calendar.list_events", "web_search", "notes.find",
         "recall", "kb_query")
TOPICS = ("allergy", "birthday", "pet name", "home city", "job", "favourite food", "flight time", "anniversary")
CARS = ("an old Volvo", "a red Mini", "a hybrid Corolla", "a cargo bike", "a Vespa")
CAPTIONS = ("a dog on a beach", "a plate of food", "a mountain view", "two people at a party", "a handwritten note")

#: The slots a template may name, with their fillers.
SLOTS: dict[str, Sequence[str]] = {
    "name": PEOPLE, "other": PEOPLE, "rel": RELATIVES, "food": FOODS, "dish": DISHES, "city": CITIES, "job": JOBS,
    "company": COMPANIES, "pet": PETS, "pet_kind": PET_KINDS, "hobby": HOBBIES, "day": DAYS, "month": MONTHS,
    "time": TIMES, "event": EVENTS, "place": PLACES, "tool": TOOLS, "topic": TOPICS, "car": CARS,
    "n": tuple(str(i) for i in range(1, 13)), "year": tuple(str(y) for y in range(2009, 2025)),
    "age": tuple(str(a) for a in range(3, 60, 4)), "ms": ("12", "48", "230", "1024", "87"),
    "dd": tuple(f"{d:02d}" for d in range(1, 29)), "mm": tuple(f"{m:02d}" for m in range(1, 13)),
    "temp": tuple(str(t) for t in range(-5, 34, 3)), "cond": ("sunny", "light rain", "overcast", "snow", "windy"),
}

U, A, T = "user", "assistant", "tool"

#: (kind, wording, roles and their weights). Wordings are our own; each kind has 24.
TEMPLATES: tuple[tuple[str, str, tuple[tuple[str, float], ...]], ...] = (
    # statements: facts about the speaker, someone, or something
    ("statement", "I'm allergic to {food}, so keep that in mind.", ((U, 1.0),)),
    ("statement", "My {rel} {name} lives in {city}.", ((U, 0.9), (A, 0.1))),
    ("statement", "{name} works as a {job} at {company}.", ((U, 0.7), (A, 0.3))),
    ("statement", "I have a {pet_kind} called {pet}.", ((U, 1.0),)),
    ("statement", "We moved to {city} last {month}.", ((U, 1.0),)),
    ("statement", "My birthday is on {month} {dd}.", ((U, 1.0),)),
    ("statement", "{name}'s favourite dish is {dish}.", ((U, 0.7), (A, 0.3))),
    ("statement", "I've been vegetarian since {year}.", ((U, 1.0),)),
    ("statement", "Just so you know, I drive {car}.", ((U, 1.0),)),
    ("statement", "{name} and I met at {place} back in {year}.", ((U, 1.0),)),
    ("statement", "I started a new job at {company} on {day}.", ((U, 1.0),)),
    ("statement", "My {rel} is {age} years old.", ((U, 1.0),)),
    ("statement", "Your {event} is on {day} at {time}.", ((A, 0.9), (U, 0.1))),
    ("statement", "I don't eat {food} anymore, it makes me sick.", ((U, 1.0),)),
    ("statement", "{name} is terrified of flying.", ((U, 0.8), (A, 0.2))),
    ("statement", "Actually my {rel} {name} got married in {city} in {year}.", ((U, 1.0),)),
    ("statement", "You told me earlier that {name} is allergic to {food}.", ((A, 0.8), (U, 0.2))),
    ("statement", "I went {hobby} with {name} yesterday and it was great.", ((U, 1.0),)),
    ("statement", "The {event} got moved to {day}.", ((U, 0.6), (A, 0.4))),
    ("statement", "{name} has two kids and a {pet_kind} named {pet}.", ((U, 0.8), (A, 0.2))),
    ("statement", "I work night shifts as a {job} these days.", ((U, 1.0),)),
    ("statement", "My {rel} owns a small bakery in {city}.", ((U, 1.0),)),
    ("statement", "Noted: {name} prefers {dish} over {dish} and hates {food}.", ((A, 0.7), (U, 0.3))),
    ("statement", "I was born in {city} but grew up near {city}.", ((U, 1.0),)),
    # questions: asking for something
    ("question", "What am I allergic to, do you remember?", ((U, 1.0),)),
    ("question", "Where does {name} live now?", ((U, 0.8), (A, 0.2))),
    ("question", "When is my {event}?", ((U, 1.0),)),
    ("question", "Do you remember the name of my {pet_kind}?", ((U, 1.0),)),
    ("question", "Which city did {name} move to?", ((U, 0.9), (A, 0.1))),
    ("question", "How old is {name}'s {rel}?", ((U, 0.9), (A, 0.1))),
    ("question", "Who did I say works at {company}?", ((U, 1.0),)),
    ("question", "Can you remind me what {name} does for a living?", ((U, 1.0),)),
    ("question", "Did I tell you about my trip to {city}?", ((U, 1.0),)),
    ("question", "Is {name} still a {job}?", ((U, 0.8), (A, 0.2))),
    ("question", "What time is my {event} on {day}", ((U, 1.0),)),
    ("question", "Any idea when {name}'s birthday is?", ((U, 1.0),)),
    ("question", "What would you like me to call you?", ((A, 1.0),)),
    ("question", "Which day works best for the {event}?", ((A, 0.7), (U, 0.3))),
    ("question", "Are you allergic to anything I should know about?", ((A, 1.0),)),
    ("question", "Have I ever mentioned my {rel} {name} to you?", ((U, 1.0),)),
    ("question", "So what's {name}'s job again?", ((U, 1.0),)),
    ("question", "Why did {name} leave {company}?", ((U, 0.9), (A, 0.1))),
    ("question", "How many {pet_kind}s does {name} have?", ((U, 1.0),)),
    ("question", "Could you tell me where I put the notes about {topic}?", ((U, 1.0),)),
    ("question", "Do you know if {name} eats {food}?", ((U, 0.8), (A, 0.2))),
    ("question", "Wait, where did {name} and I first meet?", ((U, 1.0),)),
    ("question", "Should I bring anything to the {event}?", ((U, 1.0),)),
    ("question", "Remind me, what's {name}'s {pet_kind} called?", ((U, 1.0),)),
    # tool calls and tool results
    ("tool", "{tool}(query='{topic}')", ((A, 0.6), (T, 0.4))),
    ("tool", '{{"name": "{tool}", "arguments": {{"city": "{city}"}}}}', ((A, 0.6), (T, 0.4))),
    ("tool", "Tool result: {n} matching entries", ((T, 0.8), (U, 0.2))),
    ("tool", '{{"results": [{{"id": {n}, "text": "{name} lives in {city}"}}], "count": 1}}', ((T, 0.7), (U, 0.3))),
    ("tool", 'calendar.create_event(title="Lunch with {name}", date="2024-{mm}-{dd}")', ((A, 0.7), (T, 0.3))),
    ("tool", '<tool_call>send_email(to="{name}@example.org", subject="{event}")</tool_call>', ((A, 0.8), (T, 0.2))),
    ("tool", "Error 404: no record found for '{name}'", ((T, 0.8), (U, 0.2))),
    ("tool", "status: ok\ncount: {n}\nelapsed_ms: {ms}", ((T, 0.8), (U, 0.2))),
    ("tool", "Returned {n} rows in {ms} ms.", ((T, 0.9), (U, 0.1))),
    ("tool", "$ grep -ri '{topic}' notes/\nnotes/{pet}.md: {name} likes {dish}", ((T, 0.6), (U, 0.4))),
    ("tool", '[tool] web_search -> {n} results for "{topic} {city}"', ((T, 0.8), (A, 0.2))),
    ("tool", 'HTTP 200 {{"city": "{city}", "temp_c": {temp}, "conditions": "{cond}"}}', ((T, 0.8), (U, 0.2))),
    ("tool", "Calling lookup_contact(name='{name}')", ((A, 1.0),)),
    ("tool", "get_weather result: {temp}°C and {cond} in {city}", ((T, 0.9), (U, 0.1))),
    ("tool", "exit code 0; wrote {ms} bytes to /tmp/{pet}.json", ((T, 0.9), (U, 0.1))),
    ("tool", "memory.upsert(id='m-{n}', text='{name} likes {dish}') -> ok", ((T, 0.6), (A, 0.4))),
    ("tool", '{{"error": "timeout", "retry_after_ms": {ms}}}', ((T, 0.9), (U, 0.1))),
    ("tool", "Function output:\n- {name}: {job}\n- {other}: {job}", ((T, 0.9), (U, 0.1))),
    ("tool", "{tool}(user_id=\"u-{n}\", limit={n})", ((A, 0.7), (T, 0.3))),
    ("tool", "Observation: the search returned {n} documents, top hit '{topic}.txt'", ((T, 0.9), (A, 0.1))),
    ("tool", "[{{\"date\": \"2024-{mm}-{dd}\", \"event\": \"{event}\"}}, {{\"date\": \"2024-{mm}-{dd}\"}}]",
     ((T, 0.8), (U, 0.2))),
    ("tool", "Traceback (most recent call last): KeyError: '{topic}'", ((T, 0.8), (U, 0.2))),
    ("tool", ">>> {tool}('{name}')\n{{'found': True, 'city': '{city}'}}", ((T, 0.6), (U, 0.4))),
    ("tool", "Response from kb_query: {n} facts, {ms} ms, cache=hit", ((T, 0.9), (A, 0.1))),
    # advice: suggestions and recommendations
    ("advice", "You should try to stay away from {food} at restaurants.", ((A, 0.8), (U, 0.2))),
    ("advice", "I'd recommend asking the waiter about {food} before you order.", ((A, 0.9), (U, 0.1))),
    ("advice", "Maybe consider carrying an epipen just in case.", ((A, 0.9), (U, 0.1))),
    ("advice", "It might be a good idea to call {name} before {day}.", ((A, 0.8), (U, 0.2))),
    ("advice", "Try going to bed a bit earlier if you're tired in the mornings.", ((A, 0.9), (U, 0.1))),
    ("advice", "Make sure you pack a warm jacket, {city} gets cold at night.", ((A, 0.8), (U, 0.2))),
    ("advice", "Don't forget to bring your passport for the {event}.", ((A, 0.8), (U, 0.2))),
    ("advice", "If I were you, I'd book the tickets to {city} early.", ((A, 0.7), (U, 0.3))),
    ("advice", "You could ask {name} to help with the move.", ((A, 0.7), (U, 0.3))),
    ("advice", "A good option would be setting a reminder for {name}'s birthday.", ((A, 1.0),)),
    ("advice", "Consider switching to {food}-free snacks for the party.", ((A, 1.0),)),
    ("advice", "Drink plenty of water and rest well before the {event}.", ((A, 0.9), (U, 0.1))),
    ("advice", "Keep a card listing your allergies in your wallet.", ((A, 1.0),)),
    ("advice", "You might want to double-check the booking with {company}.", ((A, 0.9), (U, 0.1))),
    ("advice", "My suggestion: start with short sessions of {hobby} and build up slowly.", ((A, 0.9), (U, 0.1))),
    ("advice", "It's best to talk to your doctor about the reaction to {food}.", ((A, 1.0),)),
    ("advice", "You need to renew your passport before the trip to {city}.", ((A, 0.8), (U, 0.2))),
    ("advice", "Perhaps bring {name} along, {hobby} is more fun with a friend.", ((A, 0.8), (U, 0.2))),
    ("advice", "Be sure to leave early on {day}, traffic near {city} is bad.", ((A, 0.9), (U, 0.1))),
    ("advice", "I suggest writing down what {name} said so you don't forget it.", ((A, 1.0),)),
    ("advice", "Avoid booking anything on {day} since the {event} might run late.", ((A, 0.9), (U, 0.1))),
    ("advice", "You'd better check with {name} whether the {dish} has {food} in it.", ((A, 0.8), (U, 0.2))),
    ("advice", "How about trying {hobby} this weekend to unwind?", ((A, 0.7), (U, 0.3))),
    ("advice", "Set an alarm for {time} so you're on time for the {event}.", ((A, 1.0),)),
    # chatter: small talk, greetings, thanks, laughter
    ("chatter", "haha that's great, enjoy your evening!", ((U, 0.7), (A, 0.3))),
    ("chatter", "thank you!", ((U, 0.8), (A, 0.2))),
    ("chatter", "how's everything going with you?", ((U, 0.7), (A, 0.3))),
    ("chatter", "Hey {name}! Long time no see!", ((U, 0.9), (A, 0.1))),
    ("chatter", "lol that's awesome", ((U, 1.0),)),
    ("chatter", "Good morning :)", ((U, 0.7), (A, 0.3))),
    ("chatter", "ok cool", ((U, 1.0),)),
    ("chatter", "No worries, talk soon!", ((U, 0.7), (A, 0.3))),
    ("chatter", "Thanks so much, that's really helpful!", ((U, 1.0),)),
    ("chatter", "Wow, that sounds amazing!", ((U, 0.7), (A, 0.3))),
    ("chatter", "Sure thing 👍", ((U, 0.6), (A, 0.4))),
    ("chatter", "Bye for now!", ((U, 0.8), (A, 0.2))),
    ("chatter", "Hope you have a lovely weekend!", ((U, 0.6), (A, 0.4))),
    ("chatter", "hahaha no way", ((U, 1.0),)),
    ("chatter", "How are you doing today?", ((U, 0.6), (A, 0.4))),
    ("chatter", "Glad to hear it!", ((A, 0.6), (U, 0.4))),
    ("chatter", "You're welcome! Happy to help.", ((A, 1.0),)),
    ("chatter", "Hi there!", ((U, 0.6), (A, 0.4))),
    ("chatter", "omg yes, same here 😂", ((U, 1.0),)),
    ("chatter", "Aww, congrats {name}!", ((U, 0.8), (A, 0.2))),
    ("chatter", "Good night, see you tomorrow!", ((U, 0.8), (A, 0.2))),
    ("chatter", "That's so cool, nice one!", ((U, 0.7), (A, 0.3))),
    ("chatter", "hey what's up", ((U, 1.0),)),
    ("chatter", "Cheers, take care!", ((U, 0.8), (A, 0.2))),
)

#: Wordings never trained on and written after the cue features were last revised (the quarter
#: of :data:`TEMPLATES` held out informed one revision): the cleanest figure of generalisation.
FRESH_TEMPLATES: tuple[tuple[str, str, tuple[tuple[str, float], ...]], ...] = (
    ("statement", "Heads up, {name} switched jobs and is a {job} at {company} now.", ((U, 0.8), (A, 0.2))),
    ("statement", "our {pet_kind} {pet} turned {age} last week", ((U, 1.0),)),
    ("statement", "The kids' school is right next to {place} in {city}.", ((U, 0.8), (A, 0.2))),
    ("statement", "I can't have {food}, I break out in hives.", ((U, 1.0),)),
    ("question", "hmm what was the name of {name}'s {pet_kind}", ((U, 1.0),)),
    ("question", "Where did we end up booking for the {event}?", ((U, 0.8), (A, 0.2))),
    ("question", "Was it {name} or {other} who moved to {city}?", ((U, 1.0),)),
    ("question", "Do I have anything scheduled on {day}?", ((U, 1.0),)),
    ("tool", '{{"tool": "{tool}", "input": {{"query": "{topic}", "k": {n}}}}}', ((A, 0.6), (T, 0.4))),
    ("tool", "search_memory returned: [{name} is allergic to {food}] (score 0.{n})", ((T, 0.8), (U, 0.2))),
    ("tool", "GET /v1/contacts?name={name} -> 200 OK ({ms} ms)", ((T, 0.8), (U, 0.2))),
    ("tool", "fetch_calendar(day='{day}') => []", ((T, 0.6), (A, 0.4))),
    ("advice", "Honestly, just tell {name} how you feel.", ((A, 0.7), (U, 0.3))),
    ("advice", "Best to skip the {dish} if you're not sure about the {food}.", ((A, 0.9), (U, 0.1))),
    ("advice", "Why not bring a snack you know is safe, like fruit?", ((A, 0.8), (U, 0.2))),
    ("advice", "You may want to pack some medicine for the trip to {city}.", ((A, 0.9), (U, 0.1))),
    ("chatter", "lmao stop 😂", ((U, 1.0),)),
    ("chatter", "Nice talking to you, {name}!", ((U, 0.7), (A, 0.3))),
    ("chatter", "morning! sleep well?", ((U, 0.8), (A, 0.2))),
    ("chatter", "awesome, thx a lot", ((U, 1.0),)),
)

#: Small talk around a turn with content: the content decides its kind (facts before chatter).
_OPENERS = ("Thanks, {name}! ", "Haha, ", "Oh nice! ", "Hey {name}! ", "Wow, ", "Good to hear. ", "lol ok. ",
            "Aww, that's sweet. ", "Sure! ")
_CLOSERS = (" Anyway, hope you're well!", " haha", " Have a good one!", " :)", " Talk soon!")
_FILLERS = ("ok so ", "btw ", "oh and ", "hey, ", "also ", "um, ")
_EMOJI = (" 🙂", " 😊", " ❤️", " 😅")


#: Every template: :data:`TEMPLATES` then :data:`FRESH_TEMPLATES` (a :class:`Turn`'s index is into this).
ALL_TEMPLATES = TEMPLATES + FRESH_TEMPLATES


@dataclass(frozen=True)
class Turn:
    """One labelled turn: ``template`` is its wording's index in :data:`ALL_TEMPLATES`."""

    text: str
    role: str
    kind: str
    template: int


def position(template: int) -> int:
    """The template's position among the :data:`TEMPLATES` of its kind."""
    kind = ALL_TEMPLATES[template][0]
    return sum(1 for k, _, _ in TEMPLATES[:template] if k == kind)


def split(template: int) -> str:
    """Which set a template's turns belong to: ``fresh`` (:data:`FRESH_TEMPLATES`), ``held_out``
    (every :data:`HELD_OUT_EVERY`-th wording of a kind, from its second) or ``train``."""
    if template >= len(TEMPLATES):
        return "fresh"
    return "held_out" if position(template) % HELD_OUT_EVERY == 1 else "train"


class _Draw(dict[str, str]):
    """Slot values for :meth:`str.format_map`: each ``{slot}`` occurrence draws afresh."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self.rng = rng

    def __missing__(self, key: str) -> str:
        return self.rng.choice(SLOTS[key])


def _noise(text: str, kind: str, rng: random.Random) -> str:
    if kind in ("statement", "question", "advice") and rng.random() < 0.2:
        text = rng.choice(_OPENERS).format_map(_Draw(rng)) + text
    if kind == "statement" and rng.random() < 0.1:
        text += rng.choice(_CLOSERS)
    if kind != "tool":
        if rng.random() < 0.1:
            text = rng.choice(_FILLERS) + text[0].lower() + text[1:]
        if rng.random() < 0.15 and text[-1] in ".!?":
            text = text[:-1]
        if rng.random() < 0.08:
            text += rng.choice(_EMOJI)
        if kind in ("statement", "chatter") and rng.random() < 0.05:
            text += f" [shares a photo of {rng.choice(CAPTIONS)}]"
    if rng.random() < 0.2:
        text = text.lower()
    return text


def generate(per_template: int = PER_TEMPLATE, seed: int = SEED) -> list[Turn]:
    """``per_template`` turns of every template of :data:`ALL_TEMPLATES`, deterministic for
    ``seed`` (one generator per template, so adding a template leaves the others' turns as they were)."""
    out = []
    for i, (kind, wording, roles) in enumerate(ALL_TEMPLATES):
        rng = random.Random(f"{seed}:{i}")
        names, weights = [r for r, _ in roles], [w for _, w in roles]
        for _ in range(per_template):
            role = rng.choices(names, weights)[0]
            out.append(Turn(_noise(wording.format_map(_Draw(rng)), kind, rng), role, kind, i))
    return out


def matrix(turns: Sequence[Turn]) -> tuple[np.ndarray, np.ndarray]:
    """Feature rows (n, F) and label indices (n,) of ``turns``."""
    x = np.asarray([turn_features(t.text, t.role) for t in turns], dtype=np.float64).reshape(-1, len(TURN_FEATURES))
    y = np.asarray([TURN_KINDS.index(t.kind) for t in turns], dtype=np.int64)
    return x, y


def accuracy(model: TurnKindModel, x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """Accuracy overall and per kind (the share of a kind's turns whose most probable kind is it),
    with the confusion counts (true kind -> predicted kind -> turns)."""
    pred = model.probabilities(x).argmax(axis=1)
    per_kind = {k: round(float((pred[y == i] == i).mean()), 4) for i, k in enumerate(TURN_KINDS) if (y == i).any()}
    confusion = {k: {p: int(((y == i) & (pred == j)).sum()) for j, p in enumerate(TURN_KINDS)}
                 for i, k in enumerate(TURN_KINDS)}
    return {"accuracy": round(float((pred == y).mean()), 4), "per_kind": per_kind, "turns": len(y),
            "confusion": confusion}


def select_l2(x: np.ndarray, y: np.ndarray, folds: np.ndarray) -> tuple[float, dict[str, float]]:
    """The :data:`L2_GRID` penalty with the best mean accuracy over template-grouped folds of the
    training turns (each fold's wordings unseen by its fit); ties go to the stronger penalty."""
    scores: dict[str, float] = {}
    for l2 in L2_GRID:
        accs = []
        for f in np.unique(folds):
            model = fit(x[folds != f], y[folds != f], l2=l2)
            accs.append(float((model.probabilities(x[folds == f]).argmax(axis=1) == y[folds == f]).mean()))
        scores[str(l2)] = round(float(np.mean(accs)), 4)
    best = max(L2_GRID, key=lambda v: (scores[str(v)], v))
    return best, scores


def train(per_template: int = PER_TEMPLATE, seed: int = SEED,
          l2: float | None = None) -> tuple[TurnKindModel, dict[str, Any]]:
    """Fit on the training wordings (``l2`` given, or chosen by :func:`select_l2`); report accuracy
    on them, on the held-out wordings and on the fresh ones. The returned model is the one
    validated: fitted without any held-out or fresh wording."""
    turns = generate(per_template, seed)
    x, y = matrix(turns)
    sets = np.asarray([split(t.template) for t in turns])
    fold = np.asarray([position(t.template) % HELD_OUT_EVERY for t in turns])
    on = sets == "train"
    cv: dict[str, float] = {}
    if l2 is None:
        l2, cv = select_l2(x[on], y[on], fold[on])
    meta: dict[str, Any] = {
        "script": "scripts/train_turn_kinds.py", "generator": "jevmem.bench.turn_kinds_data", "seed": seed,
        "per_template": per_template, "l2": l2,
        "templates": {name: sum(1 for i in range(len(ALL_TEMPLATES)) if split(i) == name)
                      for name in ("train", "held_out", "fresh")}}
    model = fit(x[on], y[on], l2=l2, meta=meta)
    report: dict[str, Any] = {name: accuracy(model, x[sets == name], y[sets == name])
                              for name in ("train", "held_out", "fresh")}
    report["l2"], report["cv_accuracy_by_l2"] = l2, cv
    model.meta["accuracy"] = {name: {"all": report[name]["accuracy"], **report[name]["per_kind"]}
                              for name in ("held_out", "fresh")}
    return model, report
