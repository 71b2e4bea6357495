"""The memory page at ``/ui``: static files (HTML, plain JS modules, CSS) and a tiny config.

The page itself needs no key: it asks for one and sends it as ``Authorization: Bearer <key>``
with every API call it makes, so it sees exactly what the key may see. Its front-end libraries
(cytoscape and its fcose layout) come from the npm registry, pinned by ``ui/package-lock.json``,
and are copied into ``static/vendor/`` by ``scripts/ui-build`` (run by ``scripts/setup``); they
are not committed. Without them the page still loads and says so (``/ui/config.json`` lists the
missing files) instead of drawing a graph.

Development mode (``jevmem serve --dev-ui``, loopback only): the server mints a key for one
tenant (scopes ``query`` and ``admin``) that lives in memory for the life of the process (it is
never written to the key store) and hands it to the page through ``/ui/config.json``, so the
page signs itself in. The key is only revealed to requests whose ``Host`` header names a
loopback address, which a DNS-rebinding page cannot forge.

Every response under ``/ui`` carries a Content-Security-Policy allowing scripts from the same
origin only (memory text is untrusted input; the page also only ever inserts it as text).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Send
from starlette.types import Scope as AsgiScope

from query_api.auth import mint
from storage.ports import ApiKeyRecord, KeyStore

STATIC = Path(__file__).parent / "static"
VENDOR = STATIC / "vendor"
# Load order matters: each UMD bundle reads the previous one's global.
VENDOR_FILES = ("cytoscape.min.js", "layout-base.js", "cose-base.js", "cytoscape-fcose.js")
DEV_SCOPES = ("query", "admin")
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
                               "frame-ancestors 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def missing_vendor_files() -> list[str]:
    """The front-end library files ``scripts/ui-build`` has not put in ``static/vendor`` (empty when built)."""
    return [name for name in VENDOR_FILES if not (VENDOR / name).is_file()]


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and any loopback IP (127.0.0.0/8, ::1, bracketed or not); False
    for everything else, including wildcard binds such as ``0.0.0.0`` and ``::``."""
    host = host.strip().lower().removeprefix("[").removesuffix("]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_name(header: str) -> str:
    """The host part of a ``Host`` header (port dropped; IPv6 brackets kept off)."""
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


@dataclass(frozen=True)
class DevUi:
    """A development-mode sign-in handed to the page: the tenant and its in-memory key."""

    tenant_id: str
    key: str


class DevKeyStore:
    """A :class:`KeyStore` that also knows one in-memory key record (the dev key): ``get`` finds
    it without touching ``inner``, which it never writes; everything else goes to ``inner``."""

    def __init__(self, inner: KeyStore, record: ApiKeyRecord) -> None:
        self.inner, self.record = inner, record

    async def create(self, record: ApiKeyRecord) -> None:
        await self.inner.create(record)

    async def get(self, key_id: str) -> ApiKeyRecord | None:
        return self.record if key_id == self.record.key_id else await self.inner.get(key_id)

    async def list(self, tenant_id: str | None = None) -> list[ApiKeyRecord]:
        return await self.inner.list(tenant_id)

    async def revoke(self, key_id: str) -> bool:
        return await self.inner.revoke(key_id)

    async def close(self) -> None:
        await self.inner.close()


def dev_key(tenant_id: str, store: KeyStore) -> tuple[DevUi, DevKeyStore]:
    """A fresh dev-mode key for ``tenant_id`` (scopes :data:`DEV_SCOPES`) and ``store`` wrapped to
    accept it. Raises ValueError for an invalid tenant id."""
    key, record = mint(tenant_id, DEV_SCOPES, label="dev-ui")
    return DevUi(tenant_id=tenant_id, key=key), DevKeyStore(store, record)


class _SecurityHeaders:
    """ASGI middleware: :data:`HEADERS` on every HTTP response of the wrapped app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)


def ui_app(dev: Callable[[], DevUi | None]) -> ASGIApp:
    """The ``/ui`` application: ``config.json`` (missing vendor files; the dev sign-in, when
    ``dev()`` returns one and the request's Host is loopback) and the static page."""
    async def config(request: Request) -> JSONResponse:
        body: dict[str, Any] = {"missing_vendor_files": missing_vendor_files(), "dev": None}
        sign_in = dev()
        if sign_in is not None and is_loopback(_host_name(request.headers.get("host", ""))):
            body["dev"] = {"tenant_id": sign_in.tenant_id, "key": sign_in.key}
        return JSONResponse(body, headers={"Cache-Control": "no-store"})

    app = Starlette(routes=[Route("/config.json", config),
                            Mount("/", StaticFiles(directory=STATIC, html=True, check_dir=True))])
    return _SecurityHeaders(app)


def mount_ui(app: FastAPI) -> None:
    """Serve the page at ``/ui/`` on ``app`` (no key needed for the page; its API calls need one).
    Dev mode is off until :func:`enable_dev_ui`."""
    app.mount("/ui", ui_app(lambda: getattr(app.state, "ui_dev", None)), name="ui")


def enable_dev_ui(app: FastAPI, sign_in: DevUi) -> None:
    """Hand ``sign_in`` to the page of ``app`` (only over loopback Host names; see the module doc)."""
    app.state.ui_dev = sign_in
