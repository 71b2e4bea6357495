"""Every storage port, small ones, and the records they carry (search hits, API key records, wrapped data keys).
Every memory call is scoped by tenant and conversation.

An adapter implements the whole port of its store (:class:`NodeStore`, :class:`EdgeStore`,
:class:`VectorIndex`, ...); a caller asks only for the part it uses (:class:`NodeReader`,
:class:`SeqSource`, :class:`EdgeReader`, :class:`VectorSearch`, ...). In-memory fakes of the node
and edge stores and the dead-letter sink are in :mod:`storage.memory`.

Writes are idempotent upserts keyed by deterministic ids; a write returns only once the store
has acknowledged it (so a caller may commit its input offset afterwards).

Deletes (forgetting, see ``streams.forget``) are idempotent too: deleting what is already gone is
a no-op, and they return once acknowledged and invisible to every later read. ``delete(scope,
ids)`` only ever touches the scope's records; ``delete_scope(scope)`` removes all of them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol, TypeGuard, get_args, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict

from topology.schemas import ConsolidationDecision, DeadLetter, EdgeEvent, Ident, MemoryNode, Realm, Scope, View


@dataclass(frozen=True)
class Hit:
    """A search result: a node id and its score; ``conversation_id`` names the node's
    conversation in the answers of realm searches (None from a search of one conversation)."""

    id: str
    score: float
    conversation_id: str | None = None


class RealmSearch(Protocol):
    """Search over a :class:`~topology.schemas.Realm` (a tenant's nodes, or one user's, or some
    conversations'): one ranking over all of them, not one per conversation. Implemented by the
    vector indexes (dot product with the retrieval vectors, as :meth:`VectorSearch.search`) and
    the lexical indexes (BM25 over the tenant's statistics, as :meth:`LexicalIndex.search`)."""

    async def search_realm(self, realm: Realm, query: Sequence[float] | str, limit: int) -> list[Hit]:
        """The realm's best ``limit`` nodes for ``query`` (a vector for a vector index, a text for
        a lexical index), best first, each hit naming its conversation. Ties: earlier seq, then id."""
        ...


def searches_realm(store: object) -> TypeGuard[RealmSearch]:
    """Whether ``store`` implements :class:`RealmSearch` (has a callable ``search_realm``)."""
    return callable(getattr(store, "search_realm", None))


class RealmSearches(Protocol):
    """Many vector realm searches in one request (a vector server, where each request costs a round
    trip): :meth:`RealmSearch.search_realm` for each query, the same hits in the same order."""

    async def search_realms(self, queries: Sequence[tuple[Realm, Sequence[float]]], limit: int) -> list[list[Hit]]:
        """For each ``(realm, vector)`` of ``queries``, in order: the realm's best ``limit`` hits."""
        ...


def searches_realms(store: object) -> TypeGuard[RealmSearches]:
    """Whether ``store`` implements :class:`RealmSearches` (has a callable ``search_realms``)."""
    return callable(getattr(store, "search_realms", None))


class VectorSearch(Protocol):
    async def search(self, scope: Scope, vector: Sequence[float], limit: int, before_seq: int | None = None) -> list[Hit]:
        """Nodes by the dot product of ``vector`` with their retrieval vectors
        (:meth:`~topology.schemas.MemoryNode.retrieval_vector`: the cosine for a node without a
        context vector), best first; ``before_seq`` keeps only earlier nodes."""
        ...


class VectorIndex(VectorSearch, Protocol):
    async def upsert(self, nodes: Sequence[MemoryNode]) -> None:
        """Index each node's embedding (nodes without one are skipped)."""
        ...

    async def delete(self, scope: Scope, ids: Sequence[str]) -> None:
        """Remove the vectors of nodes ``ids`` of ``scope`` (unknown ids are ignored)."""
        ...

    async def delete_scope(self, scope: Scope) -> None:
        """Remove every vector of ``scope``."""
        ...

    async def close(self) -> None: ...


class LexicalIndex(Protocol):
    async def upsert(self, nodes: Sequence[MemoryNode]) -> None: ...

    async def search(self, scope: Scope, text: str, limit: int) -> list[Hit]:
        """BM25 ranking of the scope's nodes for ``text``, best first."""
        ...

    async def overlapping(self, scope: Scope, tokens: Sequence[str], before_seq: int, limit: int) -> list[str]:
        """Earlier nodes sharing the most distinct content tokens (ties: latest first)."""
        ...

    async def delete(self, scope: Scope, ids: Sequence[str]) -> None:
        """Remove the lexical entries (BM25 rows, token postings) of nodes ``ids`` of ``scope``."""
        ...

    async def delete_scope(self, scope: Scope) -> None:
        """Remove every lexical entry of ``scope``."""
        ...

    async def close(self) -> None: ...


class NodeReader(Protocol):
    """What the read path and the write path's in-memory conversations read of a scope's nodes."""

    async def get(self, scope: Scope, ids: Sequence[str]) -> list[MemoryNode]:
        """Nodes (with embeddings) in the order of ``ids``; unknown ids are skipped."""
        ...

    async def scan(self, scope: Scope) -> list[MemoryNode]:
        """All nodes of the scope by seq (without embeddings)."""
        ...

    async def forgotten(self, scope: Scope) -> dict[str, int]:
        """event_id -> seq of the scope's forgotten observations."""
        ...


@runtime_checkable
class NodeReads(Protocol):
    """Many node reads in one call (optional): a realm reads the nodes of many conversations of
    one tenant, which a server store answers in one request instead of one a conversation."""

    async def get_many(self, reads: Sequence[tuple[Scope, Sequence[str]]],
                       vectors: bool = True) -> list[list[MemoryNode]]:
        """For each ``(scope, ids)`` of ``reads``, what :meth:`NodeReader.get` returns for it
        (``vectors`` False: the nodes without their vectors, :meth:`NodeHeads.get_heads`), in
        the order of ``reads``."""
        ...


@runtime_checkable
class NodeRowReads(Protocol):
    """Many row reads in one call (optional): a realm's reads of many conversations, each answered
    as :meth:`NodeRows.get_rows` answers it, which a server store makes one request."""

    async def get_rows_many(self, reads: Sequence[tuple[Scope, Sequence[str]]],
                            dim: int) -> list[tuple[list[MemoryNode], np.ndarray]]:
        """For each ``(scope, ids)`` of ``reads``, in order, what :meth:`NodeRows.get_rows` returns
        for it: the nodes without their vectors and their float32 retrieval rows."""
        ...


@runtime_checkable
class NodeHeads(Protocol):
    """A node store that can read nodes without their vectors (optional): for a caller that
    filters many nodes by their fields and needs the vectors of a few of them."""

    async def get_heads(self, scope: Scope, ids: Sequence[str]) -> list[MemoryNode]:
        """The nodes :meth:`NodeReader.get` gives for ``ids`` (same order), without their vectors."""
        ...


@runtime_checkable
class NodeRows(Protocol):
    """A node store that can read nodes without building their embeddings as Python lists: the
    read path needs an embedding only as a matrix row (optional; the embedded store has it)."""

    async def get_rows(self, scope: Scope, ids: Sequence[str], dim: int) -> tuple[list[MemoryNode], np.ndarray]:
        """The nodes :meth:`NodeReader.get` gives for ``ids`` (same order), without their vectors,
        and a float32 ``(len(nodes), dim)`` matrix whose row ``j`` is node ``j``'s retrieval vector
        (:meth:`~topology.schemas.MemoryNode.retrieval_vector`, as :mod:`topology.vectors` computes
        it; zeros for a node without an embedding of width ``dim``): what the read path ranks by."""
        ...

    async def scan_rows(self, scope: Scope, dim: int) -> tuple[list[MemoryNode], np.ndarray]:
        """:meth:`NodeReader.scan` with the nodes' embeddings (not their retrieval vectors: the
        write path builds the graph from embeddings) as float32 rows."""
        ...


class SeqSource(Protocol):
    """What seq assignment (``streams.write_path.number``) reads of a scope: the node store, or
    the write path's in-memory copy of it (:class:`storage.scope_cache.ScopeCache`); both answer
    the same for a scope this process writes."""

    async def seqs(self, scope: Scope, event_ids: Sequence[str]) -> dict[str, int]:
        """event_id -> seq for the events already stored."""
        ...

    async def next_seq(self, scope: Scope) -> int:
        """One past the largest observation seq of the scope (0 when empty). Forgotten events'
        seqs are not counted here: see :meth:`forgotten` (``streams.write_path.number`` merges them)."""
        ...

    async def observation_count(self, scope: Scope) -> int:
        """Number of observation nodes of the scope (== ``next_seq`` unless a seq is unused)."""
        ...

    async def used_seqs(self, scope: Scope) -> list[int]:
        """Every observation seq of the scope, ascending (read only when there are holes)."""
        ...

    async def forgotten(self, scope: Scope) -> dict[str, int]:
        """event_id -> seq of the scope's forgotten observations."""
        ...


class EarlierNodes(Protocol):
    """Candidate discovery's store reads that are not vector or lexical searches."""

    async def sharing_entities_before(self, scope: Scope, entity_ids: Sequence[str], before_seq: int,
                                      limit: int) -> list[str]:
        """Ids of the latest nodes before ``before_seq`` mentioning any of ``entity_ids``."""
        ...

    async def preceding(self, scope: Scope, before_seq: int, limit: int) -> list[str]:
        """Ids of the ``limit`` observation nodes right before ``before_seq``, latest first."""
        ...


class NodeWriter(Protocol):
    async def upsert(self, nodes: Sequence[MemoryNode]) -> None: ...


class NodeEraser(Protocol):
    """What forgetting (``streams.forget``) writes to the node store."""

    async def delete(self, scope: Scope, ids: Sequence[str]) -> int:
        """Remove nodes ``ids`` of ``scope``; returns how many existed."""
        ...

    async def delete_scope(self, scope: Scope) -> int:
        """Remove every node of ``scope``, then its forgotten-event records (so the conversation
        can start again at seq 0); returns the number of nodes removed."""
        ...

    async def record_forgotten(self, scope: Scope, event_id: str, seq: int) -> None:
        """Keep ``(event_id, seq)`` of a forgotten observation so its seq is never handed to another
        event (idempotent)."""
        ...


class NodeStore(NodeReader, SeqSource, EarlierNodes, NodeWriter, NodeEraser, Protocol):
    """Every node-store port: what an adapter implements (callers ask for the small ones)."""

    async def conversations(self, tenant_id: str, users: Collection[str] | None = None) -> list[tuple[str, int]]:
        """The tenant's conversations that hold nodes, with their node counts, by conversation id;
        with ``users``, those holding a node that carries one of them as its ``user_id``, with the
        count of those nodes."""
        ...

    async def close(self) -> None: ...


class EdgeReads(Protocol):
    """Many edge reads in one call (a realm reads each of its conversations; an embedded store
    answers them in one pass without a coroutine each): for each ``(scope, node_ids)`` of
    ``reads``, what :meth:`EdgeReader.neighbours` (``label`` None) or :meth:`EdgeReader.labelled`
    would return, in the order of ``reads``."""

    async def read_many(self, reads: Sequence[tuple[Scope, Sequence[str]]], views: Sequence[View], limit: int,
                        label: str | None) -> list[list[EdgeEvent]]: ...


class EdgeSession(EdgeReads, Protocol):
    """The edge reads of one retrieval, sharing what they fetch (see :class:`EdgeSessions`): each
    answers as the store's :meth:`EdgeReader.neighbours`, :meth:`EdgeReader.labelled` and
    :meth:`EdgeReads.read_many` answer."""

    def ahead(self, reads: Sequence[tuple[Scope, Sequence[str]]]) -> None:
        """Start fetching, in the background, what reads at ``reads``' node ids in their
        conversations need; a later read waits for it instead of asking again. A failure is
        raised by the next read."""
        ...

    async def neighbours(self, scope: Scope, node_ids: Sequence[str], views: Sequence[View], limit: int) -> list[EdgeEvent]: ...

    async def labelled(self, scope: Scope, node_ids: Sequence[str], views: Sequence[View], limit: int,
                       label: str) -> list[EdgeEvent]: ...


@runtime_checkable
class EdgeSessions(Protocol):
    """An edge store whose reads for one retrieval can share what they fetch (optional): a server
    store, whose every read is a request, fetches what a retrieval's next reads need while it
    reads the nodes they start from, and asks once for what several reads need."""

    def session(self) -> EdgeSession:
        """A new session: for one retrieval, not to be kept (it sees the store as of its fetches)."""
        ...


def reads_many(store: object) -> TypeGuard[EdgeReads]:
    """Whether ``store`` implements :class:`EdgeReads` (has a callable ``read_many``)."""
    return callable(getattr(store, "read_many", None))


class EdgeReader(Protocol):
    async def neighbours(self, scope: Scope, node_ids: Sequence[str], views: Sequence[View], limit: int) -> list[EdgeEvent]:
        """Edges of ``views`` touching any of ``node_ids`` (either end), strongest first."""
        ...

    async def labelled(self, scope: Scope, node_ids: Sequence[str], views: Sequence[View], limit: int,
                       label: str) -> list[EdgeEvent]:
        """The edges of :meth:`neighbours` (same arguments) labelled ``label``, in its order (the
        limit counts every edge, as there); a store may skip decoding the others."""
        ...


class EdgeStore(EdgeReader, Protocol):
    async def upsert(self, edges: Sequence[EdgeEvent]) -> None: ...

    async def scan(self, scope: Scope) -> list[EdgeEvent]: ...

    async def upsert_decisions(self, decisions: Sequence[ConsolidationDecision]) -> None: ...

    async def decisions(self, scope: Scope) -> list[ConsolidationDecision]: ...

    async def delete(self, scope: Scope, node_ids: Sequence[str]) -> int:
        """Remove every edge of ``scope`` touching any of ``node_ids`` (either end); returns the count."""
        ...

    async def delete_scope(self, scope: Scope) -> int:
        """Remove every edge of ``scope``; returns the count."""
        ...

    async def delete_edges(self, scope: Scope, node_id: str, edge_ids: Sequence[str]) -> int:
        """Remove the edges of ``scope`` with one of ``edge_ids`` that touch ``node_id`` (either
        end); returns the count."""
        ...

    async def conversations_touching(self, tenant_id: str, node_ids: Sequence[str]) -> list[str]:
        """The tenant's conversations holding an edge that touches any of ``node_ids`` (either
        end), sorted: where a forget must look besides the nodes' own conversation (an update edge
        is kept with the newer turn's conversation, which may be another of the user's)."""
        ...

    async def delete_decisions(self, scope: Scope, node_ids: Sequence[str]) -> int:
        """Remove the scope's consolidation decisions whose ``left``, ``right`` or
        ``derived_node_id`` is one of ``node_ids``; returns the count."""
        ...

    async def delete_scope_decisions(self, scope: Scope) -> int:
        """Remove every consolidation decision of ``scope``; returns the count."""
        ...

    async def close(self) -> None: ...


class DeadLetterSink(Protocol):
    async def put(self, letters: Sequence[DeadLetter]) -> None:
        """Keep ``letters``; returns once they are durable."""
        ...

    async def recent(self, limit: int = 100, tenant_id: str | None = None) -> list[DeadLetter]:
        """The newest ``limit`` letters, oldest first; only ``tenant_id``'s when given (letters
        whose tenant is unknown are then never listed)."""
        ...

    async def forget(self, scope: Scope, event_id: str | None) -> int:
        """Delete the letters that name ``scope`` (and ``event_id``, unless None); the count. A
        sink that cannot delete (a topic) returns 0: its letters are sealed under keys the forget
        destroys (``streams.keyring``)."""
        ...


ApiScope = Literal["ingest", "query", "admin"]
"""What an API key may do (``query_api.auth`` checks it per endpoint and tool)."""
SCOPES: tuple[ApiScope, ...] = get_args(ApiScope)


class ApiKeyRecord(BaseModel):
    """What a key store keeps of a key: never the key, only its salted scrypt hash."""

    model_config = ConfigDict(frozen=True)

    key_id: str
    tenant_id: Ident
    scopes: list[ApiScope]
    salt: str
    hash: str
    created_at: datetime
    revoked_at: datetime | None = None
    label: str = ""
    #: the users this key may act for (None: every user of the tenant; see ``query_api.auth``)
    users: list[Ident] | None = None


class KeyStore(Protocol):
    """Where API key records live (``storage.keys``: SQLite embedded, Elasticsearch distributed);
    records survive store generations and replays."""

    async def create(self, record: ApiKeyRecord) -> None: ...

    async def get(self, key_id: str) -> ApiKeyRecord | None: ...

    async def list(self, tenant_id: str | None = None) -> list[ApiKeyRecord]:
        """Records, oldest first; only ``tenant_id``'s when given."""
        ...

    async def revoke(self, key_id: str) -> bool:
        """Mark the key revoked (idempotent); False when there is no such key."""
        ...

    async def close(self) -> None: ...


class WrappedKey(BaseModel):
    """A data key as stored: never in the clear."""

    model_config = ConfigDict(frozen=True)

    kid: str
    tenant_id: str
    conversation_id: str
    node_id: str | None = None
    kek_id: str
    wrapped: str
    created_at: float  # seconds since the epoch


class DataKeyStore(Protocol):
    """Where wrapped data keys live (``storage.datakeys``: SQLite embedded, Elasticsearch
    distributed). The records belong to the log (a topic prefix), not to a store generation."""

    async def put(self, keys: Sequence[WrappedKey]) -> None:
        """Keep ``keys`` (durable when this returns; a record with the same id is replaced)."""
        ...

    async def get(self, kids: Sequence[str]) -> list[WrappedKey]:
        """The records of ``kids`` that exist (destroyed or unknown ones are simply absent)."""
        ...

    async def destroy(self, scope: Scope, node_ids: Sequence[str] | None, before: float) -> int:
        """Delete the scope's keys made at or before ``before`` (seconds since the epoch): every
        one when ``node_ids`` is None, else those protecting one of ``node_ids``; the count."""
        ...

    async def of_nodes(self, scope: Scope, node_ids: Sequence[str]) -> list[WrappedKey]:
        """Every key of the scope protecting one of ``node_ids`` (a node's observation may have
        been produced more than once, each time with a key of its own)."""
        ...

    async def kek_ids(self) -> set[str]:
        """The fingerprints of the key-encryption keys that wrap some stored key."""
        ...

    async def wrapped_by(self, kek_id: str, limit: int) -> list[WrappedKey]:
        """Up to ``limit`` records wrapped by ``kek_id`` (a rotation re-wraps them in pages)."""
        ...

    async def close(self) -> None: ...
