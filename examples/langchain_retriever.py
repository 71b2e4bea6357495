"""jevmem as a LangChain retriever in a retrieval chain (``jevmem.integrations.langchain``).

Runs offline: LangChain's fake chat model stands in for the LLM. Start a server first
(``jevmem serve``) and give an API key with the ingest and query scopes:

    JEVMEM_URL=http://127.0.0.1:8080 JEVMEM_API_KEY=jm_... python examples/langchain_retriever.py
"""

from __future__ import annotations

import os

from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough

from jevmem.client import MemoryClient
from jevmem.integrations.langchain import JevmemRetriever


def lines(docs: list[Document]) -> str:
    return "\n".join(d.metadata["prompt_line"] for d in docs)


def main() -> None:
    url, key = os.environ["JEVMEM_URL"], os.environ["JEVMEM_API_KEY"]
    with MemoryClient(url, key) as client:
        client.remember([{"event_id": "t1", "speaker": "Ana", "observed_at": "2023-05-08T10:00:00Z",
                          "content": "I start training for the Berlin marathon next week."}], "example-chat")
    retriever = JevmemRetriever(base_url=url, api_key=key, conversation_ids=["example-chat"], top_k=3)
    prompt = ChatPromptTemplate.from_template("Evidence:\n{evidence}\n\nQuestion: {question}")
    llm = FakeListChatModel(responses=["Ana trains for the Berlin marathon."])
    chain = {"evidence": retriever | RunnableLambda(lines), "question": RunnablePassthrough()} | prompt | llm
    print(chain.invoke("Which race is Ana training for?").content)


if __name__ == "__main__":
    main()
