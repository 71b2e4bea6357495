"""The benchmark's meters read each process's own CPU accounting and the blocks files hold."""

from __future__ import annotations

import os
import time
from pathlib import Path

from jevmem.bench.meter import allocated_bytes, cpu_seconds, per_observation, worker_stages


def test_cpu_seconds_grow_with_work_and_a_gone_process_reads_zero() -> None:
    before = cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    assert cpu_seconds(os.getpid()) - before >= 0.1
    assert cpu_seconds(2**22 + 12345) == 0.0  # above the default pid_max: no such process


def test_allocated_bytes_count_blocks_of_every_file_under_the_paths(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"x" * 10_000)
    (tmp_path / "g").write_bytes(b"y" * 5_000)
    assert allocated_bytes([tmp_path]) >= 15_000
    assert allocated_bytes([tmp_path / "g"]) >= 5_000
    assert allocated_bytes([tmp_path / "missing"]) == 0


def test_per_observation() -> None:
    assert per_observation({"workers": 2.0, "broker": 0.5}, 1000, 1000.0) == {"workers": 2.0, "broker": 0.5}


def test_worker_stages_average_the_stored_lines_per_batch_and_observation() -> None:
    lines = [b'{"msg":"Ready"}',
             b'{"msg":"stored","observations":2,"stage_ms":{"embed":10.0,"store_writes":4.0}}',
             b'not json, "msg":"stored"',
             b'{"msg":"stored","observations":6,"stage_ms":{"embed":30.0}}']
    got = worker_stages(lines)
    assert got == {"batches": 2, "observations_per_batch": 4.0,
                   "ms_per_batch": {"embed": 20.0, "store_writes": 2.0},
                   "ms_per_observation": {"embed": 5.0, "store_writes": 0.5}}
    assert worker_stages([]) == {"batches": 0}
