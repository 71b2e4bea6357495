"""Property-based fuzzing, bounded for CI (about a minute): the whole OpenAPI spec over real HTTP
(schemathesis, valid and invalid requests), the event decoders and the text features (hypothesis).

Invariants: no request yields a 5xx; every answer is one the OpenAPI document declares (status
code, content type and body schema: what a client generated from the spec expects); no response
carries another tenant's data; decoders either return a valid event or raise
:class:`InvalidEvent`; text features never raise and stay linear.
``JEVMEM_FUZZ_EXAMPLES`` raises the number of examples per property for a longer run.
"""

from __future__ import annotations

import asyncio
import json
import os
from datetime import date
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService
from query_api.auth import Authenticator, mint
from query_api.http import create_app
from storage.keys import SqliteKeyStore
from streams.write_path import decode_batch
from tests.conftest import chat_observations, serve_http
from topology import text
from topology.errors import InvalidEvent
from topology.ports import Embedder
from topology.schemas import (
    DeadLetter,
    EdgeEvent,
    Forget,
    MemoryNode,
    Observation,
    decode,
    decode_input,
    encode,
)

CONTRACT = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
"""The schemathesis checks every fuzzed response must pass."""
EXAMPLES = int(os.environ.get("JEVMEM_FUZZ_EXAMPLES", "0")) or None
SECRET = "GlobexSecretMarker"


def _bounded(schema: dict[str, Any]) -> dict[str, Any]:
    """The served spec with small bodies (a handful of short observations), so that a minute of
    fuzzing makes hundreds of requests instead of embedding a few huge batches."""
    body = schema["paths"]["/v1/observations"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    body["maxItems"] = 3
    body["items"]["properties"]["content"]["maxLength"] = 200
    return schema


def test_openapi_fuzz_no_5xx_answers_as_documented_and_no_cross_tenant_data(embedder: Embedder) -> None:
    store = SqliteKeyStore(":memory:")
    key_a, rec_a = mint("acme", ["ingest", "query", "admin"])
    key_b, rec_b = mint("globex", ["ingest", "query", "admin"])
    for rec in (rec_a, rec_b):
        asyncio.run(store.create(rec))
    service = EmbeddedService(Settings(), embedder=embedder, data_dir=":memory:")
    with serve_http(create_app(service, Authenticator(store))) as url:
        seeded = [{**o.model_dump(mode="json", exclude={"tenant_id"}), "content": f"{o.content} {SECRET}"}
                  for o in chat_observations(tenant="x", conversation="c1", n=4)]
        with httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {key_b}"}) as b:
            assert b.post("/v1/observations", json=seeded).status_code == 200
            assert b.post("/v1/observations", json=[{"content": f"bad {SECRET}"}]).status_code == 422
        schema = schemathesis.openapi.from_dict(_bounded(httpx.get(f"{url}/openapi.json").json()))
        seen: dict[int, int] = {}

        def check(case: schemathesis.Case, who: str) -> None:
            response = case.call(base_url=url, headers={"Authorization": f"Bearer {who}"}, timeout=60)
            seen[response.status_code] = seen.get(response.status_code, 0) + 1
            assert response.status_code < 500, (case.method, case.path, case.body, response.text[:500])
            case.validate_response(response, checks=CONTRACT)
            assert SECRET not in response.text and key_b not in response.text

        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
            strategy = schema.as_strategy(generation_mode=mode)

            @settings(max_examples=EXAMPLES or 150, deadline=None, database=None, derandomize=True,
                      suppress_health_check=list(HealthCheck))
            @given(case=strategy)
            def run(case: schemathesis.Case) -> None:
                check(case, key_a)

            run()
        # the fuzzer got past authentication and validation, and was refused too
        assert seen.get(200, 0) > 10 and sum(v for k, v in seen.items() if 400 <= k < 500) > 10, seen


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)
FIELDS = ["op", "requested_at", "schema_version", "tenant_id", "conversation_id", "event_id", "content", "speaker",
          "role", "observed_at", "provenance", "entities", "metadata", "id", "seq", "view", "source", "target", "probability"]
OBJECTS = st.dictionaries(st.sampled_from(FIELDS), JSON | st.text(min_size=1, max_size=30), max_size=len(FIELDS))


@settings(max_examples=EXAMPLES or 300, deadline=None, database=None, derandomize=True)
@given(raw=st.binary(max_size=300) | OBJECTS.map(lambda o: json.dumps(o).encode()))
def test_decoders_accept_or_explain(raw: bytes) -> None:
    for cls in (Observation, Forget, MemoryNode, EdgeEvent, DeadLetter):
        try:
            event = decode(cls, raw)
        except InvalidEvent as exc:
            assert exc.reason
        else:
            assert decode(cls, encode(event)) == event  # what is accepted survives its own topic
            if isinstance(event, Observation | Forget):
                assert event.scope.key  # an accepted input always has a valid scope
    try:
        decode_input(raw)
    except InvalidEvent as exc:
        assert exc.reason
    good, letters = decode_batch([(raw, "t:0:1")])
    assert len(good) + len(letters) == 1
    for letter in letters:
        assert letter.reason and letter.source == "t:0:1"
        assert decode(DeadLetter, encode(letter)) == letter


@settings(max_examples=EXAMPLES or 300, deadline=None, database=None, derandomize=True)
@given(content=st.text(alphabet=st.sampled_from(list(" .!?\n\t\"'(aBcZ019-&")) | st.characters(), max_size=300),
       observed=st.dates(min_value=date(1900, 1, 1), max_value=date(2199, 12, 31)))
def test_text_features_never_raise(content: str, observed: date) -> None:
    text.temporal_refs(content, observed)
    assert all(2 <= len(t) <= text.MAX_TOKEN + 1 for t in text.tokens(content))
    assert all(len(e.name) <= text.MAX_ENTITY for e in text.entities(content))
    for i in range(len(content) + 1):
        assert text.opens_sentence(content, i) == bool(text._SENTENCE_START.search(content[:i]))


@pytest.mark.parametrize("content", ["Abc Def. " * 11_000, "9999 years ago " * 6_000, "x" * 99_000,
                                     "99999999999999999999999 days ago", "A" * 99_000])
def test_hostile_content_is_cheap(content: str) -> None:
    import time

    t0 = time.perf_counter()
    text.temporal_refs(content, date(2023, 5, 8))
    text.entities(content)
    text.tokens(content)
    assert time.perf_counter() - t0 < 2.0  # linear: was 27 s for the first (a quadratic prefix scan)
