"""jevmem.heap: a started process's objects kept out of full collections, and given back."""

from __future__ import annotations

import asyncio
import gc
import weakref

import httpx

from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService
from query_api.auth import Authenticator, mint
from query_api.http import create_app
from storage.keys import SqliteKeyStore
from tests.conftest import serve_http
from topology.ports import Embedder


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


def test_settle_collects_the_starts_garbage_then_freezes_what_is_alive_and_thaw_gives_it_back() -> None:
    from jevmem import heap

    kept = [_Node() for _ in range(3)]
    garbage = _Node()
    gone = weakref.ref(garbage)
    del garbage
    try:
        heap.settle()
        assert gone() is None  # the start's garbage was collected first
        assert gc.get_freeze_count() > 0
        tracked = {id(o) for o in gc.get_objects()}
        assert not any(id(k) in tracked for k in kept)  # frozen: no collection scans them
        later = _Node()
        assert id(later) in {id(o) for o in gc.get_objects()}  # what is made after is collected as usual
    finally:
        heap.thaw()
    assert gc.get_freeze_count() == 0
    assert id(kept[0]) in {id(o) for o in gc.get_objects()}


def test_the_server_calls_started_once_its_service_has_started(embedder: Embedder) -> None:
    """``jevmem serve`` settles the heap through ``create_app(started=...)``: called once, after
    the service's start (what it built is then alive), before the first request is answered."""
    service = EmbeddedService(Settings(), embedder=embedder, data_dir=":memory:")
    calls: list[bool] = []

    def started() -> None:
        calls.append(service.mem is not None)

    store = SqliteKeyStore(":memory:")
    key, record = mint("acme", ["query"])
    asyncio.run(store.create(record))
    with serve_http(create_app(service, Authenticator(store), started=started)) as url:
        assert calls == [True]
        r = httpx.post(url + "/v1/recall", json={"question": "Anything?"},
                       headers={"Authorization": f"Bearer {key}"}, timeout=60)
        assert r.status_code == 200 and calls == [True]
