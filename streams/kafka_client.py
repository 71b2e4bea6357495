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
  forever. A plaintext client whose every broker hangs up during its first request (a TLS or SASL
  listener) is told so within about a second.
* librdkafka's own log lines go to the Python logger :data:`LIBRDKAFKA_LOG` (``librdkafka``), so
  to the process's log (the JSON log of ``jevmem serve`` and ``jevmem worker``), never straight to
  the terminal: every configuration :meth:`KafkaClient.librdkafka` makes names it, and the logger
  has a :class:`logging.NullHandler`, so a command without logging configured drops them.
"""

from __future__ import annotations

import logging
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
#: Where librdkafka's own log lines go (served by the clients' poll calls): the process's log.
LIBRDKAFKA_LOG = logging.getLogger("librdkafka")
LIBRDKAFKA_LOG.addHandler(logging.NullHandler())  # no logging configured: dropped, not printed
#: What librdkafka logs when a broker closes the connection during the client's first request
#: (ApiVersion): for a PLAINTEXT client, a listener that expects TLS or SASL.
_HUNG_UP_AT_HELLO = "in state APIVERSION_QUERY"


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
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "security.protocol": self.security_protocol,
                                "logger": LIBRDKAFKA_LOG}
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
        known to be wrong (authentication or TLS failed; a plaintext client whose brokers all hang
        up at its first request) or ``timeout_s`` passed."""
        errors: list[KafkaError] = []
        hung_up: set[str] = set()  # brokers that closed the connection at the first request
        lock = threading.Lock()

        def on_error(err: KafkaError) -> None:
            with lock:
                errors.append(err)

        class Watch(logging.Handler):  # librdkafka's log lines: kept in the log, read for hang-ups
            def emit(self, record: logging.LogRecord) -> None:
                message = record.getMessage()
                if _HUNG_UP_AT_HELLO in message and "Disconnected" in message:
                    with lock:
                        hung_up.add(message.split("]: ", 1)[-1].split(":", 2)[0])
                LIBRDKAFKA_LOG.handle(record)

        watch = logging.Logger("librdkafka")  # this check's own, not registered: no other handler
        watch.addHandler(Watch())
        admin = kafka_admin.AdminClient(self.librdkafka(error_cb=on_error, logger=watch))
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return admin.list_topics(timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            except Exception as exc:  # KafkaException: timed out
                last: Exception = exc
            admin.poll(0)  # serves error_cb and the log
            with lock:
                seen, closed = list(errors), len(hung_up)
            if fatal := [e for e in seen if e.code() in FATAL_CODES]:
                raise BrokerUnavailable(self.explain(fatal[-1]))
            if not self.tls and not self.sasl and closed and any(
                    e.code() == KafkaError._ALL_BROKERS_DOWN for e in seen):
                raise BrokerUnavailable(
                    f"kafka {self.bootstrap} (PLAINTEXT): every broker closed the connection at the first "
                    "request: the listener expects TLS or SASL; check JEVMEM_KAFKA_SECURITY_PROTOCOL "
                    "(SSL, SASL_SSL) and JEVMEM_KAFKA_BOOTSTRAP")
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
