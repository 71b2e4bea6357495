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


CONSUMER = """\
import { MemoryClient, type Recall } from "@jevmem/client";

const client = new MemoryClient({ baseUrl: "http://127.0.0.1:8080", apiKey: "jm_x" });

export async function contents(): Promise<string[]> {
  const found: Recall = await client.recall("Where does Ana live?", { userId: "ana", topK: 5 });
  return found.evidence.map((e) => e.content.toUpperCase());
}

export async function lines(): Promise<string> {
  return (await client.recall("Where?", { format: "prompt" })).text;
}

// @ts-expect-error topK is a number: an untyped (any) client would let this through
client.recall("Where?", { topK: "five" });
"""


def test_the_packed_client_type_checks_in_a_strict_project(tmp_path: Path) -> None:
    """What `npm pack` ships, installed in a fresh project compiled with `strict` and without
    `skipLibCheck`: its declarations resolve (no TS2307) and its types are real (no implicit any,
    and a wrongly typed option is an error)."""
    if shutil.which("npm") is None:
        pytest.fail("npm not found: the TypeScript client's checks need Node.js")
    assert (CLIENT / "node_modules").is_dir(), "clients/typescript has no node_modules: run scripts/setup"
    subprocess.run(["npm", "run", "--silent", "build"], cwd=CLIENT, check=True, capture_output=True, timeout=300)
    packed = subprocess.run(["npm", "pack", "--silent", "--pack-destination", str(tmp_path)], cwd=CLIENT, check=True,
                            capture_output=True, text=True, timeout=120).stdout.strip().splitlines()[-1]
    project = tmp_path / "consumer"
    target = project / "node_modules" / "@jevmem" / "client"
    target.mkdir(parents=True)
    subprocess.run(["tar", "-xzf", str(tmp_path / packed), "-C", str(target), "--strip-components", "1"], check=True)
    (project / "node_modules" / "openapi-fetch").symlink_to(CLIENT / "node_modules" / "openapi-fetch")
    (project / "package.json").write_text(json.dumps({"name": "consumer", "type": "module", "private": True}))
    (project / "tsconfig.json").write_text(json.dumps({"compilerOptions": {
        "target": "ES2022", "module": "NodeNext", "moduleResolution": "NodeNext", "strict": True,
        "noEmit": True, "types": [], "lib": ["ES2022", "DOM"]}, "include": ["consumer.ts"]}))
    (project / "consumer.ts").write_text(CONSUMER)
    tsc = CLIENT / "node_modules" / ".bin" / "tsc"
    out = subprocess.run([str(tsc), "-p", str(project)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
