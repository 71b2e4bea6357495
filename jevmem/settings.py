"""One settings object, built at the edge from ``JEVMEM_*`` environment variables and flags.

Every secret (a :class:`~pydantic.SecretStr` field) can also come from a file:
``JEVMEM_<NAME>_FILE`` names a file whose content (without its trailing newline) is the value, as
container secrets are mounted. A value given directly wins over the file.

Settings are data: values, and what follows from them alone (the cache budget, the topic
layout, the environment for child processes). The parts built from them (clients, models,
keys, the write and read paths) are made in :mod:`jevmem.assembly`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from jevmem import blas, collector
from storage.budget import MemoryPlan, plan
from streams.kafka_client import SaslMechanism, SecurityProtocol
from topology.params import Params
from topology.topics import TopicLayout

ENV_PREFIX = "JEVMEM_"


class SecretFiles(PydanticBaseSettingsSource):
    """Secret fields read from the files named by ``JEVMEM_<NAME>_FILE``."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        path = os.environ.get(f"{ENV_PREFIX}{field_name.upper()}_FILE")
        if not path or SecretStr not in _types(field.annotation):
            return None, field_name, False
        try:
            return Path(path).read_text().rstrip("\r\n"), field_name, False
        except OSError as exc:  # the path is no secret; the content never appears
            raise ValueError(f"{ENV_PREFIX}{field_name.upper()}_FILE: cannot read {path}: {exc.strerror}") from None

    def __call__(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, field in self.settings_cls.model_fields.items():
            value, _, _ = self.get_field_value(field, name)
            if value is not None:
                out[name] = value
        return out


def _types(annotation: Any) -> tuple[Any, ...]:
    return (annotation, *getattr(annotation, "__args__", ()))


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="ignore")

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, dotenv_settings, SecretFiles(settings_cls), file_secret_settings

    data_dir: Path = Path(".jevmem")
    tenant: str = "default"
    system_one: Literal["local", "typesafe"] = "local"
    # the local backend's relation judge: "learned" (the weights shipped for the embedder, the
    # rule where it has none), "rule" (hand-set), or the path of a weights file
    # (scripts/train_relations.py --out)
    relation_judge: str = "learned"
    # the local backend's update judge and the learned attribute model: None, the weights shipped
    # for the embedder, or the path of a weights file (scripts/train_update_judge.py --out,
    # scripts/train_attributes.py --out)
    update_judge: Path | None = None
    attribute_model: Path | None = None
    typesafe_base_url: str | None = None
    typesafe_api_key: SecretStr | None = None
    typesafe_model: str | None = None
    system_two_url: str | None = None
    system_two_model: str = "gpt-4o-mini"
    system_two_api_key: SecretStr | None = None
    write_batch: int = 64
    # the memory budget of the caches that grow with the store (MiB; storage.budget shares it out:
    # SQLite page cache, the write path's in-memory conversations, the read path's vectors); the
    # model and runtime come on top
    memory_mb: int = Field(default=384, ge=64)
    # set either to replace its share of the budget: nodes the write path keeps in memory (least
    # recently written conversations dropped first, reloaded when written again), and the embedded
    # store's SQLite page cache (MiB, shared by its connections)
    cache_nodes: int | None = Field(default=None, ge=1)
    sqlite_cache_mb: int | None = Field(default=None, ge=1)
    # Python's garbage-collector thresholds in a jevmem process (jevmem.collector; set by every CLI
    # command, so `serve`, `mcp` and `worker` too); [700, 10, 10] are the interpreter's own
    gc_thresholds: tuple[int, int, int] = collector.DEFAULT_THRESHOLDS
    # threads of numpy's BLAS in a jevmem process (jevmem.blas; set by every CLI command): one, so
    # small products on the event loop leave no spinning BLAS thread beside the model; 0: the
    # library's own choice (a thread per core)
    blas_threads: int = Field(default=blas.DEFAULT_THREADS, ge=0)
    write_wait_s: float = 0.1  # a worker waits at most this long to fill a micro-batch (latency floor)
    embedder: str = "e5-small-v2-int8@0.36.2"  # a name of topology.embedding.MODELS; recorded with each store
    model_cache: Path | None = None  # default: ~/.cache/jevmem/models
    # a command that needs the model fetches it on first use (jevmem.models.ensure); offline=True
    # (JEVMEM_OFFLINE=1) never downloads: a missing model is then one line saying how to get it
    offline: bool = False
    # embedder = "openai:<model>[:<dimensions>][+joined]": embeddings from an OpenAI-compatible /v1/embeddings
    # service; a service returns pooled vectors, so it embeds each turn alone, or with "+joined" the turn before
    # it and the turn as one text (topology.embedding_service); the name, suffix included, is recorded with a store
    embedding_url: str | None = None  # e.g. http://gpu-box:8000/v1
    embedding_api_key: SecretStr | None = None
    embedding_dimensions: int | None = None  # ask the service for this many (models that can shorten)
    embedding_query_prefix: str = ""  # e.g. "query: " for the e5 family
    embedding_passage_prefix: str = ""  # e.g. "passage: "
    # the service model's input limit in tokens (None: known for OpenAI's models, else 512); each text is cut to
    # that many UTF-8 bytes before it is sent (a token is at least a byte), the node keeps it whole
    embedding_max_tokens: int | None = None
    # distributed mode
    kafka_bootstrap: str = "127.0.0.1:9092"  # comma-separated host:port of some of the cluster's brokers
    kafka_security_protocol: SecurityProtocol = "PLAINTEXT"
    kafka_sasl_mechanism: SaslMechanism = "SCRAM-SHA-512"
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    kafka_ssl_cafile: Path | None = None  # CAs that signed the brokers' certificates (default: the system's)
    kafka_ssl_certfile: Path | None = None  # client certificate for mutual TLS
    kafka_ssl_keyfile: Path | None = None
    kafka_ssl_key_password: SecretStr | None = None
    kafka_replication_factor: int = 3  # 1 only on a single broker (the project's development scripts)
    kafka_min_insync_replicas: int = 2
    #: how the workers compress what they log to the output topics (memories, candidates, judgments,
    #: edges, consolidation); the observations topic, which the workers read, is left uncompressed
    kafka_output_compression: Literal["none", "gzip", "snappy", "lz4", "zstd"] = "lz4"
    kafka_retention_ms: dict[str, int] = {}  # per topic role, e.g. {"candidates": 86400000}; -1 forever
    topic_prefix: str = "jevmem"
    partitions: int = 12
    app_id: str = "jevmem"
    worker_datadir: Path = Path(".jevmem/worker")
    qdrant_url: str | None = None  # one node, or comma-separated nodes of a cluster (used in turn when one fails)
    qdrant_api_key: SecretStr | None = None
    qdrant_ca_file: Path | None = None  # https: the CA that signed the server's certificate (default: the system's)
    qdrant_shards: int | None = None  # a new collection's shard_number (None: the server's default)
    qdrant_replication_factor: int | None = None  # a new collection's replication_factor (None: the server's default)
    #: realm searches (a user's or a tenant's memories across conversations) through Qdrant's HNSW
    #: index with this ``hnsw_ef`` instead of an exact scan: faster on large realms, and no longer
    #: the embedded store's exact ranking (see docs/benchmarks.md); None: exact (the default)
    qdrant_realm_ef: int | None = Field(default=None, ge=1)
    elasticsearch_url: str = "http://127.0.0.1:9200"  # one node, or comma-separated nodes
    elasticsearch_api_key: SecretStr | None = None
    elasticsearch_username: str | None = None  # basic auth (with elasticsearch_password), instead of an API key
    elasticsearch_password: SecretStr | None = None
    elasticsearch_ca_file: Path | None = None  # https: the CA that signed the nodes' certificates
    store_prefix: str | None = None  # None: the active generation recorded in Elasticsearch
    params: Params = Params()
    mode: Literal["embedded", "distributed"] = "embedded"
    # operations
    log_format: Literal["json", "text"] = "json"  # serve, worker, mcp: one JSON object per line
    log_level: str = "INFO"
    metrics_port: int | None = None  # a worker's Prometheus /metrics port (the API serves /metrics itself)
    # API keys (see docs/security.md)
    keys_index: str = "jevmem-keys"  # distributed mode: the Elasticsearch index of key records
    # OIDC bearer tokens besides API keys (query_api/oidc.py); on when an issuer is set
    oidc_issuer: str | None = None  # e.g. https://login.example.com/realms/agents
    oidc_audience: str | None = None  # this API's identifier in the tokens' aud (required with an issuer)
    oidc_jwks_url: str | None = None  # default: the issuer's discovery document's jwks_uri
    oidc_tenant_claim: str = "tenant_id"
    oidc_scope_claim: str = "scope"
    oidc_scope_prefix: str = ""  # e.g. "jevmem:" when the issuer's scopes read jevmem:query
    auth_cache_seconds: float = 5.0  # a verified key is trusted this long (revocation delay)
    # crypto-shredding of the Kafka log (docs/security.md): personal fields of every topic record
    # sealed under a data key per observation, destroyed by a forget
    encryption: bool = False
    # base64 of 32 random bytes (`jevmem encryption new-kek`); several, comma- or newline-separated,
    # the current one first, while rotating. Or JEVMEM_ENCRYPTION_KEK_FILE (a file of them).
    encryption_kek: SecretStr | None = None
    encryption_key_cache_s: float = 300.0  # an unwrapped data key stays in a process's memory this long

    def memory(self, dim: int, embedded: bool = True) -> MemoryPlan:
        """The caches' bounds for embeddings of ``dim`` dimensions, in a process with an
        embedded store or a distributed worker (:func:`storage.budget.plan`)."""
        return plan(self.memory_mb, dim, self.sqlite_cache_mb, self.cache_nodes, embedded)

    def topic_layout(self) -> TopicLayout:
        return TopicLayout(self.partitions, self.kafka_replication_factor, self.kafka_min_insync_replicas,
                           self.kafka_retention_ms)

    def env(self) -> dict[str, str]:
        """These settings as ``JEVMEM_*`` environment variables (the fields that are set), for
        processes this one starts (workers of a benchmark). Secrets included: never log it."""
        out: dict[str, str] = {}
        for name, value in self.model_dump(exclude={"params"}).items():
            if value is None:
                continue
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            elif isinstance(value, dict | list | tuple):
                value = json.dumps(value)
            out[f"{ENV_PREFIX}{name.upper()}"] = str(value)
        return out
