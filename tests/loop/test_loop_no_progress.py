"""No-progress detection (DESIGN §4.3) and its limit handling (§4.4)."""

from __future__ import annotations

from typing import Literal

from loop.loop_support import collect_events, last_tool_text
from reverie import Agent, Runtime, Scope, tool
from reverie.core.events import LimitReached
from reverie.core.exits import Completed, Failed
from reverie.errors import CapabilityError
from reverie.hooks import CapabilityHookContext, Deny
from reverie.testing import ScriptedModel, call, calls, reply


@tool(effects=set())
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def agent(model: ScriptedModel, on_limit: Literal["finalize", "fail"] = "fail") -> Agent:
    return Agent(name="looper", model=model, tools=[add], on_limit=on_limit)


async def test_same_call_three_times_in_five_fails_with_no_progress(
    rt: Runtime, scope: Scope
) -> None:
    model = ScriptedModel(
        [
            call("add", a=1, b=2),
            call("add", a=5, b=5),
            call("add", a=1, b=2),
            call("add", a=7, b=7),
            call("add", a=1, b=2),
            reply("never reached"),
        ]
    )
    r = await rt.run(agent(model), "loop", scope=scope)

    assert r.status == "failed"
    assert isinstance(r.exit, Failed)
    assert r.exit.kind == "no_progress_detected"
    assert "add" in r.exit.safe_summary
    assert len(model.requests) == 5


async def test_repetitions_spread_beyond_the_window_of_five_do_not_trip(
    rt: Runtime, scope: Scope
) -> None:
    # The third repetition lands 6 pushes after the first: only 2 are in the last 5.
    model = ScriptedModel(
        [
            call("add", a=1, b=2),
            call("add", a=2, b=2),
            call("add", a=3, b=2),
            call("add", a=1, b=2),
            call("add", a=4, b=2),
            call("add", a=5, b=2),
            call("add", a=1, b=2),
            reply("nine"),
        ]
    )
    r = await rt.run(agent(model), "loop", scope=scope)

    assert r.status == "completed"
    assert r.text == "nine"


async def test_no_progress_with_finalize_completes_with_graceful_summary(
    rt: Runtime, scope: Scope
) -> None:
    model = ScriptedModel([call("add", a=1, b=2)] * 3 + [reply("It is 3; I kept re-checking.")])
    r = await rt.run(agent(model, on_limit="finalize"), "loop", scope=scope)

    assert r.status == "completed"
    assert isinstance(r.exit, Completed)
    assert r.exit.kind == "graceful_summary"
    assert r.exit.reason == "no_progress"
    assert r.text == "It is 3; I kept re-checking."
    assert [req.tools is None for req in model.requests] == [False, False, False, True]


async def test_argument_key_order_does_not_change_the_call_signature(
    rt: Runtime, scope: Scope
) -> None:
    model = ScriptedModel(
        [
            calls(("add", {"a": 1, "b": 2})),
            calls(("add", {"b": 2, "a": 1})),
            calls(("add", {"a": 1, "b": 2})),
            reply("never reached"),
        ]
    )
    r = await rt.run(agent(model), "loop", scope=scope)

    assert isinstance(r.exit, Failed)
    assert r.exit.kind == "no_progress_detected"
    assert len(model.requests) == 3


async def test_identical_calls_in_one_wave_count_once(rt: Runtime, scope: Scope) -> None:
    # Each distinct signature is pushed at most once per wave.
    model = ScriptedModel(
        [
            calls(("add", {"a": 1, "b": 2}), ("add", {"b": 2, "a": 1}), ("add", {"a": 1, "b": 2})),
            reply("3"),
        ]
    )
    r = await rt.run(agent(model), "go", scope=scope)

    assert r.status == "completed"
    assert r.text == "3"


async def test_nan_argument_is_an_input_invalid_result_for_the_model(
    rt: Runtime, scope: Scope
) -> None:
    model = ScriptedModel([call("add", a=float("nan"), b=1), reply("sorry")])
    r = await rt.run(agent(model), "go", scope=scope)

    assert r.status == "completed"
    assert r.text == "sorry"
    result = last_tool_text(model.requests[1])
    assert result.startswith("error (input_invalid)")


async def test_repeated_denials_trip_no_progress(rt: Runtime, scope: Scope) -> None:
    async def deny_add(ctx: CapabilityHookContext) -> Deny | None:
        return Deny("adding is off") if ctx.tool == "add" else None

    rt.hooks.register("before_capability", deny_add, name="deny-add")
    # Different arguments each time: only the denials repeat.
    model = ScriptedModel(
        [call("add", a=1, b=1), call("add", a=2, b=2), call("add", a=3, b=3), reply("x")]
    )
    h = await rt.start(agent(model), "go", scope=scope)
    r = await h.result()

    assert isinstance(r.exit, Failed)
    assert r.exit.kind == "no_progress_detected"
    assert len(model.requests) == 3
    assert "denied: adding is off" in last_tool_text(model.requests[2])


async def test_last_three_equal_failure_kinds_trip_no_progress(rt: Runtime, scope: Scope) -> None:
    @tool(effects=set())
    def fetch(url: str) -> str:
        """Fetch a page."""
        raise CapabilityError("permanent", f"{url} is gone")

    model = ScriptedModel(
        [call("fetch", url="a"), call("fetch", url="b"), call("fetch", url="c"), reply("x")]
    )
    r = await rt.run(
        Agent(name="fetcher", model=model, tools=[fetch], on_limit="fail"), "go", scope=scope
    )

    assert isinstance(r.exit, Failed)
    assert r.exit.kind == "no_progress_detected"
    assert "permanent" in r.exit.safe_summary
    assert len(model.requests) == 3


async def test_mixed_failure_kinds_do_not_trip_no_progress(rt: Runtime, scope: Scope) -> None:
    @tool(effects=set())
    def fetch(url: str) -> str:
        """Fetch a page."""
        if url == "ok":
            return "page"
        raise CapabilityError("permanent", f"{url} is gone")

    model = ScriptedModel(
        [call("fetch", url="a"), call("fetch", url="ok"), call("fetch", url="c"), reply("done")]
    )
    r = await rt.run(
        Agent(name="fetcher", model=model, tools=[fetch], on_limit="fail"), "go", scope=scope
    )

    assert r.status == "completed"


async def test_retries_do_not_recount_signatures_or_failure_kinds(
    rt: Runtime, scope: Scope
) -> None:
    attempts: list[int] = []

    @tool(effects=set())
    def flaky(n: int) -> str:
        """Fails transiently twice, then works."""
        attempts.append(n)
        if len(attempts) < 3:
            raise CapabilityError("transient", "try again")
        return "ok"

    model = ScriptedModel([call("flaky", n=1), reply("done")])
    r = await rt.run(
        Agent(name="flaky", model=model, tools=[flaky], on_limit="fail"), "go", scope=scope
    )

    assert r.status == "completed"
    assert attempts == [1, 1, 1]


async def test_no_progress_is_reported_as_no_progress_not_max_iterations(
    rt: Runtime, scope: Scope
) -> None:
    model = ScriptedModel([call("add", a=1, b=2)] * 3 + [reply("summary")])
    h = await rt.start(agent(model, on_limit="finalize"), "loop", scope=scope)
    events = await collect_events(h)
    await h.result()

    limits = [e for e in events if isinstance(e, LimitReached)]
    assert [(e.reason, e.action) for e in limits] == [("no_progress", "finalize")]
