"""Adapters from agent frameworks to the jevmem HTTP API (``jevmem.client``).

Each module needs its framework, installed with the matching extra: ``jevmem[langgraph]``
(:mod:`jevmem.integrations.langgraph`, a LangGraph ``BaseStore``), ``jevmem[langchain]``
(:mod:`jevmem.integrations.langchain`, a LangChain ``BaseRetriever``), ``jevmem[openai-agents]``
(:mod:`jevmem.integrations.openai_agents`, an OpenAI Agents SDK ``Session``).

Every adapter talks to a running ``jevmem serve`` with an API key; the key's tenant owns
everything the adapter writes. Writes are observations (the memory's canonical nodes); in the
distributed mode they are accepted by the broker first and readable once a worker wrote them.
"""
