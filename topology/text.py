"""Text features of a memory: content tokens, entities and grounded temporal references.

All functions are pure and deterministic. Entity recognition is rule-based (capitalised
phrases, producer-supplied entities, speaker names); temporal expressions are grounded against
the observation time: "yesterday" in a message dated 8 May 2023 is 7 May 2023.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterable
from datetime import date, timedelta

from topology.schemas import Entity, TemporalRef

STOPWORDS = frozenset(
    """a about above after again against all am an and any are aren't as at be because been before
    being below between both but by can can't cannot could couldn't did didn't do does doesn't doing
    don't down during each few for from further had hadn't has hasn't have haven't having he he'd
    he'll he's her here here's hers herself him himself his how how's i i'd i'll i'm i've if in into
    is isn't it it's its itself let's me more most mustn't my myself no nor not of off on once only
    or other ought our ours ourselves out over own same shan't she she'd she'll she's should
    shouldn't so some such than that that's the their theirs them themselves then there there's
    these they they'd they'll they're they've this those through to too under until up very was
    wasn't we we'd we'll we're we've were weren't what what's when when's where where's which while
    who who's whom why why's with won't would wouldn't you you'd you'll you're you've your yours
    yourself yourselves just also really yeah yes oh hey hi hello wow thanks thank lot got get
    gets going go like well much many still even ever way thing things something anything
    definitely totally always sure know think feel one lots bit kind pretty super""".split()
)

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_CAP_PHRASE = re.compile(r"\b([A-Z][a-zA-Z0-9'&-]+(?:\s+(?:of\s+|the\s+|de\s+)?[A-Z][a-zA-Z0-9'&-]+)*)")
_SENTENCE_START = re.compile(r"(?:^|[.!?]\s+|\n)\s*[\"'(]?$")
_NOT_ENTITIES = frozenset(
    """I I'm I'd I've I'll Hey Hi Hello Wow Oh Yeah Yes No Thanks Thank Sure Ok Okay Great Good
    Nice Awesome Cool That's That This These Those It It's What When Where Why How Who Which My
    Me We We're You You're Your They Their He She His Her Our Also And But So Or If Then Well
    Just Sounds Glad Love Haha Congrats Congratulations Anyway Definitely Totally Absolutely
    Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February March April May June
    July August September October November December Today Yesterday Tomorrow Last Next Have Did
    Do Does Are Is Was Were Can Could Would Should Will Let Let's Take Keep Stay Thank Mom Dad""".split()
)


def stem(word: str) -> str:
    """A light suffix stripper: enough to match plurals and simple verb forms."""
    for suffix, repl in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: len(word) - len(suffix)] + repl
    return word


MAX_TOKEN = 64  # longer "words" (hashes, runs of one letter) are not content: keyword indexes cap term size
MAX_ENTITY = 200


def tokens(text: str) -> list[str]:
    """Content tokens: lowercased, stopwords removed, lightly stemmed, order kept, duplicates kept;
    tokens outside 2..``MAX_TOKEN`` characters are dropped."""
    out = []
    for tok in _TOKEN.findall(text.lower()):
        tok = tok.removesuffix("'s")
        if tok in STOPWORDS or not 2 <= len(tok) <= MAX_TOKEN:
            continue
        out.append(stem(tok))
    return out


def entity_id(name: str) -> str:
    """Exact entity id: the normalised surface form."""
    return "ent:" + re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def opens_sentence(text: str, start: int) -> bool:
    """Whether ``text[start:]`` opens a sentence: ``text[:start]`` is empty or ends with a sentence
    end (``.!?`` then whitespace) or a newline, then optional whitespace and an optional opening
    quote or parenthesis. Equal to ``_SENTENCE_START.search(text[:start])``, but it reads only the
    tail of the prefix (the regex scanned the whole prefix for every phrase: quadratic)."""
    i = start
    if i > 0 and text[i - 1] in "\"'(":
        i -= 1
    k = i
    while k > 0 and text[k - 1].isspace():
        k -= 1
    if k == 0 or "\n" in text[k:i]:
        return True
    return k < i and text[k - 1] in ".!?"


def entities(text: str, extra: Iterable[str] = ()) -> list[Entity]:
    """Entities in ``text`` plus ``extra`` names (producer-supplied, speaker), deduplicated by id.

    Capitalised phrases count unless they open a sentence and are common words.
    """
    found: dict[str, Entity] = {}
    for name in extra:
        name = name.strip()
        if name:
            found.setdefault(entity_id(name), Entity(id=entity_id(name), name=name))
    for m in _CAP_PHRASE.finditer(text):
        name = m.group(1).strip("'-&")
        words = name.split()
        while words and words[0] in _NOT_ENTITIES:
            words = words[1:]
        while words and words[-1] in _NOT_ENTITIES:
            words = words[:-1]
        if words and opens_sentence(text, m.start()):
            while words and _opens_only(words[0]):
                words = words[1:]  # "Seeing Caroline" -> "Caroline"
        if not words or (len(words) == 1 and words[0].lower() in _INTERJECTIONS):
            continue
        name = " ".join(words)
        if name.lower() in STOPWORDS or not 2 <= len(name) <= MAX_ENTITY:
            continue
        found.setdefault(entity_id(name), Entity(id=entity_id(name), name=name))
    return sorted(found.values(), key=lambda e: e.id)


_COMMON_OPENERS = frozenset(
    "sorry absolutely actually after before during maybe sometimes probably honestly seriously "
    "speaking thinking talking there here now right yep nope true "
    # discourse words and verbs that open a sentence
    "plus check see look looks agreed exactly indeed anyway anyways besides meanwhile otherwise still even "
    "though although because while once usually recently lately finally especially hopefully luckily "
    "thankfully unfortunately fortunately must bet remember never believe enjoy talk appreciate precious buddy "
    "long since".split()
)


#: Interjections and chat shorthand: never a name, wherever they stand.
_INTERJECTIONS = frozenset(
    "aw aww awww yup yep nope yay woah whoa oof ugh hmm omg lol btw ttyl bye cheers hugs gotta gonna wanna".split()
)


def _opens_only(word: str) -> bool:
    """Whether a capitalised ``word`` opening a sentence is a common word, not a name: a listed
    opener, a gerund ("Seeing", "Taking"), or a contraction of a stopword ("It'll")."""
    low = word.lower()
    if low in _COMMON_OPENERS or low in _INTERJECTIONS or low in STOPWORDS:
        return True
    if len(low) >= 6 and low.endswith("ing"):
        return True
    base, apostrophe, _ = low.partition("'")
    return bool(apostrophe) and (base in STOPWORDS or base in _COMMON_OPENERS or base.capitalize() in _NOT_ENTITIES)

_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "couple": 2, "a couple of": 2, "few": 3, "a few": 3,
    "several": 3,
}
_WEEKDAYS = {name.lower(): i for i, name in enumerate(calendar.day_name)}
_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})

_REL = re.compile(
    r"\b(?P<expr>today|tonight|this (?:morning|afternoon|evening)|yesterday|last night|"
    r"the day before yesterday|tomorrow|(?:last|this|next|past) (?:week(?:end)?|month|year)|"
    r"last (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)|"
    r"(?P<n>\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|a couple of|couple|a few|few|several)"
    r" (?P<unit>day|week|month|year)s? ago)\b",
    re.IGNORECASE,
)
_ABS = re.compile(
    r"\b(?:(?P<d1>\d{1,2})(?:st|nd|rd|th)? (?P<m1>[A-Z][a-z]+),? (?P<y1>\d{4})|"
    r"(?P<m2>[A-Z][a-z]+) (?P<d2>\d{1,2})(?:st|nd|rd|th)?,? (?P<y2>\d{4})|"
    r"(?P<m3>[A-Z][a-z]+),? (?P<y3>\d{4}))\b"
)


def _month_span(year: int, month: int) -> tuple[date, date]:
    return date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1])


def _shift_month(d: date, months: int) -> date:
    idx = d.year * 12 + d.month - 1 + months
    return date(idx // 12, idx % 12 + 1, 1)


def _relative(expr: str, n: str | None, unit: str | None, ref: date) -> TemporalRef | None:
    e = expr.lower()
    if e in ("today", "tonight") or (e.startswith("this ") and e.split()[1] in ("morning", "afternoon", "evening")):
        return TemporalRef(text=expr, start=ref, end=ref, granularity="day")
    if e in ("yesterday", "last night"):
        d = ref - timedelta(days=1)
        return TemporalRef(text=expr, start=d, end=d, granularity="day")
    if e == "the day before yesterday":
        d = ref - timedelta(days=2)
        return TemporalRef(text=expr, start=d, end=d, granularity="day")
    if e == "tomorrow":
        d = ref + timedelta(days=1)
        return TemporalRef(text=expr, start=d, end=d, granularity="day")
    if unit is not None and n is not None:
        k = int(n) if n.isdigit() else _NUMBERS.get(n.lower(), 1)
        u = unit.lower()
        if u == "day":
            d = ref - timedelta(days=k)
            return TemporalRef(text=expr, start=d, end=d, granularity="day")
        if u == "week":
            d = ref - timedelta(weeks=k)
            return TemporalRef(text=expr, start=d - timedelta(days=d.weekday()),
                               end=d - timedelta(days=d.weekday()) + timedelta(days=6), granularity="week")
        if u == "month":
            s, t = _month_span(*(lambda x: (x.year, x.month))(_shift_month(ref, -k)))
            return TemporalRef(text=expr, start=s, end=t, granularity="month")
        y = ref.year - k
        return TemporalRef(text=expr, start=date(y, 1, 1), end=date(y, 12, 31), granularity="year")
    which, _, what = e.partition(" ")
    if what in _WEEKDAYS:
        back = (ref.weekday() - _WEEKDAYS[what]) % 7 or 7
        d = ref - timedelta(days=back)
        return TemporalRef(text=expr, start=d, end=d, granularity="day")
    offset = {"last": -1, "past": -1, "this": 0, "next": 1}[which]
    if what == "week":
        monday = ref - timedelta(days=ref.weekday()) + timedelta(weeks=offset)
        return TemporalRef(text=expr, start=monday, end=monday + timedelta(days=6), granularity="week")
    if what == "weekend":
        saturday = ref - timedelta(days=ref.weekday()) + timedelta(days=5)
        if offset < 0 or (offset == 0 and ref.weekday() < 5 and which == "last"):
            saturday -= timedelta(weeks=1)
        if offset > 0:
            saturday += timedelta(weeks=1) if ref.weekday() >= 5 else timedelta()
        return TemporalRef(text=expr, start=saturday, end=saturday + timedelta(days=1), granularity="week")
    if what == "month":
        s, t = _month_span(*(lambda x: (x.year, x.month))(_shift_month(ref, offset)))
        return TemporalRef(text=expr, start=s, end=t, granularity="month")
    y = ref.year + offset
    return TemporalRef(text=expr, start=date(y, 1, 1), end=date(y, 12, 31), granularity="year")


def temporal_refs(text: str, observed: date | None) -> list[TemporalRef]:
    """Grounded time expressions in ``text``: absolute dates always, relative ones when the
    observation time is known; expressions that fall outside the calendar are skipped."""
    refs: list[TemporalRef] = []
    for m in _ABS.finditer(text):
        day_s = m.group("d1") or m.group("d2")
        month_s = (m.group("m1") or m.group("m2") or m.group("m3") or "").lower()
        year_s = m.group("y1") or m.group("y2") or m.group("y3")
        month = _MONTHS.get(month_s)
        if month is None or year_s is None:
            continue
        year = int(year_s)
        if day_s:
            try:
                d = date(year, month, int(day_s))
            except ValueError:
                continue
            refs.append(TemporalRef(text=m.group(0), start=d, end=d, granularity="day"))
        else:
            try:
                s, t = _month_span(year, month)
            except ValueError:
                continue
            refs.append(TemporalRef(text=m.group(0), start=s, end=t, granularity="month"))
    if observed is not None:
        for m in _REL.finditer(text):
            try:
                ref = _relative(m.group("expr"), m.group("n"), m.group("unit"), observed)
            except (ValueError, OverflowError):  # "9999 years ago": outside the calendar, not a date
                continue
            if ref is not None:
                refs.append(ref)
    return refs


def tokens_raw(text: str) -> list[str]:
    """Lowercased word tokens without stemming or stopword removal."""
    return _TOKEN.findall(text.lower())


def alias_plausibility(a: str, b: str) -> float:
    """A cheap prior that two entity names co-refer: prefix ("Mel"/"Melanie"), a word of the
    other ("Smith"/"John Smith") or initials ("NYC"/"New York City")."""
    a, b = a.lower().strip(), b.lower().strip()
    short, long_ = sorted((a, b), key=len)
    if not short or short == long_:
        return 0.0 if not short else 1.0
    words = long_.split()
    if (long_.startswith(short) and len(short) >= 3) or short in words:
        return 0.85
    if len(words) > 1 and short == "".join(w[0] for w in words):
        return 0.75
    return 0.05
