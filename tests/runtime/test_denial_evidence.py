"""Denials leave evidence, and a denial is final (DESIGN §4.2, §11; docs/loop.md, docs/hooks.md).

A denied call is counted per wave (the ``calls_denied`` event), a hook's denial is journaled
so a resumed wave never asks the hook again, a call to a tool hidden from the model is a
recorded denial and a security event, and a ``Retry`` decision on a denied call ends the run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from reverie import Agent, Runtime, Scope, tool
from reverie.core.capability import Surface
from reverie.core.events import RunEvent
from reverie.core.exits import Failed
from reverie.hooks import CapabilityHookContext, Deny
from reverie.loop.family import LoopFamily
from reverie.loop.state import LoopExecutionState
from reverie.loop.strategies import DefaultRecovery, RecoveryDecision, Retry, SkipResult
from reverie.store.memory import MemoryStore
from reverie.testing import ScriptedModel, call, calls, reply

SCOPE = Scope(tenant="acme", user="ana")


@dataclass(frozen=True, slots=True)
class RetryEverything:
    """A recovery strategy that asks to retry every failed or denied call once."""

    def on_tool_error(self, error_kind: str, attempt: int) -> RecoveryDecision:
        return Retry(backoff_s=0.0) if attempt < 1 else SkipResult()

    def on_model_error(self, error_kind: str, attempt: int) -> RecoveryDecision:
        return DefaultRecovery().on_model_error(error_kind, attempt)

    def describe(self) -> Mapping[str, Any]:
        return {"retry": "everything"}


async def test_a_retry_decision_on_a_denied_call_aborts_the_run() -> None:
    ran: list[str] = []
    asked: list[str] = []

    @tool(effects={"write"})
    async def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return "deleted"

    async def no_deletes(ctx: CapabilityHookContext) -> Deny:
        asked.append(ctx.tool)
        return Deny("deletes are off")

    family = LoopFamily(id="retrying", recovery=RetryEverything())
    model = ScriptedModel([call("delete_file", path="/x"), reply("done")])
    agent = Agent(name="a", model=model, tools=[delete_file], family="retrying")
    async with Runtime.open(":memory:", families=[family]) as rt:
        rt.hooks.register("before_capability", no_deletes, name="no-deletes")
        r = await rt.run(agent, "delete /x", scope=SCOPE)

    assert r.status == "failed"
    assert isinstance(r.exit, Failed) and r.exit.kind == "policy_denied"
    assert "delete_file" in r.exit.safe_summary
    assert asked == ["delete_file"]  # the policy was asked once, never again
    assert ran == []
