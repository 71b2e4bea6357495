"""Where the integration tests find their servers and data (``scripts/test`` starts the servers
and exports the variables), and the module-level skip when they are not there.

Servers not configured (``JEVMEM_TEST_SERVERS=0``, or pytest run without ``scripts/test``) skip
the tests that need them. Missing data is different: in CI (``CI=true``, as CI runs
``.ci/run``) a data directory the tests need and do not find fails them (:func:`missing_data`),
so a checkout without its data can never pass by skipping; on a developer's machine it skips,
naming the directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

KAFKA = os.environ.get("JEVMEM_TEST_KAFKA")
ES_URL = os.environ.get("JEVMEM_TEST_ES_URL")
QDRANT_URL = os.environ.get("JEVMEM_TEST_QDRANT_URL")
#: The dev conversations (``JEVMEM_TEST_LOCOMO``, else ``../shared/data/locomo`` beside the checkout).
LOCOMO = Path(os.environ.get("JEVMEM_TEST_LOCOMO") or Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo")
#: Whether this run is CI's (``CI=true``): missing data then fails instead of skipping.
IN_CI = os.environ.get("CI", "").lower() == "true"
#: The topic layout settings for the single test broker of ``scripts/kafka/kafka.sh``.
SINGLE_BROKER = {"kafka_replication_factor": 1, "kafka_min_insync_replicas": 1}


def missing_data(what: str, where: Path) -> None:
    """The calling test (or, at import, its module) cannot run because ``what`` is not at
    ``where``: a failure in CI (:data:`IN_CI`), a skip elsewhere."""
    message = f"{what} not found at {where}"
    if IN_CI:
        pytest.fail(f"{message}: CI needs it (the shared data beside the checkout)", pytrace=False)
    pytest.skip(message, allow_module_level=True)


def require_locomo() -> None:
    """Stop the calling test or module unless the LoCoMo dev conversations are there
    (:func:`missing_data`: a failure in CI)."""
    if not LOCOMO.is_dir() or not any(LOCOMO.glob("*.json")):
        missing_data("LoCoMo dev conversations (*.json)", LOCOMO)


def require_stack() -> None:
    """Skip the calling test module unless Kafka, Elasticsearch and Qdrant are configured; then
    require the LoCoMo dev conversations (:func:`require_locomo`: missing, a failure in CI)."""
    if not (KAFKA and ES_URL and QDRANT_URL):
        pytest.skip("JEVMEM_TEST_KAFKA / JEVMEM_TEST_ES_URL / JEVMEM_TEST_QDRANT_URL not set", allow_module_level=True)
    require_locomo()


def folder_bytes(folder: Path) -> list[bytes]:
    """The contents of every file under ``folder``, read while a server runs: a segment the
    optimizer removes during the walk is skipped (what it held is gone)."""
    blobs = []
    for root, _, files in os.walk(folder):  # a folder removed mid-walk is skipped, not an error
        for name in files:
            try:
                blobs.append((Path(root) / name).read_bytes())
            except FileNotFoundError:
                continue
    return blobs
