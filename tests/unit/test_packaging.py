"""The package as a user installs it: a wheel and an sdist built from the checkout, the wheel
installed into a fresh virtualenv (its dependencies taken from the project's environment, so the
check needs no network), carrying its typing marker and data files, and its adapters working from
the installed copy against a running server."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

from tests.unit.test_integrations import Api, api  # noqa: F401 (the fixture)

ROOT = Path(__file__).resolve().parents[2]


def _checkout(into: Path) -> Path:
    """A copy of the tracked files (a build writes ``build/`` and ``*.egg-info`` into its tree)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    for name in filter(None, files.decode().split("\0")):
        src = ROOT / name
        if src.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, into / name)
    return into


def _wheel(out: Path) -> Path:
    src = _checkout(out / "src")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(src)], check=True, capture_output=True, timeout=600)
    [built] = list(out.glob("*.whl"))
    return built


def test_the_wheel_installs_into_a_fresh_environment_and_its_adapters_work(api: Api, tmp_path: Path) -> None:  # noqa: F811
    wheel = _wheel(tmp_path / "wheel")
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in ("jevmem", "topology", "storage", "streams", "query_api"):
        assert f"{package}/py.typed" in names, package  # a user's type checker reads the types
    assert "topology/systemone/score_model.json" in names and "jevmem/integrations/langgraph.py" in names
    env = tmp_path / "venv"
    venv.create(env, with_pip=False)
    py = env / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # the dependencies from this environment (after the venv's own site-packages: the wheel's copy wins)
    Path(purelib, "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", purelib, str(wheel)],
                   check=True, capture_output=True, timeout=300)
    out = subprocess.run([str(py), str(ROOT / "examples" / "langgraph_agent.py")], capture_output=True, text=True,
                         timeout=180, cwd=tmp_path, env={**os.environ, "JEVMEM_URL": api.url, "JEVMEM_API_KEY": api.keys["a"],
                                                         "PYTHONPATH": ""})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Biscuit" in out.stdout
    where = subprocess.run([str(py), "-c", "import jevmem.integrations.langgraph as m; print(m.__file__)"],
                           check=True, capture_output=True, text=True, cwd=tmp_path).stdout
    assert where.startswith(purelib), where  # the installed copy, not the checkout


def test_the_sdist_holds_the_sources_and_the_models(tmp_path: Path) -> None:
    src = _checkout(tmp_path / "src")
    subprocess.run([sys.executable, "-c", "import setuptools.build_meta as b; "
                    f"print(b.build_sdist({str(tmp_path)!r}))"], check=True, capture_output=True, timeout=300, cwd=src)
    [sdist] = list(tmp_path.glob("*.tar.gz"))
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {"pyproject.toml", "jevmem/py.typed", "topology/systemone/score_model.json",
            "jevmem/integrations/langchain.py"} <= names
