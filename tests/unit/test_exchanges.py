"""A user's turn and the assistant's reply to it, recalled across the user's sessions: the
user's own words rank above the reply that elaborates them, unless the question asks what the
assistant said; the lift is a share of the reply's score and nothing else."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from jevmem.settings import Settings
from jevmem.wiring import Embedded, build_embedded
from query_api.retrieval import formulas
from topology.params import Params
from topology.ports import Embedder
from topology.schemas import Observation, Realm

T0 = datetime(2024, 3, 1, 9, tzinfo=UTC)
REALM = Realm(tenant_id="t", user_id="u")
SESSIONS = [
    [("user", "I also need some help organising my kitchen. I recently bought a new utensil holder to keep the "
              "countertops clutter-free."),
     ("assistant", "Organising a kitchen can be a challenge! Here are some tips to keep it clean and tidy: sort your "
                   "utensils by how often you use them, wipe the counters down every evening, clean as you cook, and "
                   "empty the sink before bed so dishes never pile up.")],
    [("user", "I'm thinking of hosting a painting party at my place next month. Any ideas?"),
     ("assistant", "What a great idea! Cover the floor and tables with drop cloths so cleaning up afterwards is "
                   "quick, set up stations with brushes and water cups, and keep paper towels and a bin at every "
                   "table.")],
    [("user", "Can you recommend a good podcast about the history of Rome?"),
     ("assistant", "Sure! The History of Rome by Mike Duncan is a classic, and Emperors of Rome is great for shorter "
                   "episodes.")],
]


def _params(weight: float) -> Params:
    p = Params()
    return p.model_copy(update={"realm": p.realm.model_copy(update={"exchange_weight": weight})})


async def _stack(embedder: Embedder, weight: float) -> AsyncIterator[Embedded]:
    mem = build_embedded(Settings(params=_params(weight)), embedder=embedder, data_dir=":memory:")
    await mem.pipeline.ingest([
        Observation(tenant_id="t", conversation_id=f"s{i}", event_id=f"s{i}:{j}", content=text, speaker=role,
                    role=role, user_id="u", observed_at=T0 + timedelta(days=i, seconds=30 * j))
        for i, session in enumerate(SESSIONS) for j, (role, text) in enumerate(session)])
    yield mem
    await mem.close()


@pytest.fixture
async def lifted(model_embedder: Embedder) -> AsyncIterator[Embedded]:
    async for mem in _stack(model_embedder, Params().realm.exchange_weight):
        yield mem


@pytest.fixture
async def alone(model_embedder: Embedder) -> AsyncIterator[Embedded]:
    async for mem in _stack(model_embedder, 0.0):
        yield mem


async def _ranked(mem: Embedded, question: str) -> list[tuple[str, float]]:
    res = await mem.controller.retrieve_realm(REALM, question, 10)
    return [(e.event_id, e.score) for e in res.evidence]


def test_the_lift_is_a_share_of_the_replys_score() -> None:
    assert formulas.exchange_lift(0.4, 0.8, 0.5) == pytest.approx(0.8)
    assert formulas.exchange_lift(0.4, -0.2, 0.5) == pytest.approx(0.4)
    assert formulas.exchange_lift(0.4, 0.8, 0.0) == pytest.approx(0.4)


async def test_the_users_words_rank_above_the_reply_that_elaborates_them(lifted: Embedded, alone: Embedded) -> None:
    question = "My kitchen's becoming a bit of a mess again. Any tips for keeping it clean?"
    # scored alone, the assistant's long, on-topic reply outranks what the user said
    assert (await _ranked(alone, question))[0][0] == "s0:1"
    ranked = await _ranked(lifted, question)
    assert [i for i, _ in ranked[:2]] == ["s0:0", "s0:1"], ranked
    # another session's user turn rises only by its own reply's share, and stays below
    assert [i for i, _ in ranked].index("s1:0") > 1


async def test_a_question_about_what_the_assistant_said_leaves_its_reply_first(
        lifted: Embedded, alone: Embedded) -> None:
    question = "What tips did you give me for keeping my kitchen clean?"
    ranked = await _ranked(lifted, question)
    assert ranked == await _ranked(alone, question)
    assert ranked[0][0] == "s0:1"
