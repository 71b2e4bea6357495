"""An OpenAI Agents SDK session kept in jevmem (``jevmem.integrations.openai_agents``).

With a model configured, pass the session to the runner and the agent's history lives in jevmem:
``await Runner.run(agent, "What is my dog called?", session=session)``. This example runs offline:
it adds and reads items through the ``Session`` protocol, as the runner does, and recalls from the
history. Start a server first (``jevmem serve``), with a key that has ingest, query and admin:

    JEVMEM_URL=http://127.0.0.1:8080 JEVMEM_API_KEY=jm_... python examples/openai_agents_session.py
"""

from __future__ import annotations

import asyncio
import os

from jevmem.client import AsyncMemoryClient
from jevmem.integrations.openai_agents import JevmemSession


async def main() -> None:
    url, key = os.environ["JEVMEM_URL"], os.environ["JEVMEM_API_KEY"]
    session = JevmemSession("example-agent-session", url, key)
    try:
        await session.clear_session()
        await session.add_items([{"role": "user", "content": "My dog is called Biscuit."},
                                 {"role": "assistant", "content": "Biscuit is a lovely name!"}])
        for item in await session.get_items():
            print(item)
        async with AsyncMemoryClient(url, key) as client:
            found = await client.recall("What is the dog called?", ["example-agent-session"], 1)
            print("recalled:", found["evidence"][0]["content"])
    finally:
        await session.close()


if __name__ == "__main__":
    asyncio.run(main())
