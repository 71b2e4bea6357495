"""The background purge of applied forgets (streams.purging): every applied forget is purged by a
purge that started after it was submitted, failures are retried, and the age of the oldest
unpurged forget is what a user watches."""

from __future__ import annotations

import asyncio
import logging

import pytest

from streams.purging import Purger
from topology.errors import StoreUnavailable


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_each_submitted_forget_is_purged_by_a_purge_that_started_after_it(
        caplog: pytest.LogCaptureFixture) -> None:
    started: list[int] = []
    purger: Purger

    async def purge() -> None:
        started.append(purger.pending)
        await asyncio.sleep(0)

    purger = Purger(purge, retry_s=(0.0,))
    caplog.set_level(logging.INFO, "jevmem.worker")
    task = asyncio.create_task(purger.run())
    try:
        await asyncio.sleep(0.01)  # the sweep at start
        assert started == [0]
        purger.submit({"event": None, "nodes": 3})
        purger.submit({"event": "e1", "nodes": 1})
        for _ in range(100):
            if purger.pending == 0:
                break
            await asyncio.sleep(0.001)
        assert purger.pending == 0 and purger.oldest_s() == 0.0
        assert started[-1] == 2  # one purge covered both
        purged = [r for r in caplog.records if r.getMessage() == "forget purged"]
        assert [r.__dict__["nodes"] for r in purged] == [3, 1]
        assert all(r.__dict__["purge_s"] >= 0.0 and r.__dict__["purged_at"] for r in purged)
    finally:
        task.cancel()


async def test_a_failed_purge_is_retried_and_overdue_forgets_are_reported(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    fail = [True, True]

    async def purge() -> None:
        if fail:
            fail.pop()
            clock.now += 200.0
            raise StoreUnavailable("elasticsearch purge: leases still retain the deletes")

    purger = Purger(purge, deadline_s=300.0, retry_s=(0.0,), clock=clock)
    caplog.set_level(logging.INFO, "jevmem.worker")
    purger.submit({"event": None, "nodes": 2})
    assert purger.oldest_s() == 0.0
    assert not await purger.once()
    assert purger.oldest_s() == 200.0 and purger.pending == 1
    assert not await purger.once()  # 400 s after it was applied: past the deadline
    assert await purger.once()
    assert purger.pending == 0 and purger.failures == 2 and purger.purges == 1
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["forget purge failed; retrying", "forget purge overdue", "forget purged"]


async def test_a_forget_submitted_during_a_purge_waits_for_the_next() -> None:
    gate = asyncio.Event()
    calls = 0
    purger: Purger

    async def purge() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            purger.submit({"event": "late", "nodes": 1})  # arrives while this purge runs
            await gate.wait()

    purger = Purger(purge)
    purger.submit({"event": "first", "nodes": 1})
    first = asyncio.create_task(purger.once())
    await asyncio.sleep(0)
    gate.set()
    assert await first
    assert purger.pending == 1  # the late one is not covered by a purge that started before it
    assert await purger.once()
    assert purger.pending == 0
