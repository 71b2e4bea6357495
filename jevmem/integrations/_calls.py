"""Adapter logic written once for the blocking and the asyncio client, and asyncio clients that
work across event loops.

An operation is a generator that yields the client calls it needs, ``(method name, args)``, and
receives each call's result; a call that raises (:class:`jevmem.client.MemoryApiError`, a
transport error) is thrown into the generator at its ``yield``, so an operation may handle it.
:func:`run` drives it with a :class:`jevmem.client.MemoryClient`, :func:`arun` with an
:class:`jevmem.client.AsyncMemoryClient`. The operations themselves do no I/O, so the sync and
async faces of an adapter cannot drift apart.

:class:`LoopClients` gives each running event loop its own :class:`AsyncMemoryClient`: an httpx
async client's pooled connections belong to the loop that opened them, so one client shared by
two ``asyncio.run`` calls fails in the second with ``Event loop is closed``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Generator
from typing import Any, TypeVar

from jevmem.client import AsyncMemoryClient, MemoryClient

T = TypeVar("T")
Call = tuple[str, tuple[Any, ...]]
Plan = Generator[Call, Any, T]


def run(client: MemoryClient, plan: Plan[T]) -> T:
    """Run ``plan`` with the blocking client; returns its result."""
    try:
        method, args = next(plan)
        while True:
            try:
                got = getattr(client, method)(*args)
            except Exception as exc:
                method, args = plan.throw(exc)
            else:
                method, args = plan.send(got)
    except StopIteration as done:
        result: T = done.value
        return result


async def arun(client: AsyncMemoryClient, plan: Plan[T]) -> T:
    """Run ``plan`` with the asyncio client; returns its result."""
    try:
        method, args = next(plan)
        while True:
            try:
                got = await getattr(client, method)(*args)
            except Exception as exc:
                method, args = plan.throw(exc)
            else:
                method, args = plan.send(got)
    except StopIteration as done:
        result: T = done.value
        return result


_Entry = tuple[AsyncMemoryClient, AsyncGenerator[None, None]]


def _finish(guard: AsyncGenerator[None, None]) -> None:
    """End the guard of a closed loop without that loop (its ``finally`` awaits nothing then)."""
    closing = guard.aclose()
    try:
        closing.send(None)
    except (StopIteration, RuntimeError):
        return
    closing.close()  # pragma: no cover - the guard awaited after all


class LoopClients:
    """An :class:`AsyncMemoryClient` per running event loop, made on first use in that loop.

    Contract: :meth:`get` in a coroutine returns the running loop's client (the same one on
    every call in that loop, from any task). The client is closed when its loop ends the way
    ``asyncio.run`` ends one (``shutdown_asyncgens``), or by :meth:`aclose` in that loop; a loop
    closed otherwise leaves its client to the garbage collector, dropped on the next :meth:`get`.
    Thread-safe: loops in several threads each get their own client."""

    def __init__(self, base_url: str, api_key: str, timeout: float) -> None:
        self._args = (base_url, api_key, timeout)
        self._lock = threading.RLock()
        self._by_loop: dict[asyncio.AbstractEventLoop, _Entry] = {}

    async def get(self) -> AsyncMemoryClient:
        """The running loop's client."""
        loop = asyncio.get_running_loop()
        with self._lock:
            for gone in [lp for lp in self._by_loop if lp.is_closed()]:
                _finish(self._by_loop.pop(gone)[1])
            found = self._by_loop.get(loop)
            if found is not None:
                return found[0]
            client = AsyncMemoryClient(*self._args)
            guard = self._until_loop_ends(loop, client)
            self._by_loop[loop] = (client, guard)
        # The first step registers the guard with the loop (its async generator hooks), so the
        # loop's shutdown_asyncgens runs its finally: the client closes inside the loop it used.
        await guard.__anext__()
        return client

    async def _until_loop_ends(self, loop: asyncio.AbstractEventLoop, client: AsyncMemoryClient) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            with self._lock:
                if self._by_loop.get(loop, (None,))[0] is client:
                    del self._by_loop[loop]
            if not loop.is_closed():
                await client.close()

    async def aclose(self) -> None:
        """Close the running loop's client (a later :meth:`get` makes a new one)."""
        with self._lock:
            found = self._by_loop.pop(asyncio.get_running_loop(), None)
        if found is not None:
            await found[1].aclose()
