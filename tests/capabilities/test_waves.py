"""Waves (DESIGN §9.3, §3.4 batch policy): parallel when every call is safe, else sequential;
results in the model's order either way."""

from __future__ import annotations

import asyncio
from collections.abc import Set as AbstractSet

import pytest

from reverie import Agent, Runtime, Scope, tool
from reverie.core.messages import ModelRequest
from reverie.testing import ScriptedModel, calls, reply

SCOPE = Scope(tenant="acme", user="ana")


class Concurrency:
    """Counts tools in flight and remembers the peak."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0
        self.all_in = asyncio.Event()

    def enter(self, expected: int) -> None:
        self.now += 1
        self.peak = max(self.peak, self.now)
        if self.now >= expected:
            self.all_in.set()

    def leave(self) -> None:
        self.now -= 1


def tool_result_ids(request: ModelRequest) -> list[str | None]:
    return [m.tool_call_id for m in request.messages if m.role == "tool"]


def assistant_call_ids(request: ModelRequest) -> list[str]:
    (assistant,) = [m for m in request.messages if m.role == "assistant" and m.tool_calls]
    return [c.id for c in assistant.tool_calls]


async def test_wave_of_parallel_safe_calls_runs_concurrently() -> None:
    seen = Concurrency()

    @tool(effects={"read"})
    async def lookup(key: str) -> str:
        """Look a key up."""
        seen.enter(expected=3)
        try:
            # Only returns when all three calls are in flight at the same time: a
            # sequential wave would time out here.
            async with asyncio.timeout(60):
                await seen.all_in.wait()
        finally:
            seen.leave()
        return key.upper()

    model = ScriptedModel(
        [
            calls(("lookup", {"key": "a"}), ("lookup", {"key": "b"}), ("lookup", {"key": "c"})),
            reply("done"),
        ]
    )
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(Agent(name="a", model=model, tools=[lookup]), "go", scope=SCOPE)

    assert r.status == "completed"
    assert seen.peak == 3
    assert [m.content for m in model.requests[1].messages if m.role == "tool"] == ["A", "B", "C"]


@pytest.mark.parametrize(
    "effects",
    [{"write"}, None],
    ids=["declared-write", "undeclared"],
)
async def test_exclusive_call_in_wave_forces_sequential(effects: AbstractSet[str] | None) -> None:
    seen = Concurrency()

    async def body() -> str:
        seen.enter(expected=99)
        try:
            await asyncio.sleep(0.01)
        finally:
            seen.leave()
        return "ok"

    @tool(effects=set())
    async def pure(n: int) -> str:
        """Pure."""
        return await body()

    @tool(effects=effects)
    async def risky(n: int) -> str:
        """Has an effect (or declares none)."""
        return await body()

    model = ScriptedModel(
        [calls(("pure", {"n": 1}), ("risky", {"n": 2}), ("pure", {"n": 3})), reply("done")]
    )
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(Agent(name="a", model=model, tools=[pure, risky]), "go", scope=SCOPE)

    assert r.status == "completed"
    assert seen.peak == 1


async def test_unknown_tool_in_wave_forces_sequential() -> None:
    seen = Concurrency()

    @tool(effects=set())
    async def pure(n: int) -> str:
        """Pure."""
        seen.enter(expected=99)
        try:
            await asyncio.sleep(0.01)
        finally:
            seen.leave()
        return "ok"

    model = ScriptedModel(
        [calls(("pure", {"n": 1}), ("nope", {}), ("pure", {"n": 2})), reply("done")]
    )
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(Agent(name="a", model=model, tools=[pure]), "go", scope=SCOPE)

    assert r.status == "completed"
    assert seen.peak == 1


async def test_parallel_results_are_appended_in_the_models_order() -> None:
    second_and_third_done = asyncio.Event()
    finished: list[str] = []

    @tool(effects=set())
    async def work(name: str) -> str:
        """Work."""
        if name == "first":
            # The first call finishes last.
            async with asyncio.timeout(60):
                await second_and_third_done.wait()
        finished.append(name)
        if len(finished) == 2:
            second_and_third_done.set()
        return f"result of {name}"

    model = ScriptedModel(
        [
            calls(
                ("work", {"name": "first"}),
                ("work", {"name": "second"}),
                ("work", {"name": "third"}),
            ),
            reply("done"),
        ]
    )
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(Agent(name="a", model=model, tools=[work]), "go", scope=SCOPE)

    assert r.status == "completed"
    assert finished[-1] == "first"
    follow = model.requests[1]
    assert tool_result_ids(follow) == assistant_call_ids(follow)
    assert [m.content for m in follow.messages if m.role == "tool"] == [
        "result of first",
        "result of second",
        "result of third",
    ]


async def test_sequential_wave_runs_in_the_models_order() -> None:
    started: list[int] = []

    @tool(effects={"write"})
    async def step(n: int) -> str:
        """A step with a side effect."""
        started.append(n)
        return str(n)

    model = ScriptedModel(
        [calls(("step", {"n": 3}), ("step", {"n": 1}), ("step", {"n": 2})), reply("done")]
    )
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(Agent(name="a", model=model, tools=[step]), "go", scope=SCOPE)

    assert r.status == "completed"
    assert started == [3, 1, 2]
    assert [m.content for m in model.requests[1].messages if m.role == "tool"] == ["3", "1", "2"]
