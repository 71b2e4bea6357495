"""OIDC bearer tokens against a local issuer over real HTTP (discovery document + JWKS), signed
with RSA keys by PyJWT: good tokens name the tenant and scopes; every bad one is refused."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi import FastAPI
from jwt.algorithms import RSAAlgorithm

from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService
from query_api.auth import Authenticator, Unauthenticated, looks_like_jwt, mint
from query_api.http import create_app
from query_api.oidc import OidcConfig, OidcVerifier
from storage.keys import SqliteKeyStore
from tests.conftest import serve_http
from topology.ports import Embedder

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


async def test_the_api_takes_tokens_besides_keys_and_refuses_bad_ones_writing_nothing(
        issuer: Issuer, embedder: Embedder) -> None:
    keys = SqliteKeyStore(":memory:")
    key, record = mint("acme", ["ingest", "query"])
    await keys.create(record)
    service = EmbeddedService(Settings(), embedder=embedder, data_dir=":memory:")
    app = create_app(service, Authenticator(keys, cache_seconds=0, tokens=verifier(issuer)))
    item = [{"conversation_id": "c1", "event_id": "e1", "content": "I adopted a puppy named Biscuit"}]
    now = int(time.time())
    with serve_http(app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            meta = (await http.get("/.well-known/oauth-protected-resource")).json()
            assert meta["authorization_servers"] == [issuer.url] and meta["resource"] == AUD
            for bad in (issuer.token(exp=now - 120), issuer.token(aud="https://other.example"),
                        issuer.token(kid="k1", key=issuer.keys["rogue"]), issuer.token(kid="rogue"), "not.a.jwt"):
                r = await http.post("/v1/observations", json=item, headers={"Authorization": f"Bearer {bad}"})
                assert r.status_code == 401, r.text
                assert r.headers["www-authenticate"] == \
                    f'Bearer resource_metadata="{url}/.well-known/oauth-protected-resource"'
            r = await http.post("/mcp", json={}, headers={"Authorization": "Bearer x.y.z"})
            assert r.status_code == 401 and "resource_metadata" in r.headers["www-authenticate"]
            by_key = {"Authorization": f"Bearer {key}"}
            assert (await http.get("/v1/conversations", headers=by_key)).json() == []  # nothing was written
            good = {"Authorization": f"Bearer {issuer.token()}"}
            assert (await http.post("/v1/observations", json=item, headers=good)).status_code == 200
            assert [c["conversation_id"] for c in (await http.get("/v1/conversations", headers=by_key)).json()] == ["c1"]
            admin = await http.delete("/v1/conversations/c1", headers=good)
            assert admin.status_code == 403  # the token grants query and ingest, not admin
