"""API keys: one tenant and a set of scopes per key; only a salted scrypt hash is ever stored.

A key reads ``jm_<key_id>_<secret>``: ``key_id`` (16 hex characters) names the stored record,
``secret`` (32 random bytes, URL-safe base64) is checked against the record's scrypt hash. The key
itself is shown once, when it is made, and kept nowhere.

Scopes: ``ingest`` (write observations), ``query`` (retrieve, read nodes and edges), ``admin``
(dead letters, deletion). A key may also be limited to some users of its tenant (``users``): it
then writes only observations that carry one of those user ids and recalls only their
memory (:func:`user_of`); everything addressed by conversation or by the whole tenant (query a
conversation, read its graph, list conversations, forget, dead letters) needs a key of the
whole tenant (:func:`whole_tenant`). :class:`Authenticator` turns an ``Authorization: Bearer`` header into a
:class:`Principal`, caching a verified key for ``cache_seconds`` so the slow hash runs once per
key and a revocation takes effect within that time. Concurrent requests with a key not in the
cache share one verification, and a cached key is verified again in the background once half
its time has passed (requests keep using it meanwhile, never past ``cache_seconds``), so a
busy key's entry is renewed before it expires instead of every request in flight hashing it
at once. Failures are :class:`Unauthenticated` (401)
and :class:`Forbidden` (403), both in :mod:`topology.errors` (re-exported here).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from storage.ports import SCOPES, ApiKeyRecord, ApiScope, KeyStore
from topology.errors import Forbidden, Unauthenticated

__all__ = ["SCOPES", "ApiKeyRecord", "ApiScope", "Authenticator", "Forbidden", "KeyStore", "Principal",
           "Unauthenticated", "looks_like_jwt", "matches", "mint", "parse", "require", "same_tenant", "user_of",
           "whole_tenant"]
_PREFIX = "jm_"
_SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}


def _hash(secret: str, salt: bytes) -> str:
    return hashlib.scrypt(secret.encode(), salt=salt, **_SCRYPT).hex()


def mint(tenant_id: str, scopes: Sequence[str], label: str = "",
         users: Sequence[str] | None = None) -> tuple[str, ApiKeyRecord]:
    """A new key and its record (limited to ``users`` when given). Raises ValueError for an
    unknown scope, an invalid tenant or user id, or an empty user list."""
    if users is not None and not users:
        raise ValueError("a key limited to users needs at least one user")
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown or not scopes:
        raise ValueError(f"scopes must be a non-empty subset of {', '.join(SCOPES)} (got {', '.join(scopes) or 'none'})")
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_bytes(16)
    record = ApiKeyRecord.model_validate({
        "key_id": key_id, "tenant_id": tenant_id, "scopes": sorted(set(scopes), key=SCOPES.index),
        "salt": salt.hex(), "hash": _hash(secret, salt), "created_at": datetime.now(UTC), "label": label,
        "users": None if users is None else sorted(set(users))})
    return f"{_PREFIX}{key_id}_{secret}", record


def parse(key: str) -> tuple[str, str] | None:
    """(key_id, secret) of a well-formed key, else None."""
    if not key.startswith(_PREFIX):
        return None
    key_id, sep, secret = key[len(_PREFIX):].partition("_")
    if not sep or len(key_id) != 16 or not secret or len(secret) > 128:
        return None
    try:
        int(key_id, 16)
    except ValueError:
        return None
    return key_id, secret


def matches(record: ApiKeyRecord, secret: str) -> bool:
    """Constant-time check of ``secret`` against the record's hash (slow: scrypt)."""
    return hmac.compare_digest(_hash(secret, bytes.fromhex(record.salt)), record.hash)


@dataclass(frozen=True)
class Principal:
    """The caller: a key's tenant and scopes."""

    key_id: str
    tenant_id: str
    scopes: frozenset[str]
    #: the users this caller may act for; None: every user of the tenant
    users: frozenset[str] | None = None


def require(principal: Principal, scope: ApiScope) -> None:
    """:class:`Forbidden` unless the principal's key has ``scope``."""
    if scope not in principal.scopes:
        raise Forbidden(f"this key lacks the '{scope}' scope")


def same_tenant(principal: Principal, tenant_id: str | None) -> str:
    """The principal's tenant; :class:`Forbidden` when ``tenant_id`` names another one."""
    if tenant_id is not None and tenant_id != principal.tenant_id:
        raise Forbidden("this key belongs to another tenant")
    return principal.tenant_id


def whole_tenant(principal: Principal) -> None:
    """:class:`Forbidden` when the principal's key is limited to some users (what is addressed
    by conversation or by tenant is not any one user's)."""
    if principal.users is not None:
        raise Forbidden(f"this key is limited to users {', '.join(sorted(principal.users))}: it may remember "
                        "their observations and recall their memory (with user_id), nothing by conversation")


def user_of(principal: Principal, user_id: str | None) -> str | None:
    """The user a recall or a write acts for: ``user_id`` (None: the whole tenant) for a key of
    the whole tenant; for a key limited to users, ``user_id`` when it is one of them, its only user
    when ``user_id`` is None and it has one, else :class:`Forbidden`."""
    users = principal.users
    if users is None:
        return user_id
    if user_id is None:
        if len(users) == 1:
            return next(iter(users))
        raise Forbidden(f"this key is limited to users {', '.join(sorted(users))}: name one with user_id")
    if user_id not in users:
        raise Forbidden(f"this key is not allowed to act for user {user_id!r}")
    return user_id


def looks_like_jwt(token: str) -> bool:
    """Three dot-separated base64url parts (an API key never has a dot)."""
    parts = token.split(".")
    return len(parts) == 3 and all(parts[:2])


class TokenVerifier(Protocol):
    """Bearer tokens that are not API keys (:class:`query_api.oidc.OidcVerifier`)."""

    async def principal(self, token: str) -> Principal:
        """The token's caller; :class:`Unauthenticated` for a token it does not accept."""
        ...

    def resource_metadata(self) -> dict[str, Any]:
        """The OAuth protected-resource metadata (RFC 9728) clients discover the issuer from."""
        ...


class Authenticator:
    """Bearer header -> :class:`Principal`, with a short cache of verified keys."""

    def __init__(self, store: KeyStore, cache_seconds: float = 5.0, tokens: TokenVerifier | None = None) -> None:
        self.store = store
        self.cache_seconds = cache_seconds
        #: bearer tokens other than API keys (OIDC JWTs), when configured
        self.tokens = tokens
        #: key fingerprint -> (principal, trusted until, verify again from)
        self._cache: dict[bytes, tuple[Principal, float, float]] = {}
        #: key fingerprint -> the verification in progress (one per key at a time)
        self._pending: dict[bytes, asyncio.Task[Principal]] = {}

    async def principal(self, authorization: str | None) -> Principal:
        """The caller of a request with this ``Authorization`` header: an API key's record, or,
        with ``tokens``, a verified token's claims (never cached: a token is checked every time)."""
        if not authorization:
            raise Unauthenticated("missing Authorization: Bearer <api key>")
        scheme, _, key = authorization.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise Unauthenticated("expected Authorization: Bearer <api key>")
        key = key.strip()
        if self.tokens is not None and looks_like_jwt(key):
            return await self.tokens.principal(key)
        fingerprint = hashlib.sha256(key.encode("utf-8", "replace")).digest()
        hit = self._cache.get(fingerprint)
        now = time.monotonic()
        if hit is not None and hit[1] > now:
            if hit[2] <= now and fingerprint not in self._pending:
                self._verification(fingerprint, key)  # renewed in the background; this request goes on
            return hit[0]
        pending = self._pending.get(fingerprint) or self._verification(fingerprint, key)
        return await asyncio.shield(pending)  # a cancelled caller leaves the others' verification running

    def _verification(self, fingerprint: bytes, key: str) -> asyncio.Task[Principal]:
        """Start verifying ``key`` (one task per key at a time; its outcome is always retrieved,
        so a background renewal that fails logs nothing and leaves the entry to expire)."""
        task = asyncio.ensure_future(self._verify(fingerprint, key))
        self._pending[fingerprint] = task

        def done(t: asyncio.Task[Principal]) -> None:
            self._pending.pop(fingerprint, None)
            if not t.cancelled():
                t.exception()

        task.add_done_callback(done)
        return task

    async def _verify(self, fingerprint: bytes, key: str) -> Principal:
        """Check ``key`` against its stored record (scrypt, in a thread) and cache the principal;
        a malformed, unknown or revoked key raises :class:`Unauthenticated` and leaves the cache."""
        now = time.monotonic()
        parts = parse(key)
        if parts is None:
            raise Unauthenticated("malformed API key")
        record = await self.store.get(parts[0])
        if record is None or record.revoked_at is not None:
            self._cache.pop(fingerprint, None)
            raise Unauthenticated("unknown or revoked API key")
        if not await asyncio.to_thread(matches, record, parts[1]):
            self._cache.pop(fingerprint, None)
            raise Unauthenticated("unknown or revoked API key")
        who = Principal(record.key_id, record.tenant_id, frozenset(record.scopes),
                        None if record.users is None else frozenset(record.users))
        if self.cache_seconds > 0:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[fingerprint] = (who, now + self.cache_seconds, now + self.cache_seconds / 2)
        return who
