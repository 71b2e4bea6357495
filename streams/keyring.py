"""The keyring: data keys made, found, cached and destroyed for sealed topic records.

Granularity: one data key per *observation as produced* (its node id recorded with it), one per
derived node, one per dead letter. Every record about an observation (the observation itself, its
memory node and candidate set, the edges judged for it) is sealed under that observation's key, so
forgetting one observation destroys exactly the keys of its node and of the derived nodes built
from it, and forgetting a conversation destroys every key of the conversation. A key destroyed is
gone from the key store and from this process's cache; nothing else holds it.

A forget destroys the keys made at or before its ``requested_at``: an event sent again after the
forget was requested gets a new key, which survives (as its memory does). This compares clocks of
the processes that make keys (producers, workers) and the one that stamps the forget: keep them
synchronised (NTP); a clock running more than a forget's round trip ahead could keep a key alive.

A memory node whose embedding was read after the turn before it (``MemoryNode.after``) is
sealed under the joint key of its own observation's key and that turn's
(:func:`topology.sealing.joint_key`): a forget of either turn destroys a key it needs.
:meth:`Keyring.lookup` derives a joint key from its two parts when both exist, and
:meth:`Keyring.of_nodes` finds a turn's key by its node.

Caching: unwrapped keys a process looked up are kept in its memory at most ``ttl_s`` seconds
(``max_keys`` at most, oldest dropped first): a worker reads each input key once. Keys it makes
are not cached, and reads that must see a destruction at once (the API's dead-letter listing)
bypass the cache. A key store outage raises :class:`~topology.errors.StoreUnavailable` (the worker
retries its batch, the API answers 503); nothing is ever written or read in the clear instead.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import BaseModel

from storage.ports import DataKeyStore, WrappedKey
from topology import ids, sealing
from topology.errors import KekMissing
from topology.schemas import CandidateSet, DeadLetter, EdgeEvent, MemoryNode, Observation, Scope, encode
from topology.sealing import DataKey, Keks


@dataclass
class Opened:
    """A batch of topic values opened: each value as a JSON object (unsealed when it was sealed),
    or None when its key was destroyed (the record was forgotten), or the bytes as they were when
    they are not a JSON object (for the decoder to reject); and the key each sealed value used."""

    values: list[dict[str, Any] | bytes | None]
    keys: list[DataKey | None]

    @property
    def forgotten(self) -> int:
        return sum(v is None for v in self.values)


class Keyring:
    def __init__(self, store: DataKeyStore, keks: Keks, ttl_s: float = 300.0, max_keys: int = 100_000) -> None:
        self.store, self.keks = store, keks
        self.ttl_s, self.max_keys = ttl_s, max_keys
        self._cache: OrderedDict[str, tuple[float, DataKey]] = OrderedDict()
        #: (tenant, conversation, node id) -> the id of a cached key protecting that node
        self._by_node: dict[tuple[str, str, str], str] = {}

    def _remember(self, key: DataKey) -> None:
        self._cache[key.kid] = (time.monotonic() + self.ttl_s, key)
        self._cache.move_to_end(key.kid)
        if key.node_id is not None:
            self._by_node[(key.tenant_id, key.conversation_id, key.node_id)] = key.kid
        while len(self._cache) > self.max_keys:
            _, (_, old) = self._cache.popitem(last=False)
            self._unindex(old)

    def _unindex(self, key: DataKey) -> None:
        at = (key.tenant_id, key.conversation_id, key.node_id or "")
        if self._by_node.get(at) == key.kid:
            del self._by_node[at]

    def _cached(self, kid: str) -> DataKey | None:
        hit = self._cache.get(kid)
        if hit is None:
            return None
        if hit[0] < time.monotonic():
            del self._cache[kid]
            self._unindex(hit[1])
            return None
        return hit[1]

    async def check(self) -> None:
        """Start-up check: every stored key is wrapped by a configured key-encryption key, else
        :class:`~topology.sealing.KekMissing` naming the missing one."""
        for kek_id in sorted(await self.store.kek_ids()):
            self.keks.by_id(kek_id)

    async def create(self, owners: Sequence[tuple[str, str, str | None]]) -> list[DataKey]:
        """A new key for each ``(tenant id, conversation id, node id)``, stored (durable) before
        this returns. A dead letter that names no conversation gets ``""`` for what it lacks."""
        keys = [sealing.new_data_key(t, c, node) for t, c, node in owners]
        if not keys:
            return []
        now, kek = time.time(), self.keks.current
        await self.store.put([WrappedKey(kid=k.kid, tenant_id=k.tenant_id, conversation_id=k.conversation_id,
                                         node_id=k.node_id, kek_id=kek.id, wrapped=kek.wrap(k), created_at=now)
                              for k in keys])
        return keys  # not cached: whoever made a key seals with it at once; readers look it up

    async def lookup(self, kids: Sequence[str], cache: bool = True) -> dict[str, DataKey]:
        """The keys of ``kids`` that exist (a destroyed key is absent; a joint key is present
        when both its parts are, see :func:`topology.sealing.joint_key`); ``cache`` False: read
        the store and keep nothing (for reads that must see a destruction at once)."""
        plain = await self._lookup([p for kid in dict.fromkeys(kids) for p in sealing.kid_parts(kid)], cache)
        out: dict[str, DataKey] = {}
        for kid in kids:
            parts = sealing.kid_parts(kid)
            if all(p in plain for p in parts):
                out[kid] = plain[kid] if len(parts) == 1 else sealing.joint_key(plain[parts[0]], plain[parts[1]])
        return out

    async def _lookup(self, kids: Sequence[str], cache: bool) -> dict[str, DataKey]:
        out: dict[str, DataKey] = {}
        missing: list[str] = []
        for kid in dict.fromkeys(kids):
            hit = self._cached(kid) if cache else None
            if hit is None:
                missing.append(kid)
            else:
                out[kid] = hit
        for rec in await self.store.get(missing) if missing else []:
            key = self._unwrapped(rec)
            if cache:
                self._remember(key)
            out[key.kid] = key
        return out

    def _unwrapped(self, rec: WrappedKey) -> DataKey:
        secret = self.keks.by_id(rec.kek_id).unwrap(rec.wrapped, rec.tenant_id, rec.conversation_id, rec.kid)
        return DataKey(kid=rec.kid, tenant_id=rec.tenant_id, conversation_id=rec.conversation_id,
                       secret=secret, node_id=rec.node_id)

    async def of_nodes(self, scope: Scope, node_ids: Sequence[str]) -> dict[str, DataKey]:
        """A key of each of ``node_ids`` that has one (the newest, when its observation was
        produced more than once), by node id: from this process's cache, else the store."""
        out: dict[str, DataKey] = {}
        missing: list[str] = []
        for nid in dict.fromkeys(node_ids):
            kid = self._by_node.get((scope.tenant_id, scope.conversation_id, nid))
            hit = self._cached(kid) if kid is not None else None
            if hit is None:
                missing.append(nid)
            else:
                out[nid] = hit
        newest: dict[str, WrappedKey] = {}
        for rec in await self.store.of_nodes(scope, missing) if missing else []:
            if rec.node_id is not None and (rec.node_id not in newest or rec.created_at > newest[rec.node_id].created_at):
                newest[rec.node_id] = rec
        for nid, rec in newest.items():
            out[nid] = self._unwrapped(rec)
            self._remember(out[nid])
        return out

    async def node_keys(self, nodes: Sequence[MemoryNode], keys: Mapping[str, DataKey]) -> dict[str, DataKey]:
        """The key sealing each of ``nodes``' memory records, by node id: its own key (``keys``,
        by node id; a node without one is left out), joined with the key of the turn it was read
        after (``MemoryNode.after``: from ``keys`` or :meth:`of_nodes`), so a forget of either
        turn makes the record unreadable. A turn before that has no key was never sealed (logged
        before encryption was on): there is nothing of it to protect, and its own key seals it."""
        wanted: dict[Scope, list[str]] = {}
        for n in nodes:
            if n.after is not None and n.after not in keys and n.id in keys:
                wanted.setdefault(n.scope, []).append(n.after)
        found = dict(keys)
        for scope, ids_ in wanted.items():
            found.update(await self.of_nodes(scope, ids_))
        out: dict[str, DataKey] = {}
        for n in nodes:
            own = keys.get(n.id)
            if own is None:
                continue
            other = found.get(n.after) if n.after is not None else None
            out[n.id] = own if other is None else sealing.joint_key(own, other)
        return out

    async def destroy(self, scope: Scope, node_ids: Sequence[str] | None, before: float) -> int:
        """Destroy the scope's keys made at or before ``before`` (all, or those of ``node_ids``),
        in the store and in this cache; the number destroyed in the store."""
        n = await self.store.destroy(scope, node_ids, before)
        nodes = None if node_ids is None else set(node_ids)
        for kid, (_, k) in list(self._cache.items()):
            if (k.tenant_id, k.conversation_id) == (scope.tenant_id, scope.conversation_id) and (
                    nodes is None or k.node_id in nodes):
                del self._cache[kid]
                self._unindex(k)
        return n

    async def rotate(self, page: int = 500) -> int:
        """Re-wrap every stored key wrapped by a previous key-encryption key under the current
        one (the log is untouched); the number re-wrapped. Idempotent; safe while running."""
        done = 0
        for old in self.keks.previous:
            while batch := await self.store.wrapped_by(old.id, page):
                cur = self.keks.current
                rewrapped = []
                for rec in batch:
                    key = DataKey(kid=rec.kid, tenant_id=rec.tenant_id, conversation_id=rec.conversation_id,
                                  secret=old.unwrap(rec.wrapped, rec.tenant_id, rec.conversation_id, rec.kid),
                                  node_id=rec.node_id)
                    rewrapped.append(rec.model_copy(update={"kek_id": cur.id, "wrapped": cur.wrap(key)}))
                await self.store.put(rewrapped)
                done += len(rewrapped)
        return done

    async def close(self) -> None:
        self._cache.clear()
        self._by_node.clear()
        await self.store.close()

    async def open(self, raws: Sequence[bytes | dict[str, Any]], cache: bool = True) -> Opened:
        """``raws`` as JSON objects, unsealed with keys looked up in one call (see :meth:`lookup`)."""
        parsed: list[dict[str, Any] | bytes] = []
        for raw in raws:
            if isinstance(raw, dict):
                parsed.append(raw)
                continue
            try:
                data = orjson.loads(raw)
            except orjson.JSONDecodeError:
                parsed.append(raw)
                continue
            parsed.append(data if isinstance(data, dict) else raw)
        kids = [k for d in parsed if isinstance(d, dict) and (k := sealing.kid_of(d))]
        found = await self.lookup(kids, cache) if kids else {}
        values: list[dict[str, Any] | bytes | None] = []
        keys: list[DataKey | None] = []
        for d in parsed:
            kid = sealing.kid_of(d) if isinstance(d, dict) else None
            if kid is None:
                values.append(d)
                keys.append(None)
            elif kid not in found:
                values.append(None)
                keys.append(None)
            else:
                assert isinstance(d, dict)
                values.append(sealing.unseal(d, found[kid]))
                keys.append(found[kid])
        return Opened(values, keys)


    async def open_readable(self, raws: Sequence[bytes], cache: bool = True) -> tuple[list[dict[str, Any] | bytes], int]:
        """The values of ``raws`` that can still be read (unsealed objects, or bytes that are not
        a JSON object), in order, and how many were left out because their key was destroyed."""
        opened = await self.open(raws, cache)
        return [v for v in opened.values if v is not None], opened.forgotten


_SEALERS: dict[type[BaseModel], Callable[[Mapping[str, Any], DataKey], dict[str, Any]]] = {
    Observation: sealing.seal_observation, MemoryNode: sealing.seal_node, CandidateSet: sealing.seal_candidates,
    EdgeEvent: sealing.seal_edge, DeadLetter: sealing.seal_dead_letter}


def sealed(model: BaseModel, key: DataKey | None) -> bytes:
    """``model``'s record value: sealed under ``key`` when it is a kind with personal fields and a
    key is given, else as ``topology.schemas.encode`` writes it."""
    sealer = _SEALERS.get(type(model)) if key is not None else None
    if sealer is None or key is None:
        return encode(model)
    return orjson.dumps(sealer(model.model_dump(mode="json"), key))


__all__ = ["KekMissing", "Keyring", "Opened", "sealed"]


def letter_owner(letter: DeadLetter) -> tuple[str, str, str | None]:
    """Whose key seals a dead letter: its conversation's (and its event's node, when it names
    one), so a forget of either destroys it."""
    t, c = letter.tenant_id or "", letter.conversation_id or ""
    node = ids.node_id(t, c, letter.event_id) if t and c and letter.event_id else None
    return t, c, node
