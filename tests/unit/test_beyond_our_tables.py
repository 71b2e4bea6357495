"""Facts about attributes that none of our generators' tables name (a football team, an
instrument, a dentist, a kind of tea, where a relative lives), recalled across a user's sessions
as users ask: the stating turn ranks first, above a friend's look-alike, the user's own question
about it and small talk; and the floor: a re-ranking signal the models are not sure of leaves the
order to relevance."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jevmem.settings import Settings
from jevmem.wiring import Embedded, build_embedded
from query_api.retrieval import formulas
from query_api.retrieval.nodeinfo import derive
from query_api.retrieval.subjects import about_someone_else, asked_roles, kind_for, read_subjects
from topology.params import KindPenalties, Params, RealmRanking
from topology.ports import Embedder
from topology.schemas import Observation, Realm, Scope
from topology.systemone.turn_kinds import ASSISTANT_ROLES, TURN_KINDS, statement_within
from topology.systemone.update_model import analyse, subjects

T0 = datetime(2024, 3, 1, 9, tzinfo=UTC)

#: (speaker, the user's turns in order, the question, the index of the stating turn)
CASES = [
    ("Kai", ["I've supported Celtic since I was a kid.", "My flatmate Rosa supports Rangers, sadly.",
             "Did you catch the match last night?", "What team do I support again?"],
     "What football team does Kai support?", 0),
    ("Kai", ["I play a Fender Telecaster in a covers band.", "Do you know any good guitar shops?",
             "My bandmate Rosa plays a Gibson Les Paul.", "We rehearse on Thursdays."],
     "What guitar does Kai play?", 0),
    ("Maya", ["Morning! Coffee first, then emails.", "My sister Lena lives in Berlin.", "I live in Porto myself.",
              "I finally fixed the squeaky door."], "Where does Maya's sister live?", 1),
    ("Omar", ["My favourite tea is a smoky lapsang souchong.", "My friend Jules loves green tea.",
              "What tea should I buy for the office?", "Rain again, typical."], "What is Omar's favourite tea?", 0),
    ("Priya", ["My dentist is Dr Okafor on Mill Street.", "My colleague Ben sees Dr Hale for his teeth.",
               "Which dentist did I say I go to?", "Lunch was a sad sandwich."], "Who is Priya's dentist?", 0),
]


def _turns(speaker: str, texts: list[str]) -> list[Observation]:
    return [Observation(tenant_id="t", conversation_id=f"session-{i % 2}", event_id=f"e{i}", content=text,
                        speaker=speaker, user_id="u", observed_at=T0 + timedelta(days=i))
            for i, text in enumerate(texts)]


@pytest.mark.parametrize(("speaker", "texts", "question", "gold"), CASES)
async def test_a_stated_fact_of_an_unlisted_attribute_ranks_first(
        model_memory: Embedded, speaker: str, texts: list[str], question: str, gold: int) -> None:
    await model_memory.pipeline.ingest(_turns(speaker, texts))
    res = await model_memory.controller.retrieve_realm(Realm(tenant_id="t", user_id="u"), question, 10)
    assert res.evidence[0].event_id == f"e{gold}", [(e.content, e.score) for e in res.evidence]


async def test_two_memories_of_nearly_one_cosine_stay_close_in_a_small_realm(model_memory: Embedded) -> None:
    # the user's question stored as a memory is not the answer to itself asked again
    await model_memory.pipeline.ingest(_turns("ana", ["I adopted a golden retriever named Biscuit",
                                                      "What is my dog called?"]))
    res = await model_memory.controller.retrieve_realm(Realm(tenant_id="t", user_id="u"), "What is my dog called?", 10)
    assert [e.event_id for e in res.evidence] == ["e0", "e1"]


def test_a_relation_before_a_name_makes_the_name_the_subject_whatever_it_is_called() -> None:
    assert subjects(analyse("My bandmate Rosa plays a Gibson Les Paul."), "Kai") == {"person:rosa"}
    assert subjects(analyse("My landlord Dimitri has raised the rent."), "Kai") == {"person:dimitri"}
    # the speaker's own things stay the speaker's
    assert subjects(analyse("My old Honda Civic broke down."), "Kai") == {"person:kai"}
    assert subjects(analyse("I play a Fender Telecaster."), "Kai") == {"person:kai"}


def test_a_request_that_also_states_something_holds_a_statement() -> None:
    assert statement_within("What did I say I'm allergic to?", "user") == 0.0  # one sentence: its own kind says it
    holds = statement_within("I adopted a puppy named Miso last week. What food should I buy for him?", "user")
    asks = statement_within("Can you help me? What food is good for puppies?", "user")
    assert holds > 0.5 > asks
    # clauses too: a fact said inside a request's one sentence, and a bare question with a preamble
    clause = statement_within("I'm thinking of visiting my sister Emily in Denver soon, any kid-friendly attractions?",
                              "user")
    preamble = statement_within("Remind me, which allergy did I tell you about?", "user")
    assert clause > 0.5 > 0.2 > preamble


# -- the floor: what the models are not sure of leaves the order to relevance ---------------------

def _kind(**p: float) -> dict[str, float]:
    rest = (1.0 - sum(p.values())) / (len(TURN_KINDS) - len(p))
    return {k: p.get(k, rest) for k in TURN_KINDS}


def test_a_kind_penalty_acts_in_proportion_to_the_reading() -> None:
    pen = KindPenalties()
    scores = [0.9, 0.7, 0.5]
    # a statement, and a question that also states something, keep their scores
    assert [formulas.kind_adjust(s, _kind(statement=1.0), pen) for s in scores] == scores
    assert [formulas.kind_adjust(s, _kind(question=1.0), pen, states=1.0) for s in scores] == scores
    # a reading spread evenly over the kinds moves every score by the same factor: the order stays
    even = [formulas.kind_adjust(s, _kind(), pen) for s in scores]
    assert sorted(even, reverse=True) == even
    # the penalty grows with the probability
    assert formulas.kind_adjust(1.0, _kind(question=0.9), pen) < formulas.kind_adjust(1.0, _kind(question=0.3), pen)


def test_a_small_pools_cosines_are_not_stretched_past_their_span() -> None:
    assert formulas.spread_cosine(0.80, (0.78, 0.80), 0.1) == pytest.approx(1.0)
    assert formulas.spread_cosine(0.78, (0.78, 0.80), 0.1) == pytest.approx(0.8)
    # a pool spread wider than the floor is placed in its own range
    assert formulas.spread_cosine(0.70, (0.70, 0.90), 0.1) == pytest.approx(0.0)
    assert formulas.spread_cosine(0.78, (0.78, 0.80), 0.0) == pytest.approx(0.0)


def test_a_question_about_what_the_assistant_said_reads_its_role() -> None:
    assert asked_roles("Can you remind me what was the 7th job in the list you provided?") == ASSISTANT_ROLES
    assert asked_roles("You mentioned two companies that put safety first. Which were they?") == ASSISTANT_ROLES
    assert asked_roles("What was the name of the store you've recommended?") == ASSISTANT_ROLES
    assert asked_roles("Which names did you suggest for my bakery?") == ASSISTANT_ROLES
    # "you" that is not the subject of a past verb, or the user's own words: no role is asked about
    for question in ("Can you remind me what I bought for my sister?", "Do you need my address?",
                     "What did I tell you about my dog?", "Where does Maya's sister live?"):
        assert asked_roles(question) == frozenset(), question


def test_a_turn_of_the_asked_role_is_not_cut_for_advising() -> None:
    # the assistant's list of suggestions, typed mostly advice: the answer to "the list you provided"
    kind = {"statement": 0.3, "question": 0.05, "tool": 0.05, "advice": 0.55, "chatter": 0.05}
    penalty = KindPenalties(question=0.7, tool=0.9, advice=0.6, chatter=0.8)
    asked = kind_for(kind, "assistant", asked_roles("What was the 7th job in the list you provided?"))
    assert asked["statement"] == pytest.approx(0.85) and asked["advice"] == 0.0
    assert formulas.kind_adjust(1.0, asked, penalty) > 0.8 > 0.6 > formulas.kind_adjust(1.0, kind, penalty)
    # a question not about its words, or a turn of another role, reads the kind as typed
    assert kind_for(kind, "assistant", asked_roles("What jobs can seniors do from home?")) == kind
    assert kind_for(kind, "user", ASSISTANT_ROLES) == kind


async def test_a_users_memory_keeps_its_clause_reading_from_the_write(model_memory: Embedded) -> None:
    said = "I adopted a puppy named Miso last week. What food should I buy for him?"
    shared = Observation(tenant_id="t", conversation_id="shared", event_id="x", content=said, speaker="ana",
                         observed_at=T0)
    await model_memory.pipeline.ingest([*_turns("ana", [said]), shared])
    nodes = {n.event_id: n for conv in ("session-0", "shared")
             for n in await model_memory.stores.nodes.scan(Scope(tenant_id="t", conversation_id=conv))}
    assert nodes["e0"].types.states == statement_within(said, "user") > 0.5
    assert nodes["x"].types.states is None  # no user: read on first use, as before
    assert nodes["e0"].types.subjects == ["person:ana"] == sorted(read_subjects(nodes["x"]))
    assert nodes["x"].types.subjects is None
    # the subject step takes the kept reading as it is
    elsewhere = nodes["e0"].model_copy(update={"types": nodes["e0"].types.model_copy(update={"subjects": ["person:bo"]})})
    assert about_someone_else(elsewhere, frozenset({"ana"}), "What food should I buy?")
    assert not about_someone_else(nodes["e0"], frozenset({"ana"}), "What food should I buy?")
    # the read path takes the kept reading as it is
    kept = nodes["e0"].model_copy(update={"types": nodes["e0"].types.model_copy(update={"states": 0.123})})
    assert derive(kept, len(kept.embedding or [])).states == 0.123
    assert derive(nodes["x"], len(nodes["x"].embedding or [])).states == statement_within(said, "user")


#: (the user's turns, a question in the first person, the index of the stating turn): the
#: look-alike is the user's own report of someone else's fact.
FIRST_PERSON = [
    (["I'm learning Japanese in the evenings.", "My friend Ines is learning Italian.", "Rain again, typical."],
     "What language am I learning?", 0),
    (["Growing up everyone called me Sparky.", "My cousin Ben's nickname was Moose.", "I fixed the squeaky door."],
     "What was my childhood nickname?", 0),
]


@pytest.mark.parametrize(("texts", "question", "gold"), FIRST_PERSON)
async def test_a_question_in_the_first_person_asks_about_the_user(
        model_embedder: Embedder, texts: list[str], question: str, gold: int) -> None:
    # one person speaks in the user's sessions: "my" in a question put to their memory is theirs,
    # so their report of someone else's fact is not the answer; off, the report ranks first
    firsts = []
    for on in (True, False):
        params = Params(realm=RealmRanking(first_person=on))
        mem = build_embedded(Settings(params=params), embedder=model_embedder, data_dir=":memory:")
        try:
            await mem.pipeline.ingest(_turns("user", texts))
            res = await mem.controller.retrieve_realm(Realm(tenant_id="t", user_id="u"), question, 10)
        finally:
            await mem.close()
        firsts.append(res.evidence[0].event_id)
    assert firsts == [f"e{gold}", "e1"]


#: the threshold chosen on the update judge's wide pool (``scripts/choose_judged_update.py``), the default
JUDGED = 0.35
FILLER = ["Can you suggest a quick dinner recipe?", "What's a good way to stay focused while working from home?",
          "The printer jammed twice today.", "Traffic was awful this morning."]
#: (the user's turns, a first-person question about the present, whether the last turn changes the
#: first one's fact): attributes no table names, updated by the user's later word (in the fact's
#: own words too: the question's words are no value either keeps), restated, or
#: followed by small talk that answers the question about as well and shares no word with the fact
#: (the update judge, told nothing of the attribute, reads that one as a change)
LATER = [
    (["I drink my coffee from a chipped blue mug.", *FILLER, "These days my coffee goes in a tall green thermos."],
     "What do I drink my coffee from?", True),
    (["I volunteer at the Eastside food bank on Saturdays.", *FILLER,
      "I volunteer at the animal shelter on Saturdays instead."], "Where do I volunteer?", True),
    (["My favourite hiking trail is the Ridgeback Loop.", *FILLER, "My favourite hiking trail is the Cedar Falls path."],
     "What's my favourite hiking trail?", True),
    (["I drink my coffee from a chipped blue mug.", *FILLER,
      "I still drink my coffee from the chipped blue mug, I refuse to replace it."], "What do I drink my coffee from?", False),
    (["I've been vegetarian for three years now.", *FILLER, "I've been trying to drink more water lately."],
     "What diet do I follow?", False),
]


@pytest.mark.parametrize(("texts", "question", "changed"), LATER)
async def test_a_later_statement_the_update_judge_reads_as_a_change_answers_first(
        model_embedder: Embedder, texts: list[str], question: str, changed: bool) -> None:
    # no table names these attributes, so the write path does not link the two; at recall both
    # answer the question about as well, and the update judge reads whether the later one changes
    # the fact: a change ranks first, a restatement leaves the order to relevance; off, the words decide
    last = f"e{len(texts) - 1}"
    ranked: dict[float | None, dict[str, float]] = {}
    for judged in (JUDGED, None):
        mem = build_embedded(Settings(params=Params(realm=RealmRanking(judged_update=judged))), embedder=model_embedder,
                             data_dir=":memory:")
        try:
            await mem.pipeline.ingest([Observation(tenant_id="t", conversation_id=f"session-{i}", event_id=f"e{i}",
                                                   content=text, speaker="user", user_id="u",
                                                   observed_at=T0 + timedelta(days=7 * i))
                                       for i, text in enumerate(texts)])
            res = await mem.controller.retrieve_realm(Realm(tenant_id="t", user_id="u"), question, 10)
        finally:
            await mem.close()
        ranked[judged] = {e.event_id: e.score for e in res.evidence}
        assert not any(e.superseded_by for e in res.evidence)  # no edge: the read path decides
    off = ranked[None]
    assert max(off, key=off.__getitem__) == "e0" and off[last] >= Params().latest_band * off["e0"]  # in the band
    on = ranked[JUDGED]
    assert max(on, key=on.__getitem__) == (last if changed else "e0"), on
