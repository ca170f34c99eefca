"""A first run: an agent with one tool, a scripted model, the embedded SQLite store.

    python examples/quickstart.py

Swap ``ScriptedModel([...])`` for ``"openai:gpt-4.1-mini"`` (with OPENAI_API_KEY set) to talk to
a real model.
"""

from __future__ import annotations

import asyncio

from reverie import Agent, Runtime, Scope, tool
from reverie.testing import ScriptedModel, call, reply


@tool(effects=set())
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def main() -> None:
    agent = Agent(
        name="assistant",
        model=ScriptedModel([call("add", a=2, b=3), reply("2 + 3 = 5")]),
        instructions="You are helpful. Use tools for arithmetic.",
        tools=[add],
    )
    async with Runtime.open() as rt:  # SQLite under $REVERIE_HOME (default ~/.reverie)
        result = await rt.run(agent, "What is 2 + 3?", scope=Scope(tenant="demo", user="me"))
        print(f"{result.status}: {result.text}")
        print(f"run {result.run_id}: {result.usage}")


if __name__ == "__main__":
    asyncio.run(main())
