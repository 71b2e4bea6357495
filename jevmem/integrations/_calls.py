"""Adapter logic written once for the blocking and the asyncio client.

An operation is a generator that yields the client calls it needs, ``(method name, args)``, and
receives each call's result; :func:`run` drives it with a :class:`jevmem.client.MemoryClient`,
:func:`arun` with an :class:`jevmem.client.AsyncMemoryClient`. The operations themselves do no
I/O, so the sync and async faces of an adapter cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Generator
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
            method, args = plan.send(getattr(client, method)(*args))
    except StopIteration as done:
        result: T = done.value
        return result


async def arun(client: AsyncMemoryClient, plan: Plan[T]) -> T:
    """Run ``plan`` with the asyncio client; returns its result."""
    try:
        method, args = next(plan)
        while True:
            method, args = plan.send(await getattr(client, method)(*args))
    except StopIteration as done:
        result: T = done.value
        return result
