"""The cache memory budget: shared out within the budget, overrides replace a share, a worker
without an embedded store gives the write path most of it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jevmem.settings import Settings
from storage.budget import VECTOR_ROW_BYTES, WRITE_NODE_BYTES, plan

MIB = 2**20


@given(st.integers(min_value=64, max_value=65_536), st.sampled_from([384, 768, 1024]))
def test_the_three_caches_fit_the_budget(memory_mb: int, dim: int) -> None:
    p = plan(memory_mb, dim)
    used = (p.sqlite_cache_mb * MIB + p.write_nodes * (4 * dim + WRITE_NODE_BYTES)
            + p.vector_rows * (4 * dim + VECTOR_ROW_BYTES))
    assert used <= memory_mb * MIB * 1.01 + 2_000 * (4 * dim + WRITE_NODE_BYTES)  # the floors of tiny budgets
    assert p.sqlite_cache_mb > 0 and p.write_nodes >= 1_000 and p.vector_rows >= 1_000


def test_a_bigger_budget_holds_more_and_overrides_replace_a_share() -> None:
    small, large = plan(256, 384), plan(2048, 384)
    assert large.sqlite_cache_mb > small.sqlite_cache_mb and large.write_nodes > small.write_nodes
    assert large.vector_rows > small.vector_rows
    fixed = plan(2048, 384, sqlite_cache_mb=64, write_nodes=5_000)
    assert (fixed.sqlite_cache_mb, fixed.write_nodes, fixed.vector_rows) == (64, 5_000, large.vector_rows)


def test_a_worker_gives_the_write_path_the_budget() -> None:
    worker, embedded = plan(1024, 384, embedded=False), plan(1024, 384)
    assert worker.sqlite_cache_mb == 0 and worker.vector_rows == 0
    assert worker.write_nodes > 2 * embedded.write_nodes


def test_settings_give_the_plan_of_their_budget_and_overrides() -> None:
    s = Settings(memory_mb=128, cache_nodes=777)
    assert s.memory(384).write_nodes == 777 and s.memory(384).sqlite_cache_mb == plan(128, 384).sqlite_cache_mb
    assert Settings().memory(384) == plan(384, 384)  # the default budget, 384-d embeddings
