"""The strict doubles catch the transcripts reverie must never send (issue 10).

Each test drives a path that used to leave a thread with a tool call and no result (or repeated
call ids) and asserts that the next request is one a provider would accept. They are expected to
fail until the runtime writes a durable result for every call it ends without running.
"""

from __future__ import annotations

import asyncio

from reverie import Agent, Runtime, Scope, tool
from reverie.core.messages import ModelResponse, ToolCall, ToolCallPart
from reverie.testing import ScriptedModel, call, calls, reply

SCOPE = Scope(tenant="acme", user="ana")


class _Slow:
    """A tool that starts (setting an event) and then waits until cancelled."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

        @tool(effects=set())
        async def slow(x: int) -> int:
            """Wait a long time."""
            self.started.set()
            await asyncio.Event().wait()  # until the run is cancelled
            return x

        self.tool = slow


@tool(effects=set())
async def echo(x: int) -> int:
    """Return x."""
    return x


async def test_a_thread_whose_run_was_cancelled_mid_tool_stays_usable() -> None:
    slow = _Slow()
    model = ScriptedModel([call("slow", x=1), reply("back")])
    agent = Agent(name="a", model=model, tools=[slow.tool])
    async with Runtime.open(":memory:") as rt:
        handle = await rt.start(agent, "go", scope=SCOPE)
        await slow.started.wait()
        await handle.cancel()
        first = await handle.result()
        second = await rt.run(agent, "are you there?", scope=SCOPE, thread_id=first.thread_id)
    assert first.status == "cancelled"
    assert model.violations == []
    assert second.ok


async def test_steering_then_cancel_mid_wave_leaves_the_thread_usable() -> None:
    slow = _Slow()
    model = ScriptedModel([calls(("slow", {"x": 1}), ("echo", {"x": 2})), reply("back")])
    agent = Agent(name="a", model=model, tools=[slow.tool, echo])
    async with Runtime.open(":memory:") as rt:
        handle = await rt.start(agent, "go", scope=SCOPE)
        await slow.started.wait()
        await handle.steer("and then stop")
        await handle.cancel()
        first = await handle.result()
        second = await rt.run(agent, "are you there?", scope=SCOPE, thread_id=first.thread_id)
    assert first.status == "cancelled"
    assert model.violations == []
    assert second.ok


async def test_calls_sharing_one_provider_id_are_sent_back_well_formed() -> None:
    def same_id(x: int) -> ToolCallPart:
        return ToolCallPart(call=ToolCall(id="same", name="echo", arguments={"x": x}))

    wave = ModelResponse(parts=(same_id(1), same_id(2)), finish_reason="tool_calls")
    model = ScriptedModel([wave, reply("done")])
    async with Runtime.open(":memory:") as rt:
        result = await rt.run(Agent(name="a", model=model, tools=[echo]), "go", scope=SCOPE)
    assert model.violations == []
    assert result.ok
