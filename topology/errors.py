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
    ├── Unavailable             a backend did not answer; retrying later may help
    │   ├── StoreUnavailable    a store (vector, lexical, edge, node, keys; the embedding service)
    │   └── BrokerUnavailable   the Kafka broker
    ├── UpstreamError           a model service failed or answered outside its contract
    │   ├── SystemOneError
    │   │   └── SystemOneRefused   (also a Refused)
    │   └── SystemTwoError
    │       └── SystemTwoRefused   (also a Refused)
    ├── Refused                 a service refused what it was sent (HTTP 4xx); sending it again cannot help
    ├── Misconfigured           the deployment, not the input, is at fault
    │   ├── ServiceMisconfigured  a service refused this deployment (credentials, address, model)
    │   ├── IncompatibleStore   a store server's version is not supported
    │   ├── ModelMismatch       a store was built with another embedding model
    │   └── KekMissing          encryption is on without the key-encryption key the keys need
    └── SealingError            a sealed record or wrapped key does not authenticate

**Permanent versus transient, decided here once** (:func:`kind_of`): a failure is

* ``transient`` when the same call may pass later: no answer, timeouts, HTTP 408 and 429, 5xx, an
  outage of a store or the broker (:class:`Unavailable`, :class:`UpstreamError`). Retry with
  back-off; a worker says when a partition has been stalled too long.
* ``permanent`` when the record itself is at fault and no retry can fix it: validation
  (:class:`InvalidEvent`, :class:`RequestError`), a refusal of what was sent (:class:`Refused`:
  HTTP 4xx other than 408, 429 and :data:`CONFIGURATION_STATUSES`), a sealed record that does not
  open, and any error that is not ours (a bug a record triggers: the stages cannot process it).
  The record becomes a dead letter with its cause; the rest of its batch is written, in order.
* ``configuration`` when every record would fail alike (:class:`Misconfigured`: a revoked
  credential, a wrong URL or model, a store built with another model). Never dead-lettered:
  that would empty the stream into the dead letters; retried like a transient failure, and the
  worker reports itself unhealthy until an operator fixes it.

Adapters translate their backend's own exceptions into this tree in one place each
(``storage.sqlite.store.sqlite_errors``, ``storage.elastic.store.es_errors``, ``storage.qdrant.index``'s guard,
``topology.embedding_service``, the System One and Two clients with :func:`status_kind`), so no
vendor exception crosses a port. The HTTP API and the MCP server answer each of these errors from
one table (``query_api.service.answer_for``).
"""

from __future__ import annotations

from typing import Literal

Kind = Literal["transient", "permanent", "configuration"]

#: HTTP statuses a retry may cure: a timeout (408) and back-pressure (429); every 5xx too.
TRANSIENT_STATUSES = frozenset({408, 429})
#: HTTP statuses that name the caller's credentials, address or model (401, 403, 404, 405, 407):
#: every record would be refused alike, so no record is to blame.
CONFIGURATION_STATUSES = frozenset({401, 403, 404, 405, 407})
#: How :func:`stage_of` finds the stage in an exception's notes (``topology.observe.timed`` adds it).
STAGE_NOTE = "jevmem stage: "


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
    """A backend could not be reached or did not answer in time; the same request may succeed
    later (HTTP 503). Transient."""


class StoreUnavailable(Unavailable):
    """A store (vector, lexical, edge, node, keys) could not be reached or failed a call."""


class BrokerUnavailable(Unavailable):
    """The Kafka broker could not be reached or did not acknowledge a write."""


class UpstreamError(JevMemError):
    """A model service this product calls failed (HTTP 502)."""


class Refused(JevMemError):
    """A service refused what it was sent (HTTP 4xx other than 408, 429 and
    :data:`CONFIGURATION_STATUSES`: e.g. 400 for an input over a model's limit): sending the same
    input again cannot help. Permanent: the item becomes a dead letter with this reason, the rest
    is written. ``status`` is the HTTP status when there was one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class SystemOneError(UpstreamError):
    """The System One controller failed or answered outside its contract."""


class SystemOneRefused(SystemOneError, Refused):
    """The System One service refused a request's content (permanent, see :class:`Refused`)."""


class SystemTwoError(UpstreamError):
    """The System Two (answer-writing LLM) endpoint failed."""


class SystemTwoRefused(SystemTwoError, Refused):
    """The System Two service refused a request's content (permanent, see :class:`Refused`)."""


class Misconfigured(JevMemError):
    """The deployment, not the input, is at fault: every record would fail alike. Never
    dead-lettered; a worker retries and reports itself unhealthy until an operator fixes it."""


class ServiceMisconfigured(Misconfigured):
    """A model service refused this deployment rather than an input: its credentials (401, 403),
    its address or model (404, 405), a proxy's credentials (407). ``status`` is the HTTP status."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class IncompatibleStore(Misconfigured):
    """A store server's version is outside the range this build supports (retrying cannot help)."""


class ModelMismatch(Misconfigured):
    """A store was built with another embedding model than the one configured."""


class KekMissing(Misconfigured):
    """Encryption is on but no key-encryption key is configured, or a stored data key is wrapped
    by one that is not configured (configuration: the message says what to set)."""


class SealingError(JevMemError):
    """A sealed record or a wrapped data key does not authenticate: tampered, or sealed for
    another key or conversation."""


def status_kind(status: int) -> Kind:
    """What an HTTP error ``status`` from a service means for a retry: ``transient`` (408, 429,
    5xx), ``configuration`` (:data:`CONFIGURATION_STATUSES`), else ``permanent`` (the input)."""
    if status in TRANSIENT_STATUSES or status >= 500:
        return "transient"
    return "configuration" if status in CONFIGURATION_STATUSES else "permanent"


def kind_of(exc: BaseException) -> Kind:
    """Whether a retry can fix ``exc``, an ``Exception`` (cancellation is never classified; see
    the module's docstring): ``permanent`` for a refusal, validation, a record that does not open,
    and any exception that is not ours and not a timeout or connection failure (a bug a record
    triggers: the stages cannot process it); ``configuration`` for :class:`Misconfigured`
    and our other errors (a missing model file); ``transient`` for :class:`Unavailable`,
    :class:`UpstreamError`, timeouts and ``OSError``."""
    if isinstance(exc, Refused | InvalidEvent | RequestError | SealingError):
        return "permanent"
    if isinstance(exc, Misconfigured):
        return "configuration"
    if isinstance(exc, Unavailable | UpstreamError | TimeoutError | OSError | MemoryError):
        return "transient"
    if isinstance(exc, JevMemError):
        return "configuration"
    return "permanent"


def stage_of(exc: BaseException) -> str:
    """The write-path stage ``exc`` escaped first (``topology.observe.timed`` notes it), or ""."""
    for note in getattr(exc, "__notes__", ()):
        if isinstance(note, str) and note.startswith(STAGE_NOTE):
            return note[len(STAGE_NOTE):]
    return ""
