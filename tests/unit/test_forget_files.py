"""Forgotten means gone from the files: after a forget on an embedded store answers, neither the
database file nor its write-ahead log holds the forgotten text (read as raw bytes), and a
destroyed data key is in neither file of the SQLite key store."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService
from query_api.auth import Authenticator, mint
from query_api.http import create_app
from storage.datakeys import SqliteDataKeys
from storage.keys import SqliteKeyStore
from storage.ports import WrappedKey
from tests.conftest import chat_observations, serve_http
from topology.ports import Embedder
from topology.schemas import Scope

MARKER = "Qzvkmarkerword"


def found(directory: Path, needle: str, name: str = "memory.sqlite3") -> dict[str, int]:
    """Occurrences of ``needle`` (as written, and lower-cased: FTS5 keeps lower-cased terms) in
    the raw bytes of the database file and its write-ahead log."""
    out = {}
    for suffix in ("", "-wal"):
        path = directory / (name + suffix)
        data = path.read_bytes() if path.exists() else b""
        out[suffix or "db"] = data.count(needle.encode()) + data.count(needle.lower()[:8].encode())
    return out


async def test_a_forgotten_conversation_is_in_neither_the_database_nor_its_log(embedder: Embedder, tmp_path: Path) -> None:
    keys = SqliteKeyStore(":memory:")
    key, record = mint("t1", ["ingest", "query", "admin"])
    await keys.create(record)
    service = EmbeddedService(Settings(), embedder=embedder, data_dir=tmp_path)
    marked = [o.model_dump(mode="json") | {"content": f"{o.content} {MARKER}", "speaker": f"{o.speaker} {MARKER}",
                                           "entities": [MARKER]}
              for o in chat_observations(conversation="c1")]
    kept = [o.model_dump(mode="json") for o in chat_observations(conversation="c2")]
    with serve_http(create_app(service, Authenticator(keys))) as url, \
            httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {key}"}) as c:
        assert c.post("/v1/observations", json=marked + kept).status_code == 200
        assert c.post("/v1/observations", json=[{"conversation_id": "c1", "content": MARKER}]).status_code == 422
        before = found(tmp_path, MARKER)
        assert sum(before.values()) > 0, before  # the scan sees the text while it is there
        t0 = time.perf_counter()
        r = c.delete("/v1/conversations/c1")
        assert r.status_code == 200 and r.json()["nodes"] == len(marked), r.text
        forget_ms = 1000 * (time.perf_counter() - t0)
        assert found(tmp_path, MARKER) == {"db": 0, "-wal": 0}
        assert len(c.get("/v1/conversations/c2/nodes").json()) == len(kept)  # the rest is intact
        # one event of a conversation: its text leaves the files too
        assert c.post("/v1/observations", json=[{"conversation_id": "c2", "event_id": "m", "content": MARKER}]).status_code == 200
        assert sum(found(tmp_path, MARKER).values()) > 0
        assert c.delete("/v1/conversations/c2/observations/m").status_code == 200
        assert found(tmp_path, MARKER) == {"db": 0, "-wal": 0}
    assert forget_ms < 5_000


async def test_a_destroyed_data_key_is_in_neither_file_of_the_key_store(tmp_path: Path) -> None:
    store = SqliteDataKeys(tmp_path / "datakeys.sqlite3")
    doomed = "WRAPPEDsecretkeymaterial0123456789"
    await store.put([WrappedKey(kid="k1", tenant_id="t", conversation_id="c", node_id="n1", kek_id="kek",
                                wrapped=doomed, created_at=1.0),
                     WrappedKey(kid="k2", tenant_id="t", conversation_id="other", node_id="n2", kek_id="kek",
                                wrapped="KEPTkeymaterial", created_at=1.0)])
    assert sum(found(tmp_path, doomed, "datakeys.sqlite3").values()) > 0
    assert await store.destroy(Scope(tenant_id="t", conversation_id="c"), None, before=2.0) == 1
    assert found(tmp_path, doomed, "datakeys.sqlite3") == {"db": 0, "-wal": 0}
    assert [k.kid for k in await store.get(["k1", "k2"])] == ["k2"]
