"""The compose file says what it is and names every connection setting a user may need, checked
with ``docker-compose config`` (it parses and interpolates the file; no container engine needed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr

from jevmem.settings import ENV_PREFIX, Settings

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"
#: Settings the deployment chooses itself (paths inside the image) or that only matter elsewhere.
NOT_IN_COMPOSE = {"data_dir", "sqlite_cache_mb", "cache_nodes", "model_cache", "offline", "params", "embedder", "log_format",
                  "log_level", "keys_index",
                  "auth_cache_seconds", "write_wait_s", "metrics_port", "worker_datadir"}
CONNECTION = ("kafka_", "elasticsearch_", "qdrant_")


def config(**env: str) -> dict[str, Any]:
    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose not installed (scripts/setup installs Debian's package)")
    out = subprocess.run(["docker-compose", "-f", str(COMPOSE), "config"], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin:/usr/local/bin", **env}, timeout=60)
    parsed: dict[str, Any] = yaml.safe_load(out.stdout)
    return parsed


def test_the_compose_stack_is_a_single_node_development_stack_that_says_so() -> None:
    header = COMPOSE.read_text().split("\n\n", 1)[0]
    assert "DEVELOPMENT" in header and "ONE Kafka broker" in header
    env = config()["services"]["worker"]["environment"]
    assert (env["JEVMEM_KAFKA_REPLICATION_FACTOR"], env["JEVMEM_KAFKA_MIN_INSYNC_REPLICAS"]) == ("1", "1")
    assert env["JEVMEM_KAFKA_SECURITY_PROTOCOL"] == "PLAINTEXT"


def test_every_connection_setting_and_secret_file_is_named_for_the_workers_and_the_api() -> None:
    services = config()["services"]
    wanted = {f"{ENV_PREFIX}{name.upper()}" for name in Settings.model_fields
              if name.startswith(CONNECTION) or name.startswith("system_") or name.startswith("typesafe_")}
    wanted |= {f"{ENV_PREFIX}{name.upper()}_FILE" for name, f in Settings.model_fields.items()
               if f.annotation is not None and SecretStr in (f.annotation, *getattr(f.annotation, "__args__", ()))}
    for service in ("worker", "api"):
        assert wanted <= set(services[service]["environment"]), (service, sorted(wanted - set(services[service]["environment"])))
    named = {f"{ENV_PREFIX}{name.upper()}" for name in Settings.model_fields if name not in NOT_IN_COMPOSE}
    assert named <= set(services["worker"]["environment"]), sorted(
        named - set(services["worker"]["environment"]))


def test_settings_from_the_shell_reach_the_containers() -> None:
    env = config(JEVMEM_KAFKA_SECURITY_PROTOCOL="SASL_SSL",
                 JEVMEM_KAFKA_REPLICATION_FACTOR="3", JEVMEM_KAFKA_SASL_PASSWORD_FILE="/run/secrets/kafka")
    worker = env["services"]["worker"]["environment"]
    assert worker["JEVMEM_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert worker["JEVMEM_KAFKA_REPLICATION_FACTOR"] == "3"
    assert worker["JEVMEM_KAFKA_SASL_PASSWORD_FILE"] == "/run/secrets/kafka"
