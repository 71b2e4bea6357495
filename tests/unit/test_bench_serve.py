"""``jevmem bench serve`` end to end on a real ``jevmem serve`` process (embedded, the default
model) over real HTTP: a short run at two concurrency levels answers every request, loses no
acknowledged observation and reports the percentiles."""

from __future__ import annotations

from pathlib import Path

import pytest

from jevmem.bench.serve import run_serve

LOCOMO = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo"

pytestmark = pytest.mark.model


@pytest.mark.skipif(not LOCOMO.is_dir(), reason="LoCoMo dev conversations not found")
async def test_a_short_load_run_answers_everything_and_loses_nothing() -> None:
    out = await run_serve(LOCOMO, levels=(1, 3), seconds=3.0, seed_turns=10)
    assert [lv["clients"] for lv in out["levels"]] == [1, 3]
    for lv in out["levels"]:
        assert lv["requests"] > 0 and lv["errors"] == 0 and lv["5xx"] == 0, lv
        assert lv["query_ms"]["p50"] is not None and lv["query_ms"]["p50"] <= lv["query_ms"]["p99"]
        assert lv["server_cpu_ms_per_request"] > 0 and lv["client_cpu_ms_per_request"] > 0
    assert out["acknowledged"] > 0 and out["lost"] == 0


def test_process_cpu_reads_a_process_of_its_own() -> None:
    import os

    from jevmem.bench.serve import process_cpu_s

    before = process_cpu_s(os.getpid())
    assert before is not None
    sum(i * i for i in range(200_000))
    after = process_cpu_s(os.getpid())
    assert after is not None and after >= before
    assert process_cpu_s(2**22 + 1) is None
