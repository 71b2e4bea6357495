"""Prometheus metrics, trace ids and JSON logs of the API (embedded service, real HTTP)."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator

import httpx
import orjson
import pytest

from jevmem import logs, metrics
from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService
from query_api.auth import Authenticator, mint
from query_api.http import create_app
from storage.keys import SqliteKeyStore
from tests.conftest import chat_observations, serve_http
from topology import observe
from topology.ports import Embedder


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logs.JsonFormatter())
        self.lines: list[dict[str, object]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(orjson.loads(self.format(record)))


@pytest.fixture
def captured() -> Iterator[Capture]:
    handler = Capture()
    logger = logging.getLogger("jevmem")
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(old)


def _sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample of the exposition (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = rf"^{re.escape(name)}{re.escape('{' + want + '}') if want else ''} (\S+)$"
    m = re.search(pattern, text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


def test_metrics_trace_ids_and_json_logs(embedder: Embedder, captured: Capture) -> None:
    store = SqliteKeyStore(":memory:")
    key, record = mint("secret-tenant-name", ["ingest", "query", "admin"])
    asyncio.run(store.create(record))
    app = create_app(EmbeddedService(Settings(), embedder=embedder, data_dir=":memory:"), Authenticator(store))
    metrics.attach(app)
    before = metrics.exposition().decode()
    with serve_http(app) as url, httpx.Client(base_url=url, timeout=60,
                                              headers={"Authorization": f"Bearer {key}"}) as c:
        items = [o.model_dump(mode="json", exclude={"tenant_id"}) for o in chat_observations(n=6)]
        r = c.post("/v1/observations", json=[*items, {"content": "no ids"}], headers={"X-Trace-Id": "ab" * 8})
        assert r.status_code == 422 and r.headers["x-trace-id"] == "ab" * 8 and r.json()["trace_id"] == "ab" * 8
        q = c.post("/v1/query", json={"conversation_id": "c1", "question": "What is the name of Ana's puppy?"})
        trace_id = q.headers["x-trace-id"]
        assert re.fullmatch(r"[0-9a-f]{32}", trace_id) and q.json()["trace_id"] == trace_id
        assert c.post("/v1/query", json={"conversation_id": "c1"}).status_code == 422
        text = c.get("/metrics").text
    assert "secret-tenant-name" not in text  # no tenant (or conversation) ids as label values
    assert _sample(text, "jevmem_observations_accepted_total") - _sample(before, "jevmem_observations_accepted_total") == 6
    assert _sample(text, "jevmem_dead_letters_total", origin="http") >= 1
    for stage in ("numbering", "embed", "typing", "store_writes", "candidates", "relations"):
        assert _sample(text, "jevmem_stage_seconds_count", stage=stage) > 0, stage
    assert _sample(text, "jevmem_query_seconds_count") >= 1
    assert _sample(text, "jevmem_controller_requests_per_query_count") >= 1
    assert _sample(text, "jevmem_controller_requests_per_write_count") >= 1
    assert _sample(text, "jevmem_http_requests_total", method="POST", route="/v1/query", status="200") >= 1
    assert _sample(text, "jevmem_http_requests_total", method="POST", route="/v1/query", status="422") >= 1
    # the ingest and the query are logged as JSON lines carrying their trace ids
    ingest = [ln for ln in captured.lines if ln["msg"] == "ingest"]
    assert ingest and ingest[-1]["trace_id"] == "ab" * 8 and ingest[-1]["accepted"] == 6
    query = [ln for ln in captured.lines if ln["msg"] == "query"]
    assert query and query[-1]["trace_id"] == trace_id and query[-1]["evidence"] == len(q.json()["evidence"]) == 6
    assert observe.TRACE_ID.get() is None  # nothing leaks out of a request


def test_json_formatter_keeps_extras_and_exceptions() -> None:
    formatter = logs.JsonFormatter()
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = logging.LogRecord("jevmem.x", logging.ERROR, __file__, 1, "failed %s", ("here",), sys.exc_info())
    record.events = ["e1"]
    token = observe.TRACE_ID.set("feed" * 4)
    try:
        line = orjson.loads(formatter.format(record))
    finally:
        observe.TRACE_ID.reset(token)
    assert line["msg"] == "failed here" and line["level"] == "ERROR" and line["events"] == ["e1"]
    assert line["trace_id"] == "feed" * 4 and "ValueError: boom" in line["exc"]


async def test_tally_sums_the_stages_of_a_block_and_the_tasks_it_starts() -> None:
    import asyncio

    from topology import observe

    async def stage(name: str) -> None:
        with observe.timed(name):
            await asyncio.sleep(0.01)

    with observe.timed("outside"):
        pass
    with observe.tally() as stages:
        await stage("embed")
        await asyncio.gather(asyncio.create_task(stage("embed")), stage("emit"))
    with observe.timed("after"):
        pass
    assert set(stages) == {"embed", "emit"}  # nothing from before or after the block
    assert stages["embed"] >= 0.02 and stages["emit"] >= 0.01
