"""The distributed write path on a real Elasticsearch node: a micro-batch is durable when written,
and is not refreshed by its writer; readers refresh what they read (``storage.elastic.store.Visibility``).

Needs ``JEVMEM_TEST_ES_URL``.
"""

from __future__ import annotations

import os
import uuid

import pytest

pytestmark = pytest.mark.integration

ES_URL = os.environ.get("JEVMEM_TEST_ES_URL")
if not ES_URL:
    pytest.skip("JEVMEM_TEST_ES_URL is not set", allow_module_level=True)

from jevmem import assembly  # noqa: E402
from jevmem.distributed import distributed_stores, prepare_indices  # noqa: E402
from jevmem.settings import Settings  # noqa: E402
from storage.elastic.store import Visibility  # noqa: E402
from streams.write_path import write_batch  # noqa: E402
from tests.conftest import chat_observations  # noqa: E402
from topology.embedding import default_embedder  # noqa: E402


async def test_the_write_path_refreshes_nothing_per_batch_and_readers_see_every_acknowledged_write() -> None:
    prefix = f"jevmem-test-{uuid.uuid4().hex[:12]}-"
    settings = Settings(mode="distributed", elasticsearch_url=ES_URL or "", qdrant_url=None, store_prefix=prefix)
    embedder = default_embedder()
    await prepare_indices(settings, prefix, embedder.dim)
    writer = distributed_stores(settings, prefix, embedder.dim, owner=True)
    reader = distributed_stores(settings, prefix, embedder.dim)
    es = assembly.elasticsearch(settings)
    try:
        wp = assembly.paths(settings, writer, embedder, embedded=False).writer()
        seen = writer.nodes._visibility  # type: ignore[attr-defined]
        assert isinstance(seen, Visibility)
        obs = chat_observations("t-vis", "c1")
        scope = obs[0].scope
        await write_batch(writer, wp, obs[:4])
        first = seen.refreshes  # the conversation's first sight: one load from the store
        for i in range(4, len(obs), 3):
            await write_batch(writer, wp, obs[i: i + 3])
        assert seen.refreshes == first, "a micro-batch refreshed an index"
        # durable and searchable by any reader, without the writer refreshing
        assert [n.seq for n in await reader.nodes.scan(scope)] == list(range(len(obs)))
        assert len(await reader.edges.scan(scope)) > 0
        # the writer's own reads refresh what it wrote: it sees the same
        assert [n.id for n in await writer.nodes.scan(scope)] == [n.id for n in await reader.nodes.scan(scope)]
    finally:
        await writer.close()
        await reader.close()
        names = list((await es.indices.get(index=prefix + "*")).keys())
        if names:
            await es.indices.delete(index=",".join(names), ignore_unavailable=True)
        await es.close()
