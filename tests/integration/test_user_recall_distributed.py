"""Recall of a user's memory across their sessions, end to end in the distributed deployment: a
user's sessions go through :class:`~jevmem.distributed.DistributedService` onto a real Kafka
broker, a Faust worker process writes them to a real Elasticsearch node and a real Qdrant server
(or Elasticsearch's exact vector index: the fallback), and ``recall`` finds a fact stated in one
session among many in one ranking over the user's sessions; other users, sessions without a user
and other tenants stay out of it, and a forgotten session is never recalled again.

Needs ``JEVMEM_TEST_KAFKA``, ``JEVMEM_TEST_ES_URL`` and ``JEVMEM_TEST_QDRANT_URL`` (``scripts/test``
starts the three servers).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

from tests.integration.servers import ES_URL, KAFKA, QDRANT_URL, SINGLE_BROKER  # noqa: E402

if not (KAFKA and ES_URL and QDRANT_URL):
    pytest.skip("JEVMEM_TEST_KAFKA / JEVMEM_TEST_ES_URL / JEVMEM_TEST_QDRANT_URL not set", allow_module_level=True)

from jevmem.bench.kafka import spawn_worker, stop_workers, worker_env  # noqa: E402
from jevmem.distributed import DistributedService  # noqa: E402
from jevmem.settings import Settings  # noqa: E402
from query_api.recall import recall  # noqa: E402
from query_api.service import ForgetAccepted  # noqa: E402
from storage.elastic.vectors import ElasticVectorIndex  # noqa: E402
from storage.qdrant.index import QdrantVectorIndex  # noqa: E402
from streams.kafka_admin import ensure_topics  # noqa: E402
from topology.embedding import default_embedder  # noqa: E402
from topology.schemas import Observation, Realm, Scope  # noqa: E402

T0 = datetime(2024, 3, 1, tzinfo=UTC)
SESSIONS = 12
FACT = "My locker code at the gym is 4417, I keep forgetting it."
BEN_FACT = "The code of my gym locker is 9902."
QUESTION = "What is my locker code at the gym?"


def sessions(user: str | None, tenant: str = "acme", n: int = SESSIONS, fact_at: int | None = None,
             fact: str = FACT, name: str | None = None) -> list[Observation]:
    """``n`` three-turn sessions of ``user`` (None: sessions that name no user) about other
    things; session ``fact_at`` states ``fact``."""
    who = name or user or "anon"
    out = []
    for s in range(n):
        turns = [f"Session {s}: we talked about the weather and a recipe for soup number {s}.",
                 f"I watched episode {s} of a cooking show yesterday.",
                 fact if s == fact_at else f"Remind me to water the plants on day {s}."]
        out += [Observation(tenant_id=tenant, conversation_id=f"{who}-s{s:03d}", event_id=f"t{t}", user_id=user,
                            content=text, speaker=who, observed_at=T0 + timedelta(days=s, minutes=t))
                for t, text in enumerate(turns)]
    return out


async def wait_for(check: Callable[[], Awaitable[bool]], what: str, log: Path, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(1.0)
    pytest.fail(f"timed out waiting for {what}\n{log.read_text(errors='replace')[-4000:]}")


@pytest.fixture(params=["qdrant", "elastic"])
async def deployment(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[DistributedService, Path]]:
    """A distributed service and one worker on fresh topics and store prefix; vectors in Qdrant
    (as deployed) or in Elasticsearch's exact index (no Qdrant URL)."""
    tag = uuid.uuid4().hex[:8]
    settings = Settings(kafka_bootstrap=KAFKA or "", elasticsearch_url=ES_URL or "",
                        qdrant_url=QDRANT_URL if request.param == "qdrant" else None, topic_prefix=f"ur{tag}",
                        app_id=f"ur{tag}", store_prefix=f"ur{tag}-", partitions=4, write_batch=16)
    settings = settings.model_copy(update=SINGLE_BROKER)  # the single test broker's topic layout
    ensure_topics(KAFKA or "", settings.topic_prefix, settings.topic_layout())
    log = tmp_path / "worker.log"
    worker = spawn_worker({**worker_env(settings), "JEVMEM_WORKER_DATADIR": str(tmp_path / "worker")}, log)
    service = DistributedService(settings, embedder=default_embedder())
    await service.start()
    try:
        want = QdrantVectorIndex if request.param == "qdrant" else ElasticVectorIndex
        assert isinstance(service.stores.vectors, want)
        yield service, log
    finally:
        await service.stop()
        stop_workers([worker], timeout_s=20)


async def test_a_users_fact_is_recalled_across_their_sessions(deployment: tuple[DistributedService, Path]) -> None:
    service, log = deployment
    ana = sessions("ana", fact_at=7)
    ben = sessions("ben", n=5, fact_at=3, fact=BEN_FACT)
    anon = sessions(None, n=2, fact_at=1, fact="Note for everyone: the gym locker code for guests is 1234.")
    globex = sessions("ana", tenant="globex", n=3, fact_at=2, fact="My locker code at the gym is 5150.")
    everything = ana + ben + anon + globex
    await service.submit(everything)
    scopes = {o.scope for o in everything}

    async def written() -> bool:
        counts = [await service.stores.nodes.observation_count(s) for s in scopes]
        return counts == [3] * len(scopes)

    await wait_for(written, f"{len(everything)} observations in {len(scopes)} sessions to be written", log)

    # one user's memory: the fact of one session among twelve, first, and nothing of anyone else's
    out = await recall(service, "acme", QUESTION, top_k=5, user_id="ana")
    top = out.evidence[0]
    assert (top.conversation_id, top.event_id, top.content) == ("ana-s007", "t2", FACT)
    assert all(e.conversation_id.startswith("ana-") for e in out.evidence)
    assert out.user_id == "ana" and sum(c.evidence for c in out.conversations) == len(out.evidence)
    scores = [e.score for e in out.evidence]
    assert scores == sorted(scores, reverse=True)
    # the service's recall is the controller's realm retrieval
    direct = await service.recall(Realm(tenant_id="acme", user_id="ana"), QUESTION, 5)
    assert [e.node_id for e in direct.evidence] == [e.node_id for e in out.evidence]

    # another user's recall finds their own fact; a tenant-wide one finds every fact, the
    # sessions without a user included, and never another tenant's
    ben_out = await recall(service, "acme", QUESTION, top_k=5, user_id="ben")
    assert ben_out.evidence[0].content == BEN_FACT
    assert all(e.conversation_id.startswith("ben-") for e in ben_out.evidence)
    tenant = await recall(service, "acme", QUESTION, top_k=10)
    contents = [e.content for e in tenant.evidence]
    assert FACT in contents and BEN_FACT in contents and any("guests" in c for c in contents)
    assert not any("5150" in c for c in contents)
    acme_ids = {o.scope for o in ana + ben + anon}
    assert all(Scope(tenant_id="acme", conversation_id=e.conversation_id) in acme_ids for e in tenant.evidence)
    assert not any("guests" in e.content for e in out.evidence)
    other = await recall(service, "globex", QUESTION, top_k=5, user_id="ana")
    assert "5150" in other.evidence[0].content and all(e.conversation_id in {"ana-s000", "ana-s001", "ana-s002"}
                                                       for e in other.evidence)
    # a list of the user's sessions limits the search to them
    some = await recall(service, "acme", QUESTION, top_k=5, user_id="ana", conversation_ids=["ana-s001", "ana-s002"])
    assert some.evidence and {e.conversation_id for e in some.evidence} <= {"ana-s001", "ana-s002"}
    assert FACT not in [e.content for e in some.evidence]
    assert (await recall(service, "acme", QUESTION, top_k=5, user_id="nobody")).evidence == []

    # a forgotten session is never recalled again
    assert await service.forget(Scope(tenant_id="acme", conversation_id="ana-s007"), None) == ForgetAccepted()

    async def forgotten() -> bool:
        return await service.stores.nodes.observation_count(Scope(tenant_id="acme", conversation_id="ana-s007")) == 0

    await wait_for(forgotten, "the forget of ana-s007", log)
    after = await recall(service, "acme", QUESTION, top_k=10, user_id="ana")
    assert after.evidence and all(e.conversation_id != "ana-s007" for e in after.evidence)
    assert FACT not in [e.content for e in after.evidence]


OLD_HOME = "I live in Porto, near the old bridge."
NEW_HOME = "I moved to Lisbon last month, I live there now."
HOME = "Where does Ana live now?"


@pytest.mark.parametrize("deployment", ["qdrant"], indirect=True)
async def test_an_update_in_a_later_session_is_caught_when_written(deployment: tuple[DistributedService, Path]) -> None:
    """The worker's relation request asks the update question of the speaker's earlier memories in
    the user's other sessions (read from the shared stores): the supersedes edge is written with
    the newer session, recall by user ranks the replacement first and marks the older memory, and
    forgetting the replacement makes the older memory current again."""
    service, log = deployment

    def said(session: str, day: int, text: str, speaker: str = "Ana") -> Observation:
        return Observation(tenant_id="acme", conversation_id=session, event_id=f"d{day}", user_id="ana",
                           content=text, speaker=speaker, observed_at=T0 + timedelta(days=day))

    first = [said("home-s0", 0, OLD_HOME), said("home-s0", 1, "Porto is lovely in spring.", "Ben"),
             said("home-s0", 2, "We watched a film about space travel.")]
    later = [said("home-s1", 30, "Dinner was pasta with too much garlic."), said("home-s1", 31, NEW_HOME)]
    s0, s1 = first[0].scope, later[0].scope
    await service.submit(first)

    async def count(scope: Scope, n: int) -> bool:
        return await service.stores.nodes.observation_count(scope) == n

    await wait_for(lambda: count(s0, 3), "the first session", log)
    await service.submit(later)
    await wait_for(lambda: count(s1, 2), "the later session", log)

    async def superseding() -> bool:
        return any(e.label == "supersedes" for e in await service.stores.edges.scan(s1))

    await wait_for(superseding, "the supersedes edge", log)
    edges = [e for e in await service.stores.edges.scan(s1) if e.label == "supersedes"]
    old_id = next(n.id for n in await service.stores.nodes.scan(s0) if n.event_id == "d0")
    new_id = next(n.id for n in await service.stores.nodes.scan(s1) if n.event_id == "d31")
    assert [(e.source, e.target) for e in edges] == [(new_id, old_id)]
    out = await recall(service, "acme", HOME, top_k=10, user_id="ana")
    at = {e.event_id: (i, e) for i, e in enumerate(out.evidence)}
    assert at["d31"][0] < at["d0"][0] and at["d0"][1].superseded_by == [NEW_HOME]

    assert await service.forget(s1, "d31") == ForgetAccepted()
    await wait_for(lambda: count(s1, 1), "the forget of the replacement", log)
    again = {e.event_id: e for e in (await recall(service, "acme", HOME, top_k=10, user_id="ana")).evidence}
    assert "d31" not in again and again["d0"].superseded_by == []
