"""Recovery (DESIGN §4.2): tool and model errors become results, retries, or a clean failure."""

from __future__ import annotations

import asyncio

from loop.loop_support import last_tool_text
from reverie import Agent, Runtime, Scope, tool
from reverie.core.exits import Failed
from reverie.errors import CapabilityError
from reverie.testing import ScriptedModel, call, error, raw_call, reply


@tool(effects=set())
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def test_tool_exception_becomes_an_error_result_and_the_run_continues(
    rt: Runtime, scope: Scope
) -> None:
    @tool(effects=set())
    def explode(x: int) -> int:
        """Always fails."""
        raise ValueError("boom")

    model = ScriptedModel([call("explode", x=1), reply("recovered")])
    r = await rt.run(Agent(name="r", model=model, tools=[explode]), "go", scope=scope)

    assert r.status == "completed"
    assert r.text == "recovered"
    result = last_tool_text(model.requests[1])
    assert result.startswith("error (internal)")
    assert "ValueError: boom" in result


async def test_transient_tool_failure_is_retried_twice_then_skipped(
    rt: Runtime, scope: Scope
) -> None:
    attempts = 0

    @tool(effects=set())
    def flaky(x: int) -> int:
        """Always fails transiently."""
        nonlocal attempts
        attempts += 1
        raise CapabilityError("transient", "upstream busy")

    model = ScriptedModel([call("flaky", x=1), reply("gave up on flaky")])
    r = await rt.run(Agent(name="r", model=model, tools=[flaky]), "go", scope=scope)

    assert attempts == 3  # the first attempt and 2 retries
    assert r.status == "completed"
    assert last_tool_text(model.requests[1]) == "error (transient): upstream busy"


async def test_transient_tool_failure_that_recovers_returns_the_result(
    rt: Runtime, scope: Scope
) -> None:
    attempts = 0

    @tool(effects=set())
    def flaky(x: int) -> int:
        """Fails once, then works."""
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise CapabilityError("transient", "upstream busy")
        return x * 10

    model = ScriptedModel([call("flaky", x=4), reply("40")])
    r = await rt.run(Agent(name="r", model=model, tools=[flaky]), "go", scope=scope)

    assert attempts == 2
    assert r.status == "completed"
    assert last_tool_text(model.requests[1]) == "40"


async def test_permanent_tool_failure_is_not_retried(rt: Runtime, scope: Scope) -> None:
    attempts = 0

    @tool(effects=set())
    def broken(x: int) -> int:
        """Fails permanently."""
        nonlocal attempts
        attempts += 1
        raise CapabilityError("permanent", "no such record")

    model = ScriptedModel([call("broken", x=1), reply("ok")])
    r = await rt.run(Agent(name="r", model=model, tools=[broken]), "go", scope=scope)

    assert attempts == 1
    assert r.status == "completed"
    assert last_tool_text(model.requests[1]) == "error (permanent): no such record"


async def test_tool_hanging_past_its_timeout_is_an_error_result(rt: Runtime, scope: Scope) -> None:
    @tool(effects=set(), timeout_s=0.02)
    async def hang(x: int) -> int:
        """Never returns in time."""
        await asyncio.sleep(30)
        return x

    model = ScriptedModel([call("hang", x=1), reply("it hung")])
    async with asyncio.timeout(60):
        r = await rt.run(Agent(name="r", model=model, tools=[hang]), "go", scope=scope)

    assert r.status == "completed"
    assert r.text == "it hung"
    assert "timed out after 0.02s" in last_tool_text(model.requests[1])


async def test_unknown_tool_is_input_invalid_listing_available_tools(
    rt: Runtime, scope: Scope
) -> None:
    model = ScriptedModel([call("multiply", a=2, b=3), reply("I can only add")])
    r = await rt.run(Agent(name="r", model=model, tools=[add]), "go", scope=scope)

    assert r.status == "completed"
    result = last_tool_text(model.requests[1])
    assert result.startswith("error (input_invalid)")
    assert "'multiply'" in result
    assert "available tools: add" in result


async def test_malformed_json_arguments_are_input_invalid(rt: Runtime, scope: Scope) -> None:
    model = ScriptedModel(
        [raw_call("add", arguments_error="Expecting value"), call("add", a=1, b=2), reply("3")]
    )
    r = await rt.run(Agent(name="r", model=model, tools=[add]), "go", scope=scope)

    assert r.status == "completed"
    assert r.text == "3"
    result = last_tool_text(model.requests[1])
    assert result.startswith("error (input_invalid)")
    assert "Expecting value" in result
    assert last_tool_text(model.requests[2]) == "3"


async def test_arguments_failing_the_schema_are_input_invalid(rt: Runtime, scope: Scope) -> None:
    model = ScriptedModel([call("add", a="one", b=2), reply("oops")])
    r = await rt.run(Agent(name="r", model=model, tools=[add]), "go", scope=scope)

    assert r.status == "completed"
    assert last_tool_text(model.requests[1]).startswith("error (input_invalid)")


async def test_transient_model_error_is_retried(rt: Runtime, scope: Scope) -> None:
    model = ScriptedModel([error("transient"), reply("hello")])
    r = await rt.run(Agent(name="r", model=model), "hi", scope=scope)

    assert r.status == "completed"
    assert r.text == "hello"
    assert len(model.requests) == 2


async def test_transient_model_error_three_times_fails_with_model_error(
    rt: Runtime, scope: Scope
) -> None:
    model = ScriptedModel([error("transient")] * 3 + [reply("too late")])
    r = await rt.run(Agent(name="r", model=model), "hi", scope=scope)

    assert isinstance(r.exit, Failed)
    assert r.exit.kind == "model_error"
    assert "transient" in r.exit.safe_summary
    assert len(model.requests) == 3


async def test_non_transient_model_error_is_not_retried(rt: Runtime, scope: Scope) -> None:
    model = ScriptedModel([error("content_filtered"), reply("never")])
    r = await rt.run(Agent(name="r", model=model), "hi", scope=scope)

    assert isinstance(r.exit, Failed)
    assert r.exit.kind == "model_error"
    assert len(model.requests) == 1


async def test_exhausted_script_fails_with_model_error_naming_the_script(
    rt: Runtime, scope: Scope
) -> None:
    model = ScriptedModel([call("add", a=1, b=2)], name="weather-script")
    r = await rt.run(Agent(name="r", model=model, tools=[add]), "hi", scope=scope)

    assert isinstance(r.exit, Failed)
    assert r.exit.kind == "model_error"
    assert "weather-script" in r.exit.safe_summary
    assert "exhausted" in r.exit.safe_summary


async def test_empty_model_reply_fails_as_invalid_model_output(rt: Runtime, scope: Scope) -> None:
    model = ScriptedModel([reply(" \n ")])
    r = await rt.run(Agent(name="r", model=model), "hi", scope=scope)

    assert isinstance(r.exit, Failed)
    assert r.exit.kind == "invalid_model_output"
    items = await rt.store.thread_items(r.thread_id)
    assert [i.role for i in items] == ["user"]
