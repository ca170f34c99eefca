"""Budgets (DESIGN §4.5): charged at dispatch, hard, named when they end a run."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from loop.loop_support import collect_events, tool_messages
from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.capabilities import Capability
from reverie.core.events import LimitReached
from reverie.core.exits import Completed, Failed
from reverie.core.messages import ModelRequest, ModelResponse, TokenUsage
from reverie.testing import ScriptedModel, call, calls, error, reply


def counting_tool() -> tuple[list[int], Capability]:
    """A pure tool ``probe`` and the list of ``n`` it ran with."""
    ran: list[int] = []

    @tool(effects=set())
    def probe(n: int) -> str:
        """Probe something."""
        ran.append(n)
        return f"probed {n}"

    return ran, probe


async def test_wave_of_eight_against_budget_of_three_runs_three(rt: Runtime, scope: Scope) -> None:
    ran, probe = counting_tool()
    model = ScriptedModel(
        [calls(*[("probe", {"n": i}) for i in range(8)]), reply("summary of 3 probes")]
    )
    agent = Agent(name="b", model=model, tools=[probe], limits=Limits(max_capability_calls=3))
    r = await rt.run(agent, "go", scope=scope)

    assert sorted(ran) == [0, 1, 2]
    results = [m.content for m in tool_messages(model.requests[1])]
    assert results[:3] == ["probed 0", "probed 1", "probed 2"]
    assert len(results) == 8
    for text in results[3:]:
        assert text.startswith("error (")
        assert "budget of 3" in text
    assert r.usage.capability_calls == 3
    # The exhausted budget still allows the finalizer's one model call.
    assert isinstance(r.exit, Completed)
    assert r.exit.kind == "graceful_summary"
    assert r.exit.reason == "capability_call_limit"
    assert model.requests[1].tools is None


async def test_exhausted_capability_budget_with_on_limit_fail_is_failed(
    rt: Runtime, scope: Scope
) -> None:
    ran, probe = counting_tool()
    model = ScriptedModel([calls(("probe", {"n": 1}), ("probe", {"n": 2})), reply("x")])
    agent = Agent(
        name="b",
        model=model,
        tools=[probe],
        limits=Limits(max_capability_calls=1),
        on_limit="fail",
    )
    r = await rt.run(agent, "go", scope=scope)

    assert ran == [1]
    assert isinstance(r.exit, Failed)
    assert r.exit.kind == "capability_call_limit"
    assert "capability call limit of 1" in r.exit.safe_summary
    assert len(model.requests) == 1


async def test_calls_past_max_calls_per_batch_get_an_error_naming_the_limit(
    rt: Runtime, scope: Scope
) -> None:
    ran, probe = counting_tool()
    model = ScriptedModel([calls(*[("probe", {"n": i}) for i in range(5)]), reply("ok")])
    agent = Agent(name="b", model=model, tools=[probe], limits=Limits(max_calls_per_batch=2))
    r = await rt.run(agent, "go", scope=scope)

    assert sorted(ran) == [0, 1]
    results = [m.content for m in tool_messages(model.requests[1])]
    assert results[:2] == ["probed 0", "probed 1"]
    for text in results[2:]:
        assert text.startswith("error (")
        assert "at most 2 tool calls" in text
    # The model is told and carries on: refused calls are not "no progress".
    assert model.requests[1].tools is not None
    assert isinstance(r.exit, Completed)
    assert r.exit.kind == "reply"
    assert r.text == "ok"


async def test_model_call_limit_fails_the_run_naming_the_limit(rt: Runtime, scope: Scope) -> None:
    counter = itertools.count()

    def answer(request: ModelRequest) -> ModelResponse:
        return call("probe", n=next(counter))

    model = ScriptedModel(answer)
    _, probe = counting_tool()
    # on_limit="finalize" (the default): no model call is left for a finalizer.
    agent = Agent(name="b", model=model, tools=[probe], limits=Limits(max_model_calls=2))
    r = await rt.run(agent, "go", scope=scope)

    assert isinstance(r.exit, Failed)
    assert r.exit.kind == "model_call_limit"
    assert "model call limit of 2" in r.exit.safe_summary
    assert len(model.requests) == 2
    assert r.usage.model_calls == 2


async def test_model_retries_are_charged_to_the_model_call_budget(
    rt: Runtime, scope: Scope
) -> None:
    model = ScriptedModel([error("transient"), error("transient"), reply("late")])
    agent = Agent(name="b", model=model, limits=Limits(max_model_calls=2))
    r = await rt.run(agent, "go", scope=scope)

    assert isinstance(r.exit, Failed)
    assert r.exit.kind == "model_call_limit"
    assert len(model.requests) == 2


@pytest.mark.parametrize(
    ("budget", "kind"),
    [
        (Limits(max_iterations=2, max_model_calls=2), "model_call_limit"),
        (Limits(max_iterations=2, max_tokens=10), "token_limit"),
    ],
    ids=["model-calls", "tokens"],
)
async def test_budget_error_during_the_finalizer_is_returned_unchanged(
    rt: Runtime, scope: Scope, budget: Limits, kind: str
) -> None:
    counter = itertools.count()

    def answer(request: ModelRequest) -> ModelResponse:
        if request.tools is None:
            return reply("summary")
        return replace(call("probe", n=next(counter)), usage=TokenUsage(input_tokens=5))

    model = ScriptedModel(answer)
    _, probe = counting_tool()
    agent = Agent(name="b", model=model, tools=[probe], limits=budget, on_limit="finalize")
    h = await rt.start(agent, "go", scope=scope)
    events = await collect_events(h)
    r = await h.result()

    # The iteration cap fired, but the finalizer's call would exceed the budget: the budget
    # error comes back as it is, not rewritten as iteration_limit.
    assert isinstance(r.exit, Failed)
    assert r.exit.kind == kind
    assert len(model.requests) == 2
    assert all(req.tools is not None for req in model.requests)
    assert "max_iterations" in [e.reason for e in events if isinstance(e, LimitReached)]
