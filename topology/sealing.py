"""Sealed records: the personal fields of a topic record encrypted under a data key.

A sealed record is the record's JSON object with its personal fields taken out and put, as one
JSON object encrypted with AES-256-GCM, under ``"sealed"``::

    {"tenant_id": "t", "conversation_id": "c", "event_id": "e1", ...,
     "sealed": {"kid": "<data key id>", "nonce": "<base64>", "data": "<base64 ciphertext+tag>"}}

What stays in the clear is an allow-list per record type (:data:`CLEAR`): ids, seqs, timestamps,
probabilities, the scope. Everything else (content, speaker, metadata, provenance, entities,
tokens, embeddings, edge labels, a dead letter's original and reason) is sealed, so a field added
to a schema later is sealed unless someone decides otherwise. Records with nothing personal
(forget requests and markers, judgments, consolidation decisions, and edges whose label is a
rule's name, :data:`RULE_LABELS`) are not sealed.

**Sealed under two keys.** A record that carries something computed from another record's text
(a node whose embedding was read after the turn before it, ``MemoryNode.after``) is sealed under
a *joint key* of the two observations' data keys (:func:`joint_key`): its secret is derived
(HKDF-SHA256) from both secrets, and its id names both (``<own kid>+<other kid>``), so reading
it needs both keys and destroying either (a forget of either turn) makes it unreadable.

The associated data of each ciphertext is its key id and the key's scope, and a key is only ever
handed out for its own scope (``streams.keyring``), so a sealed part cannot be moved to another
record's key or conversation without failing authentication. Data keys are wrapped by a
key-encryption key (:class:`Kek`) the same way (associated data: scope and key id).

Pure: no I/O; the random nonces and keys come from :func:`os.urandom`.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from topology.errors import KekMissing, SealingError

KEY_BYTES = 32    # AES-256
NONCE_BYTES = 12  # GCM's standard nonce; random per encryption (2^-32 collision bound far off)

#: Fields left in the clear, by record kind; every other field of such a record is sealed.
CLEAR: dict[str, frozenset[str]] = {
    "observation": frozenset({"schema_version", "tenant_id", "conversation_id", "event_id", "observed_at"}),
    "node": frozenset({"schema_version", "id", "tenant_id", "conversation_id", "event_id", "seq", "kind",
                       "observed_at", "derived_from"}),
    "edge": frozenset({"schema_version", "id", "tenant_id", "conversation_id", "view", "source", "target",
                       "direction", "probability", "created_by"}),
    "dead_letter": frozenset({"schema_version", "source", "received_at", "tenant_id", "conversation_id",
                              "event_id", "truncated", "original_bytes", "original_encoding"}),
}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def scope_key(tenant_id: str, conversation_id: str) -> str:
    """The scope a key belongs to, as bound into associated data (tenant ``%``/``/`` escaped, so
    ``a/b`` + ``c`` and ``a`` + ``b/c`` differ; see ``topology.schemas.Scope.key``)."""
    return f"{tenant_id.replace('%', '%25').replace('/', '%2F')}/{conversation_id}"


@dataclass(frozen=True)
class DataKey:
    """One data key in the clear: its id, its scope, and (optionally) the node it protects."""

    kid: str
    tenant_id: str
    conversation_id: str
    secret: bytes = field(repr=False)
    node_id: str | None = None

    @functools.cached_property
    def aad(self) -> bytes:
        return f"jevmem.sealed.v1|{scope_key(self.tenant_id, self.conversation_id)}|{self.kid}".encode()

    @functools.cached_property
    def cipher(self) -> AESGCM:
        """The AES-256-GCM instance of this key (made once: a batch seals many records with it)."""
        return AESGCM(self.secret)


def new_data_key(tenant_id: str, conversation_id: str, node_id: str | None = None) -> DataKey:
    """A fresh random data key with a random 128-bit id."""
    return DataKey(kid=os.urandom(16).hex(), tenant_id=tenant_id, conversation_id=conversation_id,
                   secret=os.urandom(KEY_BYTES), node_id=node_id)


#: Joins the two key ids of a joint key's id (key ids are hex: never part of one).
JOINT = "+"


def joint_key(own: DataKey, other: DataKey) -> DataKey:
    """A key that only both ``own`` and ``other`` (two keys of one scope) give: its secret is
    HKDF-SHA256 of both secrets (bound to both ids), its id ``own.kid + JOINT + other.kid``, its
    node ``own``'s. Deterministic: whoever holds both keys derives the same key."""
    if (own.tenant_id, own.conversation_id) != (other.tenant_id, other.conversation_id):
        raise SealingError("a joint key joins two keys of one scope")
    kid = f"{own.kid}{JOINT}{other.kid}"
    secret = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None,
                  info=f"jevmem.joint.v1|{kid}".encode()).derive(own.secret + other.secret)
    return DataKey(kid=kid, tenant_id=own.tenant_id, conversation_id=own.conversation_id, secret=secret,
                   node_id=own.node_id)


def kid_parts(kid: str) -> list[str]:
    """The ids of the keys a (joint) key id needs."""
    return kid.split(JOINT)


@dataclass(frozen=True)
class Kek:
    """A key-encryption key: wraps data keys (AES-256-GCM, associated data: scope and key id).
    ``id`` is a fingerprint (the first 8 bytes of a SHA-256 of the key), recorded with every
    wrapped key so the right one is used to unwrap it."""

    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.secret) != KEY_BYTES:
            raise ValueError(f"a key-encryption key is {KEY_BYTES} bytes (base64 of 32 random bytes), "
                             f"not {len(self.secret)}")

    @property
    def id(self) -> str:
        return hashlib.sha256(b"jevmem-kek|" + self.secret).hexdigest()[:16]

    @staticmethod
    def _aad(tenant_id: str, conversation_id: str, kid: str) -> bytes:
        return f"jevmem.datakey.v1|{scope_key(tenant_id, conversation_id)}|{kid}".encode()

    def wrap(self, key: DataKey) -> str:
        """``key``'s secret encrypted under this key (base64 of nonce + ciphertext + tag)."""
        nonce = os.urandom(NONCE_BYTES)
        ct = AESGCM(self.secret).encrypt(nonce, key.secret, self._aad(key.tenant_id, key.conversation_id, key.kid))
        return b64(nonce + ct)

    def unwrap(self, wrapped: str, tenant_id: str, conversation_id: str, kid: str) -> bytes:
        raw = unb64(wrapped)
        try:
            return AESGCM(self.secret).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:],
                                               self._aad(tenant_id, conversation_id, kid))
        except InvalidTag as exc:
            raise SealingError(f"data key {kid} does not unwrap under key-encryption key {self.id}") from exc


@dataclass(frozen=True)
class Keks:
    """The configured key-encryption keys: ``current`` wraps new data keys; ``previous`` ones
    still unwrap what they wrapped (during a rotation, see ``jevmem encryption rotate``)."""

    current: Kek
    previous: tuple[Kek, ...] = ()

    def by_id(self, kek_id: str) -> Kek:
        for k in (self.current, *self.previous):
            if k.id == kek_id:
                return k
        raise KekMissing(f"a data key is wrapped by key-encryption key {kek_id}, which is not configured "
                         f"(configured: {', '.join(self.ids())}); set JEVMEM_ENCRYPTION_KEK or "
                         "JEVMEM_ENCRYPTION_KEK_FILE to the key in use, or list it after the new one while rotating")

    def ids(self) -> list[str]:
        return [k.id for k in (self.current, *self.previous)]

    @classmethod
    def parse(cls, text: str, where: str) -> Keks:
        """Keys from ``text``: base64 keys separated by commas or newlines, the current one first
        (``#`` starts a comment line). ``where`` names the source in errors."""
        items = [t.strip() for line in text.splitlines() if not line.strip().startswith("#")
                 for t in line.split(",") if t.strip()]
        if not items:
            raise ValueError(f"{where} holds no key-encryption key")
        keks = []
        for i, item in enumerate(items):
            try:
                keks.append(Kek(unb64(item)))
            except ValueError as exc:  # binascii.Error is one
                raise ValueError(f"{where}: key {i + 1} is not base64 of 32 bytes ({exc}); make one with "
                                 "`jevmem encryption new-kek`") from exc
        return cls(keks[0], tuple(keks[1:]))


def _packed(vector: Any) -> Any:
    """An embedding as base64 float32 bytes (``{"f32": ...}``) when that is exact (every stored
    embedding is float32-exact, ``topology.embedding.rounded``): a fifth of its JSON, and
    ciphertext does not compress. Anything else is kept as it is."""
    if not isinstance(vector, list) or not vector:
        return vector
    try:
        packed = np.asarray(vector, dtype=np.float32)
    except (TypeError, ValueError):
        return vector
    if packed.astype(np.float64).tolist() != vector:
        return vector
    return {"f32": b64(packed.tobytes())}


def _unpacked(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"f32"}:
        out: list[float] = np.frombuffer(unb64(value["f32"]), dtype=np.float32).astype(np.float64).tolist()
        return out
    return value


def seal(data: Mapping[str, Any], clear: frozenset[str], key: DataKey) -> dict[str, Any]:
    """``data`` with every field not in ``clear`` encrypted under ``key`` into ``"sealed"``
    (an ``embedding`` packed as float32 bytes first, exactly)."""
    out = {k: v for k, v in data.items() if k in clear}
    secret = {k: v for k, v in data.items() if k not in clear}
    if "embedding" in secret:
        secret["embedding"] = _packed(secret["embedding"])
    nonce = os.urandom(NONCE_BYTES)
    ct = key.cipher.encrypt(nonce, orjson.dumps(secret), key.aad)
    out["sealed"] = {"kid": key.kid, "nonce": b64(nonce), "data": b64(ct)}
    return out


def kid_of(data: Mapping[str, Any]) -> str | None:
    """The data key id a record object was sealed with (its own or its ``node``'s), or None."""
    sealed = data.get("sealed")
    if isinstance(sealed, dict) and isinstance(sealed.get("kid"), str):
        return str(sealed["kid"])
    node = data.get("node")
    return kid_of(node) if isinstance(node, dict) else None


def unseal(data: Mapping[str, Any], key: DataKey) -> dict[str, Any]:
    """The record object ``data`` with its sealed fields restored (a sealed ``node`` too);
    :class:`SealingError` when the ciphertext does not authenticate under ``key`` or the record
    names another scope than the key's."""
    out = dict(data)
    node = out.get("node")
    if isinstance(node, dict) and "sealed" in node:
        out["node"] = unseal(node, key)
    sealed = out.pop("sealed", None)
    if sealed is None:
        return out
    if not isinstance(sealed, dict) or sealed.get("kid") != key.kid:
        raise SealingError("the sealed part is malformed or names another key")
    for name, want in (("tenant_id", key.tenant_id), ("conversation_id", key.conversation_id)):
        if name in out and out[name] is not None and want and out[name] != want:
            raise SealingError(f"the record's {name} is not its key's")
    try:
        plain = key.cipher.decrypt(unb64(sealed["nonce"]), unb64(sealed["data"]), key.aad)
    except (InvalidTag, KeyError, TypeError, ValueError) as exc:
        raise SealingError("the sealed part does not authenticate under its key") from exc
    secret = orjson.loads(plain)
    if not isinstance(secret, dict) or set(secret) & set(out):
        raise SealingError("the sealed part overlaps the clear fields")
    if "embedding" in secret:
        secret["embedding"] = _unpacked(secret["embedding"])
    out.update(secret)
    return out


Sealer = Callable[[Mapping[str, Any], DataKey], dict[str, Any]]


def seal_node(data: Mapping[str, Any], key: DataKey) -> dict[str, Any]:
    return seal(data, CLEAR["node"], key)


def seal_candidates(data: Mapping[str, Any], key: DataKey) -> dict[str, Any]:
    """A candidate set: its node sealed, the candidates (ids, seqs, scores) in the clear."""
    return {**data, "node": seal_node(data["node"], key)}


def seal_observation(data: Mapping[str, Any], key: DataKey) -> dict[str, Any]:
    return seal(data, CLEAR["observation"], key)


#: Edge labels of a closed vocabulary (the rules' and judgments' names): they say nothing about
#: a person, so such an edge is written as it is. Any other label (an entity edge's shared names,
#: an alias) is sealed.
RULE_LABELS = frozenset({"before", "next", "related", "nearest", "causes", "consolidation_link", "supersedes",
                         "summarises"})


def seal_edge(data: Mapping[str, Any], key: DataKey) -> dict[str, Any]:
    if data.get("label") in RULE_LABELS:
        return dict(data)
    return seal(data, CLEAR["edge"], key)


def seal_dead_letter(data: Mapping[str, Any], key: DataKey) -> dict[str, Any]:
    return seal(data, CLEAR["dead_letter"], key)


def edge_owner(source: str, target: str, written: Sequence[str] | set[str]) -> str:
    """The node whose key seals an edge: the end written in this batch (the newer node, which
    the edge was judged for; its own text holds whatever the label names), the target when
    both or neither were."""
    return source if source in written and target not in written else target
