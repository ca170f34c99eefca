"""Loop contract gaps of the safety nets (DESIGN §4, §5): the failure ring counts a wave once,
cancellation wins over the iteration cap, a budget strategy only narrows, hidden tools stay
hidden."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loop.conftest import FAST_DEFAULT
from loop.loop_support import FakeHost, tool_messages
from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.core.capability import CapabilityDescriptor, Surface
from reverie.core.exits import Cancelled, Failed
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.core.transcript import InputRecord
from reverie.errors import CapabilityError
from reverie.loop.executor import LoopConfig, run_loop
from reverie.loop.family import LoopFamily
from reverie.loop.state import LoopExecutionState
from reverie.testing import ScriptedModel, call, calls, reply

ADD = CapabilityDescriptor(
    name="add", description="Add.", parameters={"type": "object"}, effects=frozenset()
)
FAMILY_DEFAULT = LoopFamily(id="default")


async def test_one_wave_of_distinct_calls_failing_alike_counts_once_in_the_failure_ring(
    rt: Runtime, scope: Scope
) -> None:
    @tool(effects=set())
    def fetch(url: str) -> str:
        """Fetch a page."""
        raise CapabilityError("permanent", f"{url} is gone")

    model = ScriptedModel(
        [
            calls(("fetch", {"url": "a"}), ("fetch", {"url": "b"}), ("fetch", {"url": "c"})),
            reply("gone"),
        ]
    )
    agent = Agent(name="f", model=model, tools=[fetch], on_limit="fail")
    r = await rt.run(agent, "go", scope=scope)

    # The model saw the three errors and answered; no-progress did not trip on one wave.
    assert r.status == "completed" and r.text == "gone"
    results = [m.content for m in tool_messages(model.requests[1])]
    assert len(results) == 3
    assert all(text.startswith("error (permanent)") for text in results)


async def test_three_waves_failing_alike_still_trip_no_progress(rt: Runtime, scope: Scope) -> None:
    @tool(effects=set())
    def fetch(url: str) -> str:
        """Fetch a page."""
        raise CapabilityError("permanent", f"{url} is gone")

    counter = itertools.count()

    def answer(request: ModelRequest) -> ModelResponse:
        n = next(counter)
        return calls(("fetch", {"url": f"a{n}"}), ("fetch", {"url": f"b{n}"}))

    model = ScriptedModel(answer)
    agent = Agent(name="f", model=model, tools=[fetch], on_limit="fail")
    r = await rt.run(agent, "go", scope=scope)

    assert isinstance(r.exit, Failed)
    assert r.exit.kind == "no_progress_detected"
    assert len(model.requests) == 3


def at_the_cap() -> tuple[LoopConfig, LoopExecutionState]:
    return LoopConfig(limits=Limits(max_iterations=3), on_limit="fail"), LoopExecutionState(
        iteration=3
    )


async def test_pending_cancellation_wins_over_the_iteration_cap_with_on_limit_fail() -> None:
    host = FakeHost([reply("never asked")], tools=[ADD])
    host.token.cancel("operator")
    config, state = at_the_cap()
    exit_, _ = await run_loop(host, FAMILY_DEFAULT, state, config)

    assert isinstance(exit_, Cancelled)
    assert exit_.reason == "operator"
    assert "model" not in host.log


async def test_queued_cancel_input_wins_over_the_iteration_cap_with_on_limit_fail() -> None:
    cancel = InputRecord(
        run_id="run-fake", cursor=1, input_id="in-1", kind="cancel", payload={"reason": "stop it"}
    )
    host = FakeHost([reply("never asked")], tools=[ADD], inputs=[cancel])
    config, state = at_the_cap()
    exit_, _ = await run_loop(host, FAMILY_DEFAULT, state, config)

    assert isinstance(exit_, Cancelled)
    assert exit_.reason == "stop it"


@dataclass(frozen=True, slots=True)
class GenerousBudget:
    """A custom budget strategy that tries to raise the cap tenfold."""

    def iteration_limit(self, requested: int) -> int:
        return requested * 10

    def describe(self) -> Mapping[str, Any]:
        return {"generous": True}


async def test_budget_strategy_can_only_narrow_the_iteration_cap(scope: Scope) -> None:
    counter = itertools.count()

    def answer(request: ModelRequest) -> ModelResponse:
        return call("add", a=next(counter), b=1)

    @tool(effects=set())
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    family = dataclasses.replace(FAST_DEFAULT, budget=GenerousBudget())
    model = ScriptedModel(answer)
    agent = Agent(
        name="b", model=model, tools=[add], limits=Limits(max_iterations=2), on_limit="fail"
    )
    async with Runtime.open(":memory:", families=[family]) as rt:
        r = await rt.run(agent, "go", scope=scope)

    assert isinstance(r.exit, Failed)
    assert r.exit.kind == "iteration_limit"
    assert len(model.requests) == 2


@dataclass(frozen=True, slots=True)
class HideAdmin:
    """A capability strategy that hides ``admin_reset``."""

    def filter(self, state: LoopExecutionState, surface: Surface) -> Surface:
        kept = tuple(d for d in surface.descriptors if d.name != "admin_reset")
        return Surface(descriptors=kept, version=surface.version + "-narrowed")

    def describe(self) -> Mapping[str, Any]:
        return {"hide": "admin_reset"}


async def test_call_to_a_hidden_tool_is_answered_without_naming_hidden_tools(
    scope: Scope,
) -> None:
    reset: list[bool] = []

    @tool(effects={"write"})
    def admin_reset() -> str:
        """Reset everything."""
        reset.append(True)
        return "reset"

    @tool(effects=set())
    def lookup(key: str) -> str:
        """Look a key up."""
        return key

    family = dataclasses.replace(FAST_DEFAULT, capabilities=HideAdmin())
    model = ScriptedModel([call("admin_reset"), call("no_such_tool"), reply("ok")])
    agent = Agent(name="h", model=model, tools=[admin_reset, lookup])
    async with Runtime.open(":memory:", families=[family]) as rt:
        r = await rt.run(agent, "go", scope=scope)

    assert r.status == "completed"
    assert reset == []
    assert [t.name for t in model.requests[0].tools or ()] == ["lookup"]
    # The hidden tool's call is a denial (a security event: tests/runtime/
    # test_denial_evidence.py); the unknown one's an input error. Neither names a hidden tool.
    starts = ["denied:", "error (input_invalid)"]
    for request, start in zip(model.requests[1:], starts, strict=True):
        text = tool_messages(request)[-1].content
        assert text.startswith(start)
        assert "available tools: lookup" in text
        assert "admin_reset" not in text.split("available tools:")[1]
