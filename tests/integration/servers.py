"""Where the integration tests find their servers and data (``scripts/test`` starts the servers
and exports the variables), and the module-level skip when they are not there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

KAFKA = os.environ.get("JEVMEM_TEST_KAFKA")
ES_URL = os.environ.get("JEVMEM_TEST_ES_URL")
QDRANT_URL = os.environ.get("JEVMEM_TEST_QDRANT_URL")
#: The dev conversations (``JEVMEM_TEST_LOCOMO``, else ``../shared/data/locomo`` beside the checkout).
LOCOMO = Path(os.environ.get("JEVMEM_TEST_LOCOMO") or Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo")
#: The topic layout settings for the single test broker of ``scripts/kafka/kafka.sh``.
SINGLE_BROKER = {"kafka_replication_factor": 1, "kafka_min_insync_replicas": 1}


def require_stack() -> None:
    """Skip the calling test module unless Kafka, Elasticsearch, Qdrant and the LoCoMo dev
    conversations are all available."""
    if not (KAFKA and ES_URL and QDRANT_URL):
        pytest.skip("JEVMEM_TEST_KAFKA / JEVMEM_TEST_ES_URL / JEVMEM_TEST_QDRANT_URL not set", allow_module_level=True)
    if not LOCOMO.is_dir():
        pytest.skip(f"LoCoMo dev conversations not found at {LOCOMO}", allow_module_level=True)
