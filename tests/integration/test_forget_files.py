"""Forgotten means gone from the files, distributed: a real Kafka broker, a real Elasticsearch node
and a Faust worker with encryption on. After a forget of a conversation is applied, the data-key
index, the memories indices and the edge index hold no deleted document (``_stats/docs``), and,
when the Elasticsearch node's data folder is on this machine, the raw bytes of those indices'
folders (segments and translog) hold neither the forgotten text nor a destroyed key's wrapped
value (each seen there before the forget, so the scan can see them).

Needs ``JEVMEM_TEST_KAFKA`` and ``JEVMEM_TEST_ES_URL`` (``scripts/test`` starts the servers).
"""

from __future__ import annotations

import base64
import os
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
from topology.schemas import Scope  # noqa: E402

MARKER = "Wqxforgetmarker"


async def index_folders(es: AsyncElasticsearch, indices: list[str]) -> list[Path]:
    """The data folders of ``indices`` on this machine (empty when the node's data path is not here)."""
    fs = await es.nodes.stats(metric="fs")
    roots = [Path(d["path"]) for n in fs["nodes"].values() for d in n["fs"]["data"]]
    settings = await es.indices.get_settings(index=",".join(indices))
    uuids = [s["settings"]["index"]["uuid"] for s in settings.body.values()]
    return [r / "indices" / u for r in roots for u in uuids if (r / "indices" / u).is_dir()]


def count_in(folders: list[Path], needles: list[str]) -> int:
    total = 0
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                total += sum(data.count(n.encode()) + data.count(n.lower().encode()) for n in needles)
    return total


async def test_a_forget_leaves_no_deleted_document_in_the_key_memory_and_edge_indices(
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
    c1 = Scope(tenant_id="fz", conversation_id="c1")
    try:
        marked = [o.model_copy(update={"content": f"{o.content} {MARKER}"})
                  for o in chat_observations(tenant="fz", conversation="c1")]
        await service.submit(marked + chat_observations(tenant="fz", conversation="c2"))

        async def written() -> bool:
            service.stores.fresh_reads()
            return len(await service.nodes(c1)) == len(marked)

        await wait_for(written, "the conversations", worker, log)
        await es.indices.refresh(index=keys_index)
        hits = (await es.search(index=keys_index, query={"term": {"conversation_id": "c1"}}, size=1000))["hits"]["hits"]
        wrapped = [h["_source"]["wrapped"] for h in hits]
        assert len(wrapped) >= len(marked)
        indices = sorted({keys_index, *(await es.indices.get(index=f"fz{tag}-*")).body})
        await es.indices.flush(index=",".join(indices))
        folders = await index_folders(es, indices)
        seen_before = count_in(folders, [MARKER, *wrapped[:5]])

        t0 = time.monotonic()
        assert (await service.forget(c1, None)).status == "accepted"

        async def applied() -> bool:
            return '"msg":"forget applied"' in log.read_text(errors="replace")

        await wait_for(applied, "the forget to be applied", worker, log, timeout=150)
        applied_s = time.monotonic() - t0
        stats = (await es.indices.stats(index=",".join(indices), metric="docs"))["indices"]
        deleted = {name: s["primaries"]["docs"]["deleted"] for name, s in stats.items()}
        assert deleted[keys_index] == 0 and all(v == 0 for v in deleted.values()), deleted
        assert any("memories" in n for n in deleted) and any("edges" in n for n in deleted), deleted
        if folders and seen_before:  # the node's files are on this machine and the scan saw the text before
            assert count_in(folders, [MARKER, *wrapped]) == 0
        service.stores.fresh_reads()
        assert await service.nodes(c1) == [] and len(await service.nodes(Scope(tenant_id="fz", conversation_id="c2"))) > 0
        print(f"forget applied {applied_s:.1f} s after it was accepted; byte scan: {bool(folders and seen_before)}")
    finally:
        stop_workers([worker], timeout_s=20)
        await service.stop()
        await es.close()
