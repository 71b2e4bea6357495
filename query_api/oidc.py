"""OAuth 2.1 / OpenID Connect bearer tokens as an alternative to API keys: a JWT signed by the
configured issuer names the tenant and the scopes.

Contracts:

* A token is accepted only when its signature verifies against a key of the issuer's JWKS (found
  by ``kid``; an unknown ``kid`` refetches the JWKS, at most once per ``refetch_cooldown_s``, so
  a rotated key works at once and a flood of made-up ``kid`` values costs one fetch), with an
  allowed algorithm (asymmetric only: ``RS256``/``ES256`` by default; ``none`` and HMAC never),
  ``iss`` equal to the issuer, ``aud`` containing the audience, and ``exp`` in the future
  (``nbf``/``iat`` respected; ``leeway_s`` of clock skew). Anything else is
  :class:`~topology.errors.Unauthenticated` (HTTP 401) with the reason.
* The tenant is the ``tenant_claim`` claim (a string); the scopes are the ``scope_claim`` claim
  (space-separated string or list), each with ``scope_prefix`` removed, kept when it is one of
  ``ingest``, ``query``, ``admin``. A token with no tenant or none of those scopes is refused.
* The JWKS comes from ``jwks_url``, else from the issuer's discovery document
  (``<issuer>/.well-known/openid-configuration``), and is cached for ``jwks_cache_s``.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from dataclasses import dataclass
from typing import Any

import jwt

from query_api.auth import Principal
from storage.ports import SCOPES
from topology.errors import Unauthenticated


@dataclass(frozen=True)
class OidcConfig:
    issuer: str
    audience: str
    jwks_url: str | None = None
    tenant_claim: str = "tenant_id"
    scope_claim: str = "scope"
    scope_prefix: str = ""
    algorithms: tuple[str, ...] = ("RS256", "ES256")
    leeway_s: float = 30.0
    jwks_cache_s: float = 300.0
    refetch_cooldown_s: float = 30.0


def _discover(issuer: str, timeout_s: float = 10.0) -> str:
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    with urllib.request.urlopen(url, timeout=timeout_s) as r:  # the operator's issuer URL
        doc: dict[str, Any] = json.load(r)
    jwks = doc.get("jwks_uri")
    if not isinstance(jwks, str):
        raise Unauthenticated(f"the issuer's discovery document has no jwks_uri: {url}")
    return jwks


class OidcVerifier:
    """Bearer JWT -> :class:`~query_api.auth.Principal` (``key_id`` = ``oidc:<sub>``)."""

    def __init__(self, config: OidcConfig) -> None:
        bad = [a for a in config.algorithms if not a.startswith(("RS", "ES", "PS", "Ed"))]
        if bad or not config.algorithms:
            raise ValueError(f"only asymmetric signature algorithms are allowed, not {bad or 'none'}")
        self.config = config
        self._jwks: jwt.PyJWKClient | None = None
        self._lock = asyncio.Lock()

    async def _client(self) -> jwt.PyJWKClient:
        async with self._lock:
            if self._jwks is None:
                url = self.config.jwks_url
                if not url:
                    url = await asyncio.to_thread(_discover, self.config.issuer)
                self._jwks = jwt.PyJWKClient(url, lifespan=self.config.jwks_cache_s,
                                             cooldown_duration=self.config.refetch_cooldown_s)
            return self._jwks

    async def principal(self, token: str) -> Principal:
        c = self.config
        try:
            client = await self._client()
            key = await asyncio.to_thread(client.get_signing_key_from_jwt, token)
            claims: dict[str, Any] = jwt.decode(
                token, key.key, algorithms=list(c.algorithms), audience=c.audience, issuer=c.issuer,
                leeway=c.leeway_s, options={"require": ["exp", "iss", "aud"]})
        except jwt.PyJWKClientError as exc:
            raise Unauthenticated(f"token not signed by a key of the issuer: {exc}") from exc
        except jwt.InvalidTokenError as exc:
            raise Unauthenticated(f"invalid token: {exc}") from exc
        except OSError as exc:
            raise Unauthenticated(f"the issuer's keys could not be read: {exc}") from exc
        tenant = claims.get(c.tenant_claim)
        if not isinstance(tenant, str) or not tenant:
            raise Unauthenticated(f"the token has no '{c.tenant_claim}' claim naming a tenant")
        raw = claims.get(c.scope_claim, [])
        names = raw.split() if isinstance(raw, str) else [s for s in raw if isinstance(s, str)] if isinstance(raw, list) else []
        scopes = frozenset(s[len(c.scope_prefix):] for s in names if s.startswith(c.scope_prefix)) & set(SCOPES)
        if not scopes:
            raise Unauthenticated(f"the token grants none of the scopes {', '.join(c.scope_prefix + s for s in SCOPES)}")
        return Principal(f"oidc:{claims.get('sub', '')}", tenant, scopes)

    def resource_metadata(self) -> dict[str, Any]:
        """RFC 9728 metadata: this API (the audience) and the issuer that signs its tokens."""
        c = self.config
        return {"resource": c.audience, "authorization_servers": [c.issuer], "bearer_methods_supported": ["header"],
                "scopes_supported": [c.scope_prefix + s for s in SCOPES], "resource_name": "jevmem"}
