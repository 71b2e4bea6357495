"""Where one retrieval reads: one conversation (:class:`ConversationReach`) or a realm of many
(:class:`RealmReach`: a tenant's conversations, one user's, or a list of them).

The retrieval controller (:mod:`query_api.retrieval.controller`) runs the same steps over either; a reach
turns its reads (anchor searches, node fetches, edge reads) into store calls:

* One conversation: every call is scoped by it, as the stores' ports are.
* A realm: anchors come from *one* vector search and *one* lexical search over the realm
  (:class:`~storage.ports.RealmSearch`), so candidates of every conversation compete in one
  ranking; a node's conversation is learned from the hit that found it (or from the edge that
  led to it: an edge is kept with its source's conversation), and fetches and edge reads go to
  each node's own conversation, concurrently. The one edge that may cross conversations is a
  ``supersedes`` edge from a user's later session to a memory of an earlier one, kept with the
  later session: a labelled read (:meth:`RealmReach.labelled`) asks every conversation of the
  given nodes about all of them. Conversations without a candidate are never read, so a realm
  may hold any number of conversations. A store that answers many reads in one call
  (:class:`~storage.ports.EdgeReads`, :class:`~storage.ports.NodeReads`,
  :class:`~storage.ports.NodeRowReads`: a server's one request instead of one a conversation) is
  asked once for all of a step's conversations.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from storage.ports import (
    EdgeReader,
    EdgeSession,
    EdgeSessions,
    Hit,
    LexicalIndex,
    NodeReader,
    NodeReads,
    NodeRowReads,
    NodeRows,
    RealmSearch,
    VectorSearch,
    reads_many,
    searches_realm,
)
from topology.errors import IncompatibleStore
from topology.schemas import EdgeEvent, MemoryNode, Realm, Scope, View


class Reach(Protocol):
    """The reads of one retrieval (see the module)."""

    async def lexical(self, text: str, limit: int) -> list[Hit]: ...

    async def vectors(self, vector: Sequence[float], limit: int) -> list[Hit]: ...

    async def rows(self, ids: Sequence[str], dim: int, edges_next: bool = False) -> tuple[list[MemoryNode], np.ndarray | None]:
        """The nodes ``ids`` (unknown ids skipped, in the order of ``ids``) and, when the node
        store has matrix reads (:class:`~storage.ports.NodeRows`), their retrieval rows (else
        None: the nodes carry their embeddings). ``edges_next``: the retrieval will read edges at
        these nodes; an edge store with sessions starts fetching them now."""
        ...

    async def neighbours(self, node_ids: Sequence[str], views: Sequence[View], limit: int) -> list[EdgeEvent]:
        """Edges of ``views`` touching ``node_ids``, strongest first, at most ``limit``."""
        ...

    async def labelled(self, node_ids: Sequence[str], views: Sequence[View], limit: int, label: str) -> list[EdgeEvent]:
        """The edges of :meth:`neighbours` labelled ``label``."""
        ...


class _Reads:
    """The stores a reach reads."""

    def __init__(self, vectors: VectorSearch, lexical: LexicalIndex, nodes: NodeReader, edges: EdgeReader) -> None:
        self._vec, self._lex, self._nodes = vectors, lexical, nodes
        self._row_reader: NodeRows | None = nodes if isinstance(nodes, NodeRows) else None
        self._row_reads: NodeRowReads | None = nodes if isinstance(nodes, NodeRowReads) else None
        #: one retrieval's edge session, when the store has them (:class:`~storage.ports.EdgeSessions`)
        self._session: EdgeSession | None = edges.session() if isinstance(edges, EdgeSessions) else None
        self._edges: EdgeReader = self._session if self._session is not None else edges

    @property
    def _with_rows(self) -> bool:
        """Whether node reads come without vectors, with retrieval rows."""
        return self._row_reader is not None or self._row_reads is not None

    async def _rows_of(self, scope: Scope, ids: Sequence[str], dim: int) -> tuple[list[MemoryNode], np.ndarray | None]:
        if self._row_reader is not None:
            return await self._row_reader.get_rows(scope, ids, dim)
        if self._row_reads is not None:
            return (await self._row_reads.get_rows_many([(scope, ids)], dim))[0]
        return await self._nodes.get(scope, ids), None


class ConversationReach(_Reads):
    """Every read scoped by one conversation (``scope``)."""

    def __init__(self, scope: Scope, vectors: VectorSearch, lexical: LexicalIndex, nodes: NodeReader,
                 edges: EdgeReader) -> None:
        super().__init__(vectors, lexical, nodes, edges)
        self.scope = scope

    async def lexical(self, text: str, limit: int) -> list[Hit]:
        return await self._lex.search(self.scope, text, limit)

    async def vectors(self, vector: Sequence[float], limit: int) -> list[Hit]:
        return await self._vec.search(self.scope, vector, limit)

    async def rows(self, ids: Sequence[str], dim: int, edges_next: bool = False) -> tuple[list[MemoryNode], np.ndarray | None]:
        if edges_next and self._session is not None:
            self._session.ahead([(self.scope, ids)])
        return await self._rows_of(self.scope, ids, dim)

    async def neighbours(self, node_ids: Sequence[str], views: Sequence[View], limit: int) -> list[EdgeEvent]:
        return await self._edges.neighbours(self.scope, node_ids, views, limit)

    async def labelled(self, node_ids: Sequence[str], views: Sequence[View], limit: int, label: str) -> list[EdgeEvent]:
        return await self._edges.labelled(self.scope, node_ids, views, limit, label)


def _realm_search(store: object, what: str) -> RealmSearch:
    if not searches_realm(store):
        raise IncompatibleStore(f"the {what} ({type(store).__name__}) cannot search across conversations")
    return store


class RealmReach(_Reads):
    """Reads over a :class:`~topology.schemas.Realm` (see the module). The vector and lexical
    stores must implement :class:`~storage.ports.RealmSearch`
    (:class:`~topology.errors.IncompatibleStore` otherwise)."""

    def __init__(self, realm: Realm, vectors: VectorSearch, lexical: LexicalIndex, nodes: NodeReader,
                 edges: EdgeReader) -> None:
        super().__init__(vectors, lexical, nodes, edges)
        self.realm = realm
        self._vec_realm, self._lex_realm = _realm_search(vectors, "vector index"), _realm_search(lexical, "lexical index")
        #: node id -> its conversation, for every node this reach has seen named
        self.conversation_of: dict[str, str] = {}
        self._scopes: dict[str, Scope] = {}
        #: conversation -> the ids read with ``edges_next`` there
        self._edges_next: dict[str, list[str]] = {}

    def _scope(self, conversation_id: str) -> Scope:
        scope = self._scopes.get(conversation_id)
        if scope is None:  # the realm's tenant and a conversation id a store named: valid as they are
            scope = self._scopes[conversation_id] = Scope.model_construct(tenant_id=self.realm.tenant_id,
                                                                           conversation_id=conversation_id)
        return scope

    def _learn(self, hits: Sequence[Hit]) -> list[Hit]:
        for h in hits:
            if h.conversation_id is not None:
                self.conversation_of.setdefault(h.id, h.conversation_id)
        return list(hits)

    def _by_conversation(self, ids: Sequence[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for i in dict.fromkeys(ids):
            conv = self.conversation_of.get(i)
            if conv is not None:
                out.setdefault(conv, []).append(i)
        return out

    async def lexical(self, text: str, limit: int) -> list[Hit]:
        return self._learn(await self._lex_realm.search_realm(self.realm, text, limit))

    async def vectors(self, vector: Sequence[float], limit: int) -> list[Hit]:
        return self._learn(await self._vec_realm.search_realm(self.realm, vector, limit))

    def _ahead(self, groups: dict[str, list[str]]) -> None:
        """Start the edge session fetching, for every conversation read with ``edges_next`` so
        far, the edges at every id read so (what :meth:`neighbours` and :meth:`labelled` of those
        ids will ask; the session skips what it holds)."""
        if self._session is None:
            return
        for conv, got in groups.items():
            self._edges_next.setdefault(conv, []).extend(got)
        every = [i for got in self._edges_next.values() for i in got]
        self._session.ahead([(self._scope(conv), every) for conv in self._edges_next])

    async def rows(self, ids: Sequence[str], dim: int, edges_next: bool = False) -> tuple[list[MemoryNode], np.ndarray | None]:
        groups = self._by_conversation(ids)
        if edges_next:
            self._ahead(groups)
        parts: Sequence[tuple[list[MemoryNode], np.ndarray | None]]
        if self._row_reader is None and self._row_reads is not None:  # one call for every conversation
            parts = await self._row_reads.get_rows_many([(self._scope(c), got) for c, got in groups.items()], dim)
        elif self._row_reader is None and isinstance(self._nodes, NodeReads):
            parts = [(nodes, None) for nodes in await self._nodes.get_many([(self._scope(c), got)
                                                                           for c, got in groups.items()])]
        else:
            parts = await asyncio.gather(*(self._rows_of(self._scope(c), got, dim) for c, got in groups.items()))
        found: dict[str, tuple[MemoryNode, np.ndarray | None]] = {}
        for nodes, rows in parts:
            for j, n in enumerate(nodes):
                if self.realm.holds(n):
                    found[n.id] = (n, None if rows is None else rows[j])
        kept = [found[i] for i in ids if i in found]
        nodes_out = [n for n, _ in kept]
        if not self._with_rows:
            return nodes_out, None
        matrix = np.stack([r for _, r in kept if r is not None]) if kept else np.zeros((0, dim), dtype=np.float32)
        return nodes_out, matrix.astype(np.float32, copy=False)

    async def _edges_by_conversation(self, groups: dict[str, list[str]], views: Sequence[View], limit: int,
                                     label: str | None) -> list[EdgeEvent]:
        """The edges of ``views`` (labelled ``label`` unless None) at the node ids of ``groups``
        (conversation -> ids read there), one read per conversation, most probable first."""

        async def one(conv: str, ids: list[str]) -> list[EdgeEvent]:
            if label is None:
                return await self._edges.neighbours(self._scope(conv), ids, views, limit)
            return await self._edges.labelled(self._scope(conv), ids, views, limit, label)

        if reads_many(self._edges):  # one call for every conversation
            parts = await self._edges.read_many([(self._scope(c), got) for c, got in groups.items()], views, limit,
                                                label)
        else:
            parts = await asyncio.gather(*(one(c, got) for c, got in groups.items()))
        edges = [e for part in parts for e in part]
        for e in edges:  # an edge is kept with its source's conversation; a node already placed stays there
            self.conversation_of.setdefault(e.source, e.conversation_id)
            self.conversation_of.setdefault(e.target, e.conversation_id)
        edges.sort(key=lambda e: -e.probability)
        return edges[:limit]

    async def neighbours(self, node_ids: Sequence[str], views: Sequence[View], limit: int) -> list[EdgeEvent]:
        return await self._edges_by_conversation(self._by_conversation(node_ids), views, limit, None)

    async def labelled(self, node_ids: Sequence[str], views: Sequence[View], limit: int, label: str) -> list[EdgeEvent]:
        """The edges labelled ``label`` at any of ``node_ids`` kept in any of their conversations
        (one read per conversation, with every id): a ``supersedes`` edge kept with a later
        session is found from the earlier memory it ends at when the pool holds a memory of that
        session."""
        conversations = self._by_conversation(node_ids)
        every = [i for got in conversations.values() for i in got]
        return await self._edges_by_conversation({conv: every for conv in conversations}, views, limit, label)
