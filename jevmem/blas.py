"""How many threads the BLAS library under numpy may use in a jevmem process.

The write path and the query path multiply small matrices on the event loop (candidate
similarities, the learned judges, a question against its candidates), while the embedding model
runs its own threads on every core. OpenBLAS, numpy's default, starts one thread per core and, after
each product it splits, keeps those threads spinning on a core for a while: in a jevmem process that
is CPU taken from the model for products too small to gain from a second thread. The figures behind
the default are in ``docs/experiments/benchmarks-history.md`` ("BLAS threads").

Contract: :func:`limit` caps the BLAS thread pools of the libraries loaded in this process (through
``threadpoolctl``) and returns how many threads each pool had before; ``0`` leaves them as they are.
"""

from __future__ import annotations

#: BLAS threads in a jevmem process (``JEVMEM_BLAS_THREADS``; 0: the library's own choice).
DEFAULT_THREADS = 1


def limit(threads: int) -> dict[str, int]:
    """Cap every loaded BLAS library at ``threads`` threads (0: no change); the thread count of
    each library before the call, by its file path. Raises ValueError for a negative count."""
    if threads < 0:
        raise ValueError(f"BLAS threads must be 0 (no change) or more, not {threads}")
    import numpy  # noqa: F401  (loads the BLAS library the pools are read from)
    from threadpoolctl import threadpool_info, threadpool_limits

    before = {str(p["filepath"]): int(p["num_threads"]) for p in threadpool_info() if p["user_api"] == "blas"}
    if threads:
        threadpool_limits(limits=threads, user_api="blas")
    return before
