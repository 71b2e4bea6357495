"""One short round of the chaos benchmark on the real servers: two of three workers SIGKILLed
(the second while the group rebalances after the first), at a random point, with no replacement
worker and nothing nudging the group: nothing lost, duplicated or stalled, same graph as the
embedded run. (``jevmem bench chaos`` runs every fault, for more rounds.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

KAFKA = os.environ.get("JEVMEM_TEST_KAFKA")
ES_URL = os.environ.get("JEVMEM_TEST_ES_URL")
LOCOMO = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo"
if not (KAFKA and ES_URL):
    pytest.skip("JEVMEM_TEST_KAFKA / JEVMEM_TEST_ES_URL not set", allow_module_level=True)
if not LOCOMO.is_dir():
    pytest.skip(f"LoCoMo dev conversations not found at {LOCOMO}", allow_module_level=True)

from jevmem.bench_chaos import run_chaos  # noqa: E402
from jevmem.settings import Settings  # noqa: E402


async def test_two_workers_killed_none_replaced() -> None:
    settings = Settings(kafka_bootstrap=KAFKA or "", elasticsearch_url=ES_URL or "", partitions=4, write_batch=16)
    out = await run_chaos(LOCOMO, settings, rounds=1, turns=16, faults=("double_kill",), stall_s=60.0,
                          timeout_s=240.0)
    result = out["results"][0]
    assert out["passed"] == 1, result
    assert (out["lost"], out["duplicated"], out["stalled"], out["graph_mismatches"]) == (0, 0, 0, 0)
