"""Run logs under ``reverie.*``: lifecycle at INFO, retries and degradations at WARNING,
details at DEBUG (docs/observability.md)."""

from __future__ import annotations

import logging

import pytest

from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.errors import RetryTool
from reverie.testing import ScriptedModel, call, error, reply

SCOPE = Scope(tenant="acme", user="ana")


@tool(effects={"write"}, needs_approval=True, idempotent=False)
def send_email(to: str, body: str) -> str:
    """Send an email."""
    return f"sent to {to}"


@tool(effects=set())
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == level and r.name.startswith("reverie.")
    ]


async def test_run_lifecycle_is_logged_at_info_started_blocked_resumed_finished_with_usage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="reverie")
    model = ScriptedModel([call("send_email", to="bob@x", body="hi"), reply("done")])
    agent = Agent(name="mailer", model=model, tools=[send_email])
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "mail bob", scope=SCOPE)
        assert r.gate is not None
        r2 = await rt.approve(r.gate.ref)
    info = [m for m in messages(caplog, logging.INFO) if r.run_id in m]
    assert info[0].startswith(f"run {r.run_id} started (agent mailer")
    assert info[1].startswith(f"run {r.run_id} blocked on gate {r.gate.ref}")
    assert info[2].startswith(f"run {r.run_id} resumed (agent mailer")
    assert info[3] == (
        f"run {r.run_id} finished: completed (model calls {r2.usage.model_calls}, tokens "
        f"{r2.usage.input_tokens} in / {r2.usage.output_tokens} out, tool calls "
        f"{r2.usage.capability_calls}, ${r2.usage.usd:.4f})"
    )
    assert len(info) == 4
    assert not messages(caplog, logging.DEBUG)  # details stay below the level asked for


async def test_a_failed_run_is_logged_at_info_with_its_failure_kind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="reverie")
    model = ScriptedModel([error("content_filtered", "refused")])
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(Agent(name="calc", model=model, tools=[add]), "hi", scope=SCOPE)
    assert r.status == "failed"
    kind = r.exit.kind  # type: ignore[union-attr]
    assert any(
        m.startswith(f"run {r.run_id} finished: failed ({kind})")
        for m in messages(caplog, logging.INFO)
    )


async def test_retries_are_logged_at_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="reverie")
    model = ScriptedModel([error("transient", "try again"), reply("fine")])
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(Agent(name="calc", model=model, tools=[add]), "hi", scope=SCOPE)
    assert r.status == "completed"
    warnings = messages(caplog, logging.WARNING)
    assert f"run {r.run_id}: model scripted:scripted call failed (transient)" in warnings
    assert f"run {r.run_id}: retrying the model call (attempt 1)" in warnings


async def test_a_poisoned_hook_is_a_degradation_logged_at_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="reverie")

    async def broken(ctx: object) -> None:
        raise RuntimeError("hook bug")

    model = ScriptedModel([call("add", a=1, b=2), reply("3")])
    async with Runtime.open(":memory:") as rt:
        rt.hooks.register("after_capability", broken, name="audit")
        r = await rt.run(Agent(name="calc", model=model, tools=[add]), "hi", scope=SCOPE)
    assert r.status == "completed"
    assert any(
        m.startswith("hook audit (trusted) failed at after_capability")
        for m in messages(caplog, logging.WARNING)
    )


async def test_details_of_a_run_are_logged_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="reverie")
    model = ScriptedModel([call("add", a=1, b=2), reply("3")])
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(Agent(name="calc", model=model, tools=[add]), "hi", scope=SCOPE)
    debug = [m for m in messages(caplog, logging.DEBUG) if r.run_id in m]
    assert any(m.startswith(f"run {r.run_id}: model_request ") for m in debug)
    assert any(m.startswith(f"run {r.run_id}: tool_finished ") for m in debug)


async def test_tool_retries_and_limits_are_logged_at_warning_and_first_attempts_are_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="reverie")
    tries: list[int] = []

    @tool(effects=set())
    def flaky(n: int) -> int:
        """Fail once, then answer."""
        tries.append(n)
        if len(tries) == 1:
            raise RetryTool("busy")
        return n

    model = ScriptedModel([call("flaky", n=1), call("flaky", n=2), reply("never")])
    agent = Agent(name="calc", model=model, tools=[flaky], limits=Limits(max_iterations=1))
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "hi", scope=SCOPE)
    warnings = [m for m in messages(caplog, logging.WARNING) if r.run_id in m]
    assert warnings.count(f"run {r.run_id}: retrying tool flaky (attempt 1)") == 1
    assert f"run {r.run_id}: limit reached: max_iterations (finalize)" in warnings
    assert not any("retrying the model call" in m for m in warnings)
