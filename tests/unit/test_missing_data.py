"""Missing test data fails CI and skips elsewhere (``tests.integration.servers.missing_data``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration import servers


def test_missing_data_fails_in_ci_and_skips_elsewhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(servers, "LOCOMO", tmp_path / "locomo")
    monkeypatch.setattr(servers, "IN_CI", True)
    with pytest.raises(pytest.fail.Exception, match=r"not found at .*locomo: CI needs it"):
        servers.require_locomo()
    monkeypatch.setattr(servers, "IN_CI", False)
    with pytest.raises(pytest.skip.Exception, match="not found at"):
        servers.require_locomo()
    (tmp_path / "locomo").mkdir()  # an empty directory is missing data too
    with pytest.raises(pytest.skip.Exception):
        servers.require_locomo()
    (tmp_path / "locomo" / "conv-1.json").write_text("{}")
    servers.require_locomo()  # there: nothing raised
