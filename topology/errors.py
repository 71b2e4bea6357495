"""One error tree for the whole product; vendor errors are translated at the adapters.

Every error this product raises on purpose is a :class:`JevMemError`::

    JevMemError
    ├── InvalidEvent            an input event failed validation (its dead letter records why)
    ├── RequestError            the caller must change the request; retrying it as is cannot help
    │   ├── Unauthenticated     no valid API key
    │   ├── Forbidden           a valid key without the scope, or naming another tenant
    │   ├── NotFound            the request names something the caller's tenant does not have
    │   │   └── UnknownConversation
    │   └── InvalidRequest      well-formed, but outside what the API accepts
    ├── Unavailable             a backend did not answer or refused; retrying later may help
    │   ├── StoreUnavailable    a store (vector, lexical, edge, node, keys)
    │   └── BrokerUnavailable   the Kafka broker
    ├── UpstreamError           a model service failed or answered outside its contract
    │   ├── SystemOneError
    │   └── SystemTwoError
    ├── IncompatibleStore       a store server's version is not supported (configuration)
    ├── ModelMismatch           a store was built with another embedding model (configuration)
    ├── KekMissing              encryption is on without the key-encryption key the keys need (configuration)
    └── SealingError            a sealed record or wrapped key does not authenticate

Adapters translate their backend's own exceptions into this tree in one place each
(``storage.sqlite.sqlite_errors``, ``storage.elastic.es_errors``, ``storage.qdrant``'s guard), so
no vendor exception crosses a port. The HTTP API and the MCP server answer each of these errors
from one table (``query_api.service.answer_for``).
"""

from __future__ import annotations


class JevMemError(Exception):
    """Root of every error this product raises on purpose."""


class InvalidEvent(JevMemError):
    """An input event failed validation; ``reason`` is what a dead letter records."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RequestError(JevMemError):
    """The request cannot be served as it is; the message says what to change."""


class Unauthenticated(RequestError):
    """No key, a malformed key, an unknown or revoked key, or a wrong secret (HTTP 401)."""


class Forbidden(RequestError):
    """A valid key without the scope, or naming another tenant (HTTP 403)."""


class NotFound(RequestError):
    """The request names something the caller's tenant does not have (HTTP 404)."""


class UnknownConversation(NotFound):
    """A read of a conversation the caller's tenant has no memory of. ``conversation_id`` is the
    id asked for; the message never names another tenant's conversations."""

    def __init__(self, conversation_id: str) -> None:
        super().__init__(f"no conversation {conversation_id!r} in this tenant's memory")
        self.conversation_id = conversation_id


class InvalidRequest(RequestError, ValueError):
    """A well-formed request outside what the API accepts, e.g. over a cap (HTTP 422). ``where``
    names the field at fault when there is one (``("path", "event_id")``)."""

    def __init__(self, message: str, where: tuple[str | int, ...] = ()) -> None:
        super().__init__(message)
        self.where = where


class Unavailable(JevMemError):
    """A backend could not be reached or refused; the same request may succeed later (HTTP 503)."""


class StoreUnavailable(Unavailable):
    """A store (vector, lexical, edge, node, keys) could not be reached or refused a call."""


class BrokerUnavailable(Unavailable):
    """The Kafka broker could not be reached or did not acknowledge a write."""


class UpstreamError(JevMemError):
    """A model service this product calls failed (HTTP 502)."""


class SystemOneError(UpstreamError):
    """The System One controller failed or answered outside its contract."""


class SystemTwoError(UpstreamError):
    """The System Two (answer-writing LLM) endpoint failed."""


class IncompatibleStore(JevMemError):
    """A store server's version is outside the range this build supports (retrying cannot help)."""


class ModelMismatch(JevMemError):
    """A store was built with another embedding model than the one configured."""


class KekMissing(JevMemError):
    """Encryption is on but no key-encryption key is configured, or a stored data key is wrapped
    by one that is not configured (configuration: the message says what to set)."""


class SealingError(JevMemError):
    """A sealed record or a wrapped data key does not authenticate: tampered, or sealed for
    another key or conversation."""
