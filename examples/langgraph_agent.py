"""A LangGraph agent whose long-term memory is jevmem (``jevmem.integrations.langgraph``).

Runs offline: LangChain's fake chat model stands in for the LLM. Start a server first
(``jevmem serve``) and give an API key with the ingest, query and admin scopes:

    JEVMEM_URL=http://127.0.0.1:8080 JEVMEM_API_KEY=jm_... python examples/langgraph_agent.py
"""

from __future__ import annotations

import os
from typing import Any, TypedDict

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

from jevmem.integrations.langgraph import JevmemStore


class State(TypedDict):
    user: str
    message: str
    answer: str


llm = FakeListChatModel(responses=["Your dog is called Biscuit."])


def remember(state: State, *, store: BaseStore) -> dict[str, Any]:
    """Keep what the user said as a memory of the user's namespace."""
    store.put((state["user"], "memories"), f"msg-{abs(hash(state['message']))}", {"content": state["message"]})
    return {}


def respond(state: State, *, store: BaseStore) -> dict[str, Any]:
    """Recall the user's memories relevant to the message and answer with them in the prompt."""
    hits = store.search((state["user"], "memories"), query=state["message"], limit=3)
    context = "\n".join(f"- {h.value['content']}" for h in hits)
    reply = llm.invoke(f"Memories:\n{context}\n\nUser: {state['message']}")
    return {"answer": str(reply.content)}


def main() -> None:
    with JevmemStore(os.environ["JEVMEM_URL"], os.environ["JEVMEM_API_KEY"]) as store:
        graph = (StateGraph(State).add_node("remember", remember).add_node("respond", respond)
                 .add_edge(START, "remember").add_edge("remember", "respond").add_edge("respond", END)
                 .compile(store=store))
        graph.invoke({"user": "ana", "message": "I adopted a golden retriever named Biscuit", "answer": ""})
        out = graph.invoke({"user": "ana", "message": "What is my dog called?", "answer": ""})
        print(out["answer"])
        for hit in store.search(("ana", "memories"), query="dog", limit=2):
            print(f"{hit.score:.3f} {hit.value['content']}")


if __name__ == "__main__":
    main()
