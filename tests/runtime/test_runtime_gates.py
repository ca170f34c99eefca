"""Gates and approvals through the public runtime API (DESIGN §8)."""

from __future__ import annotations

from typing import Any

import pytest

from reverie import Agent, Runtime, Scope, tool
from reverie.core.exits import Blocked
from reverie.errors import GateResolvedError, UnknownAgentError
from reverie.testing import ScriptedModel, call, calls, reply

SCOPE = Scope(tenant="acme", user="ana")


def make_tools(log: list[str]) -> list[object]:
    @tool(effects={"write"}, needs_approval=True, idempotent=False)
    async def send_email(to: str, body: str) -> str:
        """Send an email."""
        log.append(f"send:{to}")
        return f"sent to {to}"

    @tool(effects={"read"})
    async def lookup(key: str) -> str:
        """Look something up."""
        log.append(f"lookup:{key}")
        return f"value of {key}"

    return [send_email, lookup]


async def test_needs_approval_blocks_the_run_with_a_pending_gate() -> None:
    log: list[str] = []
    model = ScriptedModel([call("send_email", to="bob@x", body="hi"), reply("done")])
    agent = Agent(name="mailer", model=model, tools=make_tools(log))
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "mail bob", scope=SCOPE)
        assert r.status == "blocked"
        assert isinstance(r.exit, Blocked)
        assert r.gate is not None and r.gate.tool == "send_email"
        assert r.gate.arguments == {"to": "bob@x", "body": "hi"}
        assert log == []  # nothing ran
        pending = await rt.store.list_gates(scope=SCOPE)
        assert [g.ref for g in pending] == [r.gate.ref]


async def test_approve_runs_the_call_and_completes() -> None:
    log: list[str] = []
    model = ScriptedModel([call("send_email", to="bob@x", body="hi"), reply("done")])
    agent = Agent(name="mailer", model=model, tools=make_tools(log))
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "mail bob", scope=SCOPE)
        assert r.gate is not None
        r2 = await rt.approve(r.gate.ref)
        assert r2.status == "completed" and r2.text == "done"
        assert log == ["send:bob@x"]
        tool_msgs = [m for m in model.requests[-1].messages if m.role == "tool"]
        assert [m.content for m in tool_msgs] == ["sent to bob@x"]


async def test_deny_tells_the_model_and_the_run_continues() -> None:
    log: list[str] = []
    model = ScriptedModel([call("send_email", to="bob@x", body="hi"), reply("ok, not sent")])
    agent = Agent(name="mailer", model=model, tools=make_tools(log))
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "mail bob", scope=SCOPE)
        assert r.gate is not None
        r2 = await rt.deny(r.gate.ref, reason="not today")
        assert r2.status == "completed"
        assert log == []
        tool_msgs = [m for m in model.requests[-1].messages if m.role == "tool"]
        assert "denied" in tool_msgs[0].content and "not today" in tool_msgs[0].content


async def test_second_resolution_of_a_gate_is_a_typed_error() -> None:
    model = ScriptedModel([call("send_email", to="bob@x", body="hi"), reply("done")])
    agent = Agent(name="mailer", model=model, tools=make_tools([]))
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "mail bob", scope=SCOPE)
        assert r.gate is not None
        await rt.approve(r.gate.ref)
        with pytest.raises(GateResolvedError):
            await rt.approve(r.gate.ref)
        with pytest.raises(GateResolvedError):
            await rt.deny(r.gate.ref)


async def test_ungated_calls_of_the_same_wave_keep_their_results() -> None:
    log: list[str] = []
    model = ScriptedModel(
        [
            calls(
                ("send_email", {"to": "bob@x", "body": "hi"}),
                ("lookup", {"key": "a"}),
                ("lookup", {"key": "b"}),
            ),
            reply("done"),
        ]
    )
    agent = Agent(name="mailer", model=model, tools=make_tools(log))
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "go", scope=SCOPE)
        assert r.status == "blocked"
        assert sorted(log) == ["lookup:a", "lookup:b"]
        assert r.gate is not None
        r2 = await rt.approve(r.gate.ref)
        assert r2.status == "completed"
        # The reads were not re-run, and every result reached the model in the model's order.
        assert sorted(log) == ["lookup:a", "lookup:b", "send:bob@x"]
        tool_msgs = [m.content for m in model.requests[-1].messages if m.role == "tool"]
        assert tool_msgs == ["sent to bob@x", "value of a", "value of b"]


async def test_approval_predicate_gates_only_matching_arguments() -> None:
    log: list[str] = []

    @tool(effects={"write"}, needs_approval=lambda args: args["amount"] > 100)
    async def pay(amount: int) -> str:
        """Pay an amount."""
        log.append(f"pay:{amount}")
        return "paid"

    model = ScriptedModel([call("pay", amount=5), call("pay", amount=500), reply("done")])
    agent = Agent(name="payer", model=model, tools=[pay])
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "pay", scope=SCOPE)
        assert log == ["pay:5"]
        assert r.status == "blocked" and r.gate is not None
        assert r.gate.arguments == {"amount": 500}


async def test_gate_arguments_redact_secret_looking_values() -> None:
    @tool(effects={"network"}, needs_approval=True)
    async def login(user: str, password: str) -> str:
        """Log in."""
        return "ok"

    model = ScriptedModel([call("login", user="ana", password="hunter2"), reply("in")])
    agent = Agent(name="login", model=model, tools=[login])
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "log in", scope=SCOPE)
        assert r.gate is not None
        assert r.gate.arguments == {"user": "ana", "password": "[redacted]"}


async def test_secrets_inside_lists_are_masked_in_the_gate_and_the_call_runs_with_them() -> None:
    received: list[Any] = []

    @tool(effects={"write"}, needs_approval=True)
    async def sync_accounts(accounts: list[dict[str, Any]], notes: list[Any]) -> str:
        """Sync accounts."""
        received.append((accounts, notes))
        return "synced"

    accounts = [{"name": "main", "password": "hunter2-main"}, {"name": "spare", "apiKey": "k-9"}]
    notes = [["plain", {"db": {"secret": "s-1", "host": "h"}}]]
    model = ScriptedModel([call("sync_accounts", accounts=accounts, notes=notes), reply("done")])
    agent = Agent(name="syncer", model=model, tools=[sync_accounts])
    shown = {
        "accounts": [
            {"name": "main", "password": "[redacted]"},
            {"name": "spare", "apiKey": "[redacted]"},
        ],
        "notes": [["plain", {"db": {"secret": "[redacted]", "host": "h"}}]],
    }
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "sync", scope=SCOPE)
        assert r.gate is not None
        assert r.gate.arguments == shown
        [stored] = await rt.gates.list(scope=SCOPE)
        assert stored.arguments == shown
        done = await rt.approve(r.gate.ref)
    assert done.status == "completed"
    assert received == [(accounts, notes)]  # masking is for display: the call has its values


async def test_unbound_family_aborts_approval_gates() -> None:
    model = ScriptedModel([call("send_email", to="bob@x", body="hi"), reply("done")])
    agent = Agent(name="mailer", model=model, tools=make_tools([]))
    async with Runtime.open(":memory:") as rt:
        handle = await rt.start(agent, "go", scope=SCOPE, profile="unbound", has_actor=False)
        r = await handle.result()
        assert r.status == "failed"
        assert r.exit.kind == "gate_not_supported"  # type: ignore[union-attr]


async def test_approving_a_run_whose_agent_is_not_registered_is_a_typed_error() -> None:
    model = ScriptedModel([call("send_email", to="bob@x", body="hi"), reply("done")])
    agent = Agent(name="mailer", model=model, tools=make_tools([]))
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "go", scope=SCOPE)
        assert r.gate is not None
        rt.unregister(agent)  # as a process that never registered the agent
        with pytest.raises(UnknownAgentError, match="mailer"):
            await rt.approve(r.gate.ref)
        # Nothing changed: the gate is still pending.
        assert (await rt.store.get_gate(r.gate.ref)).status == "pending"


async def test_cancelling_a_blocked_run_closes_its_gate() -> None:
    model = ScriptedModel([call("send_email", to="bob@x", body="hi"), reply("done")])
    agent = Agent(name="mailer", model=model, tools=make_tools([]))
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "go", scope=SCOPE)
        assert r.gate is not None
        await rt.cancel(r.run_id)
        assert (await rt.store.get_run(r.run_id)).status == "cancelled"
        assert (await rt.store.get_gate(r.gate.ref)).status == "denied"
        assert await rt.store.list_gates(scope=SCOPE) == []


async def test_a_blocked_result_reports_the_usage_so_far() -> None:
    model = ScriptedModel([call("send_email", to="bob@x", body="hi"), reply("done")])
    agent = Agent(name="mailer", model=model, tools=make_tools([]))
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "go", scope=SCOPE)
    assert r.status == "blocked"
    assert r.usage.model_calls == 1 and r.usage.capability_calls == 1
