"""Forgotten means gone from the files, distributed: a real Kafka broker, a real Elasticsearch node
and a Faust worker with encryption on. A forget is applied (the worker moves on: a conversation
sent after it is written without waiting for the purge), then purged in the background. Once it
is logged purged, no segment of the data-key, memories or edge indices holds a deleted document
(``_segments``, not ``_stats``: the searcher's count says 0 while the files still hold them), and,
when the Elasticsearch node's data folder is on this machine, Lucene itself (``es.sh scan``:
every document of every segment, deleted ones included) finds neither the forgotten text nor a
destroyed key's wrapped value (each found there before the forget, so the scan can see them). A
second forget, on the now older indices, is purged the same way.

Needs ``JEVMEM_TEST_KAFKA`` and ``JEVMEM_TEST_ES_URL`` (``scripts/test`` starts the servers).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from elasticsearch import AsyncElasticsearch
from pydantic import SecretStr

from tests.integration.servers import ES_URL, KAFKA, SINGLE_BROKER

pytestmark = pytest.mark.integration
if not (KAFKA and ES_URL):
    pytest.skip("JEVMEM_TEST_KAFKA / JEVMEM_TEST_ES_URL not set", allow_module_level=True)

from jevmem.bench.kafka import spawn_worker, stop_workers, worker_env  # noqa: E402
from jevmem.distributed import DistributedService  # noqa: E402
from jevmem.settings import Settings  # noqa: E402
from streams.kafka_admin import ensure_topics  # noqa: E402
from tests.conftest import chat_observations  # noqa: E402
from tests.integration.test_poison import DIM, Service, embeddings, wait_for  # noqa: E402, F401
from topology.schemas import Observation, Scope  # noqa: E402

MARKER, MARKER2 = "Wqxforgetmarker", "Wqxsecondmarker"
ES_SH = Path(__file__).resolve().parents[2] / "scripts" / "elasticsearch" / "es.sh"


async def index_folders(es: AsyncElasticsearch, indices: list[str]) -> list[Path]:
    """The data folders of ``indices`` on this machine (empty when the node's data path is not here)."""
    fs = await es.nodes.stats(metric="fs")
    roots = [Path(d["path"]) for n in fs["nodes"].values() for d in n["fs"]["data"]]
    settings = await es.indices.get_settings(index=",".join(indices))
    uuids = [s["settings"]["index"]["uuid"] for s in settings.body.values()]
    return [r / "indices" / u for r in roots for u in uuids if (r / "indices" / u).is_dir()]


async def segment_deletes(es: AsyncElasticsearch, indices: list[str]) -> dict[str, int]:
    """Deleted documents per index, as its segments count them."""
    got = (await es.indices.segments(index=",".join(indices))).body["indices"]
    return {name: sum(seg.get("deleted_docs", 0) for copies in i["shards"].values() for c in copies
                      for seg in c["segments"].values()) for name, i in got.items()}


def lucene_hits(folders: list[Path], needles: list[str]) -> int:
    """Documents (live or deleted) of ``folders`` whose stored fields hold one of ``needles``, as
    Lucene reads the latest commit (scripts/elasticsearch/es.sh scan)."""
    total = 0
    for folder in folders:
        out = subprocess.run(["bash", str(ES_SH), "scan", str(folder), *needles], capture_output=True, text=True,
                             check=True, timeout=120)
        total += sum(json.loads(out.stdout.strip().splitlines()[-1])["hits"].values())
    return total


async def test_a_forget_is_applied_at_once_and_purged_from_every_segment_in_the_background(
        embeddings: Service, tmp_path: Path) -> None:  # noqa: F811 (the fixture imported above)
    tag = uuid.uuid4().hex[:8]
    kek = SecretStr(base64.b64encode(os.urandom(32)).decode())
    settings = Settings(kafka_bootstrap=KAFKA or "", elasticsearch_url=ES_URL or "", qdrant_url=None,
                        topic_prefix=f"fz{tag}", app_id=f"fz{tag}", store_prefix=f"fz{tag}-", partitions=2,
                        write_batch=16, embedder=f"openai:fake-embed:{DIM}", embedding_url=embeddings.url,
                        encryption=True, encryption_kek=kek, **SINGLE_BROKER)
    ensure_topics(KAFKA or "", settings.topic_prefix, settings.topic_layout())
    log = tmp_path / "worker.log"
    worker = spawn_worker({**worker_env(settings), "JEVMEM_WORKER_DATADIR": str(tmp_path / "worker")}, log)
    service = DistributedService(settings)
    await service.start()
    es = AsyncElasticsearch(ES_URL or "")
    keys_index = f"fz{tag}-datakeys"
    c1, c2, c3 = (Scope(tenant_id="fz", conversation_id=c) for c in ("c1", "c2", "c3"))

    def marked(scope: Scope, marker: str) -> list[Observation]:
        return [o.model_copy(update={"content": f"{o.content} {marker}"})
                for o in chat_observations(tenant="fz", conversation=scope.conversation_id)]

    def logged(msg: str) -> int:
        return log.read_text(errors="replace").count(f'"msg":"{msg}"')

    async def holds(scope: Scope, n: int) -> bool:
        service.stores.fresh_reads()
        return len(await service.nodes(scope)) == n

    async def wrapped_keys(scope: Scope) -> list[str]:
        await es.indices.refresh(index=keys_index)
        hits = (await es.search(index=keys_index, query={"term": {"conversation_id": scope.conversation_id}},
                                size=1000))["hits"]["hits"]
        return [h["_source"]["wrapped"] for h in hits]

    try:
        first, second = marked(c1, MARKER), marked(c2, MARKER2)
        await service.submit(first + second)
        await wait_for(lambda: holds(c1, len(first)), "the conversations", worker, log)
        await wait_for(lambda: holds(c2, len(second)), "the conversations", worker, log)
        keys1, keys2 = await wrapped_keys(c1), await wrapped_keys(c2)
        assert len(keys1) >= len(first) and len(keys2) >= len(second)
        indices = sorted({keys_index, *(await es.indices.get(index=f"fz{tag}-*")).body})
        await es.indices.flush(index=",".join(indices))
        folders = await index_folders(es, indices)
        seen_before = bool(folders) and lucene_hits(folders, [MARKER, MARKER2, *keys1[:3], *keys2[:3]]) > 0

        # applied at once, and the worker moves on without waiting for the purge
        t0 = time.monotonic()
        assert (await service.forget(c1, None)).status == "accepted"
        await service.submit(chat_observations(tenant="fz", conversation="c3"))
        await wait_for(lambda: holds(c3, len(first)), "the conversation sent after the forget", worker, log)
        behind_s = time.monotonic() - t0
        assert logged("forget applied") == 1
        assert behind_s < 15.0, f"a conversation sent after a forget took {behind_s:.1f} s to be written"

        await wait_for(lambda: _true(logged("forget purged") == 1), "the forget to be purged", worker, log, timeout=150)
        purged_s = time.monotonic() - t0
        deleted = await segment_deletes(es, indices)
        assert any("memories" in n for n in deleted) and any("edges" in n for n in deleted), deleted
        assert deleted[keys_index] == 0 and all(v == 0 for v in deleted.values()), deleted
        if seen_before:  # the node's files are on this machine and Lucene saw the text and keys before
            assert lucene_hits(folders, [MARKER, *keys1]) == 0
            assert lucene_hits(folders, [MARKER2, *keys2[:3]]) > 0  # what was not forgotten is still there
        service.stores.fresh_reads()
        assert await service.nodes(c1) == [] and len(await service.nodes(c2)) == len(second)

        # a second forget, on indices that already held and purged deletes
        assert (await service.forget(c2, None)).status == "accepted"
        await wait_for(lambda: _true(logged("forget purged") == 2), "the second forget to be purged", worker, log,
                       timeout=150)
        assert all(v == 0 for v in (await segment_deletes(es, indices)).values())
        if seen_before:
            assert lucene_hits(folders, [MARKER2, *keys2]) == 0
        print(f"written {behind_s:.1f} s after a forget; first forget purged {purged_s:.1f} s after it was accepted; "
              f"Lucene scan: {seen_before}")
    finally:
        stop_workers([worker], timeout_s=20)
        await service.stop()
        await es.close()


async def _true(value: bool) -> bool:
    return value
