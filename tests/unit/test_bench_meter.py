"""The benchmark's meters read each process's own CPU accounting and the blocks files hold."""

from __future__ import annotations

import os
import time
from pathlib import Path

from jevmem.bench_meter import allocated_bytes, cpu_seconds, per_observation


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
