"""Fixtures of the Elasticsearch adapter tests (``JEVMEM_TEST_ES_URL``; the modules using them skip
without it): a client with a fresh store generation prefix, removed after the test, and the
adapters on it."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest
from elasticsearch import AsyncElasticsearch

from storage.elastic import store as elastic
from storage.elastic.edges import ElasticEdgeStore
from storage.elastic.store import ElasticLexicalIndex, ElasticNodeStore
from tests.integration.elastic_data import Stores


@pytest.fixture
async def es() -> AsyncIterator[tuple[AsyncElasticsearch, str]]:
    client = AsyncElasticsearch(os.environ["JEVMEM_TEST_ES_URL"], request_timeout=30)
    prefix = f"jevmem-test-{uuid.uuid4().hex[:12]}-"
    yield client, prefix
    names = list((await client.indices.get(index=prefix + "*")).keys())  # wildcard deletes are refused
    if names:
        await client.indices.delete(index=",".join(names), ignore_unavailable=True)
    await client.close()


@pytest.fixture(params=["immediate", "deferred"])
def stores(es: tuple[AsyncElasticsearch, str], request: pytest.FixtureRequest) -> Stores:
    """The adapters on the test's client (the fixture closes it): each write its own refreshed
    bulk request, or (as the workers run them) buffered in one shared :class:`Visibility`."""
    client, prefix = es
    seen = elastic.Visibility(client) if request.param == "deferred" else None
    return Stores(ElasticLexicalIndex(client, prefix, seen), ElasticNodeStore(client, prefix, seen),
                  ElasticEdgeStore(client, prefix, seen))
