"""The CLI tells a user what it did and what it accepts: help texts name the settings and the
choices, ingest names what it wrote, an unknown conversation is an error that lists the known ones."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from jevmem.bench import chaos as bench_chaos
from jevmem.cli import SHOWN_CONVERSATIONS, app, unknown_conversations, written_summary
from jevmem.cli_bench import Fault
from tests.conftest import chat_observations
from topology.ports import Embedder

# every command of cli.py (the keys commands live in cli_keys.py)
COMMANDS = [["ingest"], ["query"], ["conversations"], ["serve"], ["mcp"], ["worker"], ["produce"], ["forget"],
            ["replay"], ["bench", "locomo"], ["bench", "edges"], ["bench", "scale"], ["bench", "kafka"], ["bench", "chaos"],
            ["models", "fetch"], ["models", "list"]]


def _help(*command: str) -> str:
    res = CliRunner().invoke(app, [*command, "--help"])
    assert res.exit_code == 0, res.output
    return res.output


def _flat(text: str) -> str:
    """``text`` with every run of whitespace as one space (Rich wraps messages at the console width)."""
    return " ".join(text.split())


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_shows_values_not_python_types(command: list[str]) -> None:
    text = _help(*command)
    options = text.split("Options:", 1)[1]
    assert "<bool>" not in text and "``" not in text
    assert "<str>" not in options  # (typer prints an argument's type beside its name, whatever its metavar)


@pytest.mark.parametrize("command", [["ingest"], ["query"], ["conversations"], ["serve"], ["forget"]], ids=" ".join)
def test_help_names_the_settings_behind_the_defaults(command: list[str]) -> None:
    text = _flat(_help(*command))
    assert "[env JEVMEM_DATA_DIR, default .jevmem]" in text
    assert "[env JEVMEM_TENANT, default 'default']" in text


def test_help_lists_the_choices_of_enum_options() -> None:
    assert f"<list[{'|'.join(bench_chaos.FAULTS)}]>" in _help("bench", "chaos")
    assert "<edges|observations>" in _help("replay")
    assert "<qdrant|elastic|both>" in _help("bench", "kafka")


def test_the_fault_choices_are_the_benchmark_s_faults() -> None:
    assert tuple(f.value for f in Fault) == bench_chaos.FAULTS


def test_models_help_names_both_registries() -> None:
    assert "Maven Central or PyPI" in _flat(_help("models"))


def test_an_unknown_fault_is_refused_with_the_choices(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["bench", "chaos", str(tmp_path), "--fault", "meteor"], env={"COLUMNS": "200"})
    assert res.exit_code == 2
    assert "meteor" in res.output and "double_kill" in res.output


def test_written_summary_names_tenant_conversations_and_counts() -> None:
    assert written_summary(Counter()) == "nothing written"
    assert written_summary(Counter({("acme", "locomo-26"): 419})) == "tenant 'acme': conversation 'locomo-26' (419 observations)"
    two = written_summary(Counter({("acme", "b"): 1, ("acme", "a"): 2, ("globex", "c"): 3}))
    assert two == ("tenant 'acme': conversations 'a' (2 observations), 'b' (1 observation); "
                   "tenant 'globex': conversation 'c' (3 observations)")
    many = written_summary(Counter({("acme", f"c{i:02d}"): 1 for i in range(SHOWN_CONVERSATIONS + 3)}))
    assert many.endswith("'c09' (1 observation) and 3 more")


def test_unknown_conversation_message() -> None:
    known = [("locomo-30", 600), ("locomo-26", 419)]
    assert unknown_conversations("acme", ["locomo-26"], known, "data") is None
    msg = unknown_conversations("acme", ["26"], known, "data")
    assert msg == ("tenant 'acme' has no conversation '26' in data; "
                   "its conversations: 'locomo-26' (419 nodes), 'locomo-30' (600 nodes)")
    two = unknown_conversations("acme", ["x", "locomo-30", "y", "x"], known, "data")
    assert two is not None and two.startswith("tenant 'acme' has no conversations 'x', 'y' in data;")
    assert unknown_conversations("acme", ["x"], [], "data") == (
        "tenant 'acme' has no conversation 'x' in data; it has no conversations yet "
        "(add some: jevmem ingest FILE --tenant acme)")
    lots = [(f"c{i:02d}", 1) for i in range(SHOWN_CONVERSATIONS + 2)]
    long = unknown_conversations("acme", ["x"], lots, "data")
    assert long is not None and "'c09' (1 nodes) and 2 more (all of them: jevmem conversations --tenant acme)" in long
    assert "'c10'" not in long


def test_chaos_faults_that_run_scripts_need_a_checkout(tmp_path: Path) -> None:
    bench_chaos.require_scripts(bench_chaos.FAULTS)  # this checkout has them all
    bench_chaos.require_scripts(["kill", "double_kill", "es_outage", "scale"], tmp_path)  # these need none
    assert bench_chaos.missing_scripts(["kill", "broker_restart", "broker_loss", "broker_rolling"], tmp_path) == {
        "kafka/kafka.sh": ["broker_restart"], "kafka/cluster.sh": ["broker_loss", "broker_rolling"]}
    with pytest.raises(bench_chaos.SourceCheckoutNeeded) as err:
        bench_chaos.require_scripts(["qdrant_kill"], tmp_path)
    assert "qdrant_kill run scripts/qdrant/qdrant.sh" in str(err.value)
    assert "source checkout" in str(err.value)
    assert "--fault kill --fault double_kill --fault es_outage --fault scale" in str(err.value)


def test_bench_chaos_from_an_installed_package_says_what_it_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_chaos, "SCRIPTS", tmp_path / "site-packages" / "scripts")
    res = CliRunner().invoke(app, ["bench", "chaos", str(tmp_path), "--fault", "broker_restart"],
                             env={"COLUMNS": "300"})
    assert res.exit_code == 2
    assert "broker_restart run scripts/kafka/kafka.sh, which is part of a source checkout" in _flat(res.output)


@pytest.fixture
def data(tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data directory with tenant acme's conversation c1 (12 turns) ingested through the CLI;
    the CLI's commands load the session's embedder instead of the model files again."""
    monkeypatch.setattr("jevmem.assembly.load_embedder", lambda *_a, **_k: embedder)
    lines = [o.model_dump_json(exclude={"tenant_id", "conversation_id"}) for o in chat_observations()]
    (tmp_path / "chat.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "data"
    res = CliRunner().invoke(app, ["ingest", str(tmp_path / "chat.jsonl"), "--data-dir", str(out), "--tenant", "acme",
                                   "--conversation", "c1"], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert "accepted 12 (12 new nodes), " in _flat(res.output)
    assert f"-> tenant 'acme': conversation 'c1' (12 observations) in {out}" in _flat(res.output)
    assert 'ask it: jevmem query "..." -c c1 --tenant acme' in _flat(res.output)
    return out


def test_conversations_lists_the_tenant_s_conversations(data: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["conversations", "--tenant", "acme", "--data-dir", str(data)], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines() == ["c1\t12"]
    assert f"tenant 'acme': 1 conversation in {data}" in _flat(res.stderr)
    res = runner.invoke(app, ["conversations", "--tenant", "acme", "--data-dir", str(data), "--json"])
    assert orjson.loads(res.stdout) == {"tenant": "acme", "conversations": [{"conversation_id": "c1", "nodes": 12}]}
    res = runner.invoke(app, ["conversations", "--tenant", "globex", "--data-dir", str(data)], env={"COLUMNS": "300"})
    assert res.exit_code == 0 and res.stdout == ""
    assert "tenant 'globex': 0 conversations" in _flat(res.stderr)


def test_query_on_an_unknown_conversation_says_so(data: Path) -> None:
    runner = CliRunner()
    for args in (["-c", "26"], ["-c", "26", "-c", "c1"]):
        res = runner.invoke(app, ["query", "What is the name of Ana's puppy?", *args, "--tenant", "acme", "--data-dir", str(data),
                                  "--json"], env={"COLUMNS": "300"})
        assert res.exit_code == 1
        assert res.stdout == ""
        assert (f"tenant 'acme' has no conversation '26' in {data}; its conversations: 'c1' (12 nodes)"
                in _flat(res.stderr))
    res = runner.invoke(app, ["query", "What is the name of Ana's puppy?", "-c", "c1", "--tenant", "acme", "--data-dir", str(data),
                              "--json"])
    assert res.exit_code == 0, res.output
    assert "e0" in [e["event_id"] for e in orjson.loads(res.stdout)["evidence"][:2]]


def test_ingest_names_a_bad_line_by_its_index_in_the_file(tmp_path: Path, embedder: Embedder,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("jevmem.assembly.load_embedder", lambda *_a, **_k: embedder)
    turns = [o.model_copy(update={"event_id": f"r{r}-{o.event_id}"}) for r in range(4) for o in chat_observations()]
    good = [o.model_dump_json(exclude={"tenant_id", "conversation_id"}) for o in turns[:40]]
    lines = [*good[:35], "{not json", *good[35:]]
    (tmp_path / "chat.jsonl").write_text("\n".join(lines) + "\n")
    # a write batch of 2: the file goes in calls of 32 lines, the bad line is in the second
    res = CliRunner().invoke(app, ["ingest", str(tmp_path / "chat.jsonl"), "--data-dir", str(tmp_path / "data"),
                                   "--tenant", "acme", "--conversation", "c1"],
                             env={"COLUMNS": "300", "JEVMEM_WRITE_BATCH": "2"})
    assert res.exit_code == 0, res.output
    assert "dead letter chat.jsonl#35: " in _flat(res.output)
    assert "accepted 40 (40 new nodes), " in _flat(res.output) and "1 dead letters" in _flat(res.output)
    assert "conversation 'c1' (40 observations)" in _flat(res.output)


def test_every_command_sets_the_collector_thresholds_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from jevmem import collector

    before = gc.get_threshold()
    try:
        monkeypatch.setenv("JEVMEM_GC_THRESHOLDS", "[50000, 5, 20]")
        assert CliRunner().invoke(app, ["models", "list"]).exit_code == 0
        assert gc.get_threshold() == (50000, 5, 20)
        monkeypatch.delenv("JEVMEM_GC_THRESHOLDS")
        assert CliRunner().invoke(app, ["models", "list"]).exit_code == 0
        assert gc.get_threshold() == collector.DEFAULT_THRESHOLDS
        with pytest.raises(ValueError, match="positive"):
            collector.tune((0, 10, 10))
        assert gc.get_threshold() == collector.DEFAULT_THRESHOLDS  # a refused setting changes nothing
    finally:
        gc.set_threshold(*before)


def test_every_command_sets_numpys_blas_threads_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from threadpoolctl import threadpool_info, threadpool_limits

    from jevmem import blas

    def pools() -> dict[str, int]:
        return {str(p["filepath"]): int(p["num_threads"]) for p in threadpool_info() if p["user_api"] == "blas"}

    before = blas.limit(0)  # 0 changes nothing and says what there is
    assert before and before == pools()
    try:
        monkeypatch.delenv("JEVMEM_BLAS_THREADS", raising=False)
        assert CliRunner().invoke(app, ["models", "list"]).exit_code == 0
        assert set(pools().values()) == {blas.DEFAULT_THREADS}
        threadpool_limits(limits=max(before.values()), user_api="blas")
        monkeypatch.setenv("JEVMEM_BLAS_THREADS", "0")
        assert CliRunner().invoke(app, ["models", "list"]).exit_code == 0
        assert pools() == before
        with pytest.raises(ValueError, match="0 \\(no change\\) or more"):
            blas.limit(-1)
    finally:
        threadpool_limits(limits=max(before.values()), user_api="blas")
