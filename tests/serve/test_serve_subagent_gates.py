"""A chat turn whose subagent needs approval fails 403, and the child's gate dies with it."""

from __future__ import annotations

import openai
import pytest

from reverie import Agent, tool
from reverie.testing import ScriptedModel, call, reply
from serve.serve_support import serving


async def test_a_run_that_is_over_runs_nothing_a_chat_turns_subagent_gate_closes() -> None:
    paid: list[int] = []

    @tool(effects={"write"}, needs_approval=True)
    def pay(amount: int) -> str:
        """Pay an invoice."""
        paid.append(amount)
        return "paid"

    payer = Agent(
        name="payer",
        model=ScriptedModel([call("pay", amount=120), reply("paid it")]),
        tools=[pay],
    )
    buyer = Agent(
        name="buyer",
        model=ScriptedModel([call("settle", input="pay the invoice"), reply("done")]),
        tools=[payer.as_tool(name="settle")],
    )
    async with serving(buyer) as srv, srv.openai() as client:
        with pytest.raises(openai.PermissionDeniedError) as caught:
            await client.chat.completions.create(
                model="buyer", messages=[{"role": "user", "content": "settle the invoice"}]
            )
        listed = (await srv.ana.get("/v1/gates")).json()["data"]
        every = await srv.rt.gates.list(status=None)
        approvals = [await srv.ana.post(f"/v1/gates/{g.ref}/approve") for g in every]
        children = [r for r in await srv.rt.runs.list() if r.agent_name == "payer"]

    assert "gate_not_supported" in caught.value.message
    assert listed == []  # the child's gate closed with the turn
    assert every, "the child reached its gate"
    assert all(r.status_code in (404, 409) for r in approvals), [r.text for r in approvals]
    assert paid == []  # the payment never ran for a turn that is over
    [child] = children
    assert child.status == "cancelled"
    assert "parent" in str((child.exit or {}).get("reason"))
