"""What a recall over a user's sessions asks the servers, in the distributed deployment: the
sessions written by a worker's write path into a real Elasticsearch node and a real Qdrant server
(:class:`jevmem.bench.servers.ServerStores`), then recalled by a reader started afresh.

* A step of the retrieval reads every conversation of its candidates in one request (edges: one
  search; nodes: one mget), however many sessions the pool spans; the edges at the nodes a step
  fetches are fetched beside them, and no group document twice.
* A recall refreshes the indices it reads once, in one request sent as it starts.
* The first recall after a start asks what later ones ask, plus the one lookup of the tenant's
  memories index: the vector collection and the edge index are made ready at the start.

Needs ``JEVMEM_TEST_ES_URL`` and ``JEVMEM_TEST_QDRANT_URL`` (``scripts/test`` starts the servers).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

from tests.integration.servers import ES_URL, QDRANT_URL  # noqa: E402

if not (ES_URL and QDRANT_URL):
    pytest.skip("JEVMEM_TEST_ES_URL / JEVMEM_TEST_QDRANT_URL not set", allow_module_level=True)

import elastic_transport  # noqa: E402
import httpx  # noqa: E402
import orjson  # noqa: E402
from elasticsearch import AsyncElasticsearch  # noqa: E402

from jevmem.bench.servers import ServerStores  # noqa: E402
from jevmem.settings import Settings  # noqa: E402
from storage.elastic.store import memories_index  # noqa: E402
from topology.embedding import default_embedder  # noqa: E402
from topology.schemas import Observation, Realm  # noqa: E402

T0 = datetime(2024, 3, 1, tzinfo=UTC)
SESSIONS = 24
FACT = "My locker code at the gym is 4417, I keep forgetting it."
QUESTION = "What is my locker code at the gym?"


def sessions() -> list[Observation]:
    """Ana's three-turn sessions about the gym, her plants and cooking; session 9 states the code."""
    out = []
    for s in range(SESSIONS):
        turns = [f"I went to the gym on day {s} and used locker {s + 10} again.",
                 f"Remind me to water the plants and cook soup number {s}.",
                 FACT if s == 9 else f"The gym was crowded on day {s}, I skipped the sauna."]
        out += [Observation(tenant_id="acme", conversation_id=f"ana-s{s:03d}", event_id=f"t{t}", user_id="ana",
                            content=text, speaker="ana", observed_at=T0 + timedelta(days=s, minutes=t))
                for t, text in enumerate(turns)]
    return out


@pytest.fixture
def requests(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Every request to Elasticsearch (``es METHOD /index/_endpoint``) and Qdrant (``qd METHOD
    /path``) made while the test runs, counted; index names end ``<tenant>`` for the memories."""
    seen: Counter[str] = Counter()
    es_call = elastic_transport.AsyncTransport.perform_request
    qd_call = httpx.AsyncClient.send

    async def es(self: Any, method: str, target: str, **kwargs: Any) -> Any:
        seen["es " + method + " " + re.sub(r"[^/]*memories-[0-9a-f]+", "<memories>", target.split("?")[0])] += 1
        return await es_call(self, method, target, **kwargs)

    async def qd(self: Any, request: httpx.Request, **kwargs: Any) -> Any:
        seen["qd " + request.method + " " + request.url.path] += 1
        return await qd_call(self, request, **kwargs)

    monkeypatch.setattr(elastic_transport.AsyncTransport, "perform_request", es)
    monkeypatch.setattr(httpx.AsyncClient, "send", qd)
    return seen


@pytest.fixture
async def written() -> AsyncIterator[ServerStores]:
    tag = uuid.uuid4().hex[:8]
    settings = Settings(elasticsearch_url=ES_URL or "", qdrant_url=QDRANT_URL, write_batch=16)
    writer = ServerStores(settings, default_embedder(), f"rd{tag}-")
    await writer.start()
    try:
        assert await writer.submit(sessions()) == []
        await writer.stop()
        yield writer
    finally:
        await writer.stop()
        await writer.drop()


async def asked(requests: Counter[str], call: Callable[[], Awaitable[Any]]) -> tuple[Any, Counter[str]]:
    requests.clear()
    out = await call()
    return out, Counter(requests)


async def test_a_recall_reads_each_step_in_one_request_and_its_first_asks_no_more_than_later_ones(
        written: ServerStores, requests: Counter[str]) -> None:
    reader = written.restarted()
    await reader.start()
    try:
        realm = Realm(tenant_id="acme", user_id="ana")
        t0 = time.perf_counter()
        first, at_first = await asked(requests, lambda: reader.recall(realm, QUESTION, 10))
        first_ms = (time.perf_counter() - t0) * 1000
        again, later = await asked(requests, lambda: reader.recall(realm, QUESTION, 10))
    finally:
        await reader.stop()
    assert first.evidence[0].content == FACT
    assert [e.node_id for e in again.evidence] == [e.node_id for e in first.evidence]
    spanned = first.trace.conversations
    assert len(spanned) >= 12, spanned  # the pool spans many sessions
    # each step reads its conversations in one request: a handful of requests in all, where a
    # read a conversation would make one for each of them in every step
    assert later["es POST /<memories>/_mget"] <= 5, later
    assert sum(later.values()) <= 12 < len(spanned) + 5, later
    # the edges at the nodes a step fetches are fetched beside them, each document once; the
    # read of what superseded what, at the end, finds them fetched
    assert later["es POST /" + written.prefix + "edges-grouped/_search"] <= later["es POST /<memories>/_mget"], later
    # what a refresh makes current is refreshed once, both indices in one request, at the start
    assert [k for k in later if k.endswith("/_refresh")] == [f"es POST /<memories>,{written.prefix}edges-grouped/_refresh"]
    assert later[f"es POST /<memories>,{written.prefix}edges-grouped/_refresh"] == 1, later
    # the first asks what later ones ask, and looks the tenant's index up once
    extra = at_first - later
    assert set(extra) <= {"es HEAD /<memories>", "es GET /_cluster/health/<memories>"}, (extra, first_ms)
    assert later - at_first == Counter()


async def test_the_write_path_reads_a_users_earlier_sessions_in_one_request_a_step(
        written: ServerStores, requests: Counter[str]) -> None:
    """New sessions' statements are judged against the speaker's earlier memories across the
    user's 24 sessions (``storage.speaker_facts``): those memories are read in one request a
    step, not one a session."""
    writer = written.restarted()
    await writer.start()
    try:
        later = [o.model_copy(update={"conversation_id": f"ana-new{o.conversation_id[-3:]}",
                                      "observed_at": (o.observed_at or T0) + timedelta(days=SESSIONS)})
                 for o in sessions()[:12]]
        _, counted = await asked(requests, lambda: writer.submit(later))
    finally:
        await writer.stop()
    # a few reads a write chunk (the hits, then the memories kept); read one session at a time,
    # the same write made 58
    assert counted["es POST /<memories>/_mget"] <= len(later), sorted(counted.items())


async def test_a_tenants_index_is_made_with_its_first_key_not_by_its_first_write(tmp_path: Path) -> None:
    """``jevmem keys create`` in distributed mode makes the tenant's memories index (with the
    codec of an index every recall reads), so the tenant's first write batch does not wait for
    the index to be created: the index it writes is the one the key's creation made."""
    prefix = f"kt{uuid.uuid4().hex[:8]}-"
    env = {"JEVMEM_MODE": "distributed", "JEVMEM_ELASTICSEARCH_URL": ES_URL or "", "JEVMEM_STORE_PREFIX": prefix,
           "JEVMEM_KEYS_INDEX": prefix + "keys"}
    done = subprocess.run([sys.executable, "-c", "from jevmem.cli import main; main()", "keys", "create",
                           "--tenant", "newco", "--json"], cwd=tmp_path, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout)["tenant"] == "newco"
    settings = Settings(elasticsearch_url=ES_URL or "", qdrant_url=QDRANT_URL, write_batch=16)
    writer = ServerStores(settings, default_embedder(), prefix)
    index = prefix + memories_index("newco")
    es = AsyncElasticsearch(ES_URL or "")
    try:
        made = (await es.indices.get_settings(index=index))[index]["settings"]["index"]
        assert made["codec"] == "default"
        await writer.start()
        assert await writer.submit([o.model_copy(update={"tenant_id": "newco"}) for o in sessions()[:6]]) == []
        await writer.stop()
        after = (await es.indices.get_settings(index=index))[index]["settings"]["index"]
        assert after["uuid"] == made["uuid"] and after["creation_date"] == made["creation_date"]
        await es.indices.refresh(index=index)
        assert (await es.count(index=index))["count"] == 6
    finally:
        await es.close()
        await writer.stop()
        await writer.drop()
