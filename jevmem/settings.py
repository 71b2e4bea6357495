"""One settings object, built at the edge from ``JEVMEM_*`` environment variables and flags."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from topology.params import Params


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="JEVMEM_", env_nested_delimiter="__", extra="ignore")

    data_dir: Path = Path(".jevmem")
    tenant: str = "default"
    system_one: Literal["local", "typesafe"] = "local"
    typesafe_base_url: str | None = None
    typesafe_api_key: SecretStr | None = None
    typesafe_model: str | None = None
    system_two_url: str | None = None
    system_two_model: str = "gpt-4o-mini"
    system_two_api_key: SecretStr | None = None
    write_batch: int = 64
    write_wait_s: float = 0.1  # a worker waits at most this long to fill a micro-batch (latency floor)
    embedder: str = "e5-small-v2-int8@0.36.2"  # a name of topology.embedding.MODELS; recorded with each store
    model_cache: Path | None = None  # default: ~/.cache/jevmem/models
    # distributed mode
    kafka_bootstrap: str = "127.0.0.1:9092"
    topic_prefix: str = "jevmem"
    partitions: int = 4
    app_id: str = "jevmem"
    worker_datadir: Path = Path(".jevmem/worker")
    qdrant_url: str | None = None
    qdrant_api_key: SecretStr | None = None
    elasticsearch_url: str = "http://127.0.0.1:9200"
    elasticsearch_api_key: SecretStr | None = None
    store_prefix: str | None = None  # None: the active generation recorded in Elasticsearch
    params: Params = Params()
    mode: Literal["embedded", "distributed"] = "embedded"
    # operations
    log_format: Literal["json", "text"] = "json"  # serve, worker, mcp: one JSON object per line
    log_level: str = "INFO"
    metrics_port: int | None = None  # a worker's Prometheus /metrics port (the API serves /metrics itself)
    # API keys (see README, "Security model")
    keys_index: str = "jevmem-keys"  # distributed mode: the Elasticsearch index of key records
    auth_cache_seconds: float = 5.0  # a verified key is trusted this long (revocation delay)
