"""A tool round trip against a real model server (llama-cpp-python serving SmolLM2-135M).

The tiny model never chooses a tool by itself, so its first request forces one by name
(``ModelRequest.tool_choice``, which llama-cpp-python honours with a grammar); everything else —
the adapter, the stream of a tool call, the journal, the request that carries the call and its
result back — is the real path. The server refuses an assistant message whose ``content`` is
null (HTTP 500, "7 validation errors"), which is what a tool call without text used to send.
"""

from __future__ import annotations

import pytest

from real_model.llama_support import ForceFirstTool, LlamaServer
from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.models.registry import resolve_model

pytestmark = pytest.mark.real_model

SCOPE = Scope(tenant="acme", user="ana")
ADDED: list[tuple[int, int]] = []


@tool(effects=set())
def add(a: int, b: int) -> int:
    """Add two integers."""
    ADDED.append((a, b))
    return a + b


async def test_a_tool_round_trip_completes_against_a_real_server(llama: LlamaServer) -> None:
    ADDED.clear()
    agent = Agent(
        name="smol",
        model=ForceFirstTool(resolve_model(llama.spec), "add"),
        instructions="Use the add tool, then answer with the sum.",
        tools=[add],
        limits=Limits(max_model_calls=4),
    )
    async with Runtime.open(":memory:") as rt:
        result = await rt.run(agent, "What is 2 + 3?", scope=SCOPE)
        rows = await rt.store.thread_items(result.thread_id)
    assert result.status == "completed", result.exit
    assert len(ADDED) == 1  # the call ran once, with whatever integers the model chose
    assert result.usage.capability_calls == 1
    assert result.usage.model_calls == 2  # the forced call, then a reply after its result
    assert [r.role for r in rows][:3] == ["user", "assistant", "tool"]
