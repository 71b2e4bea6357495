"""Short rounds of the chaos benchmark on the real servers, vectors in the Qdrant server:

* two of three workers SIGKILLed (the second while the group rebalances after the first), at a
  random point, with no replacement worker and nothing nudging the group;
* records an embedding service refuses mixed into the stream (each one dead letter, the rest written);
* the Qdrant server SIGKILLed mid-stream and restarted (``scripts/qdrant/qdrant.sh``): the workers
  back off and retry their batch, every vector acknowledged before the kill is there after it.

Each: nothing lost, duplicated or stalled, same graph as the embedded run, one Qdrant point per
node. (``jevmem bench chaos`` runs every fault, for more rounds.)"""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.integration

from tests.integration.servers import ES_URL, KAFKA, LOCOMO, QDRANT_URL, SINGLE_BROKER, require_stack  # noqa: E402

require_stack()

from jevmem.bench.chaos import run_chaos  # noqa: E402
from jevmem.settings import Settings  # noqa: E402


def why(result: dict[str, object]) -> str:
    """A failed round's problems first (pytest shortens a long dict to its first keys)."""
    keys = ("stalled", "graph_mismatch", "poison_problems", "max_gap_s", "detail")
    return "; ".join(f"{k}={result.get(k)!r}" for k in keys)


SETTINGS = Settings(kafka_bootstrap=KAFKA or "", elasticsearch_url=ES_URL or "", qdrant_url=QDRANT_URL,
                    partitions=4, write_batch=16, **SINGLE_BROKER)


async def test_two_workers_killed_none_replaced() -> None:
    out = await run_chaos(LOCOMO, SETTINGS, rounds=1, turns=16, faults=("double_kill",), stall_s=60.0, timeout_s=240.0)
    result = out["results"][0]
    assert out["passed"] == 1, why(result)
    assert (out["lost"], out["duplicated"], out["stalled"], out["graph_mismatches"]) == (0, 0, 0, 0)


async def test_qdrant_server_killed_and_restarted_mid_stream() -> None:
    """Needs the server of ``scripts/qdrant/qdrant.sh`` (found by its pid file: QDRANT_DATA /
    QDRANT_PORT, as ``scripts/test`` exports them)."""
    out = await run_chaos(LOCOMO, SETTINGS, rounds=1, turns=16, faults=("qdrant_kill",), stall_s=60.0, timeout_s=240.0)
    result = out["results"][0]
    assert out["passed"] == 1, why(result)
    assert (out["lost"], out["duplicated"], out["stalled"], out["graph_mismatches"]) == (0, 0, 0, 0)
    killed = [d for d in result["detail"] if d.startswith("SIGKILL Qdrant")]
    acknowledged = int(re.findall(r"\((\d+) points acknowledged\)", killed[0])[0])
    assert acknowledged > 0, result  # the kill landed after some vectors were written: the WAL was exercised
    assert "Qdrant restarted" in result["detail"]


async def test_poison_records_are_dead_letters_and_the_stream_moves_on() -> None:
    """Records an embedding service refuses (HTTP 400) mixed into the stream: each is one dead
    letter naming its cause, every other record is written once, the graph equals the embedded
    run without them, and no batch pause is longer than a few seconds."""
    out = await run_chaos(LOCOMO, SETTINGS, rounds=1, turns=16, faults=("poison",), stall_s=60.0, timeout_s=240.0)
    result = out["results"][0]
    assert out["passed"] == 1, why(result)
    assert (out["lost"], out["duplicated"], out["stalled"], out["graph_mismatches"], out["poison_problems"]) == (0, 0, 0, 0, 0)
    assert any("poison records among" in d for d in result["detail"]), result
