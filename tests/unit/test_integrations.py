"""The framework adapters (``jevmem.integrations``) against a real HTTP server of the embedded
service, driven through each framework's own interface: LangGraph's ``BaseStore`` (and a compiled
graph that uses it), LangChain's ``BaseRetriever``, the OpenAI Agents SDK's ``Session``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import pytest
from agents.memory import Session
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

from jevmem.client import MemoryClient
from jevmem.integrations.langchain import JevmemRetriever
from jevmem.integrations.langgraph import JevmemStore, conversation_of, matches, namespace_of, text_of
from jevmem.integrations.openai_agents import JevmemSession
from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService
from query_api.auth import Authenticator, mint
from query_api.http import create_app
from storage.keys import SqliteKeyStore
from tests.conftest import serve_http
from topology.ports import Embedder


@dataclass
class Api:
    url: str
    keys: dict[str, str]


@pytest.fixture
def api(model_embedder: Embedder) -> Iterator[Api]:
    import asyncio

    store = SqliteKeyStore(":memory:")
    keys = {}
    for name, tenant in [("a", "acme"), ("b", "globex")]:
        keys[name], record = mint(tenant, ["ingest", "query", "admin"])
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
                    {"event_id": "e2", "content": "The marathon is in September", "speaker": "Ben"}], "chat-1")
    r = JevmemRetriever(base_url=api.url, api_key=api.keys["a"], top_k=2)
    docs = r.invoke("What is the puppy called?")
    assert docs[0].page_content == "I adopted a puppy named Biscuit"
    assert docs[0].metadata["conversation_id"] == "chat-1" and docs[0].metadata["speaker"] == "Ana"
    assert docs[0].metadata["prompt_line"] == "[recorded 2023-05-08] Ana: I adopted a puppy named Biscuit"
    assert [d.page_content for d in await r.ainvoke("What is the puppy called?")] == [d.page_content for d in docs]
    assert api.keys["a"] not in repr(r)  # the key is a secret


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
