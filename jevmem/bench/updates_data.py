"""The synthetic conversations of ``jevmem bench updates``: personal facts that change.

A deterministic, seeded generator (no data files; its own people, attributes and wordings). A
person talks with an assistant or a friend for about a hundred turns of small talk (long enough
for consolidation, every 20 writes, to run several times); in between they state attributes that
change (where they live, their employer, manager, car, favourite food, partner, phone, gym,
hobby) and, 20 to 80 turns later, update them in one of three wording kinds (:data:`UPDATE_KINDS`):
``explicit`` (a change verb: "I moved to Lisbon last month"), ``contrast`` (the old value named
as no longer true: "Actually my favourite food is ramen these days, not sushi") or ``implicit``
(no change cue: "These days I cycle to work through Porto"). Stable attributes are stated once
and followed by a *look-alike*: the same attribute of someone else ("My sister lives in Madrid"
after "I live in Madrid"), or, with a friend, the friend's own statement; a look-alike is never an
update. Some people have a second, later conversation (the same ``user_id``) that updates
attributes of the first: those facts cross sessions.

Questions: about the present ("Where does Ana live?": gold the current statement, ``stale`` the
one it replaced), about the past ("Where did Ana live before?": gold the replaced statement) and
about stable attributes (gold the statement, ``lookalike`` the other person's). A person with one
conversation is asked in that conversation (``Question.conversation_id``); a person with two is
asked across their conversations (``conversation_id`` None: recall by ``user_id``). Gold ids are
for scoring only; only a question's text reaches the product.

Contract:

- The same arguments give the same :class:`Dataset` (``random.Random`` seeded with strings).
- Every wording table has at least three templates; template ``i`` is held out when
  ``i % 3 == 2`` (:func:`jevmem.bench.users_data.held_out`), so ``wordings="train"`` and ``"heldout"``
  draw from disjoint templates of every table; ``"all"`` draws from both. A turn records its
  template (``table:index``).
- Event ids are unique (``<conversation>-<turn>``); a conversation's turns are in time order,
  the person speaks at even turns and the partner at odd ones; a person's second conversation
  starts after the first ends.

:func:`jevmem.bench.update_pairs.judge_pairs` builds the labelled (older, newer) pairs the update
judge is trained and validated on (``scripts/train_update_judge.py``) from the same tables.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from jevmem.bench.users_data import WORDINGS, Wordings, allowed

UpdateKind = Literal["explicit", "contrast", "implicit"]
UPDATE_KINDS: tuple[UpdateKind, ...] = ("explicit", "contrast", "implicit")
TurnKind = Literal["state", "update", "restate", "lookalike", "ack", "small_talk"]
QuestionKind = Literal["present", "past", "stable"]

START = datetime(2024, 3, 4, 8, 0, tzinfo=UTC)
"""When the first person's first conversation starts (each next person an hour later)."""
TURNS = 100
"""Turns of a conversation by default: five consolidation runs at one every 20 writes."""
MIN_TURNS = 60
"""Shortest conversation: room for every planned fact with its update 20 or more turns later."""
GAP_SLOTS = (10, 40)
"""An update comes this many of the person's own turns after the statement (20-80 turns)."""


@dataclass(frozen=True)
class Attribute:
    """One attribute of a person that may change. Slots: ``{v}`` the value, ``{old}`` the value
    it replaces, ``{who}``/``{who_l}`` someone else (sentence start / mid-sentence), ``{name}``
    the person asked about. ``state``: a first statement; ``explicit``/``contrast``/``implicit``:
    updates by wording kind; ``restate``: the same value again (not an update); ``other``: the
    same attribute of someone else (a look-alike); ``other_update``: someone else's value
    changes; ``ack``: the partner's reply naming the value; ``ask``: the partner asks about it;
    ``now``/``before``: benchmark questions about the present and the past; ``remark``: the
    person speaks of the same thing again without changing it (no value, or ``{v}`` unchanged),
    a non-update the judge is trained on where a table has them (the wide pool's,
    :mod:`jevmem.bench.wide`)."""

    name: str
    values: tuple[str, ...]
    state: tuple[str, ...]
    explicit: tuple[str, ...]
    contrast: tuple[str, ...]
    implicit: tuple[str, ...]
    restate: tuple[str, ...]
    other: tuple[str, ...]
    other_update: tuple[str, ...]
    ack: tuple[str, ...]
    ask: tuple[str, ...]
    now: tuple[str, ...]
    before: tuple[str, ...]
    remark: tuple[str, ...] = ()

    def tables(self) -> dict[str, tuple[str, ...]]:
        """The wording tables by name (``<attribute>.<part>``)."""
        return {f"{self.name}.{part}": getattr(self, part) for part in PARTS}


PARTS = ("state", "explicit", "contrast", "implicit", "restate", "other", "other_update", "ack", "ask", "now",
         "before")

ATTRIBUTES: tuple[Attribute, ...] = (
    Attribute(
        "city", ("Lisbon", "Porto", "Madrid", "Valencia", "Lyon", "Utrecht", "Gothenburg", "Bologna", "Tallinn",
                 "Cork", "Leipzig", "Seville", "Bruges", "Bergen"),
        state=("I live in {v}, in a small flat near the river.", "Home is {v} for me, I've been there a few years.",
               "I'm based in {v} at the moment, it suits me.", "My apartment is in {v}, right by the old market.",
               "I rent a place in {v}, not far from the centre.", "Living in {v} has its perks, the food especially."),
        explicit=("I moved to {v} last month, still unpacking boxes.", "Big news: we relocated to {v} over the summer.",
                  "I've just moved to {v}, the flat is tiny but bright.", "Finally changed cities, I'm living in {v} now."),
        contrast=("I don't live in {old} anymore, I'm in {v} now.", "Actually it's {v} now, not {old}; I left in spring.",
                  "No more {old} for me, home is {v} these days."),
        implicit=("These days I cycle to work through {v}.", "My landlord here in {v} finally fixed the heating.",
                  "I love my morning walks along the seafront in {v}.", "Our flat in {v} gets so much light in the mornings.",
                  "The neighbours here in {v} invited me to a barbecue.", "Getting groceries in {v} is easy from my street."),
        restate=("Still loving life in {v}, honestly.", "{v} is treating me well, as always.",
                 "Yep, still in {v}, same flat as before."),
        other=("{who} lives in {v}.", "{who} has a flat in {v}, close to the port.", "{who} is based in {v} these days.",
               "{who}'s home is in {v}, we visit at Easter.", "{who} rents a house in {v} with two friends.",
               "Funny enough, {who_l} lives in {v} too."),
        other_update=("{who} just moved to {v}.", "{who} relocated to {v} for a new job.",
                      "{who} packed up and moved to {v} last week."),
        ack=("{v} sounds like a lovely place to live.", "Oh nice, I've heard great things about {v}.",
             "How are you finding {v} so far?"),
        ask=("Where are you living these days?", "Remind me, which city are you in?",
             "Are you still in the same place as before?"),
        now=("Where does {name} live?", "Which city does {name} live in now?", "Where is {name} living these days?",
             "What city is {name} based in?"),
        before=("Where did {name} live before?", "Which city did {name} live in before moving?",
                "Where was {name} living previously?"),
    ),
    Attribute(
        "employer", ("Halden Logistics", "Brightwater Labs", "Norcastle Bank", "Pellucid Games", "Quillmark Press",
                     "Tidewell Energy", "Sablewood Studios", "Orbital Freight", "Greenhollow Foods", "Varga Insurance"),
        state=("I work at {v}, mostly on the planning side.", "My employer is {v}, they're decent to work for.",
               "I've got a job at {v}, it's a steady gig.", "These past years I've been working for {v}.",
               "I'm on the payroll at {v}, in the operations team.", "My job at {v} keeps me pretty busy."),
        explicit=("I changed jobs, I'm at {v} now.", "I started a new job at {v} on Monday.",
                  "Just joined {v}, first week went well.", "I switched employers, {v} made me a better offer."),
        contrast=("I'm not at {old} anymore, I work for {v} now.", "I left {old} in March and joined {v}.",
                  "No longer with {old}; {v} hired me last month."),
        implicit=("My desk at {v} overlooks the car park, sadly.", "The onboarding at {v} was surprisingly well organised.",
                  "Lunch at the {v} canteen is actually good.", "My team at {v} does demos every Friday."),
        restate=("Work at {v} is the same as ever.", "Another long week at {v}.", "Still working at {v}, nothing new there."),
        other=("{who} works at {v}.", "{who} has a job at {v} in the finance team.", "{who} is employed by {v} these days.",
               "{who} got hired by {v} as an engineer.", "{who}'s office is at {v}, downtown.",
               "Coincidentally, {who_l} works for {v} as well."),
        other_update=("{who} just started a new job at {v}.", "{who} quit and joined {v}.", "{who} switched to {v} last week."),
        ack=("{v} is a good company to work for, I hear.", "Congrats on the job at {v}!", "How do you like {v} so far?"),
        ask=("Where are you working at the moment?", "Which company are you with now?", "Are you still at the same job?"),
        now=("Where does {name} work?", "Who is {name}'s employer?", "Which company does {name} work for now?",
             "Where is {name} employed?"),
        before=("Where did {name} work before?", "Which company did {name} work for previously?",
                "What was {name}'s previous employer?"),
    ),
    Attribute(
        "manager", ("Jonas", "Claire", "Marisol", "Devan", "Agnieszka", "Rufus", "Helena", "Tariq", "Ines", "Bogdan"),
        state=("My manager is {v}, very organised.", "I report to {v} at work.", "{v} is my boss, and a fair one.",
               "My line manager, {v}, runs a tight ship.", "My team lead is {v}, we get on well.",
               "I answer to {v}, who heads our team."),
        explicit=("My new manager is {v}, {old} left.", "We got a new boss, {v}, last week.",
                  "I've been moved to a new team, I report to {v} now.", "There was a reshuffle and {v} is my manager now."),
        contrast=("{old} isn't my manager anymore, it's {v}.", "I don't report to {old} now, {v} took over.",
                  "{old} moved on, so {v} is my boss these days."),
        implicit=("{v} runs our weekly one-to-ones.", "Had my first review with {v} today, went fine.",
                  "{v} signed off my holiday request this morning.", "{v} wants the quarterly report from me by Friday."),
        restate=("{v} is still my manager, thankfully.", "Had another good chat with my manager {v}.",
                 "Same boss as always, {v}."),
        other=("{who}'s manager is {v}.", "{who} reports to {v}.", "{who}'s boss, {v}, sounds awful.",
               "{who} works under {v} at the council.", "{who}'s team lead is {v}.",
               "Apparently {who_l} has {v} as a manager too."),
        other_update=("{who} has a new manager, {v}.", "{who} reports to {v} now.", "{who} got moved under {v} last week."),
        ack=("{v} sounds like a good manager.", "Hope {v} treats you well.", "Is {v} easy to work with?"),
        ask=("Who's your manager at the moment?", "Who do you report to these days?", "Do you still have the same boss?"),
        now=("Who is {name}'s manager?", "Who does {name} report to?", "Who is {name}'s boss now?",
             "Who manages {name} at work?"),
        before=("Who was {name}'s manager before?", "Who did {name} report to previously?", "Who was {name}'s old boss?"),
    ),
    Attribute(
        "car", ("Tesla Model 3", "Honda Civic", "Renault Clio", "Skoda Octavia", "Mazda MX-5", "Ford Focus",
                "Peugeot 208", "Hyundai Kona", "Volvo XC40", "Nissan Leaf"),
        state=("I drive a {v}, it's been reliable.", "My car is a {v}, a bit scratched but fine.",
               "I get around in a {v} most days.", "I own a {v}, bought it used.", "My {v} is parked outside, as usual.",
               "The {v} I drive needs a wash."),
        explicit=("I sold the {old} and got a {v}.", "I bought a new car, a {v}.",
                  "Traded in my old car for a {v} last week.", "I switched to a {v} over the winter."),
        contrast=("I don't drive the {old} anymore, I've got a {v}.", "No more {old}, it's a {v} now.",
                  "The {old} is gone; I drive a {v} instead."),
        implicit=("I drive a {v} now.", "Parking my {v} at the office is easy.", "My {v} handles the mountain roads well.",
                  "Took my {v} for its first service today."),
        restate=("Still driving the {v}, it never lets me down.", "The {v} is going strong.", "Yep, same {v} as always."),
        other=("{who} drives a {v}.", "{who} has a {v}, bright red.", "{who} owns a {v} and never cleans it.",
               "{who}'s car is a {v}.", "{who} borrowed a {v} for the trip.", "Oddly enough {who_l} drives a {v} too."),
        other_update=("{who} just bought a {v}.", "{who} traded in the old car for a {v}.", "{who} got a {v} last month."),
        ack=("A {v} is a solid choice.", "Enjoy the {v}!", "How does the {v} drive?"),
        ask=("What are you driving these days?", "Do you still have the same car?", "What car do you have now?"),
        now=("What car does {name} drive?", "What does {name} drive now?", "Which car does {name} have?",
             "What is {name}'s car?"),
        before=("What did {name} drive before?", "Which car did {name} have previously?", "What was {name}'s old car?"),
    ),
    Attribute(
        "food", ("ramen", "sushi", "lasagne", "pho", "tacos", "biryani", "paella", "dumplings", "falafel", "pierogi",
                 "moussaka", "katsu curry"),
        state=("My favourite food is {v}, no contest.", "I could eat {v} every single day.", "Nothing beats {v} for me.",
               "If I had to pick one dish, it would be {v}.", "I'm a huge fan of {v}, always have been.",
               "My go-to comfort meal is {v}."),
        explicit=("My taste changed, {v} is my favourite now.", "I've switched favourites, it's {v} now.",
                  "New favourite food alert: {v}.", "Lately I've gone off my old favourite; {v} is the one now."),
        contrast=("Actually my favourite food is {v} these days, not {old}.", "I'm over {old}, {v} is my thing now.",
                  "Forget {old}, I'm all about {v} at the moment."),
        implicit=("I've had {v} three times this week and I'm not sorry.", "Honestly {v} is the best thing I eat all week.",
                  "I'd pick {v} over anything on the menu right now.", "Every Friday I treat myself to {v}."),
        restate=("Had {v} again, still my favourite.", "{v} never gets old for me.", "Yep, {v} is still the best."),
        other=("{who} loves {v}.", "{who}'s favourite food is {v}.", "{who} orders {v} every time we go out.",
               "{who} could live on {v}.", "{who} is obsessed with {v}.", "Just like me, {who_l} adores {v}."),
        other_update=("{who} has a new favourite food, {v}.", "{who} is all about {v} now.",
                      "{who} went off pasta and now swears by {v}."),
        ack=("{v} is delicious, good choice.", "Ooh, I love a good {v}.", "Where do you get your {v}?"),
        ask=("What's your favourite food these days?", "Are you still into the same food?",
             "What do you like eating most?"),
        now=("What is {name}'s favourite food?", "What food does {name} like most now?",
             "What's {name}'s favourite dish these days?", "Which food does {name} love most?"),
        before=("What was {name}'s favourite food before?", "What did {name} like eating most previously?",
                "Which dish did {name} use to prefer?"),
    ),
    Attribute(
        "partner", ("Mateo", "Sofia", "Elias", "Rhiannon", "Nikhil", "Greta", "Ravi", "Lotte", "Caio", "Imogen"),
        state=("I'm dating {v}, we met at a concert.", "My partner is {v}, we've been together two years.",
               "{v} and I have been a couple since university.", "My other half, {v}, works nights.",
               "I share a flat with my partner {v}.", "{v} is my partner; we share a dog."),
        explicit=("{old} and I split up; I'm seeing {v} now.", "I've started dating {v}, it's still new.",
                  "I have a new partner, {v}.", "I broke up with {old} and met {v} soon after."),
        contrast=("I'm not with {old} anymore, I'm with {v}.", "It's over with {old}; {v} and I are together now.",
                  "{old} is in the past, I'm dating {v} these days."),
        implicit=("{v} cooked me dinner last night, so sweet.", "{v} and I are planning our first trip together.",
                  "Meeting {v}'s parents this weekend, nervous!", "{v} surprised me with flowers today."),
        restate=("{v} and I are still going strong.", "Another lovely evening with {v}.", "Still with {v}, happier than ever."),
        other=("{who} is dating {v}.", "{who}'s partner is {v}.", "{who} has been with {v} for years.",
               "{who} is seeing someone called {v}.", "{who} and {v} just got engaged.",
               "Apparently {who_l} is going out with {v}."),
        other_update=("{who} broke up and is now with {v}.", "{who} has a new partner, {v}.",
                      "{who} started seeing {v} last month."),
        ack=("{v} sounds lovely.", "I'm happy for you and {v}.", "How did you and {v} meet?"),
        ask=("Are you seeing anyone at the moment?", "How's your love life these days?",
             "Are you still with the same person?"),
        now=("Who is {name}'s partner?", "Who is {name} dating now?", "Who is {name} in a relationship with?",
             "Who is {name} seeing these days?"),
        before=("Who was {name}'s partner before?", "Who did {name} date previously?", "Who was {name} with before?"),
    ),
    Attribute(
        "phone", ("Pixel 8", "iPhone 15", "Galaxy S23", "Fairphone 5", "OnePlus 12", "Xperia 10", "Moto Edge"),
        state=("I use a {v}, the battery is great.", "My phone is a {v}.", "I've had a {v} for a couple of years.",
               "I text from my {v}, sorry for the typos.", "My {v} takes decent photos.",
               "The {v} in my pocket is my whole life."),
        explicit=("I switched phones, I'm on a {v} now.", "Got a new phone, a {v}.", "I upgraded to a {v} at the weekend.",
                  "I replaced my phone with a {v}."),
        contrast=("No more {old} for me, I've moved to a {v}.", "I gave up the {old}; I'm using a {v} now.",
                  "The {old} died, so now it's a {v}."),
        implicit=("Setting up my {v} took the whole evening.", "The camera on my {v} is unreal.",
                  "My {v} already has a crack in the screen.", "Learning the gestures on this {v} is tricky."),
        restate=("My {v} is still going strong.", "Same {v} as ever, no complaints.", "Still on the {v}."),
        other=("{who} uses a {v}.", "{who}'s phone is a {v}.", "{who} swears by the {v}.",
               "{who} has a {v} with a pink case.", "{who} texts me from a {v}.", "Apparently {who_l} has a {v} too."),
        other_update=("{who} just got a {v}.", "{who} switched to a {v}.", "{who} upgraded to a {v} last week."),
        ack=("The {v} is a good phone.", "Enjoy the {v}!", "Is the {v} easy to use?"),
        ask=("What phone are you using these days?", "Do you still have the same phone?", "Which phone do you have now?"),
        now=("What phone does {name} use?", "Which phone does {name} have now?", "What is {name}'s phone?",
             "What mobile does {name} use these days?"),
        before=("What phone did {name} use before?", "Which phone did {name} have previously?",
                "What was {name}'s old phone?"),
    ),
    Attribute(
        "gym", ("Ironworks", "PulseFit", "Harbour Leisure Centre", "Anvil Strength Club", "BlueLine Fitness",
                "Summit Climbing", "Core Collective", "Kestrel Sports Hall"),
        state=("I train at {v}, usually before work.", "My gym is {v}, it's never too busy.",
               "I've got a membership at {v}.", "I work out at {v} three times a week.",
               "I go to {v} for classes on Tuesdays.", "{v} is where I lift, it's close by."),
        explicit=("I switched gyms, I go to {v} now.", "I joined {v} this month.", "New gym: {v}, much better equipment.",
                  "I moved my membership over to {v}."),
        contrast=("I quit {old}; I train at {v} now.", "I'm not going to {old} anymore, {v} is my gym.",
                  "Cancelled {old}, signed up with {v} instead."),
        implicit=("The sauna at {v} is wonderful after a session.", "I did my first spin class at {v} tonight.",
                  "The trainers at {v} really push you.", "The changing rooms at {v} are spotless."),
        restate=("Another session at {v} this morning.", "{v} is still my gym, love it.", "Back at {v} as usual."),
        other=("{who} trains at {v}.", "{who} is a member at {v}.", "{who} goes to {v} every morning.",
               "{who}'s gym is {v}.", "{who} teaches a class at {v}.", "Turns out {who_l} works out at {v} as well."),
        other_update=("{who} just joined {v}.", "{who} switched to {v}.", "{who} signed up at {v} last week."),
        ack=("{v} sounds like a good gym.", "Enjoy your sessions at {v}!", "Is {v} expensive?"),
        ask=("Which gym do you go to now?", "Where do you work out these days?", "Are you still at the same gym?"),
        now=("Which gym does {name} go to?", "Where does {name} train?", "What gym is {name} a member of now?",
             "Where does {name} work out?"),
        before=("Which gym did {name} go to before?", "Where did {name} train previously?", "What was {name}'s old gym?"),
    ),
    Attribute(
        "hobby", ("pottery", "bouldering", "chess", "sea swimming", "birdwatching", "salsa dancing", "woodworking",
                  "film photography", "trail running", "sourdough baking", "knitting", "padel"),
        state=("My main hobby is {v}.", "In my spare time I do {v}.", "I spend most weekends on {v}.",
               "I'm really into {v}.", "{v} is how I unwind after work.", "I've been doing {v} for ages, it keeps me sane."),
        explicit=("I took up {v} recently and I love it.", "New hobby: {v}!", "I've switched hobbies, it's {v} now.",
                  "I started doing {v} this spring."),
        contrast=("I gave up {old}, I do {v} now.", "Not into {old} anymore; {v} is my thing.", "I've dropped {old} for {v}."),
        implicit=("Spent the whole Saturday on {v} again.", "I signed up for a {v} course on Thursdays.",
                  "I can't stop thinking about {v} these days.", "My weekends revolve around {v} at the moment."),
        restate=("Still doing {v} every weekend.", "{v} remains my favourite way to relax.", "More {v} this weekend, as usual."),
        other=("{who} is really into {v}.", "{who}'s hobby is {v}.", "{who} spends every weekend on {v}.",
               "{who} does {v} in the evenings.", "{who} has done {v} for years.", "Amusingly, {who_l} is into {v} as well."),
        other_update=("{who} took up {v}.", "{who} has a new hobby, {v}.", "{who} started {v} last month."),
        ack=("{v} sounds fun.", "I'd love to hear more about your {v}.", "How did you get into {v}?"),
        ask=("What do you do for fun these days?", "Any hobbies at the moment?", "Are you still doing the same hobby?"),
        now=("What is {name}'s hobby?", "What does {name} do for fun now?", "What hobby is {name} into these days?",
             "What does {name} do in their spare time?"),
        before=("What was {name}'s hobby before?", "What did {name} do for fun previously?",
                "Which hobby did {name} have before?"),
    ),
)
BY_NAME = {a.name: a for a in ATTRIBUTES}

SMALL_TALK_PERSON = (
    "Ugh, Mondays are rough.", "I burned my toast {when}, classic.", "Did you see the sunset {when}? Unreal.",
    "I've been meaning to read more, any genre is fine.", "My houseplants are thriving, which is a first.",
    "The train was packed again {when}.", "I watched a documentary about {topic} {when}.",
    "It's been raining nonstop all {span}.", "I need a holiday, honestly.", "Made pancakes {when}, they were a bit flat.",
    "My laptop kept freezing {when}.", "I finally cleaned out the fridge.", "The kettle broke {when}, tragic.",
    "Trying to drink less coffee this {span}, going badly.", "I found a great podcast about {topic}.",
    "Long day, I just want to sit on the sofa.", "I spent {day} doing absolutely nothing.",
    "A neighbour's cat wandered in again {when}.", "My back aches from sitting all day.",
    "Such a windy day {when}.", "I tried a crossword {when} and got about half.",
)
SMALL_TALK_ASSISTANT = (
    "That sounds like a lot.", "Ha, I know the feeling.", "Hope the rest of your day is calmer.",
    "That's nice to hear.", "Oh no, sorry to hear that.", "Good on you.", "Sounds like you deserve a rest.",
    "What did you think of it?", "Fair enough!", "That made me smile.", "Anything fun planned for {day}?",
    "Take it easy this {span}.", "Classic!", "I'd love to hear how it goes.", "Always good to switch off for a bit.",
)
SMALL_TALK_FRIEND = (
    "Same here, honestly.", "Haha, typical {day}.", "I had a similar {span}, don't worry.",
    "We should grab a coffee on {day}.", "Oh no! Poor you.", "That's brilliant.", "I'm so jealous.",
    "Tell me everything.", "Ha, sounds about right.", "Same thing happened to me {when}.", "Fingers crossed for you.",
    "Let's catch up properly soon.",
)
SLOTS: dict[str, tuple[str, ...]] = {
    "when": ("yesterday", "last night", "this morning", "on Tuesday", "earlier today"),
    "span": ("week", "month", "weekend"),
    "day": ("Saturday", "Sunday", "Friday", "Thursday"),
    "topic": ("deep-sea fish", "old lighthouses", "volcanoes", "medieval castles", "honeybees"),
}
PEOPLE = ("Ana", "Tomás", "Priya", "Jonah", "Mirela", "Kwame", "Sigrid", "Hugo", "Leila", "Anton", "Beatriz", "Felix",
          "Yuki", "Oskar", "Nadia", "Idris")
FRIENDS = ("Marta", "Olu", "Katrin", "Sami", "Greer", "Lorcan", "Paz", "Ruben")
"""Partners of the friend conversations (they state their own attributes too)."""
THIRD = ("Tamsin", "Gideon", "Soraya", "Piet", "Wilhelmina", "Ezra", "Lucinda", "Bram")
"""Third parties a person talks about."""
KIN = ("sister", "brother", "dad", "mum", "cousin", "best friend {t}", "colleague {t}", "{t}")
"""Who a look-alike is about (``{t}`` a name of :data:`THIRD`)."""
ASSISTANT = "assistant"


def tables() -> dict[str, tuple[str, ...]]:
    """Every wording table by name (``small_talk.person``, ``city.state``, ...)."""
    out = {"small_talk.person": SMALL_TALK_PERSON, "small_talk.assistant": SMALL_TALK_ASSISTANT,
           "small_talk.friend": SMALL_TALK_FRIEND}
    for a in ATTRIBUTES:
        out.update(a.tables())
    return out


def templates(wordings: Wordings) -> set[str]:
    """The template strings ``wordings`` may use, over every table."""
    return {t[i] for t in tables().values() for i in allowed(len(t), wordings)}


def who(rng: random.Random) -> tuple[str, str, str]:
    """(sentence-start form, mid-sentence form, subject key) of a random third party."""
    kin = rng.choice(KIN).format(t=rng.choice(THIRD))
    if kin[0].isupper():  # a bare name
        return kin, kin, kin.lower()
    return f"My {kin}", f"my {kin}", kin.lower()


@dataclass(frozen=True, slots=True)
class Turn:
    """One observation: who said what, when (``kind``, ``attribute``, ``value``, ``subject`` and
    ``template`` are for scoring and training only and never reach the product). ``subject`` is
    whose attribute a fact turn states (a person's name, or the third party's key)."""

    event_id: str
    conversation_id: str
    user_id: str
    role: str
    speaker: str
    content: str
    observed_at: datetime
    kind: TurnKind
    attribute: str | None
    value: str | None
    subject: str | None
    template: str


@dataclass(slots=True)
class Conversation:
    """One session of one person with an assistant or a friend."""

    conversation_id: str
    user_id: str
    person: str
    partner: str
    turns: list[Turn] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Question:
    """A benchmark question. ``gold``: the current statement (present), the replaced one (past)
    or the stable statement (stable); ``stale``: for present questions, the statement the gold
    replaced; ``current``: for past questions, the statement that replaced the gold;
    ``lookalike``: for stable questions, the other person's statement. ``conversation_id`` None:
    asked across the person's conversations (recall by ``user_id``)."""

    user_id: str
    conversation_id: str | None
    kind: QuestionKind
    attribute: str
    text: str
    gold: str
    stale: str | None
    current: str | None
    lookalike: str | None
    update_kind: UpdateKind | None
    cross_session: bool
    template: str


@dataclass
class Dataset:
    """Conversations (each person's in time order) and the questions."""

    conversations: list[Conversation]
    questions: list[Question]
    wordings: Wordings

    def turns(self) -> Iterator[Turn]:
        for c in self.conversations:
            yield from c.turns

    def stream(self) -> list[Turn]:
        """Every turn in arrival order (by time, then event id)."""
        return sorted(self.turns(), key=lambda t: (t.observed_at, t.event_id))

    def users(self) -> list[str]:
        return list(dict.fromkeys(c.user_id for c in self.conversations))


class _Filler:
    """Picks wordings the split allows and fills their slots."""

    def __init__(self, rng: random.Random, wordings: Wordings) -> None:
        self.rng, self.wordings = rng, wordings

    def pick(self, table: str, texts: tuple[str, ...], slots: Mapping[str, str]) -> tuple[str, str]:
        i = self.rng.choice(allowed(len(texts), self.wordings))
        fill = {k: self.rng.choice(v) for k, v in SLOTS.items()}
        fill.update(slots)
        text = texts[i].format_map(fill)
        return text[0].upper() + text[1:], f"{table}:{i}"


@dataclass(frozen=True, slots=True)
class _Event:
    """A fact turn planned at a slot: the person's own turn (``by_partner`` False) or the partner's."""

    kind: TurnKind
    attribute: str
    part: str
    slots: Mapping[str, str]
    value: str
    subject: str
    by_partner: bool = False


def _free(rng: random.Random, taken: set[int], lo: int, hi: int, n: int) -> int:
    """A random free slot in [lo, hi]; when all are taken, the first free one after ``hi``
    (before ``n``), so an update never lands before its statement."""
    lo = max(1, lo)
    options = [s for s in range(lo, hi + 1) if s not in taken] or \
        [s for s in range(max(lo, hi + 1), n) if s not in taken][:1]
    if not options:
        raise ValueError("the conversation is too short for its facts")
    slot = rng.choice(options)
    taken.add(slot)
    return slot


class _Person:
    """One person's conversations and questions."""

    def __init__(self, rng: random.Random, wordings: Wordings, u: int, n_conv: int, turns: int,
                 attributes: tuple[Attribute, ...] = ATTRIBUTES) -> None:
        self.rng, self.fill, self.attributes = rng, _Filler(rng, wordings), attributes
        self.user_id, self.name = f"upd-user-{u:03d}", PEOPLE[u % len(PEOPLE)]
        self.friend = u % 3 == 1  # every third person chats with a friend, the others with the assistant
        self.partner = FRIENDS[u % len(FRIENDS)] if self.friend else ASSISTANT
        self.clock = START + timedelta(hours=u)
        self.turns, self.n_conv = max(turns, MIN_TURNS), n_conv
        self.conversations: list[Conversation] = []
        #: attribute -> [(value, turn)] in time order (the person's own statements)
        self.history: dict[str, list[tuple[str, Turn]]] = {}
        self.kinds: dict[str, UpdateKind] = {}

    def _value(self, a: Attribute, avoid: set[str]) -> str:
        return self.rng.choice([v for v in a.values if v not in avoid])

    def _state(self, a: Attribute, value: str) -> _Event:
        return _Event("state", a.name, "state", {"v": value}, value, self.name)

    def _update(self, a: Attribute, old: str, new: str, k: int) -> _Event:
        kind = UPDATE_KINDS[k % len(UPDATE_KINDS)]
        return _Event("update", a.name, kind, {"v": new, "old": old}, new, self.name)

    def _lookalike(self, a: Attribute, value: str) -> _Event:
        if self.friend and self.rng.random() < 0.5:  # the friend states the same attribute of themselves
            return _Event("lookalike", a.name, "state", {"v": value}, value, self.partner, by_partner=True)
        start, mid, key = who(self.rng)
        return _Event("lookalike", a.name, "other", {"v": value, "who": start, "who_l": mid}, value, key)

    def plan(self) -> None:
        want = 8 if self.n_conv > 1 else 6
        attrs = self.rng.sample(self.attributes, min(want, len(self.attributes)))
        # four changing and two stable of six (or eight: two more carried into the second
        # conversation); fewer attributes to draw from keep those shares
        c = max(1, round(len(attrs) * 4 / want))
        s = round(len(attrs) * 2 / want)
        changing, stable, carried = attrs[:c], attrs[c:c + s], attrs[c + s:]
        n = self.turns // 2
        first: dict[int, _Event] = {}
        taken: set[int] = {0}
        k = self.rng.randrange(len(UPDATE_KINDS))
        values: dict[str, str] = {}
        for a in changing:
            v0 = self._value(a, set())
            v1 = self._value(a, {v0})
            s = _free(self.rng, taken, 1, min(15, n - GAP_SLOTS[0] - 2), n)
            first[s] = self._state(a, v0)
            t = _free(self.rng, taken, s + GAP_SLOTS[0], min(s + GAP_SLOTS[1], n - 2), n)
            first[t] = self._update(a, v0, v1, k)
            k += 1
            values[a.name] = v1
            between = [x for x in range(s + 1, t) if x not in taken]
            if self.rng.random() < 0.4 and between:  # someone else's value of it, in between
                first[_free(self.rng, taken, s + 1, t - 1, t)] = self._lookalike(a, self._value(a, {v0, v1}))
        for a in stable:
            v = self._value(a, set())
            s = _free(self.rng, taken, 1, min(20, n - 8), n)
            first[s] = self._state(a, v)
            same = self.rng.random() < 0.5  # "My sister lives in Madrid" after "I live in Madrid"
            first[_free(self.rng, taken, s + 3, min(s + 25, n - 2), n)] = self._lookalike(
                a, v if same else self._value(a, {v}))
        for a in carried:
            v = self._value(a, set())
            first[_free(self.rng, taken, 1, min(30, n - 2), n)] = self._state(a, v)
            values[a.name] = v
        self._conversation(0, n, first)
        for c in range(1, self.n_conv):  # later sessions update carried attributes and one changed before
            self.clock += timedelta(days=self.rng.uniform(10, 40))
            later: dict[int, _Event] = {}
            taken = {0}
            for a in [*carried, self.rng.choice(changing)]:
                old = values[a.name]
                new = self._value(a, {v for v, _ in self.history[a.name]})
                later[_free(self.rng, taken, 3, n - 3, n)] = self._update(a, old, new, k)
                k += 1
                values[a.name] = new
            self._conversation(c, n, later)

    def _conversation(self, c: int, n: int, events: Mapping[int, _Event]) -> None:
        conv = Conversation(f"{self.user_id}-s{c}", self.user_id, self.name, self.partner)
        self.conversations.append(conv)
        partner_role = "user" if self.friend else "assistant"
        reply = "small_talk.friend" if self.friend else "small_talk.assistant"
        replies = SMALL_TALK_FRIEND if self.friend else SMALL_TALK_ASSISTANT
        for slot in range(n):
            if slot and self.rng.random() < 1 / 12:  # a new sitting, days later
                self.clock += timedelta(days=self.rng.uniform(1, 9))
            ev = events.get(slot)
            mine = ev if ev is not None and not ev.by_partner else None
            said = self._say(conv, "user", self.name, mine) if mine else \
                self._small(conv, "user", self.name, "small_talk.person", SMALL_TALK_PERSON)
            if ev is not None and ev.by_partner:
                self._say(conv, partner_role, self.partner, ev)
            elif mine is not None and mine.kind != "lookalike" and self.rng.random() < 0.5:
                a = BY_NAME[mine.attribute]
                text, template = self.fill.pick(f"{a.name}.ack", a.ack, {"v": mine.value})
                self._add(conv, partner_role, self.partner, text, "ack", a.name, mine.value, None, template)
            else:
                self._small(conv, partner_role, self.partner, reply, replies)
            if mine is not None and mine.kind in ("state", "update"):
                self.history.setdefault(mine.attribute, []).append((mine.value, said))

    def _say(self, conv: Conversation, role: str, speaker: str, ev: _Event) -> Turn:
        a = BY_NAME[ev.attribute]
        text, template = self.fill.pick(f"{a.name}.{ev.part}", getattr(a, ev.part), ev.slots)
        return self._add(conv, role, speaker, text, ev.kind, a.name, ev.value, ev.subject, template)

    def _small(self, conv: Conversation, role: str, speaker: str, table: str, texts: tuple[str, ...]) -> Turn:
        text, template = self.fill.pick(table, texts, {})
        return self._add(conv, role, speaker, text, "small_talk", None, None, None, template)

    def _add(self, conv: Conversation, role: str, speaker: str, text: str, kind: TurnKind, attribute: str | None,
             value: str | None, subject: str | None, template: str) -> Turn:
        if conv.turns:
            self.clock += timedelta(seconds=self.rng.randint(25, 110))
        turn = Turn(f"{conv.conversation_id}-{len(conv.turns):03d}", conv.conversation_id, self.user_id, role, speaker,
                    text, self.clock, kind, attribute, value, subject, template)
        conv.turns.append(turn)
        return turn

    def questions(self) -> list[Question]:
        """Present and past questions for every updated attribute, one for every stable one."""
        scope = self.conversations[0].conversation_id if self.n_conv == 1 else None
        out = []
        for attr, said in self.history.items():
            a = BY_NAME[attr]
            if len(said) < 2:
                continue
            (_, stale), (_, current) = said[-2], said[-1]
            cross = stale.conversation_id != current.conversation_id
            kind = next(k for k in UPDATE_KINDS if current.template.startswith(f"{attr}.{k}:"))
            asked: tuple[tuple[QuestionKind, str], ...] = (("present", "now"), ("past", "before"))
            for qkind, table in asked:
                text, template = self.fill.pick(f"{attr}.{table}", getattr(a, table), {"name": self.name})
                gold, other = (current, stale) if qkind == "present" else (stale, current)
                out.append(Question(self.user_id, scope, qkind, attr, text, gold.event_id,
                                    other.event_id if qkind == "present" else None,
                                    other.event_id if qkind == "past" else None, None, kind, cross, template))
        for conv in self.conversations:
            for t in conv.turns:
                if t.kind != "lookalike" or t.attribute is None or len(self.history.get(t.attribute, [])) != 1:
                    continue
                stated = self.history[t.attribute]
                a = BY_NAME[t.attribute]
                text, template = self.fill.pick(f"{a.name}.now", a.now, {"name": self.name})
                out.append(Question(self.user_id, scope, "stable", a.name, text, stated[0][1].event_id, None, None,
                                    t.event_id, None, False, template))
        return out


def generate(conversations: int = 12, wordings: Wordings = "all", seed: int = 7, turns: int = TURNS,
             attributes: Collection[str] | None = None) -> Dataset:
    """``conversations`` conversations of about ``turns`` turns (at least :data:`MIN_TURNS`): every third person
    has two (the second a later session of the same ``user_id`` that updates attributes of the
    first), the others one; people state only ``attributes`` (names of :data:`ATTRIBUTES`; None:
    all, :mod:`jevmem.bench.folds`). Deterministic in its arguments."""
    if wordings not in WORDINGS:
        raise ValueError(f"wordings must be one of {WORDINGS}, not {wordings!r}")
    if conversations < 1:
        raise ValueError("conversations must be at least 1")
    pool = _pool(attributes)
    convs: list[Conversation] = []
    questions: list[Question] = []
    u = 0
    while len(convs) < conversations:
        left = conversations - len(convs)
        n_conv = 2 if u % 3 == 2 and left >= 2 else 1
        p = _Person(random.Random(f"{seed}:{wordings}:{u}"), wordings, u, n_conv, turns, pool)
        p.plan()
        convs += p.conversations
        questions += p.questions()
        u += 1
    return Dataset(convs, questions, wordings)


def _pool(attributes: Collection[str] | None) -> tuple[Attribute, ...]:
    """The :data:`ATTRIBUTES` named in ``attributes`` (all: None); ValueError when fewer than three."""
    if attributes is None:
        return ATTRIBUTES
    pool = tuple(a for a in ATTRIBUTES if a.name in attributes)
    if len(pool) < 3:
        raise ValueError(f"at least three attributes of {[a.name for a in ATTRIBUTES]} are needed, not {sorted(attributes)}")
    return pool
