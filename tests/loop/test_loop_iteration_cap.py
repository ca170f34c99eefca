"""The iteration cap (DESIGN §4.1) and its limit handling (§4.4)."""

from __future__ import annotations

import itertools
from typing import Literal

from loop.loop_support import collect_events
from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.core.events import LimitReached
from reverie.core.exits import Completed, Failed
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.testing import ScriptedModel, call, reply


@tool(effects=set())
def probe(n: int) -> str:
    """Probe something."""
    return f"probed {n}"


def busy_model() -> ScriptedModel:
    """Always calls a tool (with new arguments, so no-progress never fires) when it can."""
    counter = itertools.count()

    def answer(request: ModelRequest) -> ModelResponse:
        if request.tools is None:
            return reply("Best answer so far: probed a lot.")
        return call("probe", n=next(counter))

    return ScriptedModel(answer)


def capped(model: ScriptedModel, on_limit: Literal["finalize", "fail"]) -> Agent:
    return Agent(
        name="busy", model=model, tools=[probe], limits=Limits(max_iterations=3), on_limit=on_limit
    )


async def test_iteration_cap_with_on_limit_fail_is_failed_iteration_limit(
    rt: Runtime, scope: Scope
) -> None:
    model = busy_model()
    r = await rt.run(capped(model, "fail"), "go", scope=scope)

    assert isinstance(r.exit, Failed)
    assert r.exit.kind == "iteration_limit"
    assert "3" in r.exit.safe_summary
    assert len(model.requests) == 3


async def test_iteration_cap_with_finalize_makes_exactly_one_tools_free_request(
    rt: Runtime, scope: Scope
) -> None:
    model = busy_model()
    r = await rt.run(capped(model, "finalize"), "go", scope=scope)

    assert isinstance(r.exit, Completed)
    assert r.exit.kind == "graceful_summary"
    assert r.exit.reason == "max_iterations"
    assert r.text == "Best answer so far: probed a lot."
    assert [req.tools is None for req in model.requests] == [False, False, False, True]
    # The finalizer prompt is host-authored and specific to the reason.
    assert "maximum number of steps" in model.requests[-1].messages[-1].content


async def test_default_iteration_cap_is_32(rt: Runtime, scope: Scope) -> None:
    model = busy_model()
    r = await rt.run(
        Agent(name="busy", model=model, tools=[probe], on_limit="fail"), "go", scope=scope
    )

    assert isinstance(r.exit, Failed)
    assert r.exit.kind == "iteration_limit"
    assert len(model.requests) == 32


async def test_iteration_cap_reports_max_iterations(rt: Runtime, scope: Scope) -> None:
    model = busy_model()
    h = await rt.start(capped(model, "finalize"), "go", scope=scope)
    events = await collect_events(h)
    await h.result()

    limits = [e for e in events if isinstance(e, LimitReached)]
    assert [(e.reason, e.action) for e in limits] == [("max_iterations", "finalize")]


async def test_reply_within_the_cap_completes_normally(rt: Runtime, scope: Scope) -> None:
    model = ScriptedModel([call("probe", n=1), call("probe", n=2), reply("done")])
    r = await rt.run(capped(model, "fail"), "go", scope=scope)

    assert isinstance(r.exit, Completed)
    assert r.exit.kind == "reply"
    assert r.text == "done"
