"""The synthetic users of ``jevmem bench users``: people who talk to an agent over many sessions.

A deterministic, seeded generator (no data files; its own people, facts and wordings). Each user
states a few personal facts once ("I'm allergic to shellfish, by the way.") inside long sessions
of small talk; later sessions hold the distractors a memory must rank below the statement: the
user asking about the fact without answering it ("what was I allergic to again?"), the agent's
tool calls and tool results that mention the topic, assistant advice about it, and one-turn
sessions about unrelated things. Every fact has a benchmark question ("What am I allergic to?")
whose gold is the ``event_id`` of the stating turn; the gold is for scoring only.

Contract:

- The same arguments give the same :class:`Dataset` (``random.Random`` seeded with strings).
- Every table of wordings has at least three templates; template ``i`` is *held out* when
  ``i % 3 == 2`` (:func:`held_out`), else *train*. ``wordings="train"`` or ``"heldout"`` draws
  every turn and question only from that part of every table, so a turn-kind classifier trained
  on "train" turns is validated on wordings it never saw; ``"all"`` draws from both. Each turn
  records the template it came from (:attr:`Turn.template`, ``"table:index"``).
- A fact's ``tool_call`` and ``tool_result`` tables pair up by index (the result answers the
  call of the same index; its speaker is the called tool's name).
- Sessions of a user are in time order and never overlap; turns inside a session are 20-90 s
  apart. Event ids are unique across the whole dataset (``<conversation>-<turn>``).
- Every user's first session states at least one fact; follow-up sessions come after every
  statement session and ask about the facts in turn (the least asked first), so with at least
  as many follow-ups as facts (16 sessions and 5 facts give 6) every fact has one.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

Wordings = Literal["train", "heldout", "all"]
WORDINGS: tuple[Wordings, ...] = ("train", "heldout", "all")
TurnKind = Literal["statement", "question", "tool_call", "tool_result", "advice", "small_talk"]
"""What a turn is (the labels a turn-kind classifier learns); an unrelated one-turn request is a
``question`` in a ``one_turn`` session."""
SessionKind = Literal["statement", "followup", "small_talk", "one_turn"]

START = datetime(2024, 1, 8, 9, 0, tzinfo=UTC)
"""When the first user's first session starts (each next user starts an hour later)."""


def held_out(index: int) -> bool:
    """Whether template ``index`` of any table belongs to the held-out wordings."""
    return index % 3 == 2


def allowed(n: int, wordings: Wordings) -> list[int]:
    """The indices of an ``n``-template table that ``wordings`` may use."""
    if wordings == "all":
        return list(range(n))
    return [i for i in range(n) if held_out(i) == (wordings == "heldout")]


@dataclass(frozen=True)
class FactType:
    """One kind of personal fact: its values (each a mapping of template slots; ``v`` is the
    answer) and its wording tables."""

    name: str
    values: tuple[Mapping[str, str], ...]
    state: tuple[str, ...]
    ask: tuple[str, ...]
    question: tuple[str, ...]
    tool_call: tuple[str, ...]
    tool_result: tuple[str, ...]
    advice: tuple[str, ...]

    def tables(self) -> dict[str, tuple[str, ...]]:
        """The wording tables by name (``<fact>.<part>``)."""
        return {f"{self.name}.{part}": getattr(self, part)
                for part in ("state", "ask", "question", "tool_call", "tool_result", "advice")}


def _v(*values: str) -> tuple[Mapping[str, str], ...]:
    return tuple({"v": v} for v in values)


FACTS: tuple[FactType, ...] = (
    FactType(
        "allergy", _v("shellfish", "peanuts", "penicillin", "sesame", "latex", "bee stings", "tree nuts", "mustard"),
        state=("I'm allergic to {v}, by the way.",
               "Just so you know, I have a pretty serious allergy to {v}.",
               "Oh, my doctor confirmed it last spring: I'm allergic to {v}.",
               "Small thing to remember: {v} and I don't get along, I'm allergic.",
               "I always carry antihistamines because I react badly to {v}.",
               "Funny story, I found out I was allergic to {v} when I was twelve."),
        ask=("what was I allergic to again?",
             "Remind me, which allergy did I tell you about?",
             "Did I ever mention what I'm allergic to?",
             "Hmm, I forget, what allergy of mine did you note down?",
             "Can you remind me what I react badly to?"),
        question=("What am I allergic to?", "Which allergy do I have?", "What did I say I'm allergic to?",
                  "What allergy did I mention to you?"),
        tool_call=('search_recipes(exclude=["{v}"], servings=2)',
                   'menu_check({{"allergen": "{v}", "strict": true}})',
                   'allergen_scan(product="granola bar", allergen="{v}")',
                   'pharmacy_lookup(query="alternatives safe with a {v} allergy")'),
        tool_result=("search_recipes: 12 results excluding {v} (lemon chicken, lentil soup, mushroom risotto)",
                     '{{"allergen": "{v}", "flagged": 2, "safe": 17}}',
                     'allergen_scan: "{v}" listed under may-contain traces',
                     "pharmacy_lookup: 3 products found, none list {v}"),
        advice=("Since {v} is a problem for you, mention it whenever you book a table.",
                "I'd keep an eye on labels; {v} can turn up in unexpected places.",
                "It might be worth carrying a card that lists your {v} allergy when you travel.",
                "When you try new places, ask the staff directly about {v}."),
    ),
    FactType(
        "pet", tuple({"v": n, "kind": k} for n, k in (
            ("Pickle", "terrier"), ("Juniper", "cat"), ("Mochi", "rabbit"), ("Bramble", "greyhound"),
            ("Taco", "parrot"), ("Nutmeg", "hamster"), ("Ziggy", "corgi"))),
        state=("My {kind} is called {v}, and she's a handful.",
               "We named our {kind} {v}, after a character from a cartoon.",
               "I have a {kind} named {v} who sleeps on my feet every night.",
               "{v}, my {kind}, turned four last week.",
               "Did I tell you about {v}? That's my {kind}."),
        ask=("what did I say my pet's name was?", "Remind me what my {kind} is called?",
             "Do you remember my pet's name?", "Wait, did I tell you what I named my {kind}?"),
        question=("What is my pet's name?", "What's my {kind} called?", "What did I name my pet?",
                  "What is the name of my {kind}?"),
        tool_call=('vet_search(species="{kind}", near="home", open_now=true)',
                   'calendar.add(title="{v} vaccination", in_days=30)',
                   'shop_search(query="{kind} toys", max_price=25)',
                   'reminder.set(text="walk {v}", time="07:30")'),
        tool_result=("vet_search: 4 clinics treat a {kind} within 5 km", 'calendar.add: event "{v} vaccination" created',
                     'shop_search: 9 items for "{kind} toys"', 'reminder.set: ok, "walk {v}" at 07:30 daily'),
        advice=("A {kind} like {v} does best with a steady routine.", "Regular check-ups will keep {v} healthy.",
                "Puzzle toys are great for keeping a {kind} busy while you work.",
                "If {v} seems anxious, try leaving one of your jumpers in the basket."),
    ),
    FactType(
        "job", _v("dental hygienist", "bus driver", "data analyst", "pastry chef", "park ranger", "court interpreter",
                  "sound engineer", "land surveyor"),
        state=("I started a new job as a {v} last month.", "I've been working as a {v} for about six years now.",
               "My job? I'm a {v}, mostly day shifts.", "Being a {v} is tiring, but I like it.",
               "So I finally got hired as a {v}!"),
        ask=("what did I tell you I do for work?", "Remind me, what's my job again?",
             "Did I mention my occupation to you?", "Can you recall what I said about my work?"),
        question=("What is my job?", "What do I do for a living?", "What's my occupation?", "What kind of work do I do?"),
        tool_call=('jobs.search(title="{v}", location="remote", posted_within_days=7)',
                   'salary_lookup(role="{v}", region="national")', 'courses.find(topic="{v} certification")',
                   'calendar.block(title="shift", role="{v}")'),
        tool_result=('jobs.search: 23 openings for "{v}"', "salary_lookup: median pay for a {v} is 41,200 per year",
                     'courses.find: 5 courses match "{v} certification"', "calendar.block: {v} shift added for Monday"),
        advice=("As a {v}, you could ask your employer about a training budget.",
                "Plenty of people who work as a {v} negotiate their schedule; it's worth asking.",
                "Keeping a log of your hours as a {v} will help at review time.",
                "A {v} certification refresher could help you move up."),
    ),
    FactType(
        "hometown", _v("Tromsø", "Valparaíso", "Ghent", "Kraków", "Hobart", "Tucson", "Matsumoto", "Galway"),
        state=("I grew up in {v}, you know.", "My hometown is {v}; my parents still live there.",
               "Back in {v}, where I was raised, we cycled everywhere.", "I was born and raised in {v}.",
               "Whenever I smell the sea I think of {v}, where I grew up."),
        ask=("where did I say I grew up?", "Remind me of my hometown?", "Did I tell you where I'm from originally?",
             "What did I say about where I was raised?"),
        question=("Where did I grow up?", "What is my hometown?", "Where am I from originally?",
                  "Which city was I raised in?"),
        tool_call=('weather.forecast(city="{v}", days=3)', 'flights.search(to="{v}", month="next")',
                   'news.headlines(city="{v}", limit=5)', 'trains.search(destination="{v}", date="Friday")'),
        tool_result=("weather.forecast: {v}, 9°C, light rain, wind 20 km/h", "flights.search: 6 options to {v}, cheapest 212",
                     "news.headlines: 5 stories from {v}", "trains.search: 3 connections to {v} on Friday"),
        advice=("If you go back to {v} for the holidays, book early.", "Visiting {v} off-season is usually cheaper.",
                "You could bring something from {v} to share with your coworkers.",
                "Local papers from {v} have online editions if you miss home."),
    ),
    FactType(
        "car", _v("green Subaru Outback", "red Mini Cooper", "silver Toyota Prius", "white Volkswagen Golf",
                  "blue Kia Niro", "black Volvo V60", "yellow Fiat Panda"),
        state=("I drive a {v}, nothing fancy.", "My car is a {v}; it's older than it looks.",
               "I bought a {v} secondhand last year.", "Yeah, I get around in a {v} most days."),
        ask=("what car did I say I have?", "Remind me what I drive?", "Did I ever tell you about my car?",
             "Do you remember which car is mine?"),
        question=("What car do I drive?", "What kind of car do I have?", "What is my car?", "Which car did I say I own?"),
        tool_call=('parts.lookup(model="{v}", part="wiper blades")', 'service.book(vehicle="{v}", date="next Tuesday")',
                   'insurance.quote(vehicle="{v}", cover="full")', 'fuel.prices(near="home", vehicle="{v}")'),
        tool_result=("parts.lookup: 3 wiper sets fit the {v}", "service.book: {v} booked in for 09:00",
                     "insurance.quote: {v}, full cover, 38 per month", "fuel.prices: cheapest station for the {v} is 2 km away"),
        advice=("With a {v}, tyre pressure checks before long trips pay off.",
                "A {v} usually needs a service every 15,000 km.",
                "Keeping the {v} out of direct sun will protect the dashboard.",
                "You could save on insurance for the {v} by adding a second driver."),
    ),
    FactType(
        "sibling", tuple({"v": n, "rel": r} for n, r in (
            ("Ottilie", "sister"), ("Magnus", "brother"), ("Rosalind", "sister"), ("Teodor", "brother"),
            ("Ingrid", "sister"), ("Caspian", "brother"), ("Wren", "sister"))),
        state=("My {rel} {v} is coming to stay next weekend.", "I talked to {v}, my {rel}, for two hours yesterday.",
               "{v} is my younger {rel}; we argue like cats.", "My older {rel} is named {v}, did I mention?"),
        ask=("what's my {rel}'s name again?", "Did I tell you what my {rel} is called?", "Remind me who my {rel} is?",
             "I mentioned my {rel} before, right? What was the name?"),
        question=("What is my {rel}'s name?", "What's my {rel} called?", "Who is my {rel}?",
                  "What name did I give for my {rel}?"),
        tool_call=('gifts.search(for="{rel}", budget=40, name="{v}")', 'calendar.add(title="{v} visiting", date="Saturday")',
                   'messages.send(to="{v}", text="see you soon")', 'contacts.find(name="{v}")'),
        tool_result=("gifts.search: 8 ideas for a {rel} under 40", 'calendar.add: "{v} visiting" on Saturday',
                     "messages.send: delivered to {v}", "contacts.find: {v} ({rel}), 1 number"),
        advice=("A handwritten note for {v} would mean a lot.", "Maybe plan something low-key when {v} visits.",
                "You and your {rel} could start a shared photo album.",
                "Calling {v} on a fixed day each week makes it easier to stay in touch."),
    ),
    FactType(
        "diet", _v("vegetarian", "vegan", "pescatarian", "gluten-free", "low-sodium", "dairy-free"),
        state=("I've been {v} for three years now.", "I eat {v} these days, mostly for health reasons.",
               "Just so you know, I keep a {v} diet.", "Since last winter all my meals have been {v}."),
        ask=("what diet did I say I follow?", "Remind me what I told you about my eating habits?",
             "Did I mention my diet to you?", "What was my diet thing again?"),
        question=("What diet do I follow?", "What kind of diet am I on?", "How do I eat, diet-wise?",
                  "What did I say about my diet?"),
        tool_call=('recipes.search(diet="{v}", max_minutes=30)', 'restaurants.find(filter="{v}", near="work")',
                   'grocery.list(add="{v} staples")', 'nutrition.check(meal="lunch", diet="{v}")'),
        tool_result=("recipes.search: 17 {v} recipes under 30 minutes", "restaurants.find: 5 places with {v} options",
                     "grocery.list: added 6 {v} staples", "nutrition.check: lunch fits a {v} plan"),
        advice=("Batch cooking on Sundays makes a {v} week much easier.",
                "If you eat {v}, keep an eye on iron and B12.",
                "Check menus online; lots of places mark {v} dishes now.", "A {v} cookbook could give you new ideas."),
    ),
    FactType(
        "birthday", _v("March 14", "July 2", "November 23", "January 30", "August 9", "May 17"),
        state=("My birthday is on {v}, mark your calendar.", "I was born on {v}.", "Fun fact: {v} is my birthday.",
               "I'm turning thirty on {v} this year."),
        ask=("when did I say my birthday was?", "Remind me, when's my birthday?", "Did I tell you my birthday?",
             "Do you remember my birthday date?"),
        question=("When is my birthday?", "What date is my birthday?", "When was I born?",
                  "What day did I say my birthday is?"),
        tool_call=('calendar.add(title="Birthday", date="{v}", repeat="yearly")', 'restaurants.book(date="{v}", party=6)',
                   'cake_shop.order(pickup="{v}", size="medium")', 'reminder.set(text="plan birthday", date="{v}")'),
        tool_result=('calendar.add: "Birthday" on {v}, repeats yearly', "restaurants.book: table for 6 on {v} confirmed",
                     "cake_shop.order: medium cake ready {v}", 'reminder.set: "plan birthday" on {v}'),
        advice=("If you want a party on {v}, send invitations two weeks ahead.",
                "A weekday {v} might be a good excuse for a long weekend.",
                "Booking a table for {v} early is wise; popular places fill up.",
                "Maybe plan something small on {v} and celebrate properly at the weekend."),
    ),
)
LOCKER = FactType(
    "locker", _v("4719", "2086", "7352", "1948", "6031"),
    state=("Note for later: my gym locker code is {v}.", "The code for my locker at the pool is {v}, don't let me forget.",
           "I set my locker combination to {v}.", "Locker code at the gym is {v}, just saving it here."),
    ask=("what's my locker code again?", "Did I tell you my locker code?", "Remind me of my locker combination?"),
    question=("What's my locker code?", "What is the combination of my locker?", "Which code did I set for my locker?",
              "What did I say my gym locker code was?"),
    tool_call=('notes.search(query="locker {v}")', 'gym.booking(slot="18:00", locker="{v}")', 'vault.get(key="locker")'),
    tool_result=('notes.search: 1 note mentions "{v}"', "gym.booking: slot 18:00, locker {v}", 'vault.get: "{v}"'),
    advice=("Maybe store {v} in a password manager too.", "Changing the code from {v} every few months is safer.",
            "Don't write {v} on your gym bag."),
)
"""The fact of the many-sessions scenario (a code said once, asked for hundreds of sessions later)."""

SMALL_TALK_USER = (
    "The weather has been so grey all {span}.", "I finally finished watching {show} last night.",
    "My neighbour's kids were practising drums again {when}.", "Work was pretty quiet {when}, which was nice for a change.",
    "I went for a long walk by the {water} {when}.", "Do you think it will rain on {day}?",
    "I'm thinking of repainting the hallway a lighter colour.", "My friend {friend} keeps sending me memes about {show}.",
    "The bus was twenty minutes late {when}.", "I spent {day} afternoon sorting out old photos.",
    "I can't decide whether to start {show} or read something instead.", "The {water} looked beautiful this morning.",
    "I'm so tired, I barely slept {when}.", "{friend} and I might go bowling on {day}.",
    "I've been trying to drink more water lately.", "My plants on the balcony are finally growing.",
    "There was a street festival near my place {when}.", "I keep forgetting to call {friend} back.",
    "Honestly, {day} is the best day of the week.", "I bought a new notebook for journaling.",
    "The internet at home was flaky all {span}.",
)
SMALL_TALK_ASSISTANT = (
    "That sounds relaxing.", "Oh no, that must have been frustrating.", "Nice! How did you feel about it?",
    "It's good to take a break now and then.", "Ha, that sounds like a fun {span}.", "I hope {day} turns out well for you.",
    "That's a lovely way to spend an afternoon.", "Good for you, small habits add up.",
    "Tell me more about it if you like.", "That's a great idea.", "I can imagine, a {span} like that is draining.",
    "Sounds like you've had a busy {span}.", "Fingers crossed the weather holds up.", "That's really thoughtful of you.",
    "It's nice to hear things are going well.",
)
UNRELATED = (
    "Convert {n} miles to kilometres.", "What's a good synonym for '{word}'?", "How do you say '{phrase}' in Portuguese?",
    "Give me a fun fact about {animal}.", "What time zone is {faraway} in?", "Can you explain how compound interest works?",
    "Write a two-line poem about {season}.", "How long should I boil an egg for a runny yolk?",
    "What's the difference between weather and climate?", "Summarise the plot of a heist movie in one sentence.",
    "Is {n} a prime number?", "Suggest a name for a book club.",
)
SLOTS: dict[str, tuple[str, ...]] = {
    "span": ("week", "month", "weekend"),
    "when": ("yesterday", "last night", "this morning", "on Tuesday", "last weekend", "earlier today"),
    "day": ("Saturday", "Sunday", "Friday", "Wednesday", "Monday"),
    "show": ("The Lantern Keepers", "Harbour Lights", "Midnight Orchard", "Glass Valley", "The Quiet Ledger"),
    "friend": ("Desmond", "Anouk", "Paulo", "Signe", "Yusuf", "Leontine"),
    "water": ("river", "canal", "lake", "harbour"),
    "n": ("17", "42", "91", "113", "256", "7"),
    "word": ("happy", "quick", "stubborn", "bright", "calm"),
    "phrase": ("good morning", "thank you very much", "where is the station", "see you tomorrow"),
    "animal": ("octopuses", "owls", "axolotls", "wombats", "narwhals"),
    "faraway": ("Reykjavik", "Ulaanbaatar", "Anchorage", "Windhoek", "Perth"),
    "season": ("autumn", "late spring", "the first snow"),
}
ASSISTANT, TOOL = "assistant", "tool"


def tables() -> dict[str, tuple[str, ...]]:
    """Every wording table by name (``small_talk.user``, ``allergy.state``, ...)."""
    out: dict[str, tuple[str, ...]] = {"small_talk.user": SMALL_TALK_USER, "small_talk.assistant": SMALL_TALK_ASSISTANT,
                                       "unrelated": UNRELATED}
    for fact in (*FACTS, LOCKER):
        out.update(fact.tables())
    return out


def templates(wordings: Wordings) -> set[str]:
    """The template strings ``wordings`` may use, over every table."""
    return {t[i] for t in tables().values() for i in allowed(len(t), wordings)}


NAMES = ("Maren", "Tobias", "Ilse", "Radu", "Noor", "Eamon", "Sunniva", "Kofi", "Lucía", "Bastien", "Yara", "Dmitri",
         "Oona", "Teo", "Hanne", "Rafferty")


@dataclass(slots=True)
class Turn:
    """One observation of the dataset: who said what, when, and what it is (for scoring only:
    ``kind``, ``session``, ``fact`` and ``template`` never reach the product)."""

    event_id: str
    conversation_id: str
    user_id: str
    role: str
    speaker: str
    content: str
    observed_at: datetime
    kind: TurnKind
    session: SessionKind
    fact: str | None
    template: str


@dataclass(slots=True)
class Session:
    """One conversation of one user."""

    conversation_id: str
    user_id: str
    kind: SessionKind
    turns: list[Turn] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Question:
    """A benchmark question of one user; ``gold`` is the event id of the turn stating the fact."""

    user_id: str
    text: str
    gold: str
    fact: str
    template: str


@dataclass
class Dataset:
    """Users' sessions (each user's in time order, users one after the other) and the questions."""

    sessions: list[Session]
    questions: list[Question]
    wordings: Wordings

    def turns(self) -> Iterator[Turn]:
        """Every turn, session by session."""
        for s in self.sessions:
            yield from s.turns

    def stream(self) -> list[Turn]:
        """Every turn in arrival order (by time; users' sessions interleave as they would live)."""
        return sorted(self.turns(), key=lambda t: t.observed_at)

    def users(self) -> list[str]:
        """The user ids, first seen first."""
        return list(dict.fromkeys(s.user_id for s in self.sessions))


class _Writer:
    """Fills one user's sessions: picks wordings (respecting the split) and stamps times."""

    def __init__(self, rng: random.Random, wordings: Wordings, user_id: str, name: str, start: datetime,
                 gap_hours: tuple[float, float]) -> None:
        self.rng, self.wordings, self.user_id, self.name = rng, wordings, user_id, name
        self.clock, self.gap_hours = start, gap_hours
        self.sessions: list[Session] = []

    def pick(self, table: str, texts: tuple[str, ...], slots: Mapping[str, str],
             index: int | None = None) -> tuple[str, str]:
        """(filled text, ``table:index``) of a template of ``table`` that the split allows (the
        template ``index`` when given: a tool result answers the call of the same index)."""
        i = self.rng.choice(allowed(len(texts), self.wordings)) if index is None else index
        fill = {k: self.rng.choice(v) for k, v in SLOTS.items()}
        fill.update(slots)
        return texts[i].format_map(fill), f"{table}:{i}"

    def session(self, kind: SessionKind) -> Session:
        """A new session, started a random gap after the previous one ended."""
        self.clock += timedelta(hours=self.rng.uniform(*self.gap_hours))
        s = Session(f"{self.user_id}-{self.rng.getrandbits(40):010x}", self.user_id, kind)
        self.sessions.append(s)
        return s

    def say(self, s: Session, kind: TurnKind, role: str, table: str, texts: tuple[str, ...],
            slots: Mapping[str, str] | None = None, fact: str | None = None, speaker: str | None = None,
            index: int | None = None) -> Turn:
        """Append one turn to ``s``, 20-90 s after the previous one."""
        content, template = self.pick(table, texts, slots or {}, index)
        if s.turns:
            self.clock += timedelta(seconds=self.rng.randint(20, 90))
        who = speaker or (self.name if role == "user" else ASSISTANT)
        turn = Turn(f"{s.conversation_id}-{len(s.turns):02d}", s.conversation_id, self.user_id, role, who, content,
                    self.clock, kind, s.kind, fact, template)
        s.turns.append(turn)
        return turn

    def chat(self, s: Session, n: int) -> None:
        """``n`` turns of small talk, the user and the assistant taking turns (the user first
        when the session's last turn was not the user's)."""
        for _ in range(n):
            if s.turns and s.turns[-1].role == "user":
                self.say(s, "small_talk", "assistant", "small_talk.assistant", SMALL_TALK_ASSISTANT)
            else:
                self.say(s, "small_talk", "user", "small_talk.user", SMALL_TALK_USER)


def _plan(rng: random.Random, sessions: int, facts: int) -> list[SessionKind]:
    """The kinds of a user's ``sessions`` sessions in time order: about a quarter state facts
    (at most one session per fact; the first session always does), a quarter are one-turn
    requests, up to two follow-ups per fact, the rest small talk. Every statement session comes
    before every follow-up (some small talk and one-turn sessions fall between them)."""
    n_state = min(facts, max(1, sessions // 4))
    n_one = sessions // 4 if sessions > 1 else 0
    rest = sessions - n_state - n_one
    n_follow = min(rest - rest // 3, 2 * facts)
    def many(kind: SessionKind, n: int) -> list[SessionKind]:
        return [kind] * n

    others = many("one_turn", n_one) + many("small_talk", rest - n_follow)
    rng.shuffle(others)
    early_others = rng.randint(0, len(others) // 2)
    early = many("statement", n_state - 1) + others[:early_others]
    late = others[early_others:] + many("followup", n_follow)
    rng.shuffle(early)
    rng.shuffle(late)
    return ["statement", *early, *late]


def _user(rng: random.Random, wordings: Wordings, u: int, sessions: int, facts: int,
          gap_hours: tuple[float, float], every_wording: bool,
          pool: tuple[FactType, ...]) -> tuple[list[Session], list[Question]]:
    user_id = f"user-{u:03d}"
    w = _Writer(rng, wordings, user_id, NAMES[u % len(NAMES)], START + timedelta(hours=u), gap_hours)
    chosen = rng.sample(pool, min(facts, len(pool)))
    values = {f.name: rng.choice(f.values) for f in chosen}
    kinds = _plan(rng, sessions, len(chosen))
    n_state = kinds.count("statement")
    # facts by statement session, round-robin; each fact's stating turn
    by_session = [chosen[i::n_state] for i in range(n_state)]
    gold: dict[str, Turn] = {}
    asked: dict[str, int] = {}
    k_state = 0
    for kind in kinds:
        s = w.session(kind)
        if kind == "statement":
            mine = by_session[k_state]
            k_state += 1
            length = rng.randint(max(20, 2 * len(mine) + 2), 50)
            spots = sorted(rng.sample(range(0, length - 1, 2), len(mine)))  # user turns (even positions)
            for fact in mine:
                w.chat(s, spots.pop(0) - len(s.turns))
                gold[fact.name] = w.say(s, "statement", "user", f"{fact.name}.state", fact.state, values[fact.name],
                                        fact.name)
                asked.setdefault(fact.name, 0)
            w.chat(s, length - len(s.turns))
        elif kind == "followup":
            name = min(asked, key=lambda f: (asked[f], rng.random()))
            asked[name] += 1
            fact = next(f for f in chosen if f.name == name)
            slots = values[name]
            w.chat(s, 2 * rng.randint(0, 2))
            w.say(s, "question", "user", f"{name}.ask", fact.ask, slots, name)
            call = w.say(s, "tool_call", "assistant", f"{name}.tool_call", fact.tool_call, slots, name)
            w.say(s, "tool_result", TOOL, f"{name}.tool_result", fact.tool_result, slots, name,
                  speaker=call.content.split("(", 1)[0], index=int(call.template.rsplit(":", 1)[1]))
            w.say(s, "advice", "assistant", f"{name}.advice", fact.advice, slots, name)
            w.chat(s, rng.randint(0, 4))
        elif kind == "one_turn":
            w.say(s, "question", "user", "unrelated", UNRELATED)
        else:
            w.chat(s, rng.randint(2, 24))
    questions = []
    for fact in chosen:
        which = allowed(len(fact.question), wordings) if every_wording else [None]
        for i in which:
            text, template = w.pick(f"{fact.name}.question", fact.question, values[fact.name], i)
            questions.append(Question(user_id, text, gold[fact.name].event_id, fact.name, template))
    return w.sessions, questions


def generate(users: int = 6, sessions: int = 16, facts: int = 5, wordings: Wordings = "all", seed: int = 7,
             gap_hours: tuple[float, float] = (12.0, 84.0), every_wording: bool = False,
             attributes: Collection[str] | None = None) -> Dataset:
    """``users`` users with ``sessions`` sessions each (1 to 50 turns) and ``facts`` facts each
    (at most :data:`FACTS`), one question per fact (``every_wording``: one per question wording
    the split allows); consecutive sessions of a user start ``gap_hours`` apart (uniform). Facts
    are drawn from those named in ``attributes`` (None: all of :data:`FACTS`,
    :mod:`jevmem.bench.folds`). Deterministic in its arguments (``every_wording`` changes only
    the questions)."""
    if wordings not in WORDINGS:
        raise ValueError(f"wordings must be one of {WORDINGS}, not {wordings!r}")
    if users < 1 or sessions < 1 or facts < 1:
        raise ValueError("users, sessions and facts must be at least 1")
    pool = FACTS if attributes is None else tuple(f for f in FACTS if f.name in attributes)
    if not pool:
        raise ValueError(f"none of {sorted(attributes or ())} is a fact of {[f.name for f in FACTS]}")
    all_sessions: list[Session] = []
    questions: list[Question] = []
    for u in range(users):
        s, q = _user(random.Random(f"{seed}:{wordings}:{u}"), wordings, u, sessions, facts, gap_hours, every_wording,
                     pool)
        all_sessions += s
        questions += q
    return Dataset(all_sessions, questions, wordings)


def many_sessions(sessions: int = 400, repeats: int = 20, wordings: Wordings = "all", seed: int = 7) -> Dataset:
    """One user with ``sessions`` sessions of three turns (a few hours apart); one early session
    (in the first fifth) states a :data:`LOCKER` code, the rest are small talk. The question is
    asked ``repeats`` times, cycling through the question wordings the split allows."""
    if sessions < 1 or repeats < 1:
        raise ValueError("sessions and repeats must be at least 1")
    rng = random.Random(f"{seed}:{wordings}:many")
    w = _Writer(rng, wordings, "user-many", "Ilka", START, (2.0, 9.0))
    value = rng.choice(LOCKER.values)
    where = rng.randrange(max(1, sessions // 5))
    gold: Turn | None = None
    for i in range(sessions):
        s = w.session("statement" if i == where else "small_talk")
        if i == where:
            gold = w.say(s, "statement", "user", "locker.state", LOCKER.state, value, "locker")
            w.chat(s, 2)
        else:
            w.chat(s, 3)
    assert gold is not None
    shown = allowed(len(LOCKER.question), wordings)
    questions = [Question(w.user_id, LOCKER.question[i], gold.event_id, "locker", f"locker.question:{i}")
                 for i in (shown[r % len(shown)] for r in range(repeats))]
    return Dataset(w.sessions, questions, wordings)
