"""docs/tools.md: ``@tool(inline=True)`` runs a sync function on the event loop thread."""

from __future__ import annotations

import threading
import time

import pytest

from reverie import Agent, Runtime, Scope, tool
from reverie.capabilities import ToolContext
from reverie.core.capability import CallCompleted, CallFailed
from reverie.errors import UsageError
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="acme", user="ana")


async def _thread_seen_by_a_run(inline: bool) -> int:
    seen: list[int] = []

    @tool(effects=set(), inline=inline)
    def where() -> str:
        """Report the thread."""
        seen.append(threading.get_ident())
        return "ok"

    agent = Agent(name="a", model=ScriptedModel([call("where"), reply("done")]), tools=[where])
    async with Runtime.open(":memory:") as rt:
        result = await rt.run(agent, "go", scope=SCOPE)
    assert result.status == "completed"
    assert len(seen) == 1
    return seen[0]


async def test_inline_sync_tool_runs_on_the_event_loop_thread() -> None:
    assert await _thread_seen_by_a_run(inline=True) == threading.get_ident()


async def test_sync_tool_still_runs_in_a_worker_thread_by_default() -> None:
    assert await _thread_seen_by_a_run(inline=False) != threading.get_ident()


def test_inline_on_an_async_function_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="inline=True is for sync functions"):

        @tool(inline=True)
        async def nope() -> None:
            """Async."""


async def test_inline_tool_failure_is_still_an_outcome(ctx: ToolContext) -> None:
    @tool(effects=set(), inline=True)
    def boom() -> None:
        """Fail."""
        raise ValueError("bad")

    assert await boom.invoke({}, ctx) == CallFailed(
        error_kind="internal", message="ValueError: bad"
    )


async def test_inline_tool_is_not_interrupted_by_its_timeout(ctx: ToolContext) -> None:
    # It holds the event loop, so the deadline cannot fire while it runs (docs/tools.md).
    @tool(effects=set(), inline=True, timeout_s=0.001)
    def slow() -> str:
        """Block longer than the timeout."""
        time.sleep(0.05)
        return "finished"

    assert await slow.invoke({}, ctx) == CallCompleted(output="finished")
