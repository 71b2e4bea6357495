"""Concurrent submits to the embedded service are written as one batch, in arrival order; every
caller of a group gets its report, or the exception that failed it."""

from __future__ import annotations

import asyncio

import pytest

from jevmem.wiring import GroupWrite
from streams.in_process import IngestReport
from tests.conftest import chat_observations
from topology.errors import StoreUnavailable
from topology.schemas import Observation


async def test_writes_that_arrive_while_one_is_written_go_together_in_order() -> None:
    calls: list[list[str]] = []
    release, started = asyncio.Event(), asyncio.Event()

    async def write(obs: list[Observation]) -> IngestReport:
        calls.append([o.event_id for o in obs])
        if len(calls) == 1:
            started.set()
            await release.wait()
        return IngestReport(accepted=len(obs))

    group = GroupWrite(write)
    chat = chat_observations()
    first = asyncio.ensure_future(group.submit(chat[:1]))
    await started.wait()
    assert calls == [["e0"]]  # written at once
    later = [asyncio.ensure_future(group.submit(chat[i:i + 2])) for i in (1, 3, 5)]
    release.set()
    reports = await asyncio.gather(first, *later)
    assert calls == [["e0"], ["e1", "e2", "e3", "e4", "e5", "e6"]] and group.groups == 2
    assert [r.accepted for r in reports] == [1, 6, 6, 6]


async def test_a_failed_group_fails_each_of_its_callers_and_the_next_group_is_written() -> None:
    release, started = asyncio.Event(), asyncio.Event()
    seen: list[int] = []

    async def write(obs: list[Observation]) -> IngestReport:
        seen.append(len(obs))
        if len(seen) == 1:
            started.set()
            await release.wait()
            return IngestReport(accepted=len(obs))
        if len(seen) == 2:
            raise StoreUnavailable("disk full")
        return IngestReport(accepted=len(obs))

    group = GroupWrite(write)
    chat = chat_observations()
    first = asyncio.ensure_future(group.submit(chat[:1]))
    await started.wait()
    failing = [asyncio.ensure_future(group.submit(chat[i:i + 1])) for i in (1, 2)]
    release.set()
    assert (await first).accepted == 1
    for f in failing:
        with pytest.raises(StoreUnavailable):
            await f
    assert (await group.submit(chat[3:4])).accepted == 1
    assert seen == [1, 2, 1]
