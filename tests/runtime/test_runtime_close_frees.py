"""A closed runtime is no reference cycle: dropping it frees it and its store's rows at once,
with the cyclic collector off (runtime/tasks.py); a run in flight keeps its runtime alive."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest

from reverie import Agent, Runtime, Scope, tool
from reverie.hooks import CapabilityHookContext
from reverie.store.memory import MemoryStore
from reverie.testing import ScriptedModel, call, reply

from .runtime_support import STARTUP_S

SCOPE = Scope(tenant="acme", user="ana")


@pytest.fixture
def no_cyclic_gc() -> Iterator[None]:
    """Only reference counting frees objects while the test runs."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@tool(effects=set())
async def bump(n: int) -> int:
    """Return n + 1."""
    return n + 1


async def _nothing(ctx: CapabilityHookContext) -> None:
    return None


async def test_a_closed_runtime_and_its_store_are_freed_once_dropped_without_a_collection(
    no_cyclic_gc: None,
) -> None:
    store = MemoryStore()
    rt = Runtime(store)
    async with rt:
        rt.hooks.register("before_capability", _nothing, name="nothing")
        for user in ("ana", "bo"):
            model = ScriptedModel([call("bump", n=1), reply("done")])
            agent = Agent(name="a", model=model, tools=[bump])
            result = await rt.run(agent, "go", scope=Scope(tenant="acme", user=user))
            assert result.status == "completed"
    runtime_ref, store_ref = weakref.ref(rt), weakref.ref(store)
    del rt, store, agent, model, result

    assert runtime_ref() is None
    assert store_ref() is None


async def test_a_run_in_flight_keeps_its_runtime_alive_until_it_ends(no_cyclic_gc: None) -> None:
    release = asyncio.Event()
    entered = asyncio.Event()

    @tool(effects=set())
    async def held(n: int) -> int:
        """Wait until the test lets the call go."""
        entered.set()
        await release.wait()
        return n

    store = MemoryStore()
    rt = Runtime(store)
    await rt.__aenter__()
    agent = Agent(name="a", model=ScriptedModel([call("held", n=1), reply("done")]), tools=[held])
    handle = await rt.start(agent, "go", scope=SCOPE)
    run_id = handle.run_id
    runtime_ref = weakref.ref(rt)
    del rt, handle, agent
    await asyncio.wait_for(entered.wait(), STARTUP_S)

    assert runtime_ref() is not None  # only its run's task refers to it now
    release.set()
    for _ in range(STARTUP_S * 100):
        if (await store.get_run(run_id)).status == "completed" and runtime_ref() is None:
            break
        await asyncio.sleep(0.01)
    assert (await store.get_run(run_id)).status == "completed"
    assert runtime_ref() is None
