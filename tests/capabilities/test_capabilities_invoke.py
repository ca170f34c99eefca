"""DESIGN §9.1, §4.2: ``Tool.invoke`` validates, runs and classifies; only cancellation escapes."""

from __future__ import annotations

import asyncio
import math
import threading
from typing import Any

import pytest

from reverie.capabilities import Capability, ToolContext, tool
from reverie.core.capability import CallCompleted, CallFailed, CallGated, CallOutcome
from reverie.errors import ApprovalRequired, CapabilityError, RetryTool


@tool(effects=set())
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def failed(outcome: CallOutcome) -> CallFailed:
    assert isinstance(outcome, CallFailed), outcome
    return outcome


async def test_sync_tool_runs_in_a_worker_thread(ctx: ToolContext) -> None:
    @tool
    def where() -> int:
        """Report the thread."""
        return threading.get_ident()

    outcome = await where.invoke({}, ctx)
    assert isinstance(outcome, CallCompleted)
    assert int(outcome.output) != threading.get_ident()


async def test_async_tool_is_awaited_on_the_event_loop(ctx: ToolContext) -> None:
    @tool
    async def where() -> str:
        """Report the loop."""
        await asyncio.sleep(0)
        return f"{threading.get_ident()}:{id(asyncio.get_running_loop())}"

    outcome = await where.invoke({}, ctx)
    expected = f"{threading.get_ident()}:{id(asyncio.get_running_loop())}"
    assert outcome == CallCompleted(output=expected)


async def test_valid_arguments_complete_with_serialised_output(ctx: ToolContext) -> None:
    assert await add.invoke({"a": 1, "b": 2}, ctx) == CallCompleted(output="3")


async def test_invalid_argument_is_input_invalid_naming_the_argument(ctx: ToolContext) -> None:
    outcome = failed(await add.invoke({"a": "abc", "b": 2}, ctx))
    assert outcome.error_kind == "input_invalid"
    assert "'a'" in outcome.message
    assert "integer" in outcome.message
    assert "'b'" not in outcome.message.split("Expected")[0]


async def test_arguments_nested_too_deep_are_input_invalid_before_validation(
    ctx: ToolContext,
) -> None:
    @tool(effects=set())
    def take(x: Any) -> str:
        """Take anything."""
        return "taken"

    deep: Any = 1.5
    for _ in range(900):
        deep = [deep]
    outcome = failed(await take.invoke({"x": deep}, ctx))
    assert outcome.error_kind == "input_invalid"
    assert "the arguments is nested more than 64 levels deep" in outcome.message


async def test_missing_argument_is_input_invalid_naming_the_argument(ctx: ToolContext) -> None:
    outcome = failed(await add.invoke({"a": 1}, ctx))
    assert outcome.error_kind == "input_invalid"
    assert "missing required argument 'b'" in outcome.message


async def test_extra_argument_is_input_invalid(ctx: ToolContext) -> None:
    outcome = failed(await add.invoke({"a": 1, "b": 2, "c": 3}, ctx))
    assert outcome.error_kind == "input_invalid"
    assert "unexpected argument 'c'" in outcome.message


async def test_arguments_that_are_not_an_object_are_input_invalid(ctx: ToolContext) -> None:
    not_a_mapping: Any = [1, 2]
    outcome = failed(await add.invoke(not_a_mapping, ctx))
    assert outcome.error_kind == "input_invalid"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
async def test_non_finite_number_is_input_invalid_not_a_crash(ctx: ToolContext, bad: float) -> None:
    @tool
    def scale(factor: float, extra: dict[str, Any] | None = None) -> float:
        """Scale."""
        return factor

    outcome = failed(await scale.invoke({"factor": bad}, ctx))
    assert outcome.error_kind == "input_invalid"
    assert "'factor'" in outcome.message

    nested = failed(await scale.invoke({"factor": 1.0, "extra": {"k": [0.0, bad]}}, ctx))
    assert nested.error_kind == "input_invalid"
    assert "extra.k[1]" in nested.message


async def test_omitted_arguments_use_the_functions_own_defaults(ctx: ToolContext) -> None:
    sentinel = object()

    @tool
    def probe(x: int = 0, marker: Any = sentinel) -> bool:
        """Probe."""
        return marker is sentinel

    assert await probe.invoke({}, ctx) == CallCompleted(output="True")


async def test_timeout_is_a_transient_failure(ctx: ToolContext) -> None:
    @tool(timeout_s=0.05)
    async def hang() -> str:
        """Never answers in time."""
        await asyncio.sleep(10)
        return "late"

    outcome = failed(await hang.invoke({}, ctx))
    assert outcome.error_kind == "transient"
    assert outcome.message == "timed out after 0.05s"


async def test_timeout_also_bounds_a_sync_tool(ctx: ToolContext) -> None:
    release = threading.Event()

    @tool(timeout_s=0.05)
    def block() -> str:
        """Blocks its worker thread."""
        release.wait(5)
        return "late"

    try:
        outcome = failed(await block.invoke({}, ctx))
    finally:
        release.set()
    assert outcome.error_kind == "transient"


async def test_tools_own_timeout_error_is_internal_not_a_timeout(ctx: ToolContext) -> None:
    @tool
    async def upstream() -> str:
        """An upstream client timed out."""
        raise TimeoutError("upstream took too long")

    outcome = failed(await upstream.invoke({}, ctx))
    assert outcome.error_kind == "internal"
    assert outcome.message == "TimeoutError: upstream took too long"


async def test_raising_tool_is_an_internal_failure_with_its_message(ctx: ToolContext) -> None:
    @tool
    def boom(x: int) -> int:
        """Fails."""
        raise ValueError(f"bad x {x}")

    outcome = failed(await boom.invoke({"x": 7}, ctx))
    assert outcome.error_kind == "internal"
    assert outcome.message == "ValueError: bad x 7"


async def test_capability_error_kind_is_preserved(ctx: ToolContext) -> None:
    @tool
    async def fetch() -> str:
        """Fetches."""
        raise CapabilityError("unavailable", "service down")

    outcome = failed(await fetch.invoke({}, ctx))
    assert outcome.error_kind == "unavailable"
    assert outcome.message == "service down"


async def test_approval_required_becomes_a_gated_outcome(ctx: ToolContext) -> None:
    @tool
    def wire(amount: int) -> str:
        """Wire money."""
        raise ApprovalRequired(f"wire of {amount} needs a person")

    outcome = await wire.invoke({"amount": 5}, ctx)
    assert outcome == CallGated(gate_kind="approval", reason="wire of 5 needs a person")


async def test_approval_required_keeps_its_gate_kind(ctx: ToolContext) -> None:
    @tool
    def login() -> str:
        """Needs auth."""
        raise ApprovalRequired("sign in first", kind="auth")

    assert await login.invoke({}, ctx) == CallGated(gate_kind="auth", reason="sign in first")


async def test_retry_tool_is_a_transient_failure(ctx: ToolContext) -> None:
    @tool
    def flaky() -> str:
        """Asks to be retried."""
        raise RetryTool("try again")

    outcome = failed(await flaky.invoke({}, ctx))
    assert outcome.error_kind == "transient"
    assert outcome.message == "try again"


async def test_cancellation_propagates_out_of_invoke(ctx: ToolContext) -> None:
    started = asyncio.Event()

    @tool
    async def wait_forever() -> str:
        """Waits."""
        started.set()
        await asyncio.sleep(10)
        return "never"

    task = asyncio.create_task(wait_forever.invoke({}, ctx))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_cancellation_propagates_while_a_sync_tool_runs(ctx: ToolContext) -> None:
    started = threading.Event()
    release = threading.Event()

    @tool(timeout_s=None)
    def block() -> str:
        """Blocks its worker thread."""
        started.set()
        release.wait(5)
        return "late"

    task = asyncio.create_task(block.invoke({}, ctx))
    await asyncio.to_thread(started.wait, 5)
    task.cancel()
    try:
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        release.set()


async def test_no_timeout_when_timeout_s_is_none(ctx: ToolContext) -> None:
    @tool(timeout_s=None)
    async def quick() -> str:
        """Quick."""
        return "ok"

    assert quick.descriptor.timeout_s is None
    assert await quick.invoke({}, ctx) == CallCompleted(output="ok")


def test_tool_is_still_callable_like_the_function() -> None:
    assert add(2, 3) == 5
    assert add.__name__ == "add"
    assert add.__doc__ == "Add two integers."


async def test_async_tool_is_still_callable_like_the_function() -> None:
    @tool
    async def double(x: int) -> int:
        """Double."""
        return 2 * x

    assert await double(4) == 8


def test_tool_satisfies_the_capability_protocol() -> None:
    assert isinstance(add, Capability)


async def test_sync_tool_does_not_block_the_event_loop(ctx: ToolContext) -> None:
    started = threading.Event()
    release = threading.Event()

    @tool
    def wait_for_loop() -> str:
        """Waits until the event loop, still running, releases it."""
        started.set()
        return "released" if release.wait(5) else "the loop was blocked"

    task = asyncio.create_task(wait_for_loop.invoke({}, ctx))
    await asyncio.to_thread(started.wait, 5)
    release.set()  # only possible if the loop is not stuck inside the tool
    assert await task == CallCompleted(output="released")


async def test_a_sync_tool_that_returns_a_coroutine_has_the_coroutine_awaited(
    ctx: ToolContext,
) -> None:
    async def later(n: int) -> int:
        return n * 2

    @tool(effects=set())
    def deferred(n: int) -> Any:
        """Return a coroutine."""
        return later(n)

    outcome = await deferred.invoke({"n": 21}, ctx)
    assert isinstance(outcome, CallCompleted)
    assert outcome.output == "42"


@pytest.mark.parametrize(("value", "text"), [(3, "3"), (2.5, "2.5"), (True, "True"), (None, "")])
async def test_a_scalar_result_reads_as_its_text(ctx: ToolContext, value: Any, text: str) -> None:
    @tool(effects=set())
    def give() -> Any:
        """Return the value."""
        return value

    outcome = await give.invoke({}, ctx)
    assert isinstance(outcome, CallCompleted)
    assert outcome.output == text
