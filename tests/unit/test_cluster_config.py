"""Connecting to a real cluster, as configured: the topic layout and its checks against existing
topics, one Kafka security configuration translated for each client library, and secrets from
files that never show in a repr, an error or a worker's logged settings."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from pydantic import SecretStr

from jevmem import assembly
from jevmem.settings import Settings
from streams.faust_app import credentials
from streams.kafka_client import LIBRDKAFKA_LOG, KafkaClient
from topology.errors import BrokerUnavailable
from topology.topics import TopicLayout, TopicState, layout_problems, topics


def test_the_default_layout_suits_a_three_broker_cluster() -> None:
    layout = Settings().topic_layout()
    assert (layout.partitions, layout.replication_factor, layout.min_insync_replicas) == (12, 3, 2)
    spec = layout.specs("p")["observations"]
    assert spec.config(layout.min_insync_replicas) == {"retention.ms": "-1", "cleanup.policy": "delete",
                                                       "min.insync.replicas": "2"}


def test_retention_is_a_setting_per_topic_role() -> None:
    settings = Settings(kafka_retention_ms={"candidates": 3_600_000})
    specs = settings.topic_layout().specs("p")
    assert specs["candidates"].retention_ms == 3_600_000
    assert specs["judgments"].retention_ms == topics("p")["judgments"].retention_ms
    with pytest.raises(ValueError, match="unknown topic roles"):
        TopicLayout(retention_ms={"candidate": 1})


def test_a_layout_that_could_never_acknowledge_a_write_is_refused() -> None:
    with pytest.raises(ValueError, match="exceeds the replication factor"):
        TopicLayout(replication_factor=1, min_insync_replicas=2)


def test_existing_topics_are_checked_against_the_layout() -> None:
    layout = TopicLayout(partitions=12, replication_factor=3, min_insync_replicas=2)
    assert layout_problems(layout, TopicState("t", 12, 3, 2)) == ([], [])

    errors, warnings = layout_problems(layout, TopicState("t", 4, 1, 1))
    assert len(errors) == 2 and len(warnings) == 1
    assert "JEVMEM_PARTITIONS=4" in errors[0] and "4 partitions, 12 configured" in errors[0]
    assert "replication factor 1, 3 configured" in errors[1] and "JEVMEM_KAFKA_REPLICATION_FACTOR=1" in errors[1]
    assert "min.insync.replicas=1" in warnings[0]

    errors, warnings = layout_problems(layout, TopicState("t", 24, 5, None))
    assert errors == [] and len(warnings) == 2  # more than configured: works, but says so


def test_one_security_configuration_for_librdkafka() -> None:
    kafka = KafkaClient("b1:9093,b2:9093", "SASL_SSL", "SCRAM-SHA-256", "svc", SecretStr("pw"), "/ca.pem")
    conf = kafka.librdkafka(**{"group.id": "g"})
    assert conf == {"bootstrap.servers": "b1:9093,b2:9093", "security.protocol": "SASL_SSL",
                    "ssl.ca.location": "/ca.pem", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "svc",
                    "sasl.password": "pw", "group.id": "g", "logger": LIBRDKAFKA_LOG}
    assert KafkaClient("b:9092").librdkafka() == {"bootstrap.servers": "b:9092", "security.protocol": "PLAINTEXT",
                                                  "logger": LIBRDKAFKA_LOG}  # its log lines: the log, not the terminal
    mtls = KafkaClient("b:9094", "SSL", ssl_cafile="/ca.pem", ssl_certfile="/c.pem", ssl_keyfile="/c.key")
    assert {k: v for k, v in mtls.librdkafka().items() if k.startswith("ssl.")} == {
        "ssl.ca.location": "/ca.pem", "ssl.certificate.location": "/c.pem", "ssl.key.location": "/c.key"}


def test_and_for_the_faust_workers() -> None:
    sasl = credentials(KafkaClient("b:9093", "SASL_SSL", "SCRAM-SHA-512", "svc", SecretStr("pw")))
    assert sasl is not None
    assert (sasl.protocol.value, sasl.mechanism.value, sasl.username, sasl.password) == (  # type: ignore[attr-defined]
        "SASL_SSL", "SCRAM-SHA-512", "svc", "pw")
    context = sasl.ssl_context  # type: ignore[attr-defined]
    assert isinstance(context, ssl.SSLContext) and context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert credentials(KafkaClient("b:9092")) is None
    tls = credentials(KafkaClient("b:9093", "SSL"))
    assert tls is not None and tls.protocol.value == "SSL"


def test_incomplete_security_settings_are_refused_with_what_is_missing() -> None:
    with pytest.raises(ValueError, match="needs a SASL username and password"):
        KafkaClient("b:9093", "SASL_SSL")
    with pytest.raises(ValueError, match="needs its key"):
        KafkaClient("b:9093", "SSL", ssl_certfile="/c.pem")


def test_secrets_come_from_files_and_never_show(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "kafka-password"
    secret.write_text("hunter2-from-file\n")
    monkeypatch.setenv("JEVMEM_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("JEVMEM_KAFKA_SASL_USERNAME", "svc")
    monkeypatch.setenv("JEVMEM_KAFKA_SASL_PASSWORD_FILE", str(secret))
    monkeypatch.setenv("JEVMEM_QDRANT_API_KEY_FILE", str(secret))
    settings = Settings()
    assert settings.kafka_sasl_password is not None
    assert settings.kafka_sasl_password.get_secret_value() == "hunter2-from-file"  # trailing newline dropped
    assert assembly.qdrant_key(settings) == "hunter2-from-file"
    for text in (repr(settings), str(settings), repr(assembly.kafka(settings))):
        assert "hunter2" not in text
    # a value given directly wins over the file
    assert assembly.kafka(Settings(kafka_sasl_password=SecretStr("direct"))).librdkafka()["sasl.password"] == "direct"
    # the environment a benchmark hands its workers carries the secret itself, not the file name
    env = settings.env()
    assert env["JEVMEM_KAFKA_SASL_PASSWORD"] == "hunter2-from-file"
    assert env["JEVMEM_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"


def test_the_environment_handed_to_workers_reads_back_as_the_same_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(gc_thresholds=(50_000, 5, 20), kafka_retention_ms={"candidates": 86_400_000}, partitions=3)
    env = settings.env()
    for name in [k for k in os.environ if k.startswith("JEVMEM_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert Settings().model_dump(exclude={"params"}) == settings.model_dump(exclude={"params"})


def test_an_unreadable_secret_file_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JEVMEM_KAFKA_SASL_PASSWORD_FILE", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="JEVMEM_KAFKA_SASL_PASSWORD_FILE: cannot read"):
        Settings()


def test_connection_errors_say_what_to_check_without_the_secret() -> None:
    kafka = KafkaClient("b:9093", "SASL_SSL", "SCRAM-SHA-512", "svc", SecretStr("hunter2"))
    auth = kafka.explain(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: invalid credentials"))
    assert "authentication failed" in auth and "SCRAM-SHA-512" in auth and "hunter2" not in auth
    tls = kafka.explain(KafkaError(KafkaError._SSL, "certificate verify failed"))
    assert "TLS failed" in tls and "JEVMEM_KAFKA_SSL_CAFILE" in tls


def test_no_broker_fails_within_the_timeout() -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(BrokerUnavailable, match=f"127.0.0.1:{port}"):
        KafkaClient(f"127.0.0.1:{port}").check(timeout_s=2.0)


def test_watermarks_wait_for_a_new_leader_whose_high_watermark_is_not_caught_up() -> None:
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    from streams import kafka_admin

    class Consumer:
        """Answers as a new leader does right after a broker loss: OFFSET_NOT_AVAILABLE, then offsets."""

        def __init__(self, failures: int, code: int = KafkaError.OFFSET_NOT_AVAILABLE) -> None:
            self.failures, self.code, self.refreshed = failures, code, 0

        def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
            if self.failures:
                self.failures -= 1
                raise KafkaException(KafkaError(self.code))
            return 0, 42

        def list_topics(self, topic: str, timeout: float) -> None:
            self.refreshed += 1

    c = Consumer(2)
    assert kafka_admin.watermarks(c, TopicPartition("t", 0)) == (0, 42)  # type: ignore[arg-type]
    assert c.refreshed == 2
    # the request was in flight to a broker that left the cluster's metadata: librdkafka destroys
    # that broker's handle and fails the request locally; the leader is elsewhere now
    c = Consumer(1, KafkaError._DESTROY_BROKER)
    assert kafka_admin.watermarks(c, TopicPartition("t", 0)) == (0, 42)  # type: ignore[arg-type]
    assert c.refreshed == 1
    with pytest.raises(KafkaException):  # not transient: raised at once
        kafka_admin.watermarks(Consumer(1, KafkaError.TOPIC_AUTHORIZATION_FAILED), TopicPartition("t", 0))  # type: ignore[arg-type]


def test_realm_searches_are_exact_unless_an_hnsw_ef_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """``JEVMEM_QDRANT_REALM_EF`` sends a user's or tenant's realm searches through Qdrant's HNSW
    index with that ``hnsw_ef``; unset, they are exact scans; a value below 1 is refused."""
    monkeypatch.setenv("JEVMEM_QDRANT_URL", "http://127.0.0.1:1")
    default = assembly.qdrant(Settings(), 8, "c").realm_params
    assert default.exact and default.hnsw_ef is None
    monkeypatch.setenv("JEVMEM_QDRANT_REALM_EF", "256")
    settings = Settings()
    tuned = assembly.qdrant(settings, 8, "c").realm_params
    assert tuned.hnsw_ef == 256 and not tuned.exact
    assert settings.env()["JEVMEM_QDRANT_REALM_EF"] == "256"  # what a benchmark hands its workers
    monkeypatch.setenv("JEVMEM_QDRANT_REALM_EF", "0")
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        Settings()
