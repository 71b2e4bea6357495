"""A benchmark's service over the distributed stores: Elasticsearch and Qdrant servers.

:class:`ServerStores` is what ``bench users --stores distributed`` measures in place of the
embedded service. It writes with the write path a Faust worker runs
(:class:`streams.in_process.InProcessWriter` over :func:`jevmem.distributed.distributed_stores`,
the worker's own wiring, ``embedded=False``) in this process, with no broker in between: the
benchmark measures the stores a recall reads, not the transport that fed them. It reads as
``jevmem serve`` over the cluster reads (:class:`jevmem.distributed.DistributedService`): every
recall sees every write acknowledged before it (``fresh_reads``), and asks
:meth:`~query_api.retrieval.controller.RetrievalController.retrieve_realm`, whose vector search
is Qdrant's with the user filter (Elasticsearch's flat vector index without ``qdrant_url``).

Contracts:

* Each instance owns one store generation, ``prefix`` (fresh per benchmark run; its indices, its
  collection and its model record are dropped by :meth:`drop`). ``restarted`` is a new instance
  over the same generation, with new clients and an empty controller: a service process started
  afresh.
* ``submit`` returns once the batch is written and durable (``Stores.sync``): what a worker has
  acknowledged when it commits its offsets.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import datetime

from jevmem import assembly
from jevmem.distributed import META_INDEX, check_model, distributed_stores, open_for_reads, prepare_indices
from jevmem.settings import Settings
from jevmem.wiring import failed_items
from query_api.items import ItemError
from query_api.retrieval.controller import Retrieval, RetrievalController
from streams.in_process import InProcessWriter
from streams.write_path import Stores
from topology.ports import Embedder
from topology.schemas import Observation, Realm


class ServerStores:
    """The write path of a worker and the read path of the service over one store generation
    (see the module)."""

    def __init__(self, settings: Settings, embedder: Embedder, prefix: str) -> None:
        self.settings, self.embedder, self.prefix = settings, embedder, prefix
        self._stores: Stores | None = None
        self._writer: InProcessWriter | None = None
        self._controller: RetrievalController | None = None

    def restarted(self) -> ServerStores:
        """A new (not yet started) instance over the same generation (stop this one first)."""
        return ServerStores(self.settings, self.embedder, self.prefix)

    async def start(self) -> None:
        await check_model(self.settings, self.prefix, self.embedder.name)
        await prepare_indices(self.settings, self.prefix, self.embedder.dim)
        self._stores = distributed_stores(self.settings, self.prefix, self.embedder.dim, owner=True)
        await open_for_reads(self._stores)
        built = assembly.paths(self.settings, self._stores, self.embedder, embedded=False)
        self._writer = InProcessWriter(self._stores, built.writer(), built.system_one, self.settings.write_batch)
        self._controller = built.controller
        await self._controller.warm()

    async def stop(self) -> None:
        if self._writer is not None:
            await self._writer.close()  # its System One client and the stores
        self._stores = self._writer = self._controller = None

    async def submit(self, observations: Sequence[Observation]) -> list[ItemError]:
        """Write ``observations`` and make them durable; the ones that failed permanently, with
        their indexes (as :meth:`jevmem.wiring.EmbeddedService.submit` answers)."""
        assert self._writer is not None and self._stores is not None, "not started"
        report = await self._writer.ingest(list(observations))
        await self._stores.sync()
        return failed_items(observations, report)

    async def recall(self, realm: Realm, question: str, top_k: int, as_of: datetime | None = None) -> Retrieval:
        assert self._controller is not None and self._stores is not None, "not started"
        self._stores.fresh_reads(realm.tenant_id)
        return await self._controller.retrieve_realm(realm, question, top_k, as_of)

    async def drop(self) -> None:
        """Remove the generation: its Elasticsearch indices, its Qdrant collection, its model record."""
        es = assembly.elasticsearch(self.settings)
        try:
            names = list(await es.indices.get(index=f"{self.prefix}*", expand_wildcards="all"))
            if names:
                await es.indices.delete(index=",".join(names))
            with contextlib.suppress(Exception):  # absent when the run failed before its first write
                await es.delete(index=META_INDEX, id=f"model:{self.prefix}")
        finally:
            await es.close()
        if self.settings.qdrant_url:
            vectors = assembly.qdrant(self.settings, self.embedder.dim, self.prefix.replace("-", "_") + "memories")
            try:
                await vectors.call(lambda c: c.delete_collection(vectors.collection), "drop collection")
            finally:
                await vectors.close()
