"""The LoCoMo benchmark runner on a tiny synthetic conversation file: methods, ablation, recall."""

from __future__ import annotations

from pathlib import Path

import orjson

from jevmem.bench import METHODS, NO_GRAPH, methods, no_graph, recall, run_locomo
from jevmem.settings import Settings
from tests.conftest import CHAT
from topology.params import Params
from topology.ports import Embedder


def _locomo_file(tmp_path: Path) -> Path:
    turns = [{"speaker": s, "dia_id": f"D1:{i + 1}", "text": t} for i, (s, t) in enumerate(CHAT)]
    data = {"speaker_a": "Ana", "speaker_b": "Ben", "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": turns,
            "qa": [{"question": "What is the name of Ana's puppy?", "evidence": ["D1:1"], "category": 4},
                   {"question": "Why did Ben pause his marathon training?", "evidence": ["D1:10"], "category": 1}]}
    path = tmp_path / "c1.json"
    path.write_bytes(orjson.dumps(data))
    return path


def test_recall_and_methods() -> None:
    assert recall(["a", "b", "c"], ["b", "z"], 2) == 0.5
    assert methods(False) == METHODS
    assert methods(True) == (*METHODS, NO_GRAPH)


def test_no_graph_turns_expansion_off_and_keeps_the_rest() -> None:
    p = Params(anchors=12)
    flat = no_graph(p)
    assert flat.limits.depth == 0 and p.limits.depth == 8
    assert flat.anchors == 12 and flat.limits.controller_calls == p.limits.controller_calls


async def test_ablation_reports_no_graph_in_the_same_run(tmp_path: Path, embedder: Embedder) -> None:
    _locomo_file(tmp_path)
    plain = await run_locomo(tmp_path, Settings(params=Params()), embedder)
    out = await run_locomo(tmp_path, Settings(params=Params()), embedder, ablate=True)
    assert set(plain["recall"]) == set(METHODS)
    assert set(out["recall"]) == {*METHODS, NO_GRAPH}
    assert out["questions"] == 2
    for m in out["recall"].values():
        assert set(m) == {"5", "10", "20"}
        assert m["20"]["overall"] is not None
    # the ablation is not counted in the run's controller figures
    assert out["controller_calls"] == plain["controller_calls"]
