"""The update judge (the relation task's ``updates`` Noul): the shipped weights are what the
training script reproduces, they judge held-out wordings well, clear cases right, and the write
path's relation state carries what they read."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from jevmem.bench.update_pairs import ROUNDS, SEED, judge_pairs
from topology.errors import SystemOneError
from topology.ports import Embedder
from topology.schemas import CandidateFeatures, MemoryNode
from topology.stages.relations import relation_state
from topology.systemone.catalog import RELATION
from topology.systemone.features import RelationState
from topology.systemone.local import LocalSystemOne, relation, relation_many
from topology.systemone.port import Item
from topology.systemone.update_model import (
    SENTENCE_CHECK,
    SHIPPED,
    UPDATE_FEATURES,
    UpdateModel,
    analyse,
    attributes_embedder,
    sentence_pairs,
    sentences,
    subjects,
    update_features,
)

ROOT = Path(__file__).resolve().parents[2]

HELDOUT_ACCURACY = 0.85
"""Held-out pairs are 75% non-updates, so always answering "no" scores 0.75; the shipped model
scores about 0.91. Below 0.85 a feature or the generator has regressed."""
HELDOUT_PRECISION = 0.75
"""A false update demotes a true fact; the shipped model is about 0.80 precise at p >= 0.5."""


def _state(older: str, newer: str, older_speaker: str = "Ana", newer_speaker: str = "Ana",
           older_role: str = "user", newer_role: str = "user") -> dict[str, Any]:
    return {"older": older, "newer": newer, "cosine": 0.6, "lexical": 0.1, "entity": 0.0, "gap": 30,
            "same_speaker": older_speaker == newer_speaker, "older_speaker": older_speaker,
            "newer_speaker": newer_speaker, "older_role": older_role, "newer_role": newer_role, "hours": 240.0}


@pytest.fixture(scope="module")
def trained(model_embedder: Embedder) -> tuple[UpdateModel, dict[str, Any]]:
    """The training script's model and report (its ``train``, run in-process: about 20 s)."""
    spec = importlib.util.spec_from_file_location("train_update_judge", ROOT / "scripts" / "train_update_judge.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return cast(tuple[UpdateModel, dict[str, Any]], script.train(embedder=model_embedder))


def test_the_shipped_weights_are_what_the_training_reproduces(trained: tuple[UpdateModel, dict[str, Any]]) -> None:
    shipped = UpdateModel.shipped()
    model, report = trained
    assert shipped.features == model.features == UPDATE_FEATURES
    assert shipped.meta["script"] == "scripts/train_update_judge.py"
    assert (shipped.meta["seed"], shipped.meta["rounds"]) == (SEED, ROUNDS)
    assert shipped.meta["embedder"] == model.meta["embedder"] == attributes_embedder()
    # the attribute feature comes from the int8 model, whose kernels differ between CPUs: on two
    # AMD EPYC machines (AVX2) its standardisation differed by 1.7e-4 and the fitted weights by up
    # to 0.0042 (one weight of 0.17), the held-out accuracy not at all
    for name, tol in (("mean", 1e-3), ("scale", 1e-3), ("coef", 1e-2)):
        assert np.allclose(getattr(shipped, name), getattr(model, name), atol=tol), name
    assert shipped.intercept == pytest.approx(model.intercept, abs=1e-3)
    assert shipped.meta["heldout"]["accuracy"] == pytest.approx(report["heldout"]["accuracy"], abs=1e-3)


def test_held_out_wordings_are_judged_well(trained: tuple[UpdateModel, dict[str, Any]]) -> None:
    _, report = trained
    held = report["heldout"]
    assert held["accuracy"] >= HELDOUT_ACCURACY and held["precision"] >= HELDOUT_PRECISION
    assert held["recall"] >= 0.7
    # the families the issue names are right most of the time on wordings never trained on
    by_kind = held["accuracy_by_kind"]
    for kind in ("update:explicit", "update:contrast", "lookalike", "other_speaker", "question", "ack"):
        assert by_kind[kind] >= 0.8, kind


def test_train_and_heldout_pairs_share_no_text() -> None:
    train, held = judge_pairs("train", rounds=3), judge_pairs("heldout", rounds=3)
    assert {p.label for p in train} == {True, False}
    texts = {p.older for p in train} | {p.newer for p in train}
    assert not texts & ({p.older for p in held} | {p.newer for p in held})
    assert judge_pairs("train", rounds=3) == train


@pytest.mark.parametrize(("older", "newer", "speakers", "update"), [
    ("I live in Porto.", "I moved to Lisbon.", ("Ana", "Ana"), True),
    ("My favourite food is sushi.", "Actually my favourite food is ramen these days, not sushi.", ("Ana", "Ana"), True),
    ("My manager is Claire.", "My new manager is Jonas, Claire left.", ("Ana", "Ana"), True),
    ("I drive a Honda Civic.", "I drive a Tesla now.", ("Ana", "Ana"), True),
    ("I live in Porto.", "These days I cycle to work in Lisbon.", ("Ana", "Ana"), True),
    ("My sister lives in Madrid.", "I live in Madrid.", ("Ana", "Ana"), False),
    ("I live in Madrid.", "My sister lives in Madrid.", ("Ana", "Ana"), False),
    ("I live in Porto.", "I moved to Lisbon.", ("Ana", "Ben"), False),
    ("I live in Porto.", "Still loving Porto, honestly.", ("Ana", "Ana"), False),
    ("I live in Porto, near the river.", "My favourite food is ramen.", ("Ana", "Ana"), False),
    ("I live in Porto.", "Where are you living these days?", ("Ana", "assistant"), False),
])
async def test_clear_cases(older: str, newer: str, speakers: tuple[str, str], update: bool) -> None:
    role = "assistant" if speakers[1] == "assistant" else "user"
    [answer] = await LocalSystemOne().ask([Item(RELATION, _state(older, newer, *speakers, newer_role=role))])
    assert (answer.p("updates") >= 0.5) == update, answer.p("updates")


def test_an_update_needs_the_same_attribute() -> None:
    """The same pair (another attribute, a change cue) is judged more likely an update the more
    the two are about one attribute; unknown lies in between."""
    pair = _state("I answer to Marisol, who heads our team.", "I'm based in Bologna at the moment, it suits me.")
    p = [relation({**pair, "attribute": a}).p("updates") for a in (0.0, None, 0.9)]
    assert p[0] < p[1] < p[2]


def test_the_words_a_question_asks_with_are_no_value_the_newer_keeps() -> None:
    """Judged for a question at recall, the words it asks with ("favourite hiking trail") are what
    both statements are about: a new value in the same words is a change, which the words alone
    read as the value kept; a restatement or a remark that keeps the value stays none."""
    asked = "What's my favourite hiking trail?"
    older = "My favourite hiking trail is the Ridgeback Loop."
    change = _state(older, "My favourite hiking trail is the Cedar Falls path.")
    assert relation(change).p("updates") < 0.35 <= 0.8 <= relation({**change, "question": asked}).p("updates")
    for kept in ("The Ridgeback Loop is still my favourite hiking trail.",
                 "I walked the Ridgeback Loop again, my favourite hiking trail."):
        assert relation({**_state(older, kept), "question": asked}).p("updates") < 0.35


def test_two_chat_turns_are_judged_sentence_by_sentence() -> None:
    """Two multi-sentence chat turns whose cues only add up across sentences (a shared name in
    one, new words in another) are no update; an update inside a longer turn still is, and a
    pair of single sentences is answered as before."""
    chat = _state("Thanks, Caroline! Yeah, I made this bowl in my class. It took some work, but I'm pretty proud of it.",
                  "Bye, Caroline! Can't wait to hear about it. Have fun and stay safe!")
    whole = float(UpdateModel.shipped().probabilities(np.asarray([update_features(RelationState(**chat))]))[0])
    assert whole >= SENTENCE_CHECK and relation(chat).p("updates") < min(whole, 0.5)  # the check lowers it
    assert sentences("Big news! I moved to Lisbon last month. The flat is tiny but bright.") == [
        "Big news!", "I moved to Lisbon last month.", "The flat is tiny but bright."]
    # an initial or a title ends no sentence
    assert sentences("N. K. Jemisin has become my favourite author.") == ["N. K. Jemisin has become my favourite author."]
    assert sentences("I see Dr. Patel now. She is great.") == ["I see Dr. Patel now.", "She is great."]
    assert relation(_state("I live in Porto, near the river.",
                           "Big news! I moved to Lisbon last month. The flat is tiny but bright.")).p("updates") >= 0.8
    assert relation(_state("My manager is Claire. She is great.",
                           "Claire left the company. My new manager is Jonas.")).p("updates") >= 0.8
    single = _state("I live in Porto.", "I moved to Lisbon.")
    assert sentence_pairs(RelationState(**single)) == []
    assert sentence_pairs(RelationState(**_state("I live in Porto.", "Hi! I moved."))) == [
        ("I live in Porto.", "Hi!"), ("I live in Porto.", "I moved.")]
    assert relation(single).p("updates") == float(
        UpdateModel.shipped().probabilities(np.asarray([update_features(RelationState(**single))]))[0])


def test_the_subject_is_the_speaker_a_relative_or_a_name() -> None:
    assert subjects(analyse("I live in Madrid."), "Ana") == {"person:ana"}
    assert subjects(analyse("My sister lives in Madrid."), "Ana") == {"kin:sister@ana"}
    assert subjects(analyse("Piet drives a Clio."), "Ana") == {"person:piet"}
    assert subjects(analyse("Marisol moved on, so Claire is my boss."), "Ana") == {"person:marisol", "person:ana"}
    assert subjects(analyse("Living in Cork has its perks."), "Ana") == {"person:ana"}  # a place is no subject
    # beside a relative as the subject, "me" is its object: the relative's attribute alone
    assert subjects(analyse("My uncle phones me from his new Nokia."), "Ana") == {"kin:uncle@ana"}
    assert subjects(analyse("Same as me, my brother Tom loves ramen."), "Ana") == {"person:tom"}
    # a name beside "me" may be the value of an attribute of the speaker (a manager): about both
    assert subjects(analyse("Dana wants the slides from me by noon."), "Ana") == {"person:dana", "person:ana"}
    assert subjects(analyse("My uncle lent me his car, so I drive a Fiat now."), "Ana") == {"kin:uncle@ana", "person:ana"}
    assert subjects(analyse("Where are you living?"), "assistant") == frozenset()


def test_the_listener_is_a_subject_only_where_a_clause_opens_with_them() -> None:
    """"You" after a verb or a preposition is an object, often the generic one: the text is
    still the speaker's; "your", "you're" and a clause opening with "you" are about the listener."""
    assert subjects(analyse("The coaches at Kestrel really push you."), "Ana") == {"person:ana"}
    assert subjects(analyse("Thank you, the flat in Porto is lovely."), "Ana") == {"person:ana"}
    assert subjects(analyse("Your flat in Porto sounds lovely."), "Ana") == frozenset()
    assert subjects(analyse("So you moved to Lyon."), "Ana") == frozenset()
    assert subjects(analyse("Do you still drive the Golf?"), "Ana") == frozenset()
    assert subjects(analyse("I told you I moved to Lyon."), "Ana") == {"person:ana"}


def test_a_name_before_what_it_is_or_what_it_did_is_the_subject() -> None:
    """"Yusuf is a regular at ..." and "Yusuf lent me ..." are Yusuf's; "Lotte is my partner",
    "Home is Valencia" and "Kestrel is where I swim" name the speaker's value; a capitalised word
    inside a thing's name is no subject; a sentence that opens with a verb in the past has none."""
    assert subjects(analyse("Yusuf is a regular at the climbing wall."), "Ana") == {"person:yusuf"}
    assert subjects(analyse("Yusuf is crazy about dumplings."), "Ana") == {"person:yusuf"}
    assert subjects(analyse("Yusuf rented a Fiat Panda for the weekend."), "Ana") == {"person:yusuf"}
    assert subjects(analyse("Lotte is my partner."), "Ana") == {"person:ana"}
    assert subjects(analyse("Home is Valencia for me now."), "Ana") == {"person:ana"}
    assert subjects(analyse("Kestrel is where I swim now."), "Ana") == {"person:ana"}
    assert subjects(analyse("The Fiat Panda is holding up well."), "Ana") == {"person:ana"}
    assert subjects(analyse("Booked tickets for the coast."), "Ana") == {"person:ana"}


def test_batched_answers_equal_single_ones_and_old_states_still_work() -> None:
    states = [_state("I live in Porto.", "I moved to Lisbon."), _state("I live in Madrid.", "My sister lives in Madrid.")]
    batch = relation_many(states, None)
    assert [a.nouls for a in batch] == [relation(s).nouls for s in states]
    legacy = {"older": "I live in Porto.", "newer": "I moved to Lisbon.", "cosine": 0.6, "lexical": 0.1, "entity": 0.0,
              "gap": 3, "same_speaker": True}  # a state from before the speakers, roles and hours
    assert 0.5 < relation(legacy).p("updates") <= 1.0
    assert relation({**legacy, "same_speaker": False}).p("updates") < 0.5


async def test_the_backend_uses_the_model_it_is_given() -> None:
    shipped = UpdateModel.shipped()
    never = UpdateModel(UPDATE_FEATURES, shipped.mean, shipped.scale, np.zeros(len(UPDATE_FEATURES)), -20.0)
    [answer] = await LocalSystemOne(update_model=never).ask([Item(RELATION, _state("I live in Porto.", "I moved to Lisbon."))])
    assert answer.p("updates") < 1e-6 and set(answer.nouls) == {q.key for q in RELATION.nouls()}


def test_a_model_for_other_features_or_unreadable_weights_is_rejected() -> None:
    n = len(UPDATE_FEATURES)
    with pytest.raises(SystemOneError):
        UpdateModel(("cosine",), np.zeros(1), np.ones(1), np.zeros(1), 0.0)
    with pytest.raises(SystemOneError):
        UpdateModel(UPDATE_FEATURES, np.zeros(n), np.zeros(n), np.zeros(n), 0.0)
    with pytest.raises(SystemOneError):
        UpdateModel.from_json(b'{"features": []}')


def test_the_write_path_state_carries_speakers_roles_and_hours() -> None:
    t0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)

    def node(seq: int, text: str, speaker: str | None, role: str, at: datetime | None) -> MemoryNode:
        return MemoryNode(id=f"n{seq}", tenant_id="t", conversation_id="c", event_id=f"e{seq}", seq=seq, content=text,
                          speaker=speaker, role=role, observed_at=at)

    f = CandidateFeatures(cosine=0.5, lexical=0.2, entity=0.0, temporal=0.1)
    state = relation_state(node(9, "I moved to Lisbon.", "Ana", "user", t0 + timedelta(hours=30)),
                           node(2, "I live in Porto.", "Ana", "user", t0), f)
    assert "question" not in state  # a question goes with a pair judged at recall only
    st = RelationState.model_validate(state)
    assert (st.older_speaker, st.newer_speaker, st.older_role, st.newer_role) == ("Ana", "Ana", "user", "user")
    assert st.hours == pytest.approx(30.0) and st.gap == 7 and st.same_speaker
    assert relation(state).p("updates") > 0.5
    unknown = RelationState.model_validate(relation_state(node(3, "ok", None, "assistant", None),
                                                          node(1, "hi", "Ana", "user", t0), f))
    assert unknown.hours is None and unknown.newer_speaker == "" and not unknown.same_speaker and unknown.attribute is None
    known = relation_state(node(9, "I moved to Lisbon.", "Ana", "user", t0),
                           node(2, "I live in Porto.", "Ana", "user", t0), f, 0.61)
    assert RelationState.model_validate(known).attribute == 0.61


def test_the_training_script_runs_and_writes_loadable_weights(tmp_path: Path) -> None:
    out = tmp_path / "weights.json"
    run = subprocess.run([sys.executable, "scripts/train_update_judge.py", "--rounds", "3", "--out", str(out)],
                         capture_output=True, text=True, timeout=120, check=False,
                         cwd=ROOT)
    assert run.returncode == 0, run.stderr
    model = UpdateModel.from_json(out.read_bytes())
    assert model.features == UPDATE_FEATURES and model.meta["rounds"] == 3
    assert '"heldout"' in run.stdout and SHIPPED.endswith(".json")
