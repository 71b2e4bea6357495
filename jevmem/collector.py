"""How a jevmem process sets Python's cyclic garbage collector.

A memory process keeps large caches of small objects (decoded nodes and edges, their token sets)
and makes many short-lived ones per query and per write batch. With CPython's default thresholds
(a young collection every 700 net allocations) most of those objects are examined several times
and promoted before they die, and the older generations' collections then walk the caches: the
collector, not the pipeline, sets the tail of query latency. Larger thresholds let short-lived
objects die by reference counting first. The figures behind the default are in
``docs/experiments/benchmarks-history.md`` ("The garbage collector").

Contract: :func:`tune` sets the three thresholds of :func:`gc.set_threshold` and returns the
ones in force before; it never disables the collector (a zero young threshold is refused), so
reference cycles are still reclaimed.
"""

from __future__ import annotations

import gc

#: Young-generation allocations between collections, then collections of each generation between
#: collections of the next (CPython's defaults: 700, 10, 10).
DEFAULT_THRESHOLDS = (200_000, 10, 100)


def tune(thresholds: tuple[int, int, int]) -> tuple[int, int, int]:
    """Set the collector's thresholds; the previous thresholds. Raises ValueError for a young
    threshold under 1 or a negative one."""
    if thresholds[0] < 1 or min(thresholds) < 0:
        raise ValueError(f"collector thresholds must be positive, not {thresholds}")
    before = gc.get_threshold()
    gc.set_threshold(*thresholds)
    return before
