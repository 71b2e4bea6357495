"""The learned update judge of the ``local`` backend: p(updates) for an (older, newer) pair.

The relation task's ``updates`` Noul asks whether the newer memory replaces what the older one
stated as currently true about the same person and attribute ("I moved to Lisbon" after "I live
in Porto"; not "My sister lives in Madrid" after "I live in Madrid", nor a restatement, nor
another attribute, nor someone else's turn). The answer is a logistic regression over
:data:`UPDATE_FEATURES`, pair features that do not depend on the embedding model:

- *who*: same speaker; the subject of each text (its speaker when it speaks in the first person,
  a named third party or a relative of the speaker when one is the subject; :func:`analyse`)
  and whether the two subjects are the same person; the speakers' roles;
- *what*: whether each text states an attribute-like fact (copula, possession, location,
  employment patterns) and which attribute families its words touch (:data:`SLOTS`), so whether
  both speak of the same slot;
- *value*: the content words the texts share and the ones each has alone (a new value and a
  lost one), their capitalised names;
- *how*: change cues ("moved", "now", "no longer", ...), negation on one side only, questions;
- *when*: the turn gap and the hours between them;
- *which attribute*, from the embedder: how far the two are about the same attribute of a person
  (the state's ``attribute``, :mod:`topology.systemone.attributes`), or that this is unknown;
- products of the subject match, the slot match and the value change, so a linear model can
  ask for all three at once.

Hand-written cue lists are features only: the decision is the fitted weights. The weights are a
JSON document (:data:`SHIPPED`) written by ``scripts/train_update_judge.py`` from the training
wordings of :mod:`jevmem.bench.updates_data` (pairs: :mod:`jevmem.bench.update_pairs`) and validated there on held-out wordings; the
attribute feature is fitted under one embedder (:func:`attributes_embedder`). The fit weighs
the two classes equally, so 0.5 means the features are as likely for an update as for another
pair of the same families.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, ClassVar

import numpy as np

from topology.systemone.features import RelationState
from topology.systemone.folded import cue, fold
from topology.systemone.logistic import LogisticModel, fit_balanced
from topology.text import STOPWORDS, stem

#: The package file holding the shipped weights.
SHIPPED = "update_model.json"

#: Characters of a text the cues read: an update is a sentence, a long paste costs no more.
MAX_CHARS = 1000
#: Turn gap (log scale) and hours (log scale) are capped here: beyond, time says nothing more.
MAX_LOG_GAP = math.log1p(1000)
MAX_LOG_HOURS = math.log1p(24 * 365)

#: Features read whatever the subjects are: who speaks, about whom, in which role, asking or not.
WHO_FEATURES: tuple[str, ...] = (
    "same_speaker",
    "subject_match",
    "other_older",
    "other_newer",
    "question_older",
    "question_newer",
)
#: Features read only through the gate (both statements by users, about one and the same person):
#: what the two texts say of that person, so a linear model judges *what* only once *who* holds.
GATED_FEATURES: tuple[str, ...] = (
    "gate",
    "fact_older",
    "fact_newer",
    "slot_older",
    "slot_newer",
    "same_slot",
    "slot_conflict",
    "same_shape",
    "slots_equal",
    "no_link",
    "content_dice",
    "value_shared",
    "value_new",
    "value_lost",
    "value_changed",
    "caps_changed",
    "caps_shared",
    "caps_mismatch",
    "kept_plain",
    "cue_newer",
    "cue_older",
    "still_newer",
    "negation_mix",
    "link_change",
    "log_gap",
    "log_hours",
    "attribute",
    "attribute_unknown",
)
#: The pair features, in model order.
UPDATE_FEATURES: tuple[str, ...] = WHO_FEATURES + tuple(f"gated_{f}" if f != "gate" else f for f in GATED_FEATURES)


FIRST_PERSON = cue(r"\b(?:i|i'm|i've|i'd|i'll|me|my|mine|myself|we|we're|we've|our)\b")
#: First-person words that open a clause about the speaker (not "me": "just like me, my sister ...").
FIRST_SUBJECT = cue(r"\b(?:i|i'm|i've|i'd|i'll|my|we|we're|we've|our)\b")
#: The speaker alone (not "we"): a first-person subject beside a third party makes a text about
#: the speaker too ("Rufus signed off my holiday"; not "my cousin orders it when we go out").
SINGULAR_FIRST = cue(r"\b(?:i|i'm|i've|i'd|i'll|my|me)\b")
#: The speaker as a subject or an owner, not as an object: beside a relative named by relation
#: ("my mum texts me from a Xperia", "just like me, my sister adores dumplings") "me" is the
#: relative's object, and the text states the relative's attribute, not the speaker's.
SPEAKER_SUBJECT = cue(r"\b(?:i|i'm|i've|i'd|i'll|my)\b")
#: Continuity: the newer text says the old state holds ("still", "as usual", "same ... as").
STILL = cue(r"\b(?:still|as usual|as always|as ever|same|again|another|remains?|nothing new|never lets)\b")
#: The listener as whose a text may state something: "your", "you're", ..., or "you" opening a
#: clause ("You live in Lisbon", "and you said"). "You" after a verb or a preposition is an object,
#: often the generic one ("the trainers there really push you"), and says nothing of whose it is.
SECOND_PERSON = cue(r"\b(?:your|yours|you're|you've|you'd|you'll)\b|(?:^|[.!?;:,]\s*|\b(?:and|but|so|or|if|when|because|"
                    r"that|do|did|are|were|have|had|can|could|will|would|should)\s+)you\b")
#: Relatives and acquaintances a speaker talks about by relation.
KIN_WORDS = frozenset(
    """sister brother dad father mum mom mother parents cousin aunt uncle friend colleague coworker
    neighbour neighbor flatmate roommate son daughter niece nephew grandma grandmother grandpa grandfather wife
    husband girlfriend boyfriend""".split()
)
#: A relative or acquaintance of the speaker as the subject ("my sister lives", "my colleague
#: Piet's car"), unless the copula names a value ("my partner is Sofia": the speaker's attribute).
KIN = re.compile(
    r"\b(?:[Mm]y|[Oo]ur)\s+(?:(?:older|younger|little|big|best|old|twin)\s+)?"
    rf"({'|'.join(sorted(KIN_WORDS))})\b(?:\s+([A-Z][\w-]+))?(?!\s+(?:is|was)\s+[A-Z])"
)
#: A name as a subject: before a verb in the third person or the past ("Piet lives", "Soraya
#: switched", "Ezra has"), before "is" or "was" saying what the name is ("Gideon is a member at
#: ...", "Gideon is obsessed with ..."), or opening a clause in the possessive ("Soraya's phone
#: ..."). Not before "is" naming the speaker or a value ("Lotte is my partner", "Home is
#: Valencia", "Ironworks is where I train": a value of the speaker's).
NAMED = re.compile(
    r"\b([A-Z][a-z]+)\s+(?:(?!is\b|was\b|this\b|its\b|as\b|us\b|yes\b|news\b)[a-z]+(?:s|ed)|has|had|just|got|went|"
    r"took|left|quit|could|will|would|can|never|also|still|"
    r"(?:is|was)(?=\s+(?!my\b|our\b|mine\b|me\b|i\b|where\b|how\b|what\b|why\b|when\b|who\b|the\s+one\b)[a-z]))\b"
    r"|(?:^|[.!?;,:]\s+|\band\s+)([A-Z][a-z]+)'s\b"
)
#: Verbs that make a sentence's first word its subject ("Piet lives ..."), as does "is"/"was"
#: (see :data:`NAMED`) or a word in the past ("Gideon borrowed ...") after a first word that is no
#: verb itself ("Started classes", "Booked flights"); elsewhere any verb-like word does ("Turns out
#: Ezra works ..."): a capitalised first word is often no name ("Big news").
OPENING_VERBS = frozenset(
    """lives works drives has had loves likes uses owns trains goes does says thinks plays wants
    prefers reports rents dates texts teaches spends moved got went took left quit just could will would can never
    also still""".split()
)
#: A capitalised word where no subject stands: right after a preposition it is a place or a
#: venue ("living in Cork has ..."); after an article or a possessive (and other capitalised
#: words) it is part of a thing's name ("The Honda Civic is going strong", "my Pixel 8").
NO_SUBJECT_BEFORE = re.compile(
    r"\b(?:(?:[Ii]n|[Aa]t|[Tt]o|[Ff]rom|[Nn]ear|[Ff]or|[Ww]ith|[Oo]n|[Bb]y|[Oo]f|[Aa]round|[Tt]hrough)\s+(?:the\s+)?"
    r"|(?:[Tt]he|[Aa]n?|[Mm]y|[Oo]ur|[Tt]his|[Tt]hat)\s+)(?:[A-Z][\w-]*\s+)*$"
)
NAME_LIKE = re.compile(r"\b\w*[A-Z0-9][\w-]*")
NAME_GOES_ON = re.compile(r"(?:'s\b|\s+(?:[A-Z]|is\b|and\b|isn't\b|was\b))")
#: "my <relation> <Name>" before the name a subject reading found ("My bandmate Rosa plays ...",
#: "our landlord Mr Price has ..."): the "my" belongs to the name's relation to the speaker, so the
#: name is the subject whatever the relation is called, not only the relatives of KIN_WORDS.
APPOSITION = re.compile(r"\b(?:[Mm]y|[Oo]ur)\s+(?:[a-z]+\s+){1,2}$")
PRONOUN = cue(r"(?:^|[.!?;,]\s+)(?:he|she|they)\b")
QUESTION = cue(r"\?\s*$|^\s*(?:who|what|where|when|which|why|how|do|does|did|are|is|can|could|would|remind)\b")
NEGATION = cue(r"\b(?:not|no|never|don't|doesn't|didn't|isn't|wasn't|won't|can't|aren't|nor)\b|n't\b")
CUE = cue(
    r"\b(?:now|anymore|any more|no longer|changed|change|switched|switch|moved|new|instead|used to|"
    r"these days|recently|lately|left|quit|sold|replaced|started|gone|gave up|dropped|took up|took over|"
    r"split|broke up|upgraded|traded|joined|relocated|at the moment)\b"
)
FACT = cue(
    r"\b(?:is|are|am|'s|'m)\b|\b(?:i|we)\s+(?:have|own|use|do|go|live|work|drive|train|eat)\b|"
    r"\bmy\s+\w+|\b(?:in|at|for|with)\s+[a-z]|\bwork(?:s|ing)?\s+(?:at|for|as)\b"
)
#: Attribute families a fact can be about (their words are slot words, not values).
SLOTS: dict[str, re.Pattern[str]] = {
    "residence": cue(
        r"\b(?:live[sd]?|living|moved?|moving|relocat\w*|flat|apartment|house|home|city|town|"
        r"neighbou?rs?|neighbou?rhood|landlord|rent\w*|address|based)\b"
    ),
    "work": cue(
        r"\b(?:work(?:s|ed|ing)?(?!\s+out)|jobs?|employe[rd]|company|firm|hired|joined|office|colleagues?|"
        r"payroll|career|position|desk)\b"
    ),
    "manager": cue(r"\b(?:manager|boss|supervisor|lead|reports?|reporting|one-to-ones?|review)\b"),
    "vehicle": cue(r"\b(?:drive[sn]?|driving|drove|cars?(?!\s+park)|vehicle|park(?:ed|ing)|mileage|roads?|traded)\b"),
    "food": cue(
        r"\b(?:food|dish(?:es)?|eat(?:s|ing)?|ate|cuisine|meals?|menu|restaurants?|dinner|lunch|"
        r"cook(?:s|ing)?|delicious|taste)\b"
    ),
    "partner": cue(
        r"\b(?:partner|dat(?:e|es|ed|ing)|girlfriend|boyfriend|wife|husband|seeing|together|"
        r"couple(?!\s+of)|relationship|married|engaged|split(?:\s+up|\s+from)|broke(?:\s+up|\s+off))\b"
    ),
    "phone": cue(r"\b(?:phones?|mobile|smartphone|screen|battery|camera|texts?|apps?)\b"),
    "gym": cue(
        r"\b(?:gyms?|training|(?<!the\s)(?<!\ba\s)trains?|workouts?|work out|fitness|membership|member|lift(?:ing)?|"
        r"class(?:es)?|sessions?|sauna|trainers?)\b"
    ),
    "hobby": cue(
        r"\b(?:hobby|hobbies|pastime|spare time|free time|unwind|relax|course|"
        r"took up|taken up|into)\b"
    ),
}
#: Shapes of a stated value (case-sensitive): a place ("in Lisbon"), an organisation or venue
#: ("at Brightwater Labs", "for Tidewell"), a named thing ("a Tesla", "my Pixel 8"), a person
#: ("with Sofia", "to Jonas"). Two texts whose values have the same shape may state one attribute.
SHAPES: dict[str, re.Pattern[str]] = {
    "place": re.compile(r"\b(?:in|to|from|near|around|through|across)\s+[A-Z][a-z]"),
    "organisation": re.compile(r"\b(?:at|for|joined|by|with)\s+(?:the\s+)?[A-Z][a-z]+\s+[A-Z]"),
    "thing": re.compile(r"\b(?:a|an|my|the|this|that|our)\s+[a-z]?[A-Z][\w-]*(?:\s+[A-Z0-9][\w-]*)?"),
    "person": re.compile(r"\b(?:with|to|and|under|dating|seeing|is|boss,?|manager,?)\s+[A-Z][a-z]+\b(?!\s+[A-Z])"),
}
#: Words of time ("this weekend", "all day"): when something was said, never a stated value.
TIME_WORDS = frozenset(
    """day days week weeks weekend weekends month months year years morning mornings evening
    evenings night nights today tonight yesterday tomorrow time times hour hours minute minutes ago last next
    monday tuesday wednesday thursday friday saturday sunday""".split()
)
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_NOT_NAMES = frozenset(
    """I I'm I've I'd I'll My Our We You Your He She They It It's This That These Those There Here
    The A An And But So Or If Then Let Just Actually Still Yes Yep Yeah Oh Ooh Ah Ha Haha Wow Well Sure Okay Ok No Not
    Nothing Everything Something Anything Everyone Someone Anyone Nobody Somebody Everybody Each Every Another One
    Some All Both Most Many Few Finally Lately Recently Honestly Anyway Apparently Obviously Clearly Luckily Sadly
    Hopefully Basically Seriously Today Tonight Yesterday Tomorrow Now Then Also Maybe Perhaps Again Once
    Where What Who Whom Whose Which How When Why Is Are Was Were Do Does Did Can Could Would Should Will Has Have
    Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February March April May June July August
    September October November December""".split()
)
#: The speaker of a pair whose state says one person said both without naming them.
UNNAMED = "<same speaker>"
_USER_ROLES = frozenset({"user", "human", "customer", ""})


@dataclass(frozen=True, slots=True)
class Text:
    """What the update judge reads in one text: first person, the third party it is about
    (``other``: a kin word, a name, ``"pronoun"``; empty when none; ``also_first``: a first-person
    subject besides it), question, negation, change
    cue, a fact pattern, the slot families, content words (slot and cue words left out) and the
    capitalised names."""

    first: bool
    other: str
    also_first: bool
    second: bool
    question: bool
    negated: bool
    cue: bool
    still: bool
    fact: bool
    slots: frozenset[str]
    shapes: frozenset[str]
    values: frozenset[str]
    caps: frozenset[str]

    @property
    def worded_as_fact(self) -> bool:
        """A fact pattern, an attribute's words, a stated value's shape or a change cue ("I need
        a holiday, honestly." has none)."""
        return self.fact or bool(self.slots) or bool(self.shapes) or self.cue


@functools.lru_cache(maxsize=16384)
def analyse(text: str) -> Text:
    """The cues of one text (cached: a memory is judged against many others)."""
    t = text[:MAX_CHARS]
    low = fold(t)  # what the case-insensitive cues read (same positions as ``t``)
    # the subject is the one that comes first: the speaker (first person), a relative, a name, a pronoun
    found: list[tuple[int, int, str]] = []
    apposed: re.Match[str] | None = None
    if kin := KIN.search(t):
        found.append((kin.start(), 0, (kin.group(2) or kin.group(1)).lower()))
    mine = [m.start() for m in FIRST_SUBJECT.finditer(low) if not (kin and kin.start() <= m.start() < kin.end())]
    if mine:
        found.append((mine[0], 1, ""))
    if named := next(
        (
            m
            for m in NAMED.finditer(t)
            if (m.group(1) or m.group(2)) not in _NOT_NAMES
            and not NO_SUBJECT_BEFORE.search(t, 0, m.start())
            and (m.group(2) or not _opens(t, m.start()) or _opening_verb(m.group(1), t[m.end(1) : m.end()].split()[0]))
        ),
        None,
    ):
        found.append((named.start(), 2, (named.group(1) or named.group(2)).lower()))
        if (apposed := APPOSITION.search(t, 0, named.start())) is not None:  # not the speaker's own "my"
            mine = [p for p in mine if not apposed.start() <= p < apposed.end()]
            found = [f for f in found if f[1] != 1] + ([(mine[0], 1, "")] if mine else [])
            kin = kin if kin is not None and not apposed.start() <= kin.start() < apposed.end() else None
    if pronoun := PRONOUN.search(low):
        found.append((pronoun.start(), 3, "pronoun"))
    first_found = min(found) if found else None
    other = first_found[2] if first_found else ""
    # beside a relative as the subject, "me" is its object (see SPEAKER_SUBJECT)
    speaker_cue = SPEAKER_SUBJECT if first_found is not None and first_found[1] == 0 else SINGULAR_FIRST
    caps = names(t)
    return Text(
        first=bool(FIRST_PERSON.search(low)),
        other=other,
        also_first=bool(other) and any(not (kin and kin.start() <= m.start() < kin.end()) and not (
            apposed and apposed.start() <= m.start() < apposed.end()) for m in speaker_cue.finditer(low)),
        second=bool(SECOND_PERSON.search(low)),
        question=bool(QUESTION.search(low)),
        negated=bool(NEGATION.search(low)),
        cue=bool(CUE.search(low)),
        still=bool(STILL.search(low)),
        fact=bool(FACT.search(low)),
        slots=frozenset(k for k, p in SLOTS.items() if p.search(low)),
        shapes=frozenset(k for k, p in SHAPES.items() if p.search(t)),
        values=value_words(t),
        caps=caps,
    )


def _opening_verb(first: str, verb: str) -> bool:
    """Whether ``verb`` after a sentence's first word ``first`` makes ``first`` its subject
    (:data:`OPENING_VERBS`)."""
    if verb in OPENING_VERBS or verb in ("is", "was"):
        return True
    return verb.endswith("ed") and not first.lower().endswith(("ed", "ing", "s"))


def _opens(text: str, at: int) -> bool:
    """Whether position ``at`` opens a sentence of ``text``."""
    return text[:at].rstrip()[-1:] in ("", ".", "!", "?", ":", ";")


def names(text: str) -> frozenset[str]:
    """Name-like words of ``text`` (lowercased): capitalised or mixed-case words and numbers
    ("Lisbon", "iPhone", "8"), the first word of a sentence only when a name would continue it
    (another capitalised word, "is", "and", "'s": "Lotte is my partner", "Core Collective ...")."""
    out = set()
    for m in NAME_LIKE.finditer(text):
        word = m.group(0)
        if word in _NOT_NAMES or not (any(c.isupper() for c in word) or word.isdigit()):
            continue
        if text[: m.start()].rstrip()[-1:] in ("", ".", "!", "?", ":", ";") and not NAME_GOES_ON.match(text, m.end()):
            continue
        out.add(word.lower())
    return frozenset(out)


def value_words(text: str) -> frozenset[str]:
    """Content words of ``text`` that are neither slot words (:data:`SLOTS`) nor change cues:
    what a value ("Lisbon", "ramen", "pottery") is made of. Lowercased, lightly stemmed."""
    return frozenset(v for word in _WORD.findall(CUE.sub(" ", text.lower())) if (v := _value_word(word)))


@functools.lru_cache(maxsize=65536)
def _value_word(word: str) -> str:
    """The stem of ``word`` when it can be part of a value (see :func:`value_words`), else ""."""
    word = word.removesuffix("'s")
    if (
        word in STOPWORDS
        or word in KIN_WORDS
        or word in TIME_WORDS
        or word.endswith("ly")  # an adverb ("finally", "honestly") says how, not what
        or len(word) < 2
        or CUE.fullmatch(word)
        or any(p.fullmatch(word) for p in SLOTS.values())
    ):
        return ""
    return stem(word)


def subjects(text: Text, speaker: str) -> frozenset[str]:
    """Whose attribute ``text`` may state: ``person:<name>`` (a named third party, or the speaker:
    in the first person or with no other subject), ``kin:<word>@<speaker>`` (a relative named by
    kind). A text with a third party and a first-person subject as well ("Rufus signed off my
    holiday", "Marisol moved on, so Claire is my boss") may be about either. Empty: unknown (a
    pronoun or only the second person, or no speaker)."""
    me = frozenset({f"person:{speaker.lower()}"}) if speaker else frozenset()
    if text.other == "pronoun":
        return me if text.also_first else frozenset()
    if text.other:
        them = f"kin:{text.other}@{speaker.lower()}" if text.other in KIN_WORDS else f"person:{text.other}"
        return frozenset({them}) | (me if text.also_first else frozenset())
    return me if text.first or not text.second else frozenset()


def _dice(a: frozenset[str], b: frozenset[str]) -> float:
    return 2 * len(a & b) / (len(a) + len(b)) if a or b else 0.0


#: The gated features of a pair whose gate is closed.
_UNGATED: list[float] = [0.0] * len(GATED_FEATURES)


#: An answer at least this high is checked sentence by sentence (:meth:`UpdateModel.answer`);
#: below it the check could only lower an answer no edge is made of.
SENTENCE_CHECK = 0.5
#: Sentences of a text read by the sentence check: its first ones (a chat turn states its news first).
MAX_SENTENCES = 4
#: A sentence ends after ".", "!" or "?" before a capital, but not after an initial ("N. K.
#: Jemisin") or a title ("Dr. Patel").
_SENTENCE_END = re.compile(r"(?<=[.!?])(?<!\b[A-Z]\.)(?<!\b(?:Dr|Mr|Ms|St)\.)(?<!\bMrs\.)\s+(?=[A-Z\"'\[(])")


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` (split after ".", "!" or "?" before a capital, not after an
    initial or a title), at most
    :data:`MAX_SENTENCES`; the text itself when it is one sentence."""
    parts = [p for p in _SENTENCE_END.split(text.strip()) if p.strip()]
    return parts[:MAX_SENTENCES] if len(parts) > 1 else [text]


def sentence_pairs(st: RelationState) -> list[tuple[str, str]]:
    """(older sentence, newer sentence) for every pair of the two texts' :func:`sentences`;
    empty when both texts are single sentences."""
    older, newer = sentences(st.older), sentences(st.newer)
    if len(older) == 1 and len(newer) == 1:
        return []
    return [(o, n) for n in newer for o in older]


def update_features(st: RelationState) -> list[float]:
    """The feature vector of one (older, newer) pair, in :data:`UPDATE_FEATURES` order. With a
    ``question`` (a pair judged at recall), the words the question asks with are what both texts
    are about, not values (:func:`asked_about`): "My favourite band is Radiohead." then "My
    favourite band is Fontaines D.C." for "What's my favourite band?" share no value, as "I live
    in Lisbon" and "I moved to Porto" share none (the slot words of :data:`SLOTS` are no values
    either)."""
    return _features(st, analyse(st.older), analyse(st.newer))


def asked_about(text: Text, question: str) -> Text:
    """``text`` without the words of ``question`` among its values and names (``question``
    empty: ``text`` itself)."""
    if not question:
        return text
    values, words = _asked_words(question)
    return dataclasses.replace(text, values=text.values - values, caps=text.caps - words)


@functools.lru_cache(maxsize=256)
def _asked_words(question: str) -> tuple[frozenset[str], frozenset[str]]:
    """The value words and the lowercased words of ``question`` (read once for all its pairs)."""
    return value_words(question), frozenset(_WORD.findall(question.lower()))


def _features(st: RelationState, old: Text, new: Text) -> list[float]:
    """:func:`update_features` of ``st`` with the analysed texts ``old`` and ``new`` (the
    state's own, or one sentence of each; its speakers, roles and times kept)."""
    old, new = asked_about(old, st.question), asked_about(new, st.question)
    same_speaker = st.same_speaker or (bool(st.older_speaker) and st.older_speaker == st.newer_speaker)
    # a caller that names no speakers but says one person said both (an older state) still has one speaker
    older_speaker = st.older_speaker or (UNNAMED if st.same_speaker and not st.newer_speaker else "")
    newer_speaker = st.newer_speaker or (UNNAMED if st.same_speaker and not st.older_speaker else "")
    match = 1.0 if subjects(old, older_speaker) & subjects(new, newer_speaker) else 0.0
    user_old, user_new = float(st.older_role.lower() in _USER_ROLES), float(st.newer_role.lower() in _USER_ROLES)
    who = [
        1.0 if same_speaker else 0.0,
        match,
        float(bool(old.other)),
        float(bool(new.other)),
        float(old.question),
        float(new.question),
    ]
    # both are statements by users about one person
    gate = match * user_old * user_new * (1.0 - float(old.question)) * (1.0 - float(new.question))
    if not gate:  # every gated feature is gate times a finite value
        return who + _UNGATED
    shared = old.values & new.values
    gained, lost = new.values - old.values, old.values - new.values
    link = bool(old.slots & new.slots or old.shapes & new.shapes or shared or old.caps & new.caps)
    change = bool((gained and lost) or (new.caps - old.caps) or new.cue)
    hours = 0.0 if st.hours is None else min(MAX_LOG_HOURS, math.log1p(max(0.0, st.hours)))
    attribute = st.attribute or 0.0
    what = [
        1.0,
        float(old.fact),
        float(new.fact),
        float(bool(old.slots)),
        float(bool(new.slots)),
        float(bool(old.slots & new.slots)),
        float(bool(old.slots) and bool(new.slots) and not old.slots & new.slots),
        float(bool(old.shapes & new.shapes)),
        float(bool(old.slots) and old.slots == new.slots),
        float(not link),
        _dice(old.values, new.values),
        len(shared) / max(1, min(len(old.values), len(new.values))),
        len(gained) / max(1, len(new.values)),
        len(lost) / max(1, len(old.values)),
        float(bool(gained and lost)),
        float(bool(old.caps - new.caps) and bool(new.caps - old.caps)),
        float(bool(old.caps & new.caps)),
        float(bool(old.caps - new.caps) != bool(new.caps - old.caps)),
        float(bool(shared) and not new.cue and old.negated == new.negated),
        float(new.cue),
        float(old.cue),
        float(new.still),
        float(old.negated != new.negated),
        float(link and change),
        min(MAX_LOG_GAP, math.log1p(max(0, st.gap))),
        hours,
        attribute,
        float(st.attribute is None),
    ]
    return who + [gate * v for v in what]


@dataclass(frozen=True)
class UpdateModel(LogisticModel):
    """p(update) over :data:`UPDATE_FEATURES` (:class:`~topology.systemone.logistic.LogisticModel`)."""

    FEATURES: ClassVar[tuple[str, ...]] = UPDATE_FEATURES
    FEATURES_NAME: ClassVar[str] = "UPDATE_FEATURES"
    WHAT: ClassVar[str] = "update"

    def answer(self, states: list[RelationState]) -> list[float]:
        """p(update) for parsed relation states, one evaluation for the batch, then one for the
        sentence pairs of :func:`sentence_pairs`: where a pair's answer is at least
        :data:`SENTENCE_CHECK` and a text has more than one sentence, the answer is at most that of
        its best pair of single sentences (one of each text). The judge reads one-sentence
        statements; on two long chat turns its cues add up across sentences that say nothing
        of each other (a shared word in one, a new word in another)."""
        if not states:
            return []
        rows = np.asarray([update_features(st) for st in states], dtype=np.float64)
        out = [float(p) for p in self.probabilities(rows)]
        split: list[tuple[int, list[tuple[str, str]]]] = []
        for i, (st, p) in enumerate(zip(states, out, strict=True)):
            if p >= SENTENCE_CHECK and (parts := sentence_pairs(st)):
                split.append((i, parts))
        if split:
            flat = [_features(states[i], analyse(o), analyse(n)) for i, parts in split for o, n in parts]
            ps = self.probabilities(np.asarray(flat, dtype=np.float64))
            at = 0
            for i, parts in split:
                out[i] = min(out[i], float(ps[at: at + len(parts)].max()))
                at += len(parts)
        return out

    @classmethod
    def shipped(cls) -> UpdateModel:
        """The weights shipped in the package (read once per process)."""
        return _shipped()


def attributes_embedder() -> str:
    """The embedder whose attribute similarities the shipped weights were fitted on (its
    ``name``; "" when they read none)."""
    return str(_shipped().meta.get("embedder", ""))


@functools.cache
def _shipped() -> UpdateModel:
    return UpdateModel.from_json(resources.files("topology.systemone").joinpath(SHIPPED).read_bytes())


def fit(x: np.ndarray, y: np.ndarray, l2: float = 1.0, iters: int = 50, meta: dict[str, Any] | None = None) -> UpdateModel:
    """:func:`~topology.systemone.logistic.fit_balanced` over :data:`UPDATE_FEATURES`."""
    fitted = fit_balanced(x, y, len(UPDATE_FEATURES), l2, iters, "training pairs need both updates and other pairs")
    return UpdateModel(UPDATE_FEATURES, *fitted, meta or {})
