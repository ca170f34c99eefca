"""Cancelling a run that another runtime (another worker) is advancing."""

from __future__ import annotations

import asyncio

from reverie import Agent, Runtime, Scope, tool
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.store.memory import MemoryStore
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="acme", user="ana")


async def test_cancel_from_another_runtime_reaches_the_worker_at_its_next_boundary() -> None:
    store = MemoryStore()
    started = asyncio.Event()
    release = asyncio.Event()

    @tool(effects={"read"})
    async def slow(step: int) -> str:
        """A slow read."""
        started.set()
        await release.wait()
        return f"step {step}"

    def script(request: ModelRequest) -> ModelResponse:
        done = sum(1 for m in request.messages if m.role == "tool")
        return call("slow", step=done) if done < 5 else reply("finished")

    agent = Agent(name="a", model=ScriptedModel(script), tools=[slow])
    async with Runtime(store, agents=[agent]) as worker, Runtime(store) as other:
        handle = await worker.start(agent, "go", scope=SCOPE)
        await started.wait()
        assert await other.cancel(handle.run_id) is None  # queued for the worker, no RunBusy
        release.set()
        result = await handle.result()
    assert result.status == "cancelled"
    assert (await store.get_run(handle.run_id)).status == "cancelled"
