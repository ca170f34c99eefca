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


async def test_a_wave_with_denied_calls_records_how_many_were_denied() -> None:
    ran: list[str] = []

    @tool(effects={"write"})
    async def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return "deleted"

    async def keep_etc(ctx: CapabilityHookContext) -> Deny | None:
        return Deny("not under /etc") if str(ctx.arguments["path"]).startswith("/etc") else None

    model = ScriptedModel(
        [
            calls(
                ("delete_file", {"path": "/etc/a"}),
                ("delete_file", {"path": "/tmp/b"}),
                ("delete_file", {"path": "/etc/c"}),
            ),
            call("delete_file", path="/tmp/d"),
            reply("done"),
        ]
    )
    agent = Agent(name="a", model=model, tools=[delete_file])
    async with Runtime.open(":memory:") as rt:
        rt.hooks.register("before_capability", keep_etc, name="keep-etc")
        handle = await rt.start(agent, "tidy", scope=SCOPE)
        events = [e async for e in handle.events()]
        r = await handle.result()

    assert r.status == "completed"
    assert ran == ["/tmp/b", "/tmp/d"]
    denials = [e for e in events if e.kind == "calls_denied"]
    # One record for the wave that had denials, none for the wave without.
    assert [(e.calls, e.denied, e.tools, e.hidden) for e in denials] == [
        (3, 2, ("delete_file", "delete_file"), ())
    ]


async def test_a_call_denied_by_a_hook_is_journaled_and_stays_denied_when_its_wave_resumes() -> (
    None
):
    ran: list[str] = []
    asked: list[str] = []

    @tool(effects={"write"})
    async def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return "deleted"

    @tool(effects={"write"}, needs_approval=True)
    async def deploy() -> str:
        """Deploy."""
        ran.append("deploy")
        return "deployed"

    async def deny_once(ctx: CapabilityHookContext) -> Deny | None:
        # A policy that would answer differently if asked again (a rate limit, a clock…).
        if ctx.tool != "delete_file":
            return None
        asked.append(ctx.call_id)
        return Deny("not now") if len(asked) == 1 else None

    model = ScriptedModel([calls(("delete_file", {"path": "/x"}), ("deploy", {})), reply("done")])
    agent = Agent(name="a", model=model, tools=[delete_file, deploy])
    store = MemoryStore()
    async with Runtime(store) as rt:
        rt.hooks.register("before_capability", deny_once, name="deny-once")
        blocked = await rt.run(agent, "tidy and ship", scope=SCOPE)
        assert blocked.gate is not None
        rows = await rt.runs.thread_items(blocked.thread_id)
        key = f"{next(r.ref for r in rows if r.tool_calls)}#0"
        journal = await rt.store.journal_get(blocked.run_id, [key])
        done = await rt.approve(blocked.gate.ref)

    entry = journal[key]
    assert entry.state == "finished"
    assert dict(entry.outcome or {}).get("kind") == "denied"
    assert done.status == "completed"
    assert asked == [key]  # asked once: the resumed wave took the denial from the journal
    assert ran == ["deploy"]


@dataclass(frozen=True, slots=True)
class HideAdmin:
    """A capability strategy that hides the ``admin`` tool from the model."""

    def filter(self, state: LoopExecutionState, surface: Surface) -> Surface:
        kept = tuple(d for d in surface.descriptors if d.name != "admin")
        return Surface(descriptors=kept, version=f"{surface.version}-no-admin")

    def describe(self) -> Mapping[str, Any]:
        return {"hide": ["admin"]}


async def test_a_call_to_a_tool_hidden_from_the_model_is_a_recorded_denial_and_a_security_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[str] = []

    @tool(effects={"write"})
    def admin() -> str:
        """Administer everything."""
        ran.append("admin")
        return "done"

    @tool(effects=set())
    def status() -> str:
        """Report the status."""
        return "green"

    family = LoopFamily(id="no_admin", capabilities=HideAdmin())
    model = ScriptedModel([call("admin"), reply("ok")])
    agent = Agent(name="a", model=model, tools=[admin, status], family="no_admin")
    caplog.set_level(logging.WARNING, logger="reverie")
    caplog.set_level(logging.DEBUG, logger="reverie.loop")  # the filter's trace names it
    async with Runtime.open(":memory:", families=[family]) as rt:
        handle = await rt.start(agent, "take over", scope=SCOPE)
        events: list[RunEvent] = [e async for e in handle.events()]
        r = await handle.result()
        rows = await rt.runs.thread_items(r.thread_id)

    assert r.status == "completed" and ran == []
    [finished] = [e for e in events if e.kind == "tool_finished"]
    assert (finished.tool, finished.outcome) == ("admin", "denied")
    [denial] = [e for e in events if e.kind == "calls_denied"]
    assert (denial.denied, denial.tools, denial.hidden) == (1, ("admin",), ("admin",))
    [result_row] = [row for row in rows if row.role == "tool"]
    assert result_row.meta["outcome"] == "denied"
    assert result_row.content.startswith("denied:")
    assert "available tools: status" in result_row.content
    warnings = [
        rec.getMessage()
        for rec in caplog.records
        if rec.name.startswith("reverie") and rec.levelno == logging.WARNING
    ]
    assert any("admin" in m and "security event" in m for m in warnings), warnings
    traces = [rec.getMessage() for rec in caplog.records if rec.name == "reverie.loop"]
    assert any("tools offered: 1 of 2 (hidden: admin)" in m for m in traces), traces
