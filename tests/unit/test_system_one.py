"""System One: the port contract, the local backend, and the typesafe backend over real HTTP
against a local server that speaks POST /v1/systemone."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI, Header, HTTPException, Request
from pydantic import SecretStr
from typesafe_sdk import AsyncTypeSafeClient

from jevmem.settings import Settings
from jevmem.wiring import build_embedded
from tests.conftest import chat_observations, serve_http
from topology.errors import ServiceMisconfigured, SystemOneError
from topology.ports import Embedder
from topology.systemone.catalog import ALL_TASKS, CONSOLIDATION, RELATION, ROUTE, TYPING
from topology.systemone.features import SCORE_FEATURES
from topology.systemone.local import LocalSystemOne
from topology.systemone.port import Answer, CountingSystemOne, Item, check_answers
from topology.systemone.turn_kinds import TURN_KINDS
from topology.systemone.typesafe import TypeSafeSystemOne

#: A complete, valid state for every catalog task (the typed feature models).
STATES: dict[str, dict[str, Any]] = {
    "typing": {"text": "I love hiking", "speaker": "Ana", "role": "user"},
    "relation": {"newer": "a", "older": "b", "cosine": 0.5, "lexical": 0.1, "entity": 0.0, "gap": 1},
    "alias": {"a": "Mel", "b": "Melanie"},
    "consolidation": {"newer": "a", "older": "b", "cosine": 0.5, "entity": 0.0, "negation_mix": 0.0,
                      "update_cue": 0.0, "same_speaker": 1.0, "slot_overlap": 0.2, "older_state": 0.0},
    "route": {"question": "Why did Ana move?"},
    "assess": {"question": "q", "round": 0, "best_relevance": 0.9, "strong": 2, "last_gain": 1.0,
               "multi_hop": 0.3, "negation_mix": 0.0, "evidence": ["a"]},
    "score": {"question": "q", "memory": "m", "speaker": "Ana", "view": "anchor",
              **{f: 0.5 for f in SCORE_FEATURES}},
}


async def test_local_backend_answers_every_catalog_question_in_range() -> None:
    so = LocalSystemOne()
    items = [Item(task, STATES[task.name]) for task in ALL_TASKS]
    answers = check_answers(items, await so.ask(items))
    for item, ans in zip(items, answers, strict=True):
        assert set(ans.nouls) == {q.key for q in item.task.nouls()}
        assert set(ans.choices) == {q.key for q in item.task.choices()}
        for dist in ans.choices.values():
            assert sum(dist.values()) == pytest.approx(1.0)
    assert set(answers[0].choices["kind"]) == set(TURN_KINDS)  # typing: the turn kind


@pytest.mark.parametrize("task", ALL_TASKS, ids=lambda t: t.name)
async def test_a_feature_never_sent_is_an_error(task: Any) -> None:
    state = dict(STATES[task.name])
    state.pop(next(iter(state)))
    with pytest.raises(SystemOneError):
        await LocalSystemOne().ask([Item(task, state)])
    with pytest.raises(SystemOneError):
        await LocalSystemOne().ask([Item(task, {**STATES[task.name], "unknown_feature": 1.0})])


async def test_local_backend_reads_the_cues() -> None:
    so = LocalSystemOne()
    pref, proc = await so.ask([Item(TYPING, {"text": "My favourite food is ramen", "speaker": "", "role": "user"}),
                               Item(TYPING, {"text": "First, install the package, then run the tests.",
                                             "speaker": "", "role": "user"})])
    assert pref.p("preference") > 0.5 > proc.p("preference")
    assert proc.p("procedural") > pref.p("procedural")
    fact, ask = await so.ask([Item(TYPING, {"text": "I'm allergic to peanuts, by the way.", "speaker": "", "role": "user"}),
                              Item(TYPING, {"text": "what am I allergic to again?", "speaker": "", "role": "user"})])
    assert fact.choices["kind"]["statement"] > 0.5 and ask.choices["kind"]["question"] > 0.5
    when, why = await so.ask([Item(ROUTE, {"question": "When did Ana adopt Biscuit?"}),
                              Item(ROUTE, {"question": "Why did Ben stop running?"})])
    assert when.p("temporal") > why.p("temporal") and why.p("causal") > when.p("causal")


def test_contract_violations_are_errors() -> None:
    items = [Item(RELATION, {})]
    with pytest.raises(SystemOneError):
        check_answers(items, [])
    with pytest.raises(SystemOneError):
        check_answers(items, [Answer(nouls={"semantic": 0.5, "caused_by": 1.5, "causes": 0.0})])
    with pytest.raises(SystemOneError):
        check_answers([Item(CONSOLIDATION, {})], [Answer(nouls={k: 0.5 for k in (
            "redundant", "contradiction", "obsolete", "link_useful")}, choices={"representation": {"merge": 1.0}})])


class FakeJev:
    """A Jev-compatible server: answers every noul with 0.7 and choices uniformly."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.app = FastAPI()

        @self.app.post("/v1/systemone")
        async def system_one(request: Request, authorization: str = Header("")) -> dict[str, Any]:
            if authorization != "Bearer test-key":
                raise HTTPException(401, detail="Invalid API key")
            body = await request.json()
            self.requests.append(body)
            answers: dict[str, Any] = {}
            for name, q in body["questions"].items():
                if q["type"] == "noul":
                    answers[name] = {"type": "noul", "noul": 0.7}
                else:
                    labels = list(q["criteria"])
                    answers[name] = {"type": "choice", "choice": labels[0], "confidence": 1 / len(labels),
                                     "probabilities": {lab: 1 / len(labels) for lab in labels}}
            return {"model": body.get("model") or "jev-test", "usage": {"input_tokens": 1, "output_tokens": 1},
                    "answers": answers}


@pytest.fixture
def jev() -> Any:
    fake = FakeJev()
    with serve_http(fake.app) as url:
        yield fake, url


async def test_typesafe_backend_packs_a_batch_into_one_request(jev: Any) -> None:
    fake, url = jev
    client = AsyncTypeSafeClient(api_key="test-key", base_url=url, compression=False)
    so = CountingSystemOne(TypeSafeSystemOne(client, model="jev-test"))
    items = [Item(RELATION, {"newer": f"n{i}", "older": "o", "cosine": 0.3}) for i in range(5)] + [
        Item(CONSOLIDATION, {"newer": "a", "older": "b"})]
    answers = await so.ask(items)
    await so.aclose()
    assert len(fake.requests) == 1 and so.calls == 1
    body = fake.requests[0]
    assert body["model"] == "jev-test"
    assert [s["index"] for s in body["state"]["items"]] == list(range(6))
    assert "4.caused_by" in body["questions"] and body["questions"]["5.representation"]["type"] == "choice"
    assert answers[0].p("semantic") == pytest.approx(0.7)
    assert answers[5].choices["representation"]["merge"] == pytest.approx(0.25)


async def test_typesafe_backend_asks_and_maps_the_turn_kind(jev: Any) -> None:
    fake, url = jev
    so = CountingSystemOne(TypeSafeSystemOne(AsyncTypeSafeClient(api_key="test-key", base_url=url, compression=False)))
    [answer] = await so.ask([Item(TYPING, STATES["typing"])])
    await so.aclose()
    kind = fake.requests[0]["questions"]["0.kind"]
    assert kind["type"] == "choice" and list(kind["criteria"]) == list(TURN_KINDS)
    assert answer.choices["kind"] == {k: pytest.approx(0.2) for k in TURN_KINDS}


async def test_typesafe_backend_splits_large_batches(jev: Any) -> None:
    fake, url = jev
    n = len(RELATION.questions)  # two relation items fit in one request, a third does not
    so = TypeSafeSystemOne(AsyncTypeSafeClient(api_key="test-key", base_url=url, compression=False), max_questions=2 * n)
    counting = CountingSystemOne(so)
    answers = await counting.ask([Item(RELATION, {"i": i}) for i in range(5)])  # 5 items -> 3 chunks
    await so.aclose()
    assert len(answers) == 5 and len(fake.requests) == 3
    # every HTTP request counts as a controller request
    assert counting.calls == 3 and counting.requests_for([n] * 5) == 3 and so.requests_for([]) == 0


async def test_typesafe_errors_are_translated(jev: Any) -> None:
    _, url = jev
    so = TypeSafeSystemOne(AsyncTypeSafeClient(api_key="wrong", base_url=url, compression=False))
    with pytest.raises(ServiceMisconfigured, match="Invalid API key"):  # the deployment's key: not the input
        await so.ask([Item(ROUTE, {"question": "q"})])
    await so.aclose()


async def test_pipeline_runs_on_the_typesafe_backend(jev: Any, embedder: Embedder) -> None:
    fake, url = jev
    settings = Settings(system_one="typesafe", typesafe_base_url=url, typesafe_api_key=SecretStr("test-key"))
    mem = build_embedded(settings, embedder=embedder, data_dir=":memory:")
    try:
        report = await mem.pipeline.ingest(chat_observations(n=4))
        assert report.write_calls == 2 and len(fake.requests) == 2  # typing + relations, whole batch
        edges = await mem.stores.edges.scan(chat_observations(n=1)[0].scope)
        assert any(e.created_by == "system_one" and e.probability == pytest.approx(0.7) for e in edges)
        nodes = await mem.stores.nodes.scan(chat_observations(n=1)[0].scope)
        # the uniform kind answered, stored (not the untyped default, which is also uniform)
        assert nodes and all(n.types.kind == {k: pytest.approx(0.2) for k in TURN_KINDS} for n in nodes)
    finally:
        await mem.close()
