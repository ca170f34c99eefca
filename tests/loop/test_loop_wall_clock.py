"""The wall-clock budget (DESIGN §4.5): ends the run at the next boundary, finalizer first
when it may; time blocked on a gate does not count (docs/deviations.md, entry 5)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.core.exits import Completed, Failed
from reverie.core.messages import (
    ModelEvent,
    ModelRequest,
    ModelResponse,
    ResponseComplete,
    TextDelta,
)
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="acme", user="ana")


@tool(effects={"read"})
async def slow(step: int) -> str:
    """Takes a while."""
    await asyncio.sleep(0.15)
    return f"step {step}"


def busy_then_summary(request: ModelRequest) -> ModelResponse:
    if request.tools is None:  # the finalizer's tools-free request
        return reply("summary of what was found")
    return call("slow", step=sum(1 for m in request.messages if m.role == "tool"))


async def test_wall_clock_limit_fails_the_run_with_the_limit_named() -> None:
    model = ScriptedModel(busy_then_summary)
    agent = Agent(
        name="a", model=model, tools=[slow], limits=Limits(wall_clock_s=0.1), on_limit="fail"
    )
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "go", scope=SCOPE)
    assert isinstance(r.exit, Failed)
    assert r.exit.kind == "wall_clock_limit"
    assert "0.1" in r.exit.safe_summary
    assert len(model.requests) == 1  # the boundary after the first wave ended it


async def test_wall_clock_limit_with_finalize_makes_one_tools_free_summary_call() -> None:
    model = ScriptedModel(busy_then_summary)
    agent = Agent(name="a", model=model, tools=[slow], limits=Limits(wall_clock_s=0.1))
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "go", scope=SCOPE)
    assert isinstance(r.exit, Completed)
    assert (r.exit.kind, r.exit.reason) == ("graceful_summary", "wall_clock_limit")
    assert r.text == "summary of what was found"
    assert [req.tools is None for req in model.requests] == [False, True]


async def test_time_blocked_on_a_gate_does_not_count_against_the_wall_clock() -> None:
    @tool(effects={"write"}, needs_approval=True)
    async def publish(text: str) -> str:
        """Needs a person's approval."""
        return "published"

    model = ScriptedModel([call("publish", text="hi"), reply("done")])
    agent = Agent(name="a", model=model, tools=[publish], limits=Limits(wall_clock_s=0.3))
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "go", scope=SCOPE)
        assert r.status == "blocked" and r.gate is not None
        await asyncio.sleep(0.5)  # longer than the whole budget, spent waiting for a person
        r = await rt.approve(r.gate.ref)
    assert r.status == "completed" and r.text == "done"


class TricklingModel:
    """A model that streams one small chunk after another and never finishes, except for the
    finalizer's tools-free request when ``answers_finalizer`` (then it answers at once)."""

    def __init__(self, *, answers_finalizer: bool) -> None:
        self.answers_finalizer = answers_finalizer
        self.requests: list[ModelRequest] = []
        self.chunks = 0

    @property
    def name(self) -> str:
        return "trickling"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        if request.tools is None and self.answers_finalizer:
            yield ResponseComplete(response=reply("summary of the slow start"))
            return
        while True:
            self.chunks += 1
            yield TextDelta(text="thinking ")
            await asyncio.sleep(0.05)


async def test_wall_clock_limit_cuts_an_in_flight_model_call() -> None:
    model = TricklingModel(answers_finalizer=False)
    agent = Agent(name="a", model=model, limits=Limits(wall_clock_s=0.5), on_limit="fail")
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "go", scope=SCOPE)
        rows = await rt.store.thread_items(r.thread_id)

    assert isinstance(r.exit, Failed)
    assert r.exit.kind == "wall_clock_limit"
    assert model.chunks > 0  # it was cut mid-stream, not before it began
    assert [row.role for row in rows] == ["user"]  # nothing of the cut answer is stored


async def test_wall_clock_cut_of_a_model_call_goes_to_the_finalizer_when_it_may() -> None:
    model = TricklingModel(answers_finalizer=True)
    agent = Agent(name="a", model=model, limits=Limits(wall_clock_s=0.5))
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "go", scope=SCOPE)

    assert isinstance(r.exit, Completed)
    assert (r.exit.kind, r.exit.reason) == ("graceful_summary", "wall_clock_limit")
    assert r.text == "summary of the slow start"
    assert [req.tools is None for req in model.requests] == [False, True]
