"""A LangGraph ``BaseStore`` backed by jevmem: long-term memory for LangGraph agents.

Mapping (documented, reversible):

* A namespace ``("users", "ana", "memories")`` is the conversation
  ``"<prefix>:users.ana.memories"`` of the API key's tenant (``prefix`` default ``langgraph``;
  LangGraph forbids ``.`` in namespace labels, so the join is reversible). Only conversations under
  the prefix are namespaces: the tenant's other conversations are never listed or touched.
* The user: the namespace label at ``user_label`` (default 0, the first: LangGraph's
  ``(user_id, "memories")`` pattern; ``user_label=1`` for ``("users", user_id, ...)``; None for
  no user) is stamped as the ``user_id`` of every observation a put writes, so a recall of that
  user (``POST /v1/recall`` with ``user_id``, or another adapter given the same user) finds the
  user's LangGraph memories beside their other conversations. A namespace shorter than that has no
  user. The store's own ``search`` names its conversations and does not filter by user; a search
  with a query answers :class:`MemorySearchItem` s, which carry what the server knows of their
  currency (``superseded_by``, ``valid_from``, ``valid_until``).
* The speaker: a value with a ``"speaker"`` string (``{"content": "I moved to Lisbon", "speaker":
  "Ana"}``) is written as that person's own statement (the observation's ``speaker``, role
  ``user``), so the update judge compares it with that person's earlier statements, items of
  other keys and the user's other conversations included, and a search item it replaced carries
  ``superseded_by``. Without one, an item has no speaker and is compared with nothing (a replaced
  key is forgotten instead).
* An item is one observation: ``event_id`` = the item's key, the value kept whole in the node's
  metadata (``metadata["langgraph"]``, at most 16 KB as JSON), the searchable text from the fields
  named by ``index`` (dotted paths), else the value's ``content`` or ``text`` string, else the
  value as JSON. ``created_at`` and ``updated_at`` are the time of the latest put.
* ``put`` of a new key writes one observation (the ``ingest`` scope). ``put`` of an existing key
  replaces it: the old observation is forgotten, then the new one is written (it keeps its
  position in the conversation); ``put(..., None)`` and ``delete`` forget it. Forgetting needs
  the ``admin`` scope: without it, replacing or deleting an existing key raises
  :class:`AdminScopeRequired` (a 403 :class:`~jevmem.client.MemoryApiError`) and changes nothing,
  and deleting a missing key is a no-op. (A key without ``admin`` is found out by its first
  refused forget; from then on a put first reads the namespace to see whether the key exists.)
* ``search(prefix, query=...)`` is jevmem's recall over the namespaces under ``prefix`` (at most
  1,000 conversations: the API's cap), best first, with its score, at most 50 items
  (``offset + limit`` above that is a ``ValueError``, never a silently shorter page); without a
  query, the items in namespace then write order, paged by ``offset`` and ``limit``. ``filter``
  matches value fields: equality, or ``$eq``, ``$ne``,
  ``$gt``, ``$gte``, ``$lt``, ``$lte``.
* TTLs are not supported (``supports_ttl`` is False): memories are kept until forgotten.
* With an API key limited to users (``ingest`` and ``query``; ``admin`` to replace or delete),
  the store sees only its users' items: another user's namespace reads as empty (``get`` answers
  None, ``search`` nothing), as ``InMemoryStore`` answers for an item it does not hold.

Cost: ``get`` and an unqueried ``search`` read the whole conversation (one request each), and so
does a put with a key that lacks ``admin``.
Consistency: embedded, a put is readable when it returns; distributed, once a worker wrote it.
Event loops: the asyncio methods use a client per running loop, so one store serves several
``asyncio.run`` calls; ``aclose`` closes the running loop's client, ``close`` the blocking one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from jevmem.integrations import missing_extra

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
    )
except ModuleNotFoundError as exc:  # pragma: no cover - tested by simulating the missing module
    raise missing_extra(exc, "langgraph") from exc

from jevmem.client import MemoryApiError, MemoryClient
from jevmem.integrations._calls import LoopClients, Plan, arun, run

#: Conversations one recall may search (the API's cap on ``conversation_ids``).
MAX_NAMESPACES = 1000
#: Evidence one recall may return (the API's cap); a query asks for twice the page it needs, so
#: that derived memories and filtered-out items leave enough.
MAX_TOP_K = 50
_META = "langgraph"


class AdminScopeRequired(MemoryApiError):
    """Replacing or deleting an existing item forgets its old observation, which needs an API key
    with the ``admin`` scope; the key used lacks it. ``namespace`` and ``key`` name the item."""

    def __init__(self, namespace: tuple[str, ...], key: str) -> None:
        super().__init__(403, f"the item {key!r} in namespace {namespace!r} already exists: replacing or deleting it "
                              "forgets the old one, which needs an API key with the 'admin' scope, and this key "
                              "lacks it (a put of a new key needs only 'ingest')")
        self.namespace, self.key = namespace, key


def conversation_of(prefix: str, namespace: tuple[str, ...]) -> str:
    """The conversation id of ``namespace``."""
    if not namespace or any(not label or "." in label for label in namespace):
        raise ValueError(f"namespace labels must be non-empty and contain no '.': {namespace!r}")
    return f"{prefix}:{'.'.join(namespace)}"


def namespace_of(prefix: str, conversation_id: str) -> tuple[str, ...] | None:
    """The namespace of a conversation id, or None for a conversation outside ``prefix``."""
    head = f"{prefix}:"
    if not conversation_id.startswith(head) or len(conversation_id) == len(head):
        return None
    return tuple(conversation_id[len(head):].split("."))


def text_of(value: dict[str, Any], index: list[str] | None) -> str:
    """The searchable text of an item's value (see the module contract)."""
    if index:
        parts = []
        for path in index:
            v: Any = value
            for step in path.split("."):
                v = v.get(step) if isinstance(v, dict) else None
            if v is not None:
                parts.append(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))
        if parts:
            return "\n".join(parts)
    for field in ("content", "text"):
        if isinstance(value.get(field), str) and value[field].strip():
            return str(value[field])
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


_OPS = {"$eq": lambda a, b: a == b, "$ne": lambda a, b: a != b, "$gt": lambda a, b: a > b,
        "$gte": lambda a, b: a >= b, "$lt": lambda a, b: a < b, "$lte": lambda a, b: a <= b}


def _holds(have: Any, op: str, want: Any) -> bool:
    try:
        return bool(_OPS[op](have, want))
    except TypeError:  # e.g. a missing field compared with $gt
        return False


def matches(value: dict[str, Any], filter: dict[str, Any] | None) -> bool:
    """Whether ``value`` passes ``filter``: every field's condition holds (a plain value means
    ``$eq``; a dict of operators, each of them)."""
    for field, cond in (filter or {}).items():
        ops = cond.items() if isinstance(cond, dict) and cond and all(k in _OPS for k in cond) else [("$eq", cond)]
        if not all(_holds(value.get(field), op, want) for op, want in ops):
            return False
    return True


def _value(node: dict[str, Any]) -> dict[str, Any] | None:
    """The item value a node carries, or None (a node this adapter did not write, a derived node)."""
    meta = (node.get("metadata") or {}).get(_META)
    if node.get("kind") != "observation" or not isinstance(meta, dict) or not isinstance(meta.get("value"), dict):
        return None
    value: dict[str, Any] = meta["value"]
    return value


def _when(node: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(node["observed_at"]) if node.get("observed_at") else datetime.now(UTC)


def _item(namespace: tuple[str, ...], node: dict[str, Any]) -> Item | None:
    value = _value(node)
    if value is None:
        return None
    return Item(value=value, key=node["event_id"], namespace=namespace, created_at=_when(node), updated_at=_when(node))


class MemorySearchItem(SearchItem):
    """A :class:`SearchItem` with what the server knows of its currency: the ids of the memories
    that replaced it (``superseded_by``: empty while it holds) and when it held (``valid_from``,
    ``valid_until``: ISO times, None when unknown or still true), from a search with a query."""

    __slots__ = ("superseded_by", "valid_from", "valid_until")

    def __init__(self, namespace: tuple[str, ...], key: str, value: dict[str, Any], created_at: datetime,
                 updated_at: datetime, score: float | None = None, *, superseded_by: Sequence[str] = (),
                 valid_from: str | None = None, valid_until: str | None = None) -> None:
        super().__init__(namespace, key, value, created_at, updated_at, score=score)
        self.superseded_by = list(superseded_by)
        self.valid_from = valid_from
        self.valid_until = valid_until

    def dict(self) -> dict[str, Any]:
        return {**super().dict(), "superseded_by": self.superseded_by, "valid_from": self.valid_from,
                "valid_until": self.valid_until}


def _hit(namespace: tuple[str, ...], node: dict[str, Any], score: float | None,
         evidence: dict[str, Any] | None = None) -> SearchItem | None:
    value = _value(node)
    if value is None:
        return None
    ev = evidence or {}
    return MemorySearchItem(namespace, node["event_id"], value, _when(node), _when(node), score=score,
                            superseded_by=ev.get("superseded_by") or (), valid_from=ev.get("valid_from"),
                            valid_until=ev.get("valid_until"))


def _ns_matches(ns: tuple[str, ...], conditions: Sequence[MatchCondition] | None) -> bool:
    for c in conditions or ():
        path = tuple(c.path)
        part = ns[: len(path)] if c.match_type == "prefix" else ns[len(ns) - len(path):] if len(path) <= len(ns) else None
        if part is None or len(part) != len(path) or any(p != "*" and p != q for p, q in zip(path, part, strict=True)):
            return False
    return True


class JevmemStore(BaseStore):
    """``BaseStore`` over a running ``jevmem serve`` (``base_url``) with an API key that has the
    ``ingest`` and ``query`` scopes, and ``admin`` to replace or delete existing items.
    ``user_label``: which namespace label is the user (module contract). Thread-safe as httpx's
    clients are; :meth:`close` (or ``with``) and :meth:`aclose` release them."""

    supports_ttl = False

    def __init__(self, base_url: str, api_key: str, prefix: str = "langgraph", timeout: float = 60.0,
                 user_label: int | None = 0) -> None:
        if not prefix or ":" in prefix:
            raise ValueError("prefix must be non-empty and contain no ':'")
        if user_label is not None and user_label < 0:
            raise ValueError("user_label must be a namespace position (0 or more) or None")
        self.prefix, self.user_label = prefix, user_label
        self._client = MemoryClient(base_url, api_key, timeout)
        self._aclients = LoopClients(base_url, api_key, timeout)
        self._admin: bool | None = None  # whether the key may forget; None until a forget tells

    def __enter__(self) -> JevmemStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    async def aclose(self) -> None:
        await self._aclients.aclose()

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return [run(self._client, self._op(op)) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        client = await self._aclients.get()
        return [await arun(client, self._op(op)) for op in ops]

    def user_of(self, namespace: tuple[str, ...]) -> str | None:
        """The user a namespace belongs to (its label at ``user_label``), or None."""
        return namespace[self.user_label] if self.user_label is not None and len(namespace) > self.user_label else None

    # -- the operations, as plans of client calls ------------------------------------------------

    def _op(self, op: Op) -> Plan[Result]:
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, PutOp):
            return self._put(op)
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            return self._list(op)
        raise TypeError(f"unsupported store operation: {type(op).__name__}")

    def _get(self, op: GetOp) -> Plan[Result]:
        nodes = yield ("nodes", (conversation_of(self.prefix, op.namespace),))
        for node in nodes:
            if node.get("event_id") == op.key and (found := _item(op.namespace, node)) is not None:
                return found
        return None

    def _put(self, op: PutOp) -> Plan[Result]:
        conversation = conversation_of(self.prefix, op.namespace)
        yield from self._forget_old(op.namespace, op.key, conversation)
        if op.value is None:
            return None
        value = dict(op.value)
        index = None if op.index is None or op.index is False else list(op.index)
        item = {"event_id": op.key, "content": text_of(value, index), "role": "memory",
                "observed_at": datetime.now(UTC).isoformat(), "metadata": {_META: {"value": value}}}
        speaker = value.get("speaker")
        if isinstance(speaker, str) and speaker.strip():
            item["speaker"], item["role"] = speaker, "user"
        user = self.user_of(op.namespace)
        if user is not None:
            item["user_id"] = user
        report = yield ("remember", ([item], conversation))
        if report.get("rejected"):
            raise ValueError(f"jevmem refused the item {op.key!r}: {report.get('errors')}")
        return None

    def _forget_old(self, namespace: tuple[str, ...], key: str, conversation: str) -> Plan[None]:
        """Forget the key's observation if there is one (a missing key is not an error); raises
        :class:`AdminScopeRequired` when it exists and the API key may not forget."""
        denied: MemoryApiError | None = None
        if self._admin is not False:
            try:
                yield ("forget", (conversation, key))
                self._admin = True
                return None
            except MemoryApiError as exc:
                if exc.status != 403:
                    raise
                self._admin, denied = False, exc
        nodes = yield ("nodes", (conversation,))
        if not any(n.get("event_id") == key and n.get("kind") == "observation" for n in nodes):
            return None
        if denied is None:
            try:
                yield ("forget", (conversation, key))
                return None
            except MemoryApiError as exc:
                if exc.status != 403:
                    raise
                denied = exc
        raise AdminScopeRequired(namespace, key) from denied

    def _namespaces(self) -> Plan[list[tuple[str, ...]]]:
        convs = yield ("conversations", ())
        found = (namespace_of(self.prefix, c["conversation_id"]) for c in convs)
        return sorted(ns for ns in found if ns is not None)

    def _search(self, op: SearchOp) -> Plan[Result]:
        under = [ns for ns in (yield from self._namespaces()) if ns[: len(op.namespace_prefix)] == op.namespace_prefix]
        if op.query is None:
            items: list[SearchItem] = []
            for ns in under:
                for node in (yield ("nodes", (conversation_of(self.prefix, ns),))):
                    it = _hit(ns, node, None)
                    if it is not None and matches(it.value, op.filter):
                        items.append(it)
            return items[op.offset: op.offset + op.limit]
        if len(under) > MAX_NAMESPACES:
            raise ValueError(f"{len(under)} namespaces under {op.namespace_prefix!r}; a query searches at most "
                             f"{MAX_NAMESPACES}: give a longer prefix")
        if op.offset + op.limit > MAX_TOP_K:
            raise ValueError(f"a search with a query returns at most {MAX_TOP_K} items (the API's cap on top_k); "
                             f"offset {op.offset} + limit {op.limit} asks for more: page without a query, or ask less")
        if not under:
            return []
        by_conv = {conversation_of(self.prefix, ns): ns for ns in under}
        found = yield ("recall", (op.query, list(by_conv), min(MAX_TOP_K, 2 * max(1, op.offset + op.limit))))
        nodes: dict[str, dict[str, dict[str, Any]]] = {}
        out: list[SearchItem] = []
        for ev in found["evidence"]:
            conv = ev["conversation_id"]
            if conv not in nodes:
                nodes[conv] = {n["id"]: n for n in (yield ("nodes", (conv,)))}
            node = nodes[conv].get(ev["node_id"])
            it = _hit(by_conv[conv], node, float(ev["score"]), ev) if node is not None else None
            if it is not None and matches(it.value, op.filter):
                out.append(it)
        return out[op.offset: op.offset + op.limit]

    def _list(self, op: ListNamespacesOp) -> Plan[Result]:
        seen: list[tuple[str, ...]] = []
        for ns in (yield from self._namespaces()):
            if _ns_matches(ns, op.match_conditions):
                cut = ns[: op.max_depth] if op.max_depth is not None else ns
                if cut not in seen:
                    seen.append(cut)
        return seen[op.offset: op.offset + op.limit]
