"""Forgotten means gone from Qdrant's files too: a real Kafka broker, Elasticsearch node and Qdrant
server, and a Faust worker with its vectors in Qdrant. Once a forget is logged purged (the line
names both stores), a byte scan of the collection's folder on this machine (``QDRANT_DATA``, as
``scripts/test`` exports it) finds none of the forgotten points' vectors or ids, nor the
conversation's id, each of which it found before; the other conversation's points are still
there and answer searches.

Needs ``JEVMEM_TEST_KAFKA``, ``JEVMEM_TEST_ES_URL`` and ``JEVMEM_TEST_QDRANT_URL``.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import numpy as np
import pytest

from tests.integration.servers import ES_URL, KAFKA, QDRANT_URL, SINGLE_BROKER, folder_bytes

pytestmark = pytest.mark.integration
if not (KAFKA and ES_URL and QDRANT_URL):
    pytest.skip("JEVMEM_TEST_KAFKA / JEVMEM_TEST_ES_URL / JEVMEM_TEST_QDRANT_URL not set", allow_module_level=True)

from jevmem.bench.kafka import spawn_worker, stop_workers, worker_env  # noqa: E402
from jevmem.distributed import DistributedService  # noqa: E402
from jevmem.settings import Settings  # noqa: E402
from storage.qdrant.index import QdrantVectorIndex  # noqa: E402
from streams.kafka_admin import ensure_topics  # noqa: E402
from tests.conftest import chat_observations  # noqa: E402
from tests.integration.test_poison import DIM, Service, embeddings, wait_for  # noqa: E402, F401
from topology.schemas import Scope  # noqa: E402


async def test_a_forget_is_purged_from_qdrants_segments_and_log(embeddings: Service, tmp_path: Path) -> None:  # noqa: F811
    tag = uuid.uuid4().hex[:8]
    settings = Settings(kafka_bootstrap=KAFKA or "", elasticsearch_url=ES_URL or "", qdrant_url=QDRANT_URL,
                        topic_prefix=f"fq{tag}", app_id=f"fq{tag}", store_prefix=f"fq{tag}-", partitions=2,
                        write_batch=16, embedder=f"openai:fake-embed:{DIM}", embedding_url=embeddings.url,
                        **SINGLE_BROKER)
    ensure_topics(KAFKA or "", settings.topic_prefix, settings.topic_layout())
    log = tmp_path / "worker.log"
    worker = spawn_worker({**worker_env(settings), "JEVMEM_WORKER_DATADIR": str(tmp_path / "worker")}, log)
    service = DistributedService(settings)
    await service.start()
    secret = f"Qxzconv{tag}"
    gone, kept = Scope(tenant_id="fq", conversation_id=secret), Scope(tenant_id="fq", conversation_id="kept")
    collection = f"fq{tag}_memories"
    index = QdrantVectorIndex.server(QDRANT_URL or "", DIM, collection=collection)
    data = os.environ.get("QDRANT_DATA")
    folder = Path(data) / "storage" / "collections" / collection if data else None

    def logged(msg: str) -> list[str]:
        return [line for line in log.read_text(errors="replace").splitlines() if f'"msg":"{msg}"' in line]

    async def holds(scope: Scope, n: int) -> bool:
        service.stores.fresh_reads()
        return len(await service.nodes(scope)) == n

    async def purged() -> bool:
        return len(logged("forget purged")) == 1

    try:
        first = [o.model_copy(update={"content": f"{o.content} {secret}"})  # vectors of its own
                 for o in chat_observations(tenant="fq", conversation=secret)]
        second = chat_observations(tenant="fq", conversation="kept")
        await service.submit(first + second)
        await wait_for(lambda: holds(gone, len(first)), "the conversation", worker, log)
        await wait_for(lambda: holds(kept, len(second)), "the conversation", worker, log)
        points, _ = await index.call(lambda c: c.scroll(collection, limit=1000, with_vectors=True, with_payload=True),
                                     "scroll")
        forgotten = [p for p in points if (p.payload or {}).get("conversation_id") == secret]
        assert len(forgotten) == len(first)
        needles = [secret.encode()] + [np.asarray(p.vector, dtype=np.float32).tobytes() for p in forgotten] + [
            uuid.UUID(str(p.id)).bytes for p in forgotten]

        def found() -> int:
            assert folder is not None
            blobs = folder_bytes(folder)
            return sum(1 for n in needles if any(n in b for b in blobs))

        scanned = folder is not None and folder.is_dir()
        if scanned:
            assert found() > len(forgotten)  # the scan sees the vectors and ids before the forget

        assert (await service.forget(gone, None)).status == "accepted"
        await wait_for(purged, "the forget to be purged", worker, log, timeout=150)
        assert '"stores":["elasticsearch","qdrant"]' in logged("forget purged")[0]
        if scanned:
            assert found() == 0
        assert await index.ids(gone) == set()
        assert len(await index.ids(kept)) == len(second)
        service.stores.fresh_reads()
        assert await service.nodes(gone) == [] and len(await service.nodes(kept)) == len(second)
    finally:
        stop_workers([worker], timeout_s=20)
        await service.stop()
        await index.close()
