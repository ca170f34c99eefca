"""Approving a gate with edited arguments, through ``Runtime.approve`` (DESIGN §20)."""

from __future__ import annotations

from typing import Any

import pytest

from reverie import Agent, Runtime, Scope, tool
from reverie.core.canonical import digest
from reverie.errors import GateEditError, GateResolvedError
from reverie.hooks import CapabilityHookContext, Deny
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="acme", user="ana")


def payments(log: list[dict[str, Any]], *, editable: bool = True) -> list[object]:
    @tool(effects={"write"}, needs_approval=True, editable=editable)
    async def pay(to: str, amount: int) -> str:
        """Pay an amount to someone."""
        log.append({"to": to, "amount": amount})
        return f"paid {amount} to {to}"

    @tool(effects={"write"}, needs_approval=True)
    async def refund(to: str, amount: int) -> str:
        """Refund someone."""
        log.append({"refund": to, "amount": amount})
        return f"refunded {amount} to {to}"

    return [pay, refund]


def tool_messages(model: ScriptedModel) -> list[str]:
    return [str(m.content) for m in model.requests[-1].messages if m.role == "tool"]


async def blocked_payment(
    rt: Runtime, log: list[dict[str, Any]], *, editable: bool = True
) -> tuple[str, ScriptedModel]:
    model = ScriptedModel([call("pay", to="bob", amount=500), reply("done")])
    agent = Agent(name="payer", model=model, tools=payments(log, editable=editable))
    r = await rt.run(agent, "pay bob", scope=SCOPE)
    assert r.status == "blocked" and r.gate is not None
    return r.gate.ref, model


async def test_approve_with_edited_arguments_runs_the_same_tool_with_the_edit() -> None:
    log: list[dict[str, Any]] = []
    async with Runtime.open(":memory:") as rt:
        ref, _ = await blocked_payment(rt, log)
        r = await rt.approve(ref, arguments={"to": "bob", "amount": 50}, by="carol")
        assert r.status == "completed"
        assert log == [{"to": "bob", "amount": 50}]


async def test_the_model_is_told_a_person_edited_the_call_and_sees_the_difference() -> None:
    log: list[dict[str, Any]] = []
    async with Runtime.open(":memory:") as rt:
        ref, model = await blocked_payment(rt, log)
        await rt.approve(ref, arguments={"to": "bob", "amount": 50})
        [result] = tool_messages(model)
        assert "approved this call with edited arguments" in result
        assert "amount: 500 -> 50" in result
        assert result.endswith("paid 50 to bob")
        # The model's own call stays in the transcript as it made it.
        [made] = [m for m in model.requests[-1].messages if m.tool_calls]
        assert dict(made.tool_calls[0].arguments) == {"to": "bob", "amount": 500}


async def test_the_gate_records_who_approved_when_and_digests_of_shown_and_approved() -> None:
    log: list[dict[str, Any]] = []
    async with Runtime.open(":memory:") as rt:
        ref, _ = await blocked_payment(rt, log)
        await rt.approve(ref, arguments={"to": "bob", "amount": 50}, by="carol")
        gate = await rt.gates.get(ref)
        assert gate.status == "approved" and gate.resolved_by == "carol"
        assert gate.resolved_at is not None
        assert gate.shown_digest == digest({"to": "bob", "amount": 500})
        assert gate.approved_digest == digest({"to": "bob", "amount": 50})
        assert gate.edited_arguments == {"to": "bob", "amount": 50}


async def test_an_approval_without_edit_records_equal_digests_and_no_edit() -> None:
    log: list[dict[str, Any]] = []
    async with Runtime.open(":memory:") as rt:
        ref, model = await blocked_payment(rt, log)
        await rt.approve(ref, by="carol")
        gate = await rt.gates.get(ref)
        assert gate.shown_digest == gate.approved_digest and gate.edited_arguments is None
        assert tool_messages(model) == ["paid 500 to bob"]


async def test_edited_arguments_not_fitting_the_schema_are_refused_and_the_gate_stays_pending() -> (
    None
):
    log: list[dict[str, Any]] = []
    async with Runtime.open(":memory:") as rt:
        ref, _ = await blocked_payment(rt, log)
        bad_edits: list[dict[str, Any]] = [
            {"to": "bob", "amount": "lots"},
            {"to": "bob"},
            {"to": "b", "amount": 5, "x": 1},
        ]
        for bad in bad_edits:
            with pytest.raises(GateEditError):
                await rt.approve(ref, arguments=bad)
        assert (await rt.gates.get(ref)).status == "pending"
        assert log == []
        r = await rt.approve(ref, arguments={"to": "bob", "amount": 5})
        assert r.status == "completed" and log == [{"to": "bob", "amount": 5}]


async def test_a_tool_declared_not_editable_refuses_edited_arguments_and_stays_pending() -> None:
    log: list[dict[str, Any]] = []
    async with Runtime.open(":memory:") as rt:
        ref, _ = await blocked_payment(rt, log, editable=False)
        with pytest.raises(GateEditError, match="editable=False"):
            await rt.approve(ref, arguments={"to": "bob", "amount": 1})
        gate = await rt.gates.get(ref)
        assert gate.status == "pending" and gate.resolved_by is None
        r = await rt.approve(ref)  # as made: allowed
        assert r.status == "completed" and log == [{"to": "bob", "amount": 500}]


async def test_the_tool_cannot_change_only_its_arguments() -> None:
    # Arguments of another tool (refund's shape is the same) still run the gated tool: there
    # is no way to name another tool, and a key the tool does not take is refused.
    log: list[dict[str, Any]] = []
    async with Runtime.open(":memory:") as rt:
        ref, _ = await blocked_payment(rt, log)
        with pytest.raises(GateEditError):
            await rt.approve(ref, arguments={"name": "refund", "to": "bob", "amount": 1})
        await rt.approve(ref, arguments={"to": "eve", "amount": 1})
        assert log == [{"to": "eve", "amount": 1}]  # pay ran, refund never did


async def test_a_before_capability_hook_that_denies_the_edited_call_wins() -> None:
    log: list[dict[str, Any]] = []
    seen: list[dict[str, Any]] = []

    async def no_payments_to_eve(ctx: CapabilityHookContext) -> Deny | None:
        seen.append(dict(ctx.arguments))
        return Deny("payments to eve are blocked") if ctx.arguments.get("to") == "eve" else None

    async with Runtime.open(":memory:") as rt:
        rt.hooks.register("before_capability", no_payments_to_eve, name="no-eve")
        ref, model = await blocked_payment(rt, log)
        r = await rt.approve(ref, arguments={"to": "eve", "amount": 500})
        assert r.status == "completed"
        assert log == []  # the hook's denial of the edited call won over the approval
        assert seen[-1] == {"to": "eve", "amount": 500}
        [result] = tool_messages(model)
        assert "edited arguments" in result and "eve" in result


async def test_a_second_resolution_after_an_edited_approval_is_a_typed_error() -> None:
    log: list[dict[str, Any]] = []
    async with Runtime.open(":memory:") as rt:
        ref, _ = await blocked_payment(rt, log)
        await rt.approve(ref, arguments={"to": "bob", "amount": 5})
        with pytest.raises(GateResolvedError):
            await rt.approve(ref, arguments={"to": "bob", "amount": 6})
        assert log == [{"to": "bob", "amount": 5}]


async def test_a_secret_left_as_the_mask_keeps_the_original_and_never_reaches_the_tool() -> None:
    received: list[dict[str, Any]] = []

    @tool(effects={"network"}, needs_approval=True)
    async def call_api(url: str, api_key: str) -> str:
        """Call an API."""
        received.append({"url": url, "api_key": api_key})
        return "ok"

    model = ScriptedModel(
        [call("call_api", url="https://a.test", api_key="sk-live-123456"), reply("done")]
    )
    agent = Agent(name="caller", model=model, tools=[call_api])
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "call it", scope=SCOPE)
        assert r.gate is not None
        shown = dict(r.gate.arguments)
        assert shown["api_key"] != "sk-live-123456"  # masked for the person deciding
        await rt.approve(r.gate.ref, arguments={**shown, "url": "https://b.test"})
        assert received == [{"url": "https://b.test", "api_key": "sk-live-123456"}]
        gate = await rt.gates.get(r.gate.ref)
        assert "sk-live-123456" not in repr(gate)
        assert "sk-live-123456" not in tool_messages(model)[0]


async def test_the_mask_where_no_secret_was_masked_is_refused() -> None:
    @tool(effects={"network"}, needs_approval=True)
    async def login(user: str, password: str | None = None) -> str:
        """Log in."""
        return "in"

    model = ScriptedModel([call("login", user="ana"), reply("done")])
    agent = Agent(name="login", model=model, tools=[login])
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "log in", scope=SCOPE)
        assert r.gate is not None
        with pytest.raises(GateEditError, match="mask"):
            await rt.approve(r.gate.ref, arguments={"user": "ana", "password": "[redacted]"})
        assert (await rt.gates.get(r.gate.ref)).status == "pending"


async def test_a_refused_edit_never_quotes_a_secret_value_in_its_error() -> None:
    @tool(effects={"network"}, needs_approval=True)
    async def connect(host: str, api_key: str, retries: int) -> str:
        """Connect."""
        return "connected"

    model = ScriptedModel([call("connect", host="a", api_key="k-1234567", retries=1), reply("ok")])
    agent = Agent(name="c", model=model, tools=[connect])
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "connect", scope=SCOPE)
        assert r.gate is not None
        with pytest.raises(GateEditError) as refused:
            await rt.approve(
                r.gate.ref, arguments={"host": "a", "api_key": ["sk-new-secret-99"], "retries": 1}
            )
        assert "sk-new-secret-99" not in str(refused.value)
        assert (await rt.gates.get(r.gate.ref)).status == "pending"
