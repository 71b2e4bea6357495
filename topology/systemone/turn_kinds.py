"""The turn-kind model of the ``local`` backend: what kind of turn a memory is.

The typing task's ``kind`` Choice asks whether a turn is a *statement* (states a fact about someone
or something), a *question* (asks something), *tool* (a tool call or a tool result), *advice* (a
suggestion or recommendation) or *chatter* (small talk, greetings, thanks, laughter). The local
backend answers it with a multinomial logistic regression over cue features of the text plus the
turn's role (:data:`TURN_FEATURES`, :func:`turn_features`); the role is one feature among many, so
a user who pastes tool output is still typed ``tool`` and an assistant that chats ``chatter``.

A model is a JSON document (labels, feature names, standardisation, a coefficient row and an
intercept per label, ``meta``); the shipped weights (:data:`SHIPPED`) are written by
``scripts/train_turn_kinds.py`` from the generator in :mod:`jevmem.bench.turn_kinds_data` and validated
there on wordings held out of training.

The read path asks a node's kind with :func:`turn_kind` (a pure function of its
:class:`~topology.schemas.TypeScores`).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np
import orjson

from topology.errors import SystemOneError
from topology.schemas import TypeScores
from topology.systemone.folded import cue, fold

#: The labels of the typing task's ``kind`` Choice, in model order.
TURN_KINDS: tuple[str, ...] = ("statement", "question", "tool", "advice", "chatter")

#: The package file holding the shipped weights.
SHIPPED = "turn_kind_model.json"

#: Characters of a turn the cues read: a pasted tool dump is recognised by its start, and a
#: multi-kilobyte text costs no more than this to type.
MAX_CHARS = 2000
#: Words at which the length feature saturates (log scale): longer turns add no evidence.
MAX_WORDS = 200
#: Distinct kinds of code syntax (call, JSON, snake_case, markup, path, key=value) at which the
#: combined cue saturates: two are already rare outside tool calls and results.
CODE_CUES = 3.0
#: ``key: value`` / ``key=value`` pairs at which that cue saturates: three is a payload, not prose.
MAX_KEY_VALUES = 3
#: Tool vocabulary hits ("result", "status", "error", ...) at which that cue saturates.
MAX_TOOL_WORDS = 3
#: Share of code symbols ({}[]()=_"...) at which the density cue saturates: JSON runs above 0.2,
#: prose below 0.05.
SYMBOL_SHARE = 0.2
#: A turn of at most this many words is short ("thanks!", "ok cool"): small talk is mostly short.
SHORT_WORDS = 3
#: Code points from here up (arrows, symbols, emoji) count as emoji: chat reactions, not prose.
EMOJI_FROM = 0x2190
#: Capitalised mid-sentence words counted (names of people/places): more is not more of a statement.
MAX_NAMES = 3

#: The features, in model order: role (one-hot), punctuation and sentence-start cues, cue lexicons,
#: code/JSON/function-call syntax, length.
TURN_FEATURES: tuple[str, ...] = (
    "role_user", "role_assistant", "role_tool", "role_other",
    "ends_question_mark", "has_question_mark", "wh_start", "aux_start", "request", "ends_period", "declarative",
    "second_person", "advice_cue", "imperative_start", "conditional_advice", "hedge",
    "first_person", "first_person_state", "fact_verb", "names", "digits", "time_cue", "fyi_cue",
    "function_call", "json_like", "key_value", "tool_words", "symbol_density", "snake_case", "tool_markup",
    "path_or_url", "code_cues",
    "greeting", "thanks", "laughter", "small_talk", "exclamation", "emoji",
    "log_words", "short",
)

_ROLE_USER = frozenset({"user", "human", "customer"})
#: the roles of the one a user talks to (what "you" names in a user's question)
ASSISTANT_ROLES = frozenset({"assistant", "agent", "ai", "bot", "model"})
_ROLE_TOOL = frozenset({"tool", "function", "tool_result", "function_call", "ipython"})


_CLAUSES = re.compile(r"[.!?;,:\n]+")
_SENTENCES = re.compile(r"[.!?;:\n]+")
_FILLERS = cue(r"^(?:(?:so|and|ok|okay|oh|hey|also|btw|um|uh|wait|hmm|well|but|anyway|sorry|quick question|"
               r"maybe|perhaps|just|please|honestly|personally|i think|i guess|i'd say)\b\s*)+")
_WH = cue(r"^(?:what|what's|whats|when|where|who|whom|whose|why|which|how|how's)\b")
_AUX = cue(r"^(?:do|does|did|is|isn't|are|aren't|was|were|can|could|would|will|should|shall|have|has|had|"
           r"am|may|might|didn't|doesn't|don't you|won't|any idea|remind me)\b")
_REQUEST = cue(r"\b(?:can you|could you|would you|will you|do you (?:know|remember)|remind me|tell me|"
               r"any idea|i wonder|i was wondering|not sure (?:if|what|when|where|who)|do you recall)\b")
_SECOND = cue(r"\b(?:you|your|you're|you've|you'd|you'll|yourself|u|ur)\b")
_ADVICE = cue(r"\b(?:you should|you shouldn't|you could|you might want|you may want|you'd better|you need to|"
              r"you ought|i'd recommend|i recommend|i would recommend|i suggest|i'd suggest|i would suggest|"
              r"my suggestion|my advice|my recommendation|it's best|it is best|best to|a good idea|worth (?:it )?to|"
              r"it's worth|it might help|it may help|might help|would help|consider|make sure|don't forget|"
              r"remember to|be sure to|try to|try (?:\w+ing)|how about|why not|recommend|suggest|"
              r"a good (?:option|idea|plan|move|call|bet)|one option|another option|your best bet|"
              r"the best (?:way|thing|option|bet)|would be (?:good|best|wise|smart|helpful|worth)|"
              r"worth (?:a try|trying|considering|checking))\b")
_HEDGE = cue(r"\b(?:maybe|perhaps|possibly|probably|might|ideally|preferably)\b")
_IMPERATIVE = cue(r"^(?:please\s+)?(?:try|avoid|consider|make|remember|keep|take|use|check|don't|do not|never|"
                  r"always|go|drink|eat|get|add|set|call|ask|book|bring|pack|wear|start|stop|skip|look|be|put|"
                  r"write|talk|plan|double-check|reach|give|stick|limit|cut|switch|schedule|let|stay|read|"
                  r"pick|leave|wait|think|find|buy|store|carry|avoiding|rest)\b")
_CONDITIONAL = cue(r"\b(?:if i were you|if you (?:want|can|need|get|feel|are|have|'re)|in case|just in case|"
                   r"instead of|rather than|otherwise|so that you|to be safe|as a precaution)\b")
_FIRST = cue(r"\b(?:i|i'm|im|i've|i'd|i'll|me|my|mine|we|we're|our|us)\b")
_FIRST_STATE = cue(r"\b(?:i'm|i am|im|i've|i have|i had|i was|i got|i live|i work|i own|i drive|i eat|i don't|"
                   r"i do not|i can't|i never|i always|i usually|i used to|i started|i moved|i met|i went|i love|"
                   r"i hate|i like|i prefer|my \w+(?: \w+)? (?:is|are|was|were|lives|works|has|had|got|turns|"
                   r"moved|starts|leaves)|we (?:live|have|moved|got|went|met|are|were|own))\b")
_FACT = cue(r"\b(?:is|are|was|were|has|have|had|lives|lived|works|worked|likes|loves|hates|owns|studies|"
            r"moved|got|turns|turned|became|joined|started|met|married|born|allergic|named|called|"
            r"costs|leaves|starts|opens|closes)\b")
_NAMES = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]{2,}")
_DIGITS = re.compile(r"\d")
_TIME = cue(r"\b(?:yesterday|today|tonight|tomorrow|last|next|ago|since|weekend|morning|evening|"
            r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|january|february|march|april|may|june|"
            r"july|august|september|october|november|december|\d{4}|\d{1,2}(?::\d\d)?\s?(?:am|pm))\b")
_FYI = cue(r"\b(?:by the way|btw|fyi|just so you know|for the record|heads up|for reference|note that|"
           r"just to let you know|for context|actually)\b")
_CALL = re.compile(r"[A-Za-z_][\w.]*\s*\((?:[^()]*(?:=|'|\"|\d)[^()]*)?\)")
_JSON = re.compile(r"^\s*[{\[]|[{\[]\s*\"|\"\s*:\s*[\"{\[\d\-tfn]")
_KEY_VALUE = re.compile(r"(?:^|[\s,{(])[A-Za-z_][\w.\-]*\s*(?:=|:)\s*[\"'\[{\d\-\w]", re.MULTILINE)
_TOOL_WORDS = cue(r"\b(?:tool|tool_call|result|results|returned|returns|status|error|exception|traceback|"
                  r"response|output|payload|query|rows?|records?|null|none|true|false|http|https|api|json|"
                  r"ms|bytes|exit|code|stdout|stderr|args|arguments|function|invoke|invoked|calling|"
                  r"get|post|200|404|500)\b")
_PATH = re.compile(r"(?:^|[\s(\['\"])(?:~|\.{1,2})?/[\w.\-/?=&]+|\b[\w\-]+/[\w.\-]+/|"
                   r"\b[\w\-]+\.(?:md|txt|json|py|csv|log|yaml|yml|html|js|ts|sql|xml)\b|https?://")
_SYMBOLS = frozenset("{}[]()<>=_\"'`|$\\/#@;")
_SNAKE = re.compile(r"\b[a-z][a-z0-9]*_[a-z0-9_]+\b|\b[a-z]+\.[a-z_]+\(")
_MARKUP = cue(r"</?(?:tool|function|tool_call|tool_result|result|call)\w*>|^\s*(?:\$|>>>|\[tool|\{|tool result|"
              r"function result|observation:|output:|result:|response:|calling|called)")
_GREETING = cue(r"\b(?:hi|hello|hey|heya|hiya|yo|good (?:morning|night|evening|afternoon)|morning|bye|goodbye|"
                r"see you|see ya|cya|talk (?:soon|later)|take care|cheers|catch you later|later)\b")
_THANKS = cue(r"\b(?:thanks|thank you|thank u|thx|ty|tysm|appreciate it|much appreciated|cheers)\b")
_LAUGH = cue(r"\b(?:ha(?:ha)+h?|he(?:he)+|lol|lmao|rofl|lolol)\b|:\)|:-\)|:d\b|;\)|xd\b|😂|🤣|😄|😆|😅")
_SMALL_TALK = cue(r"\b(?:how are you|how r u|how's it going|how is it going|how's your|how is your|how was your|"
                  r"how've you been|how have you been|what's up|whats up|wassup|hope you|hope your|have a (?:good|"
                  r"great|nice|lovely)|nice to|good to (?:see|hear)|long time|glad|sounds (?:good|great|fun|"
                  r"amazing|lovely)|that's (?:great|awesome|cool|nice|amazing|wonderful|so cool|hilarious|funny)|"
                  r"no worries|you're welcome|no problem|np|sure thing|awesome|cool|nice|wow|omg|yay|aww|"
                  r"lovely|fun|congrats|congratulations|same here|me too|you too|anytime|happy to help|"
                  r"enjoy|all good|fair enough|no way|ok|okay|alright|yep|yeah|sure)\b")


def _clause_starts(text: str) -> list[str]:
    """Each clause of ``text`` from its first content word (leading fillers like "so", "oh" dropped)."""
    out = []
    for clause in _CLAUSES.split(text):
        c = _FILLERS.sub("", clause.strip()).strip()
        if c:
            out.append(c)
    return out


def _hit(pattern: re.Pattern[str], text: str) -> float:
    return 1.0 if pattern.search(text) else 0.0


#: A clause after a comma that opens with one of these, in a text with no question mark, is a
#: relative clause ("I answer to Claire, who heads our team."), not a question.
_RELATIVE = cue(r"^(?:who|whom|whose|which|where)\b")


def _asking_starts(text: str, starts: Sequence[str]) -> list[str]:
    """``starts`` less the relative clauses of ``text`` (:data:`_RELATIVE`): where a
    question word at a clause start asks something."""
    if "?" in text or not any(_RELATIVE.match(s) for s in starts):
        return list(starts)
    sentences = {c for clause in _SENTENCES.split(text) if (c := _FILLERS.sub("", clause.strip()).strip())}
    return [s for s in starts if s in sentences or not _RELATIVE.match(s)]


def _any_start(pattern: re.Pattern[str], starts: Sequence[str]) -> float:
    return 1.0 if any(pattern.match(s) for s in starts) else 0.0


def _role(role: str) -> list[float]:
    r = role.strip().lower()
    hot = (r in _ROLE_USER, r in ASSISTANT_ROLES, r in _ROLE_TOOL)
    return [*(1.0 if h else 0.0 for h in hot), 0.0 if any(hot) else 1.0]


def turn_features(text: str, role: str) -> tuple[float, ...]:
    """The feature vector of one turn (order of :data:`TURN_FEATURES`, each in [0, 1]); pure and
    deterministic. Only the first :data:`MAX_CHARS` characters are read."""
    t = text[:MAX_CHARS].strip()
    low = fold(t)  # what the case-insensitive cues read
    words = t.split()
    starts = _clause_starts(low)
    tail = t.rstrip(" \t\n\"')]}*_~😊🙂👍😂🤣😄😅❤️")  # closing marks and emoji off the end
    last = tail.rstrip("!.")
    key_values = len(_KEY_VALUE.findall(t))
    code = {"function_call": _hit(_CALL, t), "json_like": _hit(_JSON, t), "snake_case": _hit(_SNAKE, t),
            "tool_markup": _hit(_MARKUP, low), "path_or_url": _hit(_PATH, t)}
    asking = _asking_starts(low, starts)
    questioning = "?" in t or not starts or any(p.match(starts[0]) for p in (_WH, _AUX, _IMPERATIVE))
    f = {
        **dict(zip(("role_user", "role_assistant", "role_tool", "role_other"), _role(role), strict=True)),
        "ends_question_mark": 1.0 if last.endswith("?") else 0.0,
        "has_question_mark": 1.0 if "?" in t else 0.0,
        "wh_start": _any_start(_WH, asking),
        "aux_start": _any_start(_AUX, starts),
        "request": _hit(_REQUEST, low),
        "ends_period": 1.0 if tail.endswith(".") and not tail.endswith("..") else 0.0,
        "declarative": 0.0 if questioning else 1.0,
        "second_person": _hit(_SECOND, low),
        "advice_cue": _hit(_ADVICE, low),
        "imperative_start": _any_start(_IMPERATIVE, starts),
        "conditional_advice": _hit(_CONDITIONAL, low),
        "hedge": _hit(_HEDGE, low),
        "first_person": _hit(_FIRST, low),
        "first_person_state": _hit(_FIRST_STATE, low),
        "fact_verb": _hit(_FACT, low),
        "names": min(len(_NAMES.findall(t)), MAX_NAMES) / MAX_NAMES,
        "digits": _hit(_DIGITS, t),
        "time_cue": _hit(_TIME, low),
        "fyi_cue": _hit(_FYI, low),
        **code,
        "key_value": min(key_values, MAX_KEY_VALUES) / MAX_KEY_VALUES,
        "tool_words": min(len(_TOOL_WORDS.findall(low)), MAX_TOOL_WORDS) / MAX_TOOL_WORDS,
        "symbol_density": min(1.0, sum(1 for ch in t if ch in _SYMBOLS) / max(1, len(t)) / SYMBOL_SHARE),
        "code_cues": min(sum(code.values()) + (1.0 if key_values >= 2 else 0.0), CODE_CUES) / CODE_CUES,
        "greeting": _hit(_GREETING, low),
        "thanks": _hit(_THANKS, low),
        "laughter": _hit(_LAUGH, low),
        "small_talk": _hit(_SMALL_TALK, low),
        "exclamation": 1.0 if "!" in t else 0.0,
        "emoji": 1.0 if any(ord(ch) >= EMOJI_FROM for ch in t) else 0.0,
        "log_words": math.log1p(min(len(words), MAX_WORDS)) / math.log1p(MAX_WORDS),
        "short": 1.0 if len(words) <= SHORT_WORDS else 0.0,
    }
    return tuple(f[name] for name in TURN_FEATURES)


@dataclass(frozen=True)
class TurnKindModel:
    """p(kind) = softmax(intercept + coef @ ((x - mean) / scale)) over :data:`TURN_KINDS`;
    ``coef`` has one row per label, ``intercept`` one entry per label."""

    labels: tuple[str, ...]
    features: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.labels != TURN_KINDS:
            raise SystemOneError(f"turn-kind model labels {self.labels} differ from TURN_KINDS")
        if self.features != TURN_FEATURES:
            raise SystemOneError(f"turn-kind model features {self.features} differ from TURN_FEATURES")
        k, f = len(self.labels), len(self.features)
        if not (self.mean.shape == self.scale.shape == (f,) and self.coef.shape == (k, f)
                and self.intercept.shape == (k,)):
            raise SystemOneError(f"turn-kind model arrays must be ({f},), ({k}, {f}) and ({k},)")
        if (self.scale <= 0).any() or not (np.isfinite(self.coef).all() and np.isfinite(self.intercept).all()):
            raise SystemOneError("turn-kind model has a non-positive scale or a non-finite weight")

    def probabilities(self, rows: np.ndarray) -> np.ndarray:
        """p(kind) for feature rows (n, F) -> (n, K), each row summing to 1. A row's answer does
        not depend on the others (elementwise products summed per row, not a BLAS product whose
        order may vary with n), so typing a turn alone or in a batch gives the same answer."""
        z = (rows - self.mean) / self.scale
        logits = (z[:, None, :] * self.coef[None, :, :]).sum(axis=2) + self.intercept
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        out: np.ndarray = e / e.sum(axis=1, keepdims=True)
        return out

    def answer(self, texts: Sequence[tuple[str, str]]) -> list[dict[str, float]]:
        """The ``kind`` distribution of each (text, role)."""
        if not texts:
            return []
        rows = np.asarray([turn_features(t, r) for t, r in texts], dtype=np.float64)
        return [dict(zip(self.labels, (float(v) for v in p), strict=True)) for p in self.probabilities(rows)]

    def to_json(self) -> bytes:
        return orjson.dumps({
            "labels": list(self.labels), "features": list(self.features),
            "mean": [round(float(v), 8) for v in self.mean], "scale": [round(float(v), 8) for v in self.scale],
            "coef": [[round(float(v), 8) for v in row] for row in self.coef],
            "intercept": [round(float(v), 8) for v in self.intercept], "meta": self.meta,
        }, option=orjson.OPT_INDENT_2)

    @classmethod
    def from_json(cls, raw: bytes | str) -> TurnKindModel:
        try:
            d = orjson.loads(raw)
            return cls(labels=tuple(d["labels"]), features=tuple(d["features"]),
                       mean=np.asarray(d["mean"], dtype=np.float64), scale=np.asarray(d["scale"], dtype=np.float64),
                       coef=np.asarray(d["coef"], dtype=np.float64),
                       intercept=np.asarray(d["intercept"], dtype=np.float64), meta=dict(d.get("meta", {})))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise SystemOneError(f"unreadable turn-kind model: {exc}") from exc

    @classmethod
    def shipped(cls) -> TurnKindModel:
        """The weights shipped in the package (read once per process)."""
        return _shipped()


@functools.cache
def _shipped() -> TurnKindModel:
    return TurnKindModel.from_json(resources.files("topology.systemone").joinpath(SHIPPED).read_bytes())


#: A turn's sentences read one by one by :func:`statement_within` (the first ones: a long turn's
#: cost stays bounded, and :data:`MAX_CHARS` bounds what is read of each).
MAX_SENTENCES = 12
#: where a turn is cut into the parts read alone: after a sentence's end or a clause's comma,
#: semicolon or colon, and at line breaks
_PART_END = re.compile(r"(?<=[.!?,;:])\s+|\n+")


def statement_within(text: str, role: str, model: TurnKindModel | None = None) -> float:
    """The highest p(statement) of a turn's sentences and clauses read alone (at most
    :data:`MAX_SENTENCES` of them, from the turn's first :data:`MAX_CHARS` characters); 0 for a
    turn of one part, whose own kind already says it. A question or request that also states
    something ("I adopted a puppy last week. What should he eat?", "I'm visiting my sister Emily in
    Denver soon, any ideas?") holds a statement; "Remind me, what did I say I'm allergic to?" does
    not."""
    parts = [x for x in (p.strip() for p in _PART_END.split(text[:MAX_CHARS])) if x][:MAX_SENTENCES]
    if len(parts) < 2:
        return 0.0
    kinds = (model or TurnKindModel.shipped()).answer([(x, role) for x in parts])
    return max(k["statement"] for k in kinds)


def fit(x: np.ndarray, y: np.ndarray, l2: float = 1.0, iters: int = 50,
        meta: dict[str, Any] | None = None) -> TurnKindModel:
    """Class-balanced, L2-regularised multinomial logistic regression by Newton's method on
    standardised features; ``y`` holds label indices into :data:`TURN_KINDS`. Each label weighs
    the same in total, so the answer is the posterior under even prior odds between kinds.
    Deterministic: no sampling, a fixed iteration budget."""
    k, f = len(TURN_KINDS), len(TURN_FEATURES)
    if x.ndim != 2 or x.shape[1] != f or len(x) != len(y):
        raise ValueError(f"expected rows of {f} features and one label each")
    counts = np.bincount(y, minlength=k).astype(np.float64)
    if (counts == 0).any() or len(counts) != k:
        raise ValueError("training turns need examples of every kind and no other label")
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    # identical (features, label) rows fitted once with their multiplicity: the same loss, fewer rows
    rows, times = np.unique(np.column_stack([x, y]), axis=0, return_counts=True)
    x, y = rows[:, :f], rows[:, f].astype(np.int64)
    z = np.column_stack([np.ones(len(x)), (x - mean) / scale])  # (n, d), d = f + 1
    d = z.shape[1]
    weight = times * (counts.sum() / (k * counts))[y]
    onehot = np.eye(k)[y]
    w = np.zeros((k, d))
    reg = np.full(d, l2)
    reg[0] = 1e-6  # the intercepts: a touch, so the softmax's shift-invariant direction is fixed
    for _ in range(iters):
        logits = z @ w.T
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        grad = ((weight[:, None] * (p - onehot)).T @ z + reg * w).ravel()
        hess = np.zeros((k * d, k * d))
        for a in range(k):
            for b in range(a, k):
                c = weight * p[:, a] * ((1.0 if a == b else 0.0) - p[:, b])
                block = np.einsum("ni,nj->ij", z * c[:, None], z)  # no BLAS threads: fast on a busy machine
                hess[a * d:(a + 1) * d, b * d:(b + 1) * d] = block
                hess[b * d:(b + 1) * d, a * d:(a + 1) * d] = block.T
        hess += np.diag(np.tile(reg, k)) + 1e-9 * np.eye(k * d)
        step = np.linalg.solve(hess, grad).reshape(k, d)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return TurnKindModel(TURN_KINDS, TURN_FEATURES, mean, scale, w[:, 1:], w[:, 0].copy(), meta or {})


def kind_distribution(dist: Mapping[str, float]) -> dict[str, float]:
    """A ``kind`` Choice answer as a distribution over exactly :data:`TURN_KINDS` (in that order),
    negatives clipped and renormalised to sum to 1 (a remote backend's rounding). A missing label
    or an all-zero answer is a :class:`~topology.errors.SystemOneError` (the port contract)."""
    missing = [k for k in TURN_KINDS if k not in dist]
    if missing:
        raise SystemOneError(f"kind answer lacks {missing}")
    clipped = {k: max(0.0, float(dist[k])) for k in TURN_KINDS}
    total = sum(clipped.values())
    if not total > 0.0 or not math.isfinite(total):
        raise SystemOneError(f"kind answer is not a distribution: {dict(dist)}")
    return {k: v / total for k, v in clipped.items()}


#: What :func:`turn_kind` answers for a node typed before the kind question existed: no evidence
#: for any kind (the uniform distribution).
UNTYPED_KIND: dict[str, float] = {k: 1.0 / len(TURN_KINDS) for k in TURN_KINDS}


def turn_kind(types: TypeScores) -> dict[str, float]:
    """p(kind) of a node, over exactly :data:`TURN_KINDS` in that order (sums to 1): the stored
    ``kind`` answer, or :data:`UNTYPED_KIND` for a node stored without one (``types.kind`` empty).
    Pure; for the read path (e.g. ``turn_kind(node.types)["question"]``)."""
    if not types.kind:
        return dict(UNTYPED_KIND)
    return {k: float(types.kind.get(k, 0.0)) for k in TURN_KINDS}
