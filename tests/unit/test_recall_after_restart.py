"""Recall right after a restart: a user's memory written by one process is recalled by the next,
and the first recall of a started service embeds only its question and reads the user's vectors
from their realm file, not from the node table (what a search needs was built at start or is on
disk, not built on the way)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService
from query_api import service as service_api
from storage.sqlite.vectors import MatrixVectorIndex
from tests.conftest import CountingEmbedder
from topology.ports import Embedder
from topology.schemas import Observation

T0 = datetime(2024, 5, 1, 9, tzinfo=UTC)


def _sessions() -> list[Observation]:
    said = ["Morning! Coffee first.", "My locker code at the gym is 4471.", "Rain again today.",
            "I watched a documentary about owls.", "Lunch was a sad sandwich.", "The bus was late."]
    return [Observation(tenant_id="t", conversation_id=f"s{i}", event_id=f"e{i}", content=text, speaker="Ilka",
                        user_id="ilka", observed_at=T0 + timedelta(days=i)) for i, text in enumerate(said)]


async def test_a_restarted_service_recalls_the_users_fact_and_embeds_only_the_question_first(
        tmp_path: Path, model_embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    first = EmbeddedService(Settings(), embedder=model_embedder, data_dir=tmp_path)
    await first.start()
    assert await first.submit(_sessions()) == []
    await first.stop()

    def no_scan(*_: object) -> None:
        raise AssertionError("a realm's rows were read from the node table")

    monkeypatch.setattr(MatrixVectorIndex, "_realm_rows", no_scan)
    monkeypatch.setattr(MatrixVectorIndex, "_load_realm", no_scan)
    counting = CountingEmbedder(model_embedder)
    again = EmbeddedService(Settings(), embedder=counting, data_dir=tmp_path)  # type: ignore[arg-type]
    await again.start()
    try:
        before = counting.calls
        res = await service_api.recall_across(again, "t", "What is my locker code?", 5, None, user_id="ilka")
        assert res.evidence[0].event_id == "e1", [(e.content, e.score) for e in res.evidence]
        assert res.searched >= 1
        assert counting.calls - before == 1  # the question, nothing built on the way
    finally:
        await again.stop()
