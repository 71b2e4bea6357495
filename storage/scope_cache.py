"""The write path's reader from memory: each conversation's nodes held by the process that writes it.

A conversation has one writer at a time (embedded: the pipeline's lock; distributed: the owner of
its partition), so that writer can keep the conversation's nodes in memory and answer candidate
discovery (:class:`topology.ports.MemoryReader`) without a store round trip per node: cosines are
one matrix product over the conversation, lexical and entity overlap come from in-memory postings.

Contracts:

* Read-your-writes: :meth:`ScopeCache.add` is called with every node the writer materialises
  (``streams.write_path.Stores.materialise`` notifies it), after the stores took them (see ``Stores.listeners``).
* A conversation not in memory is loaded from the node store (every acknowledged node, with its
  embedding) on first use. :meth:`clear` drops everything; the Faust worker calls it whenever its
  partitions change (``Stores.reassigned``), so a conversation that comes back after another
  worker wrote it is reloaded.
  :meth:`drop` forgets one conversation (``Stores.on_forget`` calls it after a deletion).
  Reloaded nodes equal the in-memory ones bit for bit: embeddings are float32-exact
  (:func:`topology.embedding.rounded`), which is what the stores keep.
* Answers follow the store readers' semantics: ``similar_before`` ranks by cosine (ties: later
  first), ``overlapping_before`` by the number of distinct shared tokens then the latest seq,
  ``sharing_entities_before`` by shared entity ids then the latest seq, ``preceding`` by seq
  (observations only): the same answers as the store readers (a unit test compares them).
* Memory is bounded: at most ``max_nodes`` nodes are kept; the least recently used conversations
  are dropped first (and reloaded from the store when needed again).
* Recent links: :meth:`remember_links` keeps the strongest semantic edge into each of the last
  :data:`RECENT_LINKED` observations this process linked in each conversation (every semantic
  edge into a node is written when that node is linked, see ``topology.stages.relations``), so a
  consolidation run over recent writes reads them from memory (:meth:`incoming`) instead of
  searching the edge store, which would first make the batch's writes searchable. A node linked
  before the conversation was (re)loaded is not known: :meth:`incoming` then answers None and the
  caller reads the store.
"""

from __future__ import annotations

import asyncio
import bisect
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from storage.ports import NodeHeads, NodeReader, NodeRows
from topology.schemas import EdgeEvent, MemoryNode, Scope
from topology.stages.relations import closest_incoming

#: Nodes kept in memory across conversations when not told (a memory plan's ``write_nodes``:
#: ``storage.budget``); about 4 KB each with a 384-d float32 embedding.
MAX_NODES = 50_000
#: Observations per conversation whose incoming semantic edges are kept (a consolidation window
#: is ``Params.consolidate_every`` = 20 writes).
RECENT_LINKED = 64


@dataclass
class _Conversation:
    """One conversation in memory. Nodes are kept without their embeddings; the embeddings live
    once, as float32 rows of ``matrix`` (row ``row_of[id]``; the embeddings are float32-exact,
    ``topology.embedding.rounded``, so nothing is lost), or in ``pending`` until the next
    :meth:`index` appends them."""

    nodes: dict[str, MemoryNode] = field(default_factory=dict)
    tokens: dict[str, set[str]] = field(default_factory=dict)    # token -> node ids
    entities: dict[str, set[str]] = field(default_factory=dict)  # entity id -> node ids
    observations: list[tuple[int, str]] = field(default_factory=list)  # (seq, id), ascending
    events: dict[str, int] = field(default_factory=dict)         # event id -> seq (every node)
    forgotten: dict[str, int] = field(default_factory=dict)      # event id -> seq, as the store has them
    ids: list[str] = field(default_factory=list)                 # row order of ``matrix``
    row_of: dict[str, int] = field(default_factory=dict)
    matrix: np.ndarray | None = None                             # float32 rows (zeros: no embedding)
    seqs: np.ndarray | None = None
    fresh: list[str] = field(default_factory=list)               # new ids not in ``matrix`` yet
    pending: dict[str, np.ndarray] = field(default_factory=dict)  # their embeddings
    #: node id -> its closest incoming semantic edge (None: it has none), for the last
    #: RECENT_LINKED nodes linked here
    incoming: OrderedDict[str, EdgeEvent | None] = field(default_factory=OrderedDict)

    def add(self, n: MemoryNode, vec: np.ndarray | None = None) -> None:
        """Hold ``n``; its embedding is ``n.embedding``, else ``vec`` (float32), else the one it had."""
        old = self.nodes.get(n.id)
        if old is not None:
            for t in set(old.tokens):
                self.tokens.get(t, set()).discard(n.id)
            for e in old.entities:
                self.entities.get(e.id, set()).discard(n.id)
            if old.kind == "observation":
                self.observations.remove((old.seq, old.id))
        else:
            self.fresh.append(n.id)
        row = self.row_of.get(n.id)
        if row is not None and self.seqs is not None:
            self.seqs[row] = n.seq  # a row changes in place
        if n.embedding is not None:
            vec = np.asarray(n.embedding, dtype=np.float32)
            n = n.without_embedding()
        if vec is not None:
            if row is not None and self.matrix is not None and self.matrix.shape[1] == len(vec):
                self.matrix[row] = vec
            else:
                self.pending[n.id] = vec
        self.nodes[n.id] = n
        self.events[n.event_id] = n.seq
        for t in set(n.tokens):
            self.tokens.setdefault(t, set()).add(n.id)
        for e in n.entities:
            self.entities.setdefault(e.id, set()).add(n.id)
        if n.kind == "observation":
            bisect.insort(self.observations, (n.seq, n.id))

    def index(self, dim: int) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Row ids (insertion order), the float32 embedding matrix and the seqs, with new nodes
        appended."""
        if self.matrix is None or self.seqs is None:
            self.matrix, self.seqs = np.zeros((0, dim), dtype=np.float32), np.zeros(0, dtype=np.int64)
        if self.fresh:
            rows = np.zeros((len(self.fresh), dim), dtype=np.float32)
            for i, nid in enumerate(self.fresh):
                v = self.pending.get(nid)
                if v is not None and len(v) == dim:
                    rows[i] = v
                self.row_of[nid] = len(self.ids) + i
            self.ids += self.fresh
            self.matrix = np.vstack([self.matrix, rows])
            self.seqs = np.concatenate([self.seqs, np.asarray([self.nodes[i].seq for i in self.fresh], dtype=np.int64)])
            self.fresh, self.pending = [], {}
        return self.ids, self.matrix, self.seqs

    def vector(self, nid: str) -> np.ndarray | None:
        """The node's embedding (float32), if it has one."""
        v = self.pending.get(nid)
        if v is not None:
            return v
        row = self.row_of.get(nid)
        if row is None or self.matrix is None:
            return None
        out = self.matrix[row]
        return out if out.any() else None


def _top(counts: Counter[str], nodes: dict[str, MemoryNode], before_seq: int, limit: int) -> list[str]:
    ranked = sorted(((c, nodes[i].seq, i) for i, c in counts.items() if nodes[i].seq < before_seq),
                    key=lambda t: (-t[0], -t[1], t[2]))
    return [i for _, _, i in ranked[:limit]]


class ScopeCache:
    """The in-memory conversations (see the module): a :class:`~topology.ports.MemoryReader`, a
    :class:`~storage.ports.SeqSource` and a :class:`~topology.ports.LinkMemory`, loading from
    ``nodes`` (:class:`~storage.ports.NodeReader`; with ``dim``, a :class:`~storage.ports.NodeRows`
    store loads a conversation in one scan, its embeddings as float32 rows)."""

    def __init__(self, nodes: NodeReader, max_nodes: int = MAX_NODES, dim: int | None = None) -> None:
        self._store = nodes
        self._rows = nodes if dim is not None and isinstance(nodes, NodeRows) else None
        self._dim = dim or 0
        self._max = max_nodes
        self._convs: OrderedDict[Scope, _Conversation] = OrderedDict()
        self._size = 0
        self._loading: dict[Scope, asyncio.Future[_Conversation]] = {}

    @property
    def max_nodes(self) -> int:
        return self._max

    @property
    def size(self) -> int:
        """Nodes held now, over every conversation in memory."""
        return self._size

    async def drop(self, scope: Scope) -> None:
        """Forget one conversation (after a forget deleted some of it; reloaded on next use)."""
        conv = self._convs.pop(scope, None)
        if conv is not None:
            self._size -= len(conv.nodes)

    def clear(self) -> None:
        """Forget every conversation (they are reloaded from the node store on next use)."""
        self._convs.clear()
        self._size = 0

    def _evict(self) -> None:
        while self._size > self._max and len(self._convs) > 1:
            _, conv = self._convs.popitem(last=False)
            self._size -= len(conv.nodes)

    async def _conv(self, scope: Scope) -> _Conversation:
        conv = self._convs.get(scope)
        if conv is not None:
            self._convs.move_to_end(scope)
            return conv
        pending = self._loading.get(scope)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[_Conversation] = asyncio.get_running_loop().create_future()
        self._loading[scope] = fut
        try:
            conv = _Conversation(forgotten=await self._store.forgotten(scope))
            if self._rows is not None:
                nodes, rows = await self._rows.scan_rows(scope, self._dim)
                for n, row in zip(nodes, rows, strict=True):
                    conv.add(n, row if row.any() else None)
            else:
                listed = await self._store.scan(scope)
                for i in range(0, len(listed), 500):
                    for n in await self._store.get(scope, [m.id for m in listed[i: i + 500]]):
                        conv.add(n)
            self._convs[scope] = conv
            self._size += len(conv.nodes)
            self._evict()
            fut.set_result(conv)
            return conv
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: a waiter re-raises it, nobody else must
            raise
        finally:
            del self._loading[scope]

    async def add(self, nodes: Sequence[MemoryNode]) -> None:
        """Nodes just materialised (acknowledged by the stores)."""
        for scope in dict.fromkeys(n.scope for n in nodes):
            conv = await self._conv(scope)
            before = len(conv.nodes)
            for n in nodes:
                if n.tenant_id == scope.tenant_id and n.conversation_id == scope.conversation_id:
                    conv.add(n)
            self._size += len(conv.nodes) - before
        self._evict()

    async def remember_links(self, nodes: Sequence[MemoryNode], edges: Sequence[EdgeEvent]) -> None:
        """``nodes`` were linked and ``edges`` are everything that linking wrote (the write path
        calls this after each chunk). Conversations not in memory are skipped."""
        strongest = closest_incoming(edges)
        for n in nodes:
            conv = self._convs.get(n.scope)
            if conv is None or n.kind != "observation":
                continue
            conv.incoming[n.id] = strongest.get(n.id)
            conv.incoming.move_to_end(n.id)
            while len(conv.incoming) > RECENT_LINKED:
                conv.incoming.popitem(last=False)

    def incoming(self, scope: Scope, ids: Sequence[str]) -> list[EdgeEvent] | None:
        """The closest semantic edge into each of ``ids`` that has one
        (:func:`~topology.stages.relations.consolidation_key`), when every id was linked by this process recently
        (:meth:`remember_links`); else None (read the store)."""
        conv = self._convs.get(scope)
        if conv is None or any(i not in conv.incoming for i in ids):
            return None
        return [e for i in ids if (e := conv.incoming[i]) is not None]

    # -- SeqSource ------------------------------------------------------------------------------

    async def seqs(self, scope: Scope, event_ids: Sequence[str]) -> dict[str, int]:
        conv = await self._conv(scope)
        return {e: conv.events[e] for e in event_ids if e in conv.events}

    async def next_seq(self, scope: Scope) -> int:
        conv = await self._conv(scope)
        return conv.observations[-1][0] + 1 if conv.observations else 0

    async def observation_count(self, scope: Scope) -> int:
        return len((await self._conv(scope)).observations)

    async def used_seqs(self, scope: Scope) -> list[int]:
        return [s for s, _ in (await self._conv(scope)).observations]

    async def forgotten(self, scope: Scope) -> dict[str, int]:
        return dict((await self._conv(scope)).forgotten)

    # -- MemoryReader -------------------------------------------------------------------------

    async def similar_before(self, scope: Scope, vector: Sequence[float], before_seq: int, limit: int) -> list[str]:
        return (await self.similar_before_many([(scope, vector, before_seq)], limit))[0]

    async def similar_before_many(self, queries: Sequence[tuple[Scope, Sequence[float], int]],
                                  limit: int) -> list[list[str]]:
        out: list[list[str]] = [[] for _ in queries]
        by_scope: dict[Scope, list[int]] = {}
        for q, (scope, _, _) in enumerate(queries):
            by_scope.setdefault(scope, []).append(q)
        for scope, qs in by_scope.items():
            conv = await self._conv(scope)
            asked = [q for q in qs if queries[q][1]]
            if not conv.nodes or not asked:
                continue
            ids, m, seqs = conv.index(len(queries[asked[0]][1]))
            # one product for every query of the conversation; scores rounded as stored features are
            scores = np.round(m.astype(np.float64) @ np.asarray([queries[q][1] for q in asked], dtype=np.float64).T, 6)
            for col, q in enumerate(asked):
                ok = np.flatnonzero(seqs < queries[q][2])
                order = ok[np.lexsort((-seqs[ok], -scores[ok, col]))][:limit]  # best first; ties: later first
                out[q] = [ids[j] for j in order.tolist()]
        return out

    async def overlapping_before(self, scope: Scope, tokens: Sequence[str], before_seq: int, limit: int) -> list[str]:
        conv = await self._conv(scope)
        counts: Counter[str] = Counter()
        for t in set(tokens):
            counts.update(conv.tokens.get(t, ()))
        return _top(counts, conv.nodes, before_seq, limit)

    async def sharing_entities_before(self, scope: Scope, entity_ids: Sequence[str], before_seq: int,
                                      limit: int) -> list[str]:
        conv = await self._conv(scope)
        counts: Counter[str] = Counter()
        for e in set(entity_ids):
            counts.update(conv.entities.get(e, ()))
        return _top(counts, conv.nodes, before_seq, limit)

    async def preceding(self, scope: Scope, before_seq: int, limit: int) -> list[str]:
        conv = await self._conv(scope)
        end = bisect.bisect_left(conv.observations, (before_seq, ""))
        return [nid for _, nid in reversed(conv.observations[max(0, end - limit): end])] if limit > 0 else []

    async def speaker_before(self, nodes: Sequence[MemoryNode], limit: int,
                             queries: Sequence[Sequence[float]]) -> list[list[tuple[MemoryNode, float]]]:
        """For each of ``nodes`` (same order): at most ``limit`` observations of its own
        conversation with an embedding, said by its speaker before it (a lower seq), with their
        dot product with ``queries[i]`` (float64 over the float32-exact embeddings), most similar
        first, ties by node id; the nodes without their embeddings (:meth:`embeddings` has them).
        A score depends only on the two vectors, not on what else the conversation holds or in
        which order it was loaded. This is what :class:`storage.speaker_facts.RealmSpeakerFacts`
        answers when a node's realm is its own conversation (its scores are the vector index's,
        which may differ in the last bits of the sum), read from memory instead of through a
        vector index and a node store."""
        out: list[list[tuple[MemoryNode, float]]] = []
        if limit <= 0:
            return [[] for _ in nodes]
        rows: dict[Scope, tuple[_Conversation, list[str], np.ndarray, np.ndarray, dict[str, np.ndarray]]] = {}
        for n, query in zip(nodes, queries, strict=True):
            if not len(query):
                out.append([])
                continue
            if n.scope not in rows:
                conv = await self._conv(n.scope)
                ids, m, seqs = conv.index(len(query))
                speakers: dict[str, list[int]] = {}
                for r, nid in enumerate(ids):
                    held = conv.nodes[nid]
                    if held.kind == "observation" and held.speaker and m[r].any():
                        speakers.setdefault(held.speaker, []).append(r)
                rows[n.scope] = (conv, ids, m.astype(np.float64), seqs,
                                 {k: np.asarray(v, dtype=np.int64) for k, v in speakers.items()})
            conv, ids, m64, seqs, by_speaker = rows[n.scope]
            mine = by_speaker.get(n.speaker or "")
            if mine is None:
                out.append([])
                continue
            mine = mine[seqs[mine] < n.seq]
            # each row's products summed on their own: a score does not depend on the row's place
            scores = (m64[mine] * np.asarray(query, dtype=np.float64)).sum(axis=1).tolist()
            best = sorted(zip(scores, mine.tolist(), strict=True), key=lambda sr: (-sr[0], ids[sr[1]]))[:limit]
            out.append([(conv.nodes[ids[r]], score) for score, r in best])
        return out

    async def get_nodes(self, scope: Scope, ids: Sequence[str]) -> list[MemoryNode]:
        """The nodes without their embeddings (:meth:`embeddings` has them)."""
        conv = await self._conv(scope)
        missing = [i for i in ids if i not in conv.nodes]
        extra = {n.id: n for n in await self._heads(scope, missing)} if missing else {}
        return [n for i in ids if (n := conv.nodes.get(i) or extra.get(i)) is not None]

    async def _heads(self, scope: Scope, ids: Sequence[str]) -> list[MemoryNode]:
        """The store's nodes ``ids`` without their vectors (read without them where the store can)."""
        if isinstance(self._store, NodeHeads):
            return await self._store.get_heads(scope, ids)
        return [n.without_embedding() for n in await self._store.get(scope, ids)]

    async def embeddings(self, scope: Scope, ids: Sequence[str], dim: int) -> np.ndarray:
        conv = await self._conv(scope)
        missing = [i for i in ids if i not in conv.nodes]
        extra = {n.id: n.embedding for n in await self._store.get(scope, missing)} if missing else {}
        m = np.zeros((len(ids), dim), dtype=np.float64)
        for row, i in enumerate(ids):
            v = conv.vector(i)
            if v is not None and len(v) == dim:
                m[row] = v
            elif extra.get(i):
                m[row] = extra[i]
        return m
