"""Loop decisions are visible when debugging: debug traces on ``reverie.loop`` at the strategy
call sites (docs/observability.md), off by default, content only with ``trace_content``."""

from __future__ import annotations

import logging

import pytest

from reverie import Agent, Runtime, Scope, tool
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="acme", user="ana")
SECRET_ARGUMENT = "acct-7731-private"
SECRET_REPLY = "Your balance is 1,234 crowns."


@tool(effects=set())
def balance(account: str) -> str:
    """Look up an account's balance."""
    return "1234"


def agent() -> Agent:
    model = ScriptedModel([call("balance", account=SECRET_ARGUMENT), reply(SECRET_REPLY)])
    return Agent(name="teller", model=model, tools=[balance])


def loop_traces(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "reverie.loop"]


async def test_loop_decisions_are_traced_at_debug_without_content(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="reverie.loop")
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent(), "what is my balance?", scope=SCOPE)
    traces = loop_traces(caplog)

    assert r.status == "completed"
    joined = "\n".join(traces)
    assert f"run {r.run_id} it0: context planned: window=100, memory=on" in joined
    assert f"run {r.run_id} it0: tools offered: 1 of 1" in joined
    assert (
        f"run {r.run_id} it0: wave of 1 call(s), sequential, 0 refused at admission: balance"
        in joined
    )
    assert "stop strategy after a wave: continue" in joined
    assert "stop strategy after a reply: continue" in joined
    assert f"run {r.run_id} it1: loop stopped: completed (reply)" in joined
    # No message or tool content without trace_content.
    assert SECRET_ARGUMENT not in joined and SECRET_REPLY not in joined


async def test_loop_traces_carry_content_only_with_trace_content(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="reverie.loop")
    async with Runtime.open(":memory:", trace_content=True) as rt:
        r = await rt.run(agent(), "what is my balance?", scope=SCOPE)
    joined = "\n".join(loop_traces(caplog))

    assert r.status == "completed"
    assert f'balance({{"account": "{SECRET_ARGUMENT}"}})' in joined
    assert SECRET_REPLY in joined


async def test_loop_traces_are_off_by_default(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="reverie")
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent(), "what is my balance?", scope=SCOPE)

    assert r.status == "completed"
    assert loop_traces(caplog) == []
