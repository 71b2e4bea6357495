"""One error tree for the whole product; vendor errors are translated at the adapters."""

from __future__ import annotations


class JevMemError(Exception):
    """Root of every error this product raises on purpose."""


class InvalidEvent(JevMemError):
    """An input event failed validation; ``reason`` is what a dead letter records."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class StoreUnavailable(JevMemError):
    """A store (vector, lexical, edge, node) could not be reached or refused a write."""


class IncompatibleStore(JevMemError):
    """A store server's version is outside the range this build supports (retrying cannot help)."""


class SystemOneError(JevMemError):
    """The System One controller failed or answered outside its contract."""


class SystemTwoError(JevMemError):
    """The System Two (answer-writing LLM) endpoint failed."""


class BrokerUnavailable(JevMemError):
    """The Kafka broker could not be reached or did not acknowledge a write."""


class ModelMismatch(JevMemError):
    """A store was built with another embedding model than the one configured."""
