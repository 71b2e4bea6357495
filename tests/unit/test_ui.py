"""The memory page at /ui: served without a key, safe headers, dev mode only over loopback, and a
real headless Chromium (Debian's ``chromium`` + ``chromium-driver``, driven by Selenium) that signs
in, draws a conversation, opens a memory, asks a question and reads the dead letters against the
embedded service with the real embedder — with no console errors.

Without Chromium the browser test skips (locally); with ``CI=true`` it fails instead, because CI
installs Chromium in ``scripts/setup``. ``JEVMEM_UI_SCREENSHOT=path`` keeps a copy of the screenshot
(``docs/ui.png`` is made that way).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from jevmem.cli import app as cli_app
from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService
from query_api.auth import Authenticator, mint
from query_api.http import create_app
from query_api.ui import DevKeyStore, dev_key, enable_dev_ui, is_loopback, missing_vendor_files
from storage.keys import SqliteKeyStore
from tests.conftest import chat_observations, serve_http
from topology.ports import Embedder

IN_CI = os.environ.get("CI", "").lower() == "true"


@dataclass
class Site:
    url: str
    keys: dict[str, str]
    nodes: int


def _app(embedder: Embedder, store: SqliteKeyStore | DevKeyStore) -> Any:
    service = EmbeddedService(Settings(), embedder=embedder, data_dir=":memory:")
    return create_app(service, Authenticator(store, cache_seconds=0))


@pytest.fixture
async def site(embedder: Embedder) -> AsyncIterator[Site]:
    """The API with the chat conversation ingested (and one invalid item dead-lettered)."""
    store = SqliteKeyStore(":memory:")
    keys = {}
    for name, scopes in [("full", ["ingest", "query", "admin"]), ("query", ["query"])]:
        keys[name], record = mint("acme", scopes)
        await store.create(record)
    with serve_http(_app(embedder, store)) as url:
        items = [o.model_dump(mode="json", exclude={"tenant_id"}) for o in chat_observations()]
        items.append({"conversation_id": "c1", "event_id": "bad", "content": ""})  # -> a dead letter
        async with httpx.AsyncClient(base_url=url, timeout=120, headers={"Authorization": f"Bearer {keys['full']}"}) as c:
            assert (await c.post("/v1/observations", json=items)).status_code == 422
            nodes = len((await c.get("/v1/conversations/c1/nodes")).json())
        assert nodes == len(items) - 1
        yield Site(url, keys, nodes)


def test_the_page_needs_no_key_and_sends_safe_headers(embedder: Embedder) -> None:
    with serve_http(_app(embedder, SqliteKeyStore(":memory:"))) as url, httpx.Client(base_url=url, timeout=30) as c:
        r = c.get("/ui", follow_redirects=False)
        assert r.status_code in (301, 302, 307, 308) and r.headers["location"].endswith("/ui/")
        page = c.get("/ui/")
        assert page.status_code == 200 and "<title>jevmem" in page.text
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert page.headers["x-content-type-options"] == "nosniff"
        js = c.get("/ui/app.js")
        assert js.status_code == 200 and "javascript" in js.headers["content-type"]
        config = c.get("/ui/config.json").json()
        assert config["dev"] is None and config["missing_vendor_files"] == missing_vendor_files()
        assert c.get("/ui/../pyproject.toml").status_code == 404
        assert c.get("/v1/conversations").status_code == 401  # the API still needs a key


def test_dev_key_lives_in_memory_and_is_only_handed_to_loopback_hosts(embedder: Embedder) -> None:
    inner = SqliteKeyStore(":memory:")
    sign_in, store = dev_key("acme", inner)
    assert asyncio.run(inner.list()) == []  # never written to the key store
    app = _app(embedder, store)
    enable_dev_ui(app, sign_in)
    with serve_http(app) as url, httpx.Client(base_url=url, timeout=30) as c:
        dev = c.get("/ui/config.json").json()["dev"]
        assert dev == {"tenant_id": "acme", "key": sign_in.key}
        assert c.get("/ui/config.json", headers={"Host": "localhost:1"}).json()["dev"] is not None
        for host in ("evil.example", "evil.example:80", "127.0.0.1.evil.example", "0.0.0.0"):
            assert c.get("/ui/config.json", headers={"Host": host}).json()["dev"] is None, host
        auth = {"Authorization": f"Bearer {sign_in.key}"}
        assert c.get("/v1/conversations", headers=auth).status_code == 200
        assert c.get("/v1/dead-letters", headers=auth).status_code == 200
        assert c.post("/v1/observations", headers=auth, json=[]).status_code == 403  # query + admin only


def test_loopback_rule_and_cli_refuses_dev_ui_on_other_hosts() -> None:
    for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "", "10.0.0.1", "example.com", "localhost.example.com"):
        assert not is_loopback(host), host
    result = CliRunner().invoke(cli_app, ["serve", "--dev-ui", "--host", "0.0.0.0"])
    assert result.exit_code == 2 and "loopback" in result.output


# ---- the page in a real browser ---------------------------------------------------------------

def _chromium() -> tuple[str, str]:
    """Paths of Debian's chromium and chromedriver; skip (fail in CI) when missing."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        why = "headless browser test needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"
        if IN_CI:
            pytest.fail(why + "; scripts/setup installs them in CI")
        pytest.skip(why)
    return browser, driver


@pytest.fixture
def browser() -> Iterator[Any]:
    browser_path, driver_path = _chromium()
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        if IN_CI:
            raise
        pytest.skip("selenium is not installed (pip install -e '.[dev]')")
    if missing_vendor_files():
        pytest.fail(f"front-end libraries not built ({', '.join(missing_vendor_files())}): run scripts/ui-build")
    options = webdriver.ChromeOptions()
    options.binary_location = browser_path
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1600,1150",
                "--no-first-run", "--disable-extensions", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _keep(driver: Any, folder: Path, name: str) -> None:
    """Screenshot ``ui[-name].png`` into ``folder``, copied beside ``JEVMEM_UI_SCREENSHOT`` (which
    names the main one) when that is set."""
    shot = folder / f"ui{'-' + name if name else ''}.png"
    driver.save_screenshot(str(shot))
    target = os.environ.get("JEVMEM_UI_SCREENSHOT")
    if target:
        shutil.copyfile(shot, Path(target).with_name(Path(target).stem + (f"-{name}" if name else "") + ".png"))


def _severe(driver: Any) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def test_page_in_headless_chromium(site: Site, browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    d = browser
    wait = WebDriverWait(d, 60)
    text = lambda css: d.find_element(By.CSS_SELECTOR, css).text  # noqa: E731

    # a wrong key is refused with a message; the right one signs in
    d.get(f"{site.url}/ui/")
    wait.until(ec.visibility_of_element_located((By.ID, "key"))).send_keys("jm_0123456789abcdef_wrong")
    d.find_element(By.CSS_SELECTOR, "#signin-form button").click()
    wait.until(lambda _: "not accepted" in text("#signin-error"))
    d.get_log("browser")  # the expected 401 of that attempt is logged by Chromium; start clean
    key = d.find_element(By.ID, "key")
    key.clear()
    key.send_keys(site.keys["full"])
    d.find_element(By.CSS_SELECTOR, "#signin-form button").click()

    # the graph shows the conversation's node count
    wait.until(lambda _: d.find_element(By.ID, "graph").get_attribute("data-nodes") == str(site.nodes))
    assert text("#graph-count").startswith(f"{site.nodes} memories")
    assert d.execute_script("return document.querySelectorAll('#graph canvas').length") > 0
    assert "c1 (12)" in text("#conversation")

    # one relation view at a time: fewer edges shown, then all again
    total = text("#graph-count")
    d.find_element(By.XPATH, "//label[contains(., 'causal')]/button").click()
    assert text("#graph-count") != total or "0 of 0" in total
    d.find_element(By.XPATH, "//span[@id='view-toggles']/button[.='all']").click()
    assert text("#graph-count") == total

    # the timeline: click a memory for its text, type scores and edges
    d.find_element(By.CSS_SELECTOR, "button[data-tab='timeline']").click()
    rows = wait.until(lambda _: d.find_elements(By.CSS_SELECTOR, "#memory-list li"))
    assert len(rows) == site.nodes
    assert len(d.find_elements(By.CSS_SELECTOR, "#timeline circle")) == site.nodes
    rows[5].click()
    wait.until(lambda _: "24 September 2023" in text("#detail-content"))
    _keep(d, tmp_path, "timeline")
    body = text("#detail-body").lower()  # (headings are upper-cased by CSS)
    assert "episodic" in body and "edges (" in body and "2023-09-24" in body  # grounded date

    # ask: the evidence and the whole trace
    d.find_element(By.CSS_SELECTOR, "button[data-tab='graph']").click()
    d.find_element(By.ID, "question").send_keys("What is the name of Ana's puppy?")
    d.find_element(By.CSS_SELECTOR, "#ask-form button").click()
    wait.until(lambda _: d.find_elements(By.CSS_SELECTOR, "#evidence li"))
    assert "Biscuit" in text("#evidence")
    trace = text("#trace")
    assert text("#stop-reason") and "route" in trace.lower() and "rounds (" in trace.lower() and "controller calls" in trace
    d.find_elements(By.CSS_SELECTOR, "#evidence li")[0].click()
    wait.until(lambda _: "Biscuit" in text("#detail-content"))
    _keep(d, tmp_path, "")
    d.execute_script("const a = document.getElementById('ask');"
                     "a.scrollTop = document.getElementById('trace').offsetTop - a.offsetTop")
    _keep(d, tmp_path, "trace")

    # dead letters: the invalid item with its reason
    d.find_element(By.CSS_SELECTOR, "button[data-tab='dead']").click()
    wait.until(lambda _: "dead letter" in text("#dead"))
    assert "http#12" in text("#dead")
    _keep(d, tmp_path, "dead-letters")
    assert _severe(d) == []

    # a query-only key: dead letters answer 403, shown as a clear message
    d.find_element(By.ID, "signout").click()
    wait.until(ec.visibility_of_element_located((By.ID, "key"))).send_keys(site.keys["query"])
    d.find_element(By.CSS_SELECTOR, "#signin-form button").click()
    wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "button[data-tab='dead']"))).click()
    wait.until(lambda _: "admin scope" in text("#dead"))
    assert all("dead-letters" in m and "403" in m for m in _severe(d))  # only the expected 403


def test_dev_mode_page_signs_itself_in(embedder: Embedder, browser: Any) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    sign_in, store = dev_key("acme", SqliteKeyStore(":memory:"))
    app = _app(embedder, store)
    enable_dev_ui(app, sign_in)
    with serve_http(app) as url:
        browser.get(f"{url}/ui/")
        WebDriverWait(browser, 30).until(lambda d: "dev mode" in d.find_element("id", "identity").text)
        assert "acme" in browser.find_element("id", "identity").text
        assert "no conversations" in browser.find_element("id", "status").text
        assert _severe(browser) == []


def test_graph_of_1000_memories_draws_in_seconds(embedder: Embedder, browser: Any) -> None:
    """1,000 memories and ~6,000 edges (synthetic, in the page's own GraphView): drawn, laid out,
    filtered and focused in seconds (generous bound: CI shares two cores)."""
    with serve_http(_app(embedder, SqliteKeyStore(":memory:"))) as url:
        browser.get(f"{url}/ui/")
        browser.set_script_timeout(120)
        out = browser.execute_async_script("""
            const done = arguments[arguments.length - 1];
            import('/ui/graph.js').then((m) => {
              const box = document.createElement('div');
              box.style.cssText = 'position:fixed;left:0;top:0;width:1000px;height:700px';
              document.body.append(box);
              let s = 1; const rnd = () => (s = (s * 16807) % 2147483647) / 2147483647;
              const views = ['semantic', 'temporal', 'causal', 'entity'];
              const nodes = [...Array(1000)].map((_, i) => ({id: 'n' + i, seq: i, speaker: i % 2 ? 'A' : 'B',
                                                             kind: 'observation', content: 'm' + i}));
              const edges = [];
              for (let i = 0; i < 1000; i++) for (let k = 0; k < 6; k++) {
                const j = Math.floor(rnd() * 1000);
                if (j !== i) edges.push({id: i + '-' + k, source: 'n' + i, target: 'n' + j, view: views[k % 4],
                                         probability: rnd(), direction: k % 4 === 2 ? 'directed' : 'undirected'});
              }
              const g = new m.GraphView(box, () => {});
              const t0 = performance.now(); g.load(nodes, edges);
              const t1 = performance.now(); g.setViews(['causal']); g.setMinP(0.5); g.focus('n5');
              const t2 = performance.now();
              done({load_ms: t1 - t0, filter_focus_ms: t2 - t1, counts: g.counts()});
            }).catch((e) => done({error: String(e)}));""")
    assert "error" not in out, out
    assert out["counts"]["nodes"] == 1000 and out["counts"]["edges"] > 5900
    print(f"1,000 memories: drawn in {out['load_ms']:.0f} ms, filtered + focused in {out['filter_focus_ms']:.0f} ms")
    assert out["load_ms"] < 30_000 and out["filter_focus_ms"] < 5_000
    assert _severe(browser) == []


def test_page_without_built_libraries_says_so(embedder: Embedder, browser: Any, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """An unbuilt checkout (no static/vendor): the page still signs in and names the fix."""
    import query_api.ui as ui

    static = tmp_path / "static"
    shutil.copytree(ui.STATIC, static, ignore=shutil.ignore_patterns("vendor"))
    monkeypatch.setattr(ui, "STATIC", static)
    monkeypatch.setattr(ui, "VENDOR", static / "vendor")
    store = SqliteKeyStore(":memory:")
    key, record = mint("acme", ["query"])
    asyncio.run(store.create(record))
    with serve_http(_app(embedder, store)) as url:
        assert httpx.get(f"{url}/ui/config.json").json()["missing_vendor_files"] == list(ui.VENDOR_FILES)
        browser.get(f"{url}/ui/")
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        wait = WebDriverWait(browser, 30)
        wait.until(lambda d: "scripts/ui-build" in d.find_element(By.ID, "banner").text)
        browser.find_element(By.ID, "key").send_keys(key)
        browser.find_element(By.CSS_SELECTOR, "#signin-form button").click()
        wait.until(lambda d: "no conversations" in d.find_element(By.ID, "status").text)
        assert all("vendor/" in m for m in _severe(browser))  # only the missing files' 404s
