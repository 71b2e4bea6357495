"""The heap of a long-running process: what its start built is kept out of full collections.

A server or a worker builds most of what it will ever hold at its start (the model and its
tokenizer, the learned parts, settings, clients) and keeps it for its life. Python's cyclic
collector still scans all of it in each full (generation 2) collection, which a busy process runs
every few seconds: on the recall bench a full collection took about 70 ms and landed inside one
recall in twenty. :func:`settle`, called once the process has started, moves what is alive then
into the collector's permanent generation (``gc.freeze``), so a full collection scans only what
was made since.

Contract: for a process that keeps its startup objects for its life (``jevmem serve``, the
benches that time a started service). An object frozen here that later becomes part of garbage
held in a reference cycle is not freed (reference counting still frees the rest); :func:`thaw`
gives every frozen object back to the collector, e.g. before a process starts another service in
place of the one it stops.
"""

from __future__ import annotations

import gc


def settle() -> None:
    """Collect what the start left behind, then freeze every object alive (see the module)."""
    gc.collect()
    gc.freeze()


def thaw() -> None:
    """Give every object :func:`settle` froze back to the collector (collected in its next full
    collection if unreachable)."""
    gc.unfreeze()
