"""The framework adapters (``jevmem.integrations``) against a real HTTP server of the embedded
service, driven through each framework's own interface: LangGraph's ``BaseStore`` (and a compiled
graph that uses it), LangChain's ``BaseRetriever`` and recall tool, the OpenAI Agents SDK's
``Session``; one object across several event loops, keys without ``admin``, users, and the error
an adapter's import gives without its extra."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import httpx
import pytest
from agents.memory import Session
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

from jevmem.client import AsyncMemoryClient, MemoryClient
from jevmem.integrations.langchain import NO_MEMORY, JevmemRecallTool, JevmemRetriever, documents
from jevmem.integrations.langgraph import (
    AdminScopeRequired,
    JevmemStore,
    MemorySearchItem,
    conversation_of,
    matches,
    namespace_of,
    text_of,
)
from jevmem.integrations.openai_agents import JevmemSession
from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService
from query_api.auth import Authenticator, mint
from query_api.http import create_app
from storage.keys import SqliteKeyStore
from tests.conftest import serve_http
from topology.ports import Embedder
from topology.schemas import Observation


@dataclass
class Api:
    url: str
    keys: dict[str, str]


@pytest.fixture
def api(model_embedder: Embedder) -> Iterator[Api]:
    store = SqliteKeyStore(":memory:")
    keys = {}
    for name, tenant, scopes, users in [("a", "acme", ["ingest", "query", "admin"], None),
                                        ("b", "globex", ["ingest", "query", "admin"], None),
                                        ("iq", "acme", ["ingest", "query"], None),
                                        ("ana", "acme", ["ingest", "query"], ["ana"]),  # least privilege
                                        ("ana_admin", "acme", ["ingest", "query", "admin"], ["ana"])]:
        keys[name], record = mint(tenant, scopes, users=users)
        asyncio.run(store.create(record))
    service = EmbeddedService(Settings(), embedder=model_embedder, data_dir=":memory:")
    with serve_http(create_app(service, Authenticator(store, cache_seconds=0))) as url:
        yield Api(url, keys)


def test_namespace_and_text_mapping_is_reversible_and_documented() -> None:
    conv = conversation_of("langgraph", ("users", "ana", "memories"))
    assert conv == "langgraph:users.ana.memories"
    assert namespace_of("langgraph", conv) == ("users", "ana", "memories")
    assert namespace_of("langgraph", "locomo-26") is None and namespace_of("langgraph", "langgraph:") is None
    with pytest.raises(ValueError):
        conversation_of("langgraph", ("a.b",))
    assert text_of({"content": "likes tea", "n": 1}, None) == "likes tea"
    assert text_of({"food": {"fav": "ramen"}, "x": 2}, ["food.fav", "missing"]) == "ramen"
    assert text_of({"n": 1}, None) == '{"n": 1}'
    assert matches({"n": 3, "k": "a"}, {"n": {"$gt": 2, "$lte": 3}, "k": "a"})
    assert not matches({"n": 3}, {"n": {"$lt": 3}}) and not matches({}, {"n": {"$gt": 1}})
    assert matches({"k": "a"}, {"k": {"$ne": "b"}})


def test_langgraph_store_put_get_search_list_delete(api: Api) -> None:
    with JevmemStore(api.url, api.keys["a"]) as store, MemoryClient(api.url, api.keys["a"]) as plain:
        assert isinstance(store, BaseStore)
        plain.remember([{"event_id": "x", "content": "not a langgraph memory"}], "other-conversation")
        ns = ("users", "ana", "memories")
        store.put(ns, "pet", {"content": "Ana adopted a golden retriever puppy named Biscuit", "kind": "pet", "n": 1})
        store.put(ns, "food", {"content": "Ana's favourite food is ramen, she cooks it on Sundays", "kind": "food", "n": 2})
        store.put(("users", "ben", "memories"), "run", {"content": "Ben trains for the Berlin marathon", "n": 3})
        got = store.get(ns, "pet")
        assert got is not None and got.value["kind"] == "pet" and got.key == "pet" and got.namespace == ns
        assert store.get(ns, "missing") is None

        hits = store.search(("users", "ana"), query="What is the name of Ana's dog?", limit=2)
        assert hits and hits[0].key == "pet" and hits[0].score is not None
        assert {h.namespace for h in store.search(("users",), query="marathon training", limit=5)} >= {("users", "ben", "memories")}
        with pytest.raises(ValueError, match="at most 50 items"):  # said, not a silently shorter page
            store.search(("users",), query="marathon training", offset=40, limit=20)
        # without a query: namespace order, then write order
        assert [h.key for h in store.search(("users",), filter={"n": {"$gte": 2}})] == ["food", "run"]
        assert [h.key for h in store.search(ns, filter={"kind": "food"})] == ["food"]

        assert store.list_namespaces() == [("users", "ana", "memories"), ("users", "ben", "memories")]
        assert store.list_namespaces(prefix=("users", "ben")) == [("users", "ben", "memories")]
        assert store.list_namespaces(max_depth=2) == [("users", "ana"), ("users", "ben")]

        store.put(ns, "pet", {"content": "Biscuit learned to sit", "kind": "pet", "n": 5})  # replaces
        replaced = store.get(ns, "pet")
        assert replaced is not None and replaced.value["n"] == 5
        assert sum(1 for h in store.search(ns) if h.key == "pet") == 1
        store.delete(ns, "food")
        assert store.get(ns, "food") is None
    with JevmemStore(api.url, api.keys["b"]) as other:  # another tenant sees none of it
        assert other.list_namespaces() == [] and other.get(ns, "pet") is None


async def test_langgraph_store_async_and_inside_a_compiled_graph(api: Api) -> None:
    store = JevmemStore(api.url, api.keys["a"])

    class State(TypedDict):
        user: str
        said: str
        recalled: list[str]

    def remember(state: State, *, store: BaseStore) -> dict[str, Any]:
        store.put(("chat", state["user"]), "turn-1", {"content": state["said"]})
        return {}

    def recall(state: State, *, store: BaseStore) -> dict[str, Any]:
        return {"recalled": [h.value["content"] for h in store.search(("chat", state["user"]), query="pets", limit=1)]}

    graph = (StateGraph(State).add_node("remember", remember).add_node("recall", recall)
             .add_edge(START, "remember").add_edge("remember", "recall").add_edge("recall", END)
             .compile(store=store))
    try:
        out = graph.invoke({"user": "ana", "said": "My puppy Biscuit chews everything", "recalled": []})
        assert out["recalled"] == ["My puppy Biscuit chews everything"]
        await store.aput(("chat", "ana"), "turn-2", {"content": "I bought chew toys"})
        item = await store.aget(("chat", "ana"), "turn-2")
        assert item is not None and item.value == {"content": "I bought chew toys"}
        assert [i.key for i in await store.asearch(("chat",))] == ["turn-1", "turn-2"]
        assert await store.alist_namespaces() == [("chat", "ana")]
        await store.adelete(("chat", "ana"), "turn-1")
        assert [i.key for i in await store.asearch(("chat",))] == ["turn-2"]
    finally:
        store.close()
        await store.aclose()


async def test_langchain_retriever_returns_documents_sync_and_async(api: Api) -> None:
    with MemoryClient(api.url, api.keys["a"]) as c:
        c.remember([{"event_id": "e1", "content": "I adopted a puppy named Biscuit", "speaker": "Ana",
                     "observed_at": "2023-05-08T10:00:00Z"},
                    {"event_id": "e2", "content": "The marathon is in September", "speaker": "Ben"},
                    {"event_id": "e3", "content": "I ran ten miles yesterday", "speaker": "Ben",
                     "observed_at": "2023-06-02T09:00:00Z"}], "chat-1")
        server = c.recall("What is the puppy called?", None, 2, format="prompt")
        ran = c.recall("How far did Ben run?", None, 1, format="prompt")
    r = JevmemRetriever(base_url=api.url, api_key=api.keys["a"], top_k=2)
    docs = r.invoke("What is the puppy called?")
    assert docs[0].page_content == "I adopted a puppy named Biscuit"
    assert docs[0].metadata["conversation_id"] == "chat-1" and docs[0].metadata["speaker"] == "Ana"
    assert docs[0].metadata["prompt_line"] == "[recorded 2023-05-08] Ana: I adopted a puppy named Biscuit"
    assert [d.metadata["prompt_line"] for d in docs] == server["lines"]  # the server's lines
    assert [d.page_content for d in await r.ainvoke("What is the puppy called?")] == [d.page_content for d in docs]
    assert api.keys["a"] not in repr(r)  # the key is a secret
    dated = JevmemRetriever(base_url=api.url, api_key=api.keys["a"], conversation_ids=["chat-1"], top_k=1)
    [doc] = dated.invoke("How far did Ben run?")
    assert doc.metadata["prompt_line"] == ran["lines"][0] == \
        '[recorded 2023-06-02; event 2023-06-01 ("yesterday")] Ben: I ran ten miles yesterday'


def test_a_superseded_memory_is_a_document_with_its_validity() -> None:
    """Read from the answer's fields, never from display lines: a superseded memory stays, with
    what superseded it, when it stopped being current, and the server's line for it."""
    old = {"node_id": "n1", "conversation_id": "c", "event_id": "e1", "content": "I live in Lyon", "speaker": "Ana",
           "score": 0.4, "relevance": 0.4, "via": "anchor", "seq": 0, "observed_at": "2023-05-08T10:00:00Z",
           "event_time": None, "temporal_refs": [], "provenance": {}, "superseded_by": ["I moved to Paris"],
           "valid_until": "2023-07-01T09:00:00Z", "valid_from": None}
    new = {**old, "node_id": "n2", "event_id": "e2", "content": "I moved to Paris", "seq": 1, "score": 0.9,
           "observed_at": "2023-07-01T09:00:00Z", "superseded_by": [], "valid_until": None,
           "valid_from": "2023-07-01T09:00:00Z"}
    docs = documents({"evidence": [new, old]})
    assert [d.page_content for d in docs] == ["I moved to Paris", "I live in Lyon"]
    assert docs[1].metadata["superseded_by"] == ["I moved to Paris"]
    assert docs[1].metadata["valid_until"] == "2023-07-01T09:00:00Z" and docs[0].metadata["valid_from"]
    assert docs[1].metadata["prompt_line"] == \
        "[recorded 2023-05-08] Ana: I live in Lyon (superseded on 2023-07-01 by: I moved to Paris)"


async def test_langchain_recall_tool_returns_the_servers_prompt_text(api: Api) -> None:
    with MemoryClient(api.url, api.keys["a"]) as c:
        c.remember([{"event_id": "t1", "content": "My sister Lena lives in Oslo", "speaker": "Ana",
                     "observed_at": "2023-05-08T10:00:00Z"}], "tool-chat", user_id="ana")
        c.remember([{"event_id": "t2", "content": "My sister Mia lives in Rome", "speaker": "Bo"}], "tool-chat-bo",
                   user_id="bo")
        server = c.recall("Where does the sister live?", None, 3, user_id="ana", format="prompt")
    tool = JevmemRecallTool(base_url=api.url, api_key=api.keys["a"], user_id="ana", top_k=3)
    assert isinstance(tool, BaseTool) and tool.name == "recall_memory" and set(tool.args) == {"question"}
    text = tool.invoke({"question": "Where does the sister live?"})
    assert text == server["text"] and text.startswith("[recorded 2023-05-08] Ana: My sister Lena lives in Oslo")
    assert "Rome" not in text  # only ana's memory
    assert await tool.ainvoke({"question": "Where does the sister live?"}) == text
    nobody = JevmemRecallTool(base_url=api.url, api_key=api.keys["a"], user_id="nobody")
    assert nobody.invoke({"question": "Where does the sister live?"}) == NO_MEMORY
    only_bo = JevmemRetriever(base_url=api.url, api_key=api.keys["a"], conversation_ids=["tool-chat-bo"], top_k=3)
    assert {d.metadata["conversation_id"] for d in only_bo.invoke("Where does the sister live?")} == {"tool-chat-bo"}
    by_user = JevmemRetriever(base_url=api.url, api_key=api.keys["a"], user_id="bo", top_k=3)
    assert [d.page_content for d in by_user.invoke("Where does the sister live?")] == ["My sister Mia lives in Rome"]


async def test_openai_agents_session_round_trips_items_in_order(api: Api) -> None:
    s = JevmemSession("agent-session-1", api.url, api.keys["a"])
    try:
        assert isinstance(s, Session)
        assert await s.get_items() == [] and await s.pop_item() is None
        items: list[Any] = [{"role": "user", "content": "My dog is called Biscuit"},
                            {"role": "assistant", "content": [{"type": "output_text", "text": "Nice name!"}]},
                            {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{\"q\": \"dog\"}"},
                            {"type": "function_call_output", "call_id": "c1", "output": "a golden retriever"}]
        await s.add_items(items[:2])
        await s.add_items(items[2:])
        assert await s.get_items() == items
        assert await s.get_items(limit=2) == items[2:]
        latest = JevmemSession("agent-session-1", api.url, api.keys["a"], session_settings={"limit": 3})
        try:  # the SDK's session settings: a default limit, which an explicit one overrides
            assert await latest.get_items() == items[1:] and await latest.get_items(limit=1) == items[3:]
        finally:
            await latest.close()
        assert await s.pop_item() == items[-1]
        assert await s.get_items() == items[:3]
        with MemoryClient(api.url, api.keys["a"]) as c:  # the history is memory: recall finds it
            assert c.recall("What is the dog called?", ["agent-session-1"], 1)["evidence"][0]["content"] == \
                "My dog is called Biscuit"
        with pytest.raises(ValueError):
            await s.add_items([{"role": "user", "content": "x" * 20_000}])
        await s.clear_session()
        assert await s.get_items() == []
    finally:
        await s.close()


async def test_openai_agents_session_keeps_tool_items_out_of_recall_unless_asked(api: Api) -> None:
    question = "What is the name of my dog?"
    items: list[Any] = [{"role": "user", "content": "My dog is called Biscuit"},
                        {"type": "function_call", "call_id": "c1", "name": "search_memory",
                         "arguments": json.dumps({"query": question})},
                        {"type": "function_call_output", "call_id": "c1", "output": f"no memory for: {question}"},
                        {"type": "reasoning", "id": "r1", "summary": []},
                        {"role": "assistant", "content": [{"type": "output_text", "text": "Your dog is Biscuit."}]}]
    plain = JevmemSession("tools-hidden", api.url, api.keys["a"])
    asked = JevmemSession("tools-shown", api.url, api.keys["a"], searchable_tool_items=True)
    try:
        for s in (plain, asked):
            await s.add_items(items[:2])
            await s.add_items(items[2:])
            assert await s.get_items() == items  # history is whole, in order, either way
        found = await plain.recall(question, top_k=10)
        said = {"My dog is called Biscuit", "Your dog is Biscuit."}
        assert found["evidence"] and {e["content"] for e in found["evidence"]} <= said
        assert all(e["conversation_id"] == "tools-hidden" for e in found["evidence"])
        with MemoryClient(api.url, api.keys["a"]) as c:
            assert [n["event_id"] for n in c.nodes("tools-hidden")] and len(c.nodes("tools-hidden")) == 2
            assert len(c.nodes(plain.tools_conversation)) == 3 and not any(
                n["recall"] for n in c.nodes(plain.tools_conversation))
            # not even a recall over the whole tenant, with no filter, returns them
            tenant = c.recall(question, top_k=20)
            assert tenant["evidence"] and all(e["conversation_id"] != plain.tools_conversation
                                              for e in tenant["evidence"])
        shown = await asked.recall(question, top_k=10)
        assert any(e["content"].startswith("search_memory(") for e in shown["evidence"])
        assert await plain.pop_item() == items[-1] and await plain.pop_item() == items[-2]
        assert await plain.get_items() == items[:3]
        await plain.clear_session()
        assert await plain.get_items() == []
        with MemoryClient(api.url, api.keys["a"]) as c:
            assert c.nodes(plain.tools_conversation) == []
    finally:
        await plain.close()
        await asked.close()


def test_one_store_and_one_session_serve_two_event_loops(api: Api) -> None:
    store = JevmemStore(api.url, api.keys["a"])
    session = JevmemSession("loops", api.url, api.keys["a"])

    async def turn(n: int) -> list[Any]:
        await store.aput(("loops", "ana"), f"k{n}", {"content": f"fact number {n}"})
        await session.add_items([{"role": "user", "content": f"turn {n}"}])
        assert [i.key for i in await store.asearch(("loops",))] == [f"k{i}" for i in range(1, n + 1)]
        return await session.get_items()

    try:
        assert asyncio.run(turn(1)) == [{"role": "user", "content": "turn 1"}]
        assert asyncio.run(turn(2)) == [{"role": "user", "content": "turn 1"}, {"role": "user", "content": "turn 2"}]
        assert asyncio.run(turn(3))[-1] == {"role": "user", "content": "turn 3"}
        # each loop's client was closed as its asyncio.run ended
        assert store._aclients._by_loop == {} and session._clients._by_loop == {}
    finally:
        store.close()


def test_langgraph_put_of_a_new_key_needs_only_ingest(api: Api) -> None:
    ns = ("ana", "memories")
    with JevmemStore(api.url, api.keys["iq"]) as store:
        store.put(ns, "pet", {"content": "Ana has a cat called Miso"})
        store.put(ns, "food", {"content": "Ana likes ramen"})  # after the first refused forget: a read first
        with pytest.raises(AdminScopeRequired, match="'admin' scope") as refused:
            store.put(ns, "pet", {"content": "Ana has a dog"})
        assert refused.value.status == 403 and refused.value.key == "pet" and refused.value.namespace == ns
        with pytest.raises(AdminScopeRequired, match="'admin' scope"):
            store.delete(ns, "food")
        store.delete(ns, "never-written")  # nothing to forget: no error
        got = store.get(ns, "pet")
        assert got is not None and got.value == {"content": "Ana has a cat called Miso"}  # unchanged

    async def async_put() -> None:
        fresh = JevmemStore(api.url, api.keys["iq"])
        await fresh.aput(ns, "drink", {"content": "Ana drinks tea"})
        with pytest.raises(AdminScopeRequired):
            await fresh.aput(ns, "drink", {"content": "Ana drinks coffee"})
        fresh.close()

    asyncio.run(async_put())
    with JevmemStore(api.url, api.keys["a"]) as admin:  # an admin key replaces
        admin.put(ns, "pet", {"content": "Ana has a dog"})
        assert [h.value["content"] for h in admin.search(ns) if h.key == "pet"] == ["Ana has a dog"]


async def test_users_langgraph_namespace_and_session_user_id(api: Api) -> None:
    store = JevmemStore(api.url, api.keys["a"])  # the first label is the user
    shared = JevmemStore(api.url, api.keys["a"], prefix="lgusers", user_label=None)
    ana = JevmemSession("ana-session-2", api.url, api.keys["a"], user_id="ana")
    bo = JevmemSession("bo-session-1", api.url, api.keys["a"], user_id="bo")
    try:
        await store.aput(("ana", "memories"), "home", {"content": "Ana lives in a houseboat in Amsterdam"})
        await store.aput(("bo", "memories"), "home", {"content": "Bo lives in a houseboat in Utrecht"})
        shared.put(("ana", "memories"), "x", {"content": "a houseboat note without a user"})
        await ana.add_items([{"role": "user", "content": "I repainted my houseboat green"},
                             {"type": "function_call", "call_id": "c", "name": "recall", "arguments": "{}"}])
        await bo.add_items([{"role": "user", "content": "I repainted my houseboat blue"}])
        async with AsyncMemoryClient(api.url, api.keys["a"]) as c:
            [node] = await c.nodes(conversation_of("langgraph", ("ana", "memories")))
            assert node["user_id"] == "ana"
            assert [n["user_id"] for n in await c.nodes(conversation_of("lgusers", ("ana", "memories")))] == [None]
            assert [n["user_id"] for n in await c.nodes("ana-session-2")] == ["ana"]
        found = await ana.recall("Where is the houseboat?", top_k=10)
        assert {e["conversation_id"] for e in found["evidence"]} == {"ana-session-2", "langgraph:ana.memories"}
        lines = await bo.recall("Where is the houseboat?", top_k=10, format="prompt")
        assert any(line.endswith("user: I repainted my houseboat blue") for line in lines["lines"])
        assert "Utrecht" in lines["text"] and "green" not in lines["text"] and "Amsterdam" not in lines["text"]
    finally:
        store.close()
        shared.close()
        await store.aclose()
        await shared.aclose()
        await ana.close()
        await bo.close()


async def test_every_adapter_works_with_a_key_limited_to_its_user(api: Api) -> None:
    """A key limited to the user an adapter serves (``ingest`` and ``query``; ``admin`` only to
    replace or delete) writes and reads that user's memory through each adapter, new namespaces
    and sessions included, and sees nothing of anyone else's."""
    with MemoryClient(api.url, api.keys["a"]) as whole:  # someone else's memory in the same tenant
        whole.remember([{"event_id": "b1", "content": "My dog is called Rex", "user_id": "ben"}], "langgraph:ben.memories")
    store = JevmemStore(api.url, api.keys["ana"])
    admin = JevmemStore(api.url, api.keys["ana_admin"])
    session = JevmemSession("ana-fresh", api.url, api.keys["ana"], user_id="ana")
    try:
        assert store.get(("ana", "fresh"), "pet") is None  # a new namespace reads as empty
        store.put(("ana", "fresh"), "pet", {"content": "I adopted a golden retriever named Biscuit"})
        got = store.get(("ana", "fresh"), "pet")
        assert got is not None and got.value["content"].endswith("Biscuit")
        with pytest.raises(AdminScopeRequired):
            store.put(("ana", "fresh"), "pet", {"content": "I adopted a cat"})
        assert store.get(("ben", "memories"), "b1") is None and store.search(("ben",)) == []  # not hers: nothing
        admin.put(("ana", "fresh"), "pet", {"content": "I adopted a cat named Miso"})
        assert [i.value["content"] for i in admin.search(("ana",))] == ["I adopted a cat named Miso"]

        assert await session.get_items() == []  # the first run of a new session
        said: list[Any] = [{"role": "user", "content": "My favourite tea is sencha"},
                           {"type": "function_call_output", "call_id": "c1", "output": "Tea shop: green tea on sale"}]
        await session.add_items(said)
        assert await session.get_items() == said
        found = await session.recall("What tea do I like?", top_k=5)
        assert found["evidence"][0]["content"] == "My favourite tea is sencha"
        # the tool item carries the key's user, and stays out of her recall all the same
        assert all(e["conversation_id"] != session.tools_conversation for e in found["evidence"]), found["evidence"]

        retriever = JevmemRetriever(base_url=api.url, api_key=api.keys["ana"], user_id="ana", top_k=5)
        docs = await retriever.ainvoke("What is my pet called?")
        assert "I adopted a cat named Miso" in [d.page_content for d in docs]
        assert all("Rex" not in d.page_content for d in docs)
        await retriever.aclose()
        admin.delete(("ana", "fresh"), "pet")
        assert store.get(("ana", "fresh"), "pet") is None
    finally:
        store.close()
        admin.close()
        await session.close()


def test_a_langgraph_search_item_carries_its_currency(api: Api) -> None:
    """A search with a query answers MemorySearchItems with what the server knows of each item's
    currency: here a memory that superseded another in the user's conversation, and one still true."""
    ns = ("ana", "memories")
    with MemoryClient(api.url, api.keys["a"]) as c:  # the user's own words, in the store's conversation
        c.remember([{"event_id": "home", "content": "I live in Porto, near the old bridge.", "speaker": "Ana",
                     "user_id": "ana", "observed_at": "2024-03-01T10:00:00Z",
                     "metadata": {"langgraph": {"value": {"content": "I live in Porto"}}}},
                    {"event_id": "move", "content": "I just moved to Lisbon, the new flat is tiny.", "speaker": "Ana",
                     "user_id": "ana", "observed_at": "2024-06-01T10:00:00Z",
                     "metadata": {"langgraph": {"value": {"content": "I moved to Lisbon"}}}}],
                   conversation_of("langgraph", ns))
    with JevmemStore(api.url, api.keys["a"]) as store:
        found = {h.key: h for h in store.search(("ana",), query="Where does Ana live?", limit=5)}
    home, move = found["home"], found["move"]
    assert isinstance(home, MemorySearchItem) and isinstance(move, MemorySearchItem)
    assert home.superseded_by and home.valid_until is not None
    assert move.superseded_by == [] and move.valid_until is None
    assert home.dict()["superseded_by"] == home.superseded_by


def test_langgraph_items_with_a_speaker_are_judged_for_updates(api: Api) -> None:
    """A value naming its speaker is that person's statement: a later item of another key, in
    another of the user's namespaces, that replaces it supersedes it; items without one do not."""
    with JevmemStore(api.url, api.keys["a"]) as store:
        store.put(("ana", "memories"), "home", {"content": "I live in Porto, near the old bridge.", "speaker": "Ana"})
        store.put(("ana", "profile"), "move", {"content": "I just moved to Lisbon, the new flat is tiny.",
                                               "speaker": "Ana"})
        store.put(("bo", "memories"), "home", {"content": "I live in Porto, near the old bridge."})
        store.put(("bo", "memories"), "move", {"content": "I just moved to Lisbon, the new flat is tiny."})
        ana = {h.key: h for h in store.search(("ana",), query="Where does Ana live?", limit=5)}
        bo = {h.key: h for h in store.search(("bo",), query="Where does Bo live?", limit=5)}
        got = store.get(("ana", "memories"), "home")
    assert isinstance(ana["home"], MemorySearchItem) and ana["home"].superseded_by
    assert ana["home"].valid_until is not None and ana["move"].superseded_by == []
    assert bo["home"].superseded_by == [] and bo["move"].superseded_by == []  # no speaker: compared with nothing
    assert got is not None and got.value == {"content": "I live in Porto, near the old bridge.", "speaker": "Ana"}


def test_the_client_sends_user_id_and_format_only_as_given() -> None:
    seen: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json={"accepted": 1, "rejected": 0, "errors": []})

    with MemoryClient("http://jevmem.test", "k", transport=httpx.MockTransport(answer)) as c:
        c.recall("q")
        c.recall("q", ["c1"], 3, user_id="ana", format="prompt")
        c.query("c1", "q", format="prompt")
        c.remember([{"event_id": "e", "content": "x"}, {"event_id": "f", "content": "y", "user_id": "bo"}], "c1",
                   user_id="ana")
        c.remember([Observation(tenant_id="t", conversation_id="c1", event_id="g", content="z")])
    assert seen[0] == {"question": "q", "top_k": 10, "format": "json"}
    assert seen[1] == {"question": "q", "top_k": 3, "format": "prompt", "conversation_ids": ["c1"], "user_id": "ana"}
    assert seen[2]["format"] == "prompt"
    assert [i["user_id"] for i in seen[3]] == ["ana", "bo"]
    assert "user_id" not in seen[4][0] and "tenant_id" not in seen[4][0]


@pytest.mark.parametrize("adapter, missing, extra", [
    ("jevmem.integrations.langgraph", "langgraph.store.base", "langgraph"),
    ("jevmem.integrations.langchain", "langchain_core.callbacks", "langchain"),
    ("jevmem.integrations.openai_agents", "agents.items", "openai-agents"),
])
def test_an_adapter_without_its_extra_names_the_extra(monkeypatch: pytest.MonkeyPatch, adapter: str, missing: str,
                                                      extra: str) -> None:
    monkeypatch.delitem(sys.modules, adapter)
    monkeypatch.setitem(sys.modules, missing, None)  # as if the framework were not installed
    with pytest.raises(ImportError, match=re.escape(f"pip install '.[{extra}]' in the jevmem checkout")) as err:
        importlib.import_module(adapter)
    assert isinstance(err.value, ModuleNotFoundError) and err.value.name == missing
    assert extra in pyproject()["project"]["optional-dependencies"]


def pyproject() -> dict[str, Any]:
    return tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())


@pytest.mark.parametrize("example, expected", [
    ("langgraph_agent.py", "Your dog is called Biscuit."),
    ("langchain_retriever.py", "Ana trains for the Berlin marathon."),
    ("openai_agents_session.py", "recalled: My dog is called Biscuit."),
])
def test_the_examples_run_offline_against_a_server(api: Api, example: str, expected: str) -> None:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(root / "examples" / example)], capture_output=True, text=True,
                         timeout=120, cwd=root, env={**os.environ, "JEVMEM_URL": api.url, "JEVMEM_API_KEY": api.keys["a"]})
    assert out.returncode == 0, out.stderr
    assert expected in out.stdout
    if example == "langgraph_agent.py":  # the memory is the namespace's user's: a recall for "ana" finds it
        from jevmem.client import MemoryClient

        with MemoryClient(api.url, api.keys["a"]) as client:
            found = client.recall("What is my dog called?", None, 5, user_id="ana")
        assert any("Biscuit" in ev["content"] for ev in found["evidence"]), found
