"""The TypeScript client (``clients/typescript``): its OpenAPI document is the API's, and its own
tests (node's test runner) pass against a real HTTP server of the embedded service."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService
from query_api.auth import Authenticator, mint
from query_api.http import create_app
from storage.keys import SqliteKeyStore
from tests.conftest import serve_http
from topology.ports import Embedder

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "typescript"


def test_the_clients_openapi_document_is_the_apis() -> None:
    spec = create_app(EmbeddedService(Settings(), data_dir=":memory:"), Authenticator(SqliteKeyStore(":memory:"))).openapi()
    committed = json.loads((CLIENT / "openapi.json").read_text())
    assert committed == json.loads(json.dumps(spec)), "the API changed: run scripts/ts-client generate"


def test_the_typescript_client_passes_its_tests_against_a_server(embedder: Embedder) -> None:
    if shutil.which("npm") is None:
        pytest.fail("npm not found: the TypeScript client's tests need Node.js")
    assert (CLIENT / "node_modules").is_dir(), "clients/typescript has no node_modules: run scripts/setup"
    keys = SqliteKeyStore(":memory:")
    key, record = mint("ts-tenant", ["ingest", "query", "admin"])
    asyncio.run(keys.create(record))
    service = EmbeddedService(Settings(), embedder=embedder, data_dir=":memory:")
    with serve_http(create_app(service, Authenticator(keys, cache_seconds=0))) as url:
        out = subprocess.run(["npm", "test", "--silent"], cwd=CLIENT, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "JEVMEM_URL": url, "JEVMEM_API_KEY": key})
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "# fail 0" in out.stdout and "# pass 5" in out.stdout
