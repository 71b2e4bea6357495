"""OIDC bearer tokens against a local issuer over real HTTP (discovery document + JWKS), signed
with RSA keys by PyJWT: good tokens name the tenant and scopes; every bad one is refused."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi import FastAPI
from jwt.algorithms import RSAAlgorithm

from query_api.auth import Unauthenticated
from query_api.oidc import OidcConfig, OidcVerifier, looks_like_jwt
from tests.conftest import serve_http

AUD = "https://memory.example/mcp"


@dataclass
class Issuer:
    url: str
    keys: dict[str, Any] = field(default_factory=dict)       # kid -> private key
    published: list[str] = field(default_factory=list)       # kids in the JWKS
    jwks_fetches: int = 0

    def token(self, kid: str = "k1", key: Any = None, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": self.url, "aud": AUD, "sub": "user-1", "exp": now + 300, "iat": now,
                "tenant_id": "acme", "scope": "jevmem:query jevmem:ingest other", **claims}
        return jwt.encode({k: v for k, v in body.items() if v is not None}, key or self.keys[kid], algorithm="RS256",
                          headers={"kid": kid})


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    app = FastAPI()
    state = Issuer("")
    for kid in ("k1", "k2", "rogue"):
        state.keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    state.published.append("k1")

    @app.get("/.well-known/openid-configuration")
    async def discovery() -> dict[str, Any]:
        return {"issuer": state.url, "jwks_uri": f"{state.url}/jwks.json"}

    @app.get("/jwks.json")
    async def jwks() -> dict[str, Any]:
        state.jwks_fetches += 1
        keys = []
        for kid in state.published:
            jwk: dict[str, Any] = RSAAlgorithm.to_jwk(state.keys[kid].public_key(), as_dict=True)
            keys.append({**jwk, "kid": kid, "use": "sig", "alg": "RS256"})
        return {"keys": keys}

    with serve_http(app) as url:
        state.url = url
        yield state


def verifier(issuer: Issuer, cooldown_s: float = 30.0) -> OidcVerifier:
    return OidcVerifier(OidcConfig(issuer=issuer.url, audience=AUD, scope_prefix="jevmem:",
                                   refetch_cooldown_s=cooldown_s))


async def test_a_good_token_names_tenant_and_scopes(issuer: Issuer) -> None:
    who = await verifier(issuer).principal(issuer.token())
    assert (who.tenant_id, who.scopes, who.key_id) == ("acme", frozenset({"query", "ingest"}), "oidc:user-1")
    assert looks_like_jwt(issuer.token()) and not looks_like_jwt("jm_0123456789abcdef_secret")


@pytest.mark.parametrize("case", ["expired", "audience", "issuer", "signature", "unknown_kid", "hmac", "no_tenant",
                                  "no_scope", "no_exp"])
async def test_bad_tokens_are_refused(issuer: Issuer, case: str) -> None:
    now = int(time.time())
    token = {
        "expired": lambda: issuer.token(exp=now - 120),
        "audience": lambda: issuer.token(aud="https://other.example"),
        "issuer": lambda: issuer.token(iss="https://evil.example"),
        "signature": lambda: issuer.token(kid="k1", key=issuer.keys["rogue"]),  # k1's kid, another key
        "unknown_kid": lambda: issuer.token(kid="rogue"),
        "hmac": lambda: jwt.encode({"iss": issuer.url, "aud": AUD, "exp": now + 60, "tenant_id": "acme",
                                    "scope": "jevmem:admin"}, "k1-used-as-an-hmac-secret-of-32-bytes!",
                           algorithm="HS256", headers={"kid": "k1"}),
        "no_tenant": lambda: issuer.token(tenant_id=None),
        "no_scope": lambda: issuer.token(scope="openid profile"),
        "no_exp": lambda: issuer.token(exp=None),
    }[case]()
    with pytest.raises(Unauthenticated):
        await verifier(issuer).principal(token)


async def test_a_rotated_key_is_fetched_once_and_then_cached(issuer: Issuer) -> None:
    v = verifier(issuer, cooldown_s=0.0)
    assert (await v.principal(issuer.token("k1"))).tenant_id == "acme"
    fetched = issuer.jwks_fetches
    issuer.published.append("k2")  # the issuer rotates: a new key appears in its JWKS
    assert (await v.principal(issuer.token("k2"))).tenant_id == "acme"
    assert issuer.jwks_fetches == fetched + 1
    await v.principal(issuer.token("k2"))
    await v.principal(issuer.token("k1"))
    assert issuer.jwks_fetches == fetched + 1


async def test_made_up_key_ids_cost_one_fetch_per_cooldown(issuer: Issuer) -> None:
    v = verifier(issuer)  # 30 s cooldown
    await v.principal(issuer.token("k1"))
    fetched = issuer.jwks_fetches
    for _ in range(5):
        with pytest.raises(Unauthenticated):
            await v.principal(issuer.token(kid="rogue"))
    assert issuer.jwks_fetches <= fetched + 1


def test_symmetric_algorithms_cannot_be_configured() -> None:
    with pytest.raises(ValueError):
        OidcVerifier(OidcConfig(issuer="https://i.example", audience=AUD, algorithms=("HS256",)))
