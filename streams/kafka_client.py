"""How every Kafka client of the pipeline reaches the brokers, from one set of settings.

One :class:`KafkaClient` describes the bootstrap servers and the security of the connection
(``PLAINTEXT``, ``SSL`` with a CA bundle and an optional client certificate for mutual TLS,
``SASL_PLAINTEXT`` / ``SASL_SSL`` with ``PLAIN``, ``SCRAM-SHA-256`` or ``SCRAM-SHA-512``). It is
translated once for each client library: librdkafka (the producer SDK, admin, replay and the
benchmarks, :meth:`KafkaClient.librdkafka`) and aiokafka (the Faust workers,
:meth:`KafkaClient.ssl_context` and :func:`streams.faust_app.credentials`).

Contracts:

* Secrets (the SASL password, the client key's password) are :class:`~pydantic.SecretStr`: they
  never appear in a ``repr``, a log line or an error message.
* :meth:`KafkaClient.check` fails fast: a wrong password, a certificate the client does not trust,
  a client speaking the wrong protocol or no broker at all raise :class:`BrokerUnavailable` within
  its timeout with what went wrong and which setting to look at, instead of librdkafka's retrying
  forever.
"""

from __future__ import annotations

import ssl
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from confluent_kafka import KafkaError
from confluent_kafka import admin as kafka_admin
from confluent_kafka.admin._metadata import ClusterMetadata
from pydantic import SecretStr

from topology.errors import BrokerUnavailable

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]

#: librdkafka error codes that no retry cures: the configuration is wrong.
FATAL_CODES = {KafkaError._AUTHENTICATION: "authentication failed", KafkaError._SSL: "TLS failed"}


@dataclass(frozen=True)
class KafkaClient:
    """Bootstrap servers (comma-separated ``host:port``) and the connection's security."""

    bootstrap: str
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism = "SCRAM-SHA-512"
    sasl_username: str | None = None
    sasl_password: SecretStr | None = field(default=None, repr=False)
    ssl_cafile: str | None = None     # PEM bundle of the CAs to trust; None: the system's
    ssl_certfile: str | None = None   # PEM client certificate (mutual TLS)
    ssl_keyfile: str | None = None    # PEM key of the client certificate
    ssl_key_password: SecretStr | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.sasl and not (self.sasl_username and self.sasl_password):
            raise ValueError(f"security protocol {self.security_protocol} needs a SASL username and password "
                             "(JEVMEM_KAFKA_SASL_USERNAME, JEVMEM_KAFKA_SASL_PASSWORD or JEVMEM_KAFKA_SASL_PASSWORD_FILE)")
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            raise ValueError("a client certificate needs its key and the key its certificate "
                             "(JEVMEM_KAFKA_SSL_CERTFILE and JEVMEM_KAFKA_SSL_KEYFILE)")

    @classmethod
    def of(cls, kafka: KafkaClient | str) -> KafkaClient:
        """``kafka`` itself, or a plaintext client of the bootstrap servers it names."""
        return kafka if isinstance(kafka, KafkaClient) else cls(kafka)

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def with_bootstrap(self, bootstrap: str) -> KafkaClient:
        return replace(self, bootstrap=bootstrap)

    def librdkafka(self, **extra: Any) -> dict[str, Any]:
        """The configuration of a librdkafka client (confluent-kafka) for these brokers, merged
        with ``extra`` (librdkafka property names)."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "security.protocol": self.security_protocol}
        if self.tls:
            if self.ssl_cafile:
                conf["ssl.ca.location"] = self.ssl_cafile
            if self.ssl_certfile:
                conf["ssl.certificate.location"] = self.ssl_certfile
                conf["ssl.key.location"] = self.ssl_keyfile
            if self.ssl_key_password is not None:
                conf["ssl.key.password"] = self.ssl_key_password.get_secret_value()
        if self.sasl:
            conf["sasl.mechanism"] = self.sasl_mechanism
            conf["sasl.username"] = self.sasl_username
            conf["sasl.password"] = self.sasl_password.get_secret_value() if self.sasl_password else None
        return {**conf, **extra}

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context of an asyncio client (aiokafka), or None without TLS: verifies the
        brokers' certificates and host names against ``ssl_cafile`` (or the system's CAs)."""
        if not self.tls:
            return None
        ctx = ssl.create_default_context(cafile=self.ssl_cafile)
        if self.ssl_certfile:
            password = self.ssl_key_password.get_secret_value() if self.ssl_key_password else None
            ctx.load_cert_chain(self.ssl_certfile, self.ssl_keyfile, password)
        return ctx

    def check(self, timeout_s: float = 15.0) -> ClusterMetadata:
        """The cluster's metadata, or :class:`BrokerUnavailable` as soon as the connection is
        known to be wrong (authentication or TLS failed) or ``timeout_s`` passed."""
        errors: list[KafkaError] = []
        lock = threading.Lock()

        def on_error(err: KafkaError) -> None:
            with lock:
                errors.append(err)

        admin = kafka_admin.AdminClient(self.librdkafka(error_cb=on_error))
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return admin.list_topics(timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            except Exception as exc:  # KafkaException: timed out
                last: Exception = exc
            admin.poll(0)  # serves error_cb
            with lock:
                seen = list(errors)
            if fatal := [e for e in seen if e.code() in FATAL_CODES]:
                raise BrokerUnavailable(self.explain(fatal[-1]))
            if time.monotonic() >= deadline:
                raise BrokerUnavailable(self.explain(seen[-1]) if seen else
                                        f"kafka {self.bootstrap}: no metadata within {timeout_s:.0f} s ({last})")

    def explain(self, err: KafkaError) -> str:
        """A librdkafka error as one line that says which settings to check (never a secret)."""
        what = FATAL_CODES.get(err.code(), "cannot connect")
        hint = {
            KafkaError._AUTHENTICATION: f"check the SASL username, password and mechanism ({self.sasl_mechanism})",
            KafkaError._SSL: "check JEVMEM_KAFKA_SSL_CAFILE (the CA that signed the brokers' certificates) "
                             "and the client certificate",
        }.get(err.code(), f"check JEVMEM_KAFKA_BOOTSTRAP and that the listener speaks {self.security_protocol}")
        return f"kafka {self.bootstrap} ({self.security_protocol}): {what}: {err.str()}; {hint}"
