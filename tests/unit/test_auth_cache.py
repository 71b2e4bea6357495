"""The API key cache: concurrent requests with one key share one verification; a busy key is
verified again before its entry expires, without making a request wait; a key revoked meanwhile
stops working at the latest when its entry would have expired."""

from __future__ import annotations

import asyncio

import pytest

from query_api import auth
from query_api.auth import ApiKeyRecord, Authenticator, Unauthenticated, mint


class _Store:
    """A key store that counts its reads."""

    def __init__(self, record: ApiKeyRecord) -> None:
        self.record: ApiKeyRecord | None = record
        self.reads = 0

    async def get(self, key_id: str) -> ApiKeyRecord | None:
        self.reads += 1
        await asyncio.sleep(0)
        return self.record if self.record is not None and self.record.key_id == key_id else None


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    c = _Clock()
    monkeypatch.setattr(auth.time, "monotonic", c)
    return c


async def test_concurrent_requests_share_one_verification(clock: _Clock) -> None:
    key, record = mint("t1", ["query"])
    store = _Store(record)
    a = Authenticator(store, cache_seconds=5.0)  # type: ignore[arg-type]
    who = await asyncio.gather(*(a.principal(f"Bearer {key}") for _ in range(16)))
    assert store.reads == 1 and {w.tenant_id for w in who} == {"t1"}
    with pytest.raises(Unauthenticated):
        await asyncio.gather(*(a.principal(f"Bearer {key}x") for _ in range(4)))


async def test_a_busy_key_is_renewed_in_the_background_and_a_revocation_holds(clock: _Clock) -> None:
    key, record = mint("t1", ["query"])
    store = _Store(record)
    a = Authenticator(store, cache_seconds=5.0)  # type: ignore[arg-type]
    await a.principal(f"Bearer {key}")
    clock.now += 2.0  # before half the entry's time: no renewal
    await a.principal(f"Bearer {key}")
    assert store.reads == 1 and not a._pending
    clock.now += 1.0  # past half: this request is answered from the entry, one renewal starts
    await asyncio.gather(*(a.principal(f"Bearer {key}") for _ in range(8)))
    assert len(a._pending) == 1
    await asyncio.wait(list(a._pending.values()))
    assert store.reads == 2 and not a._pending
    clock.now += 4.0  # past the first entry's expiry, within the renewed one
    await a.principal(f"Bearer {key}")
    assert store.reads == 2
    store.record = None  # revoked: the next renewal drops the entry
    clock.now += 0.5
    await a.principal(f"Bearer {key}")  # still trusted (within cache_seconds); a renewal starts
    await asyncio.wait(list(a._pending.values()))
    with pytest.raises(Unauthenticated):
        await a.principal(f"Bearer {key}")
