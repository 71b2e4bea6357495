"""The vector a query ranks a turn by: its own embedding averaged with its context vector.

A turn's *context vector* is the turn embedded after the turn before it in its sitting
(:mod:`topology.stages.context`): "Yes, last Friday" means little alone and a great deal after
"Did you go to the support group?". Queries rank by the dot product of the question with the
mean of the two vectors, not by its cosine: the mean is shorter when the context changes what a
turn means (a short reply), so a turn that says something of its own ranks above a bare reply to
a matching question; the reply is reached anyway, through the ``next`` edge and the ranker's
``reply_to_match``. Measured leave-one-conversation-out in ``docs/experiments/benchmarks-history.md``.

Contracts: a context vector is kept at half precision (:func:`half`: float16 values, 768 bytes at
384 dimensions, half an embedding's; a coordinate moves by at most 4.9e-4 of its value).
Retrieval rows are float32, each the exact float32 rounding of ``(embedding + context) / 2``
computed in float64 from the values the stores keep, so every store and the in-memory node
compute the same bits. A node without a context vector (an all-zero row) ranks by its embedding.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def half(vector: Sequence[float]) -> list[float]:
    """``vector`` rounded to float16 values (as plain floats): how context vectors are kept."""
    out: list[float] = np.asarray(vector, dtype=np.float16).astype(np.float64).tolist()
    return out


def retrieval_rows(embeddings: np.ndarray, contexts: np.ndarray) -> np.ndarray:
    """``(n, dim)`` float32 retrieval rows from ``(n, dim)`` float32 embeddings and context rows
    (all zeros where a node has none)."""
    e = np.asarray(embeddings, dtype=np.float32)
    c = np.asarray(contexts, dtype=np.float32)
    out = ((e.astype(np.float64) + c.astype(np.float64)) / 2.0).astype(np.float32)
    none = ~c.any(axis=1)
    out[none] = e[none]
    return out
