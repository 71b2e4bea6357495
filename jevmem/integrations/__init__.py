"""Adapters from agent frameworks to the jevmem HTTP API (``jevmem.client``).

Each module needs its framework, installed with the matching extra: ``jevmem[langgraph]``
(:mod:`jevmem.integrations.langgraph`, a LangGraph ``BaseStore``), ``jevmem[langchain]``
(:mod:`jevmem.integrations.langchain`, a LangChain ``BaseRetriever`` and a recall tool),
``jevmem[openai-agents]`` (:mod:`jevmem.integrations.openai_agents`, an OpenAI Agents SDK
``Session``); ``jevmem[integrations]`` installs all three. Importing a module without its extra
raises ``ModuleNotFoundError`` (an ``ImportError``) whose message names the extra to install.

Every adapter talks to a running ``jevmem serve`` with an API key; the key's tenant owns
everything the adapter writes. Writes are observations (the memory's canonical nodes); in the
distributed mode they are accepted by the broker first and readable once a worker wrote them.
Adapters with asyncio methods keep a client per event loop, so one adapter object works across
several ``asyncio.run`` calls (and loops in several threads).

Users: an observation may carry a ``user_id`` and recall may search one user's memory across all
of their conversations. Each adapter maps its framework's notion of the user (see each module).
"""

from __future__ import annotations


def missing_extra(exc: ModuleNotFoundError, extra: str) -> ModuleNotFoundError:
    """The error to raise (``from exc``) when an adapter's framework cannot be imported: it names
    the missing module and the extra that installs it."""
    return ModuleNotFoundError(
        f"jevmem's {extra} adapter needs the {extra} extra (missing module {exc.name!r}): "
        f"pip install '.[{extra}]' in the jevmem checkout, or 'jevmem-VERSION-py3-none-any.whl[{extra}]' "
        "for a built wheel", name=exc.name)
