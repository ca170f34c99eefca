"""A run that is over runs nothing (DESIGN §20): its live subagent runs end with it, their
gates close, and approving one afterwards is refused, across runtimes and after a crash."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from reverie import Agent, Runtime, Scope, tool
from reverie.core.exits import Failed, exit_to_dict
from reverie.errors import GateResolvedError, RunEndedError
from reverie.testing import ScriptedModel, call, reply
from runtime.runtime_support import NEEDS_POSTGRES, postgres_database, sqlite_database

SCOPE = Scope(tenant="acme", user="ana")
Database = Callable[[Path], AbstractAsyncContextManager[str]]
DATABASES = [
    pytest.param(sqlite_database, id="sqlite"),
    pytest.param(postgres_database, id="postgres", marks=NEEDS_POSTGRES),
]


def agents(paid: list[int]) -> tuple[Agent, Agent]:
    """A buyer whose ``settle`` subagent (the payer) pays only with a person's approval."""

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
    return buyer, payer


@pytest.mark.parametrize("database", DATABASES)
async def test_a_run_that_is_over_ends_its_subagents_and_their_gates_in_every_runtime(
    database: Database, tmp_path: Path
) -> None:
    paid: list[int] = []
    buyer, payer = agents(paid)
    async with database(tmp_path) as url, Runtime.open(url, agents=[buyer, payer]) as here:
        # An unbound turn cannot wait for a person: it fails when its subagent blocks.
        run_id = await here.unbound.submit(
            system_prompt="Settle invoices.",
            messages=["settle the invoice"],
            tools=buyer.tools,
            agent=buyer,
            scope=SCOPE,
        )
        result = await here.unbound.result(run_id)
        assert isinstance(result.exit, Failed) and result.exit.kind == "gate_not_supported"
        async with Runtime.open(url, agents=[buyer, payer]) as there:
            pending = await there.gates.list(scope=SCOPE)
            [gate] = await there.gates.list(scope=SCOPE, status=None)
            with pytest.raises((GateResolvedError, RunEndedError)):
                await there.approve(gate.ref)
            [child] = [r for r in await there.runs.list() if r.agent_name == "payer"]
    assert pending == []
    assert paid == []
    assert child.status == "cancelled"
    assert (child.exit or {})["reason"] == "its parent run ended (failed: gate_not_supported)"


@pytest.mark.parametrize("database", DATABASES)
@pytest.mark.parametrize("sweep", ["recover", "approve", "resume_parent", "resume_child"])
async def test_a_crash_between_a_runs_end_and_its_subagents_is_finished_by_the_next_sweep(
    database: Database, sweep: str, tmp_path: Path
) -> None:
    paid: list[int] = []
    buyer, payer = agents(paid)
    async with database(tmp_path) as url:
        async with Runtime.open(url, agents=[buyer, payer]) as first:
            blocked = await first.run(buyer, "settle the invoice", scope=SCOPE)
            assert blocked.status == "blocked" and blocked.gate is not None
            [child] = [r for r in await first.runs.list() if r.agent_name == "payer"]
            # The parent's end is written, and the process dies before its child's.
            ended = Failed(kind="driver_bug", safe_summary="the worker stopped")
            await first.store.set_run_status(
                blocked.run_id, "failed", fence=None, exit=exit_to_dict(ended)
            )
        async with Runtime.open(url, agents=[buyer, payer]) as second:
            if sweep == "recover":
                await second.recover()
            elif sweep == "approve":
                with pytest.raises(RunEndedError):
                    await second.approve(blocked.gate.ref)
            elif sweep == "resume_parent":
                await second.resume(blocked.run_id)
            else:
                await second.resume(child.run_id)
            pending = await second.gates.list(scope=SCOPE)
            with pytest.raises((GateResolvedError, RunEndedError)):
                await second.approve(blocked.gate.ref)
            after = await second.runs.get(child.run_id)
    assert pending == []
    assert paid == []
    assert after.status == "cancelled"
    assert (after.exit or {})["reason"] == "its parent run ended (failed: driver_bug)"


async def test_a_run_that_is_over_ends_its_descendants_transitively() -> None:
    paid: list[int] = []
    buyer, payer = agents(paid)
    manager = Agent(
        name="manager",
        model=ScriptedModel([call("settle", input="pay it"), reply("settled")]),
        tools=buyer.tools,  # the payer as ``settle``
    )
    head = Agent(
        name="head",
        model=ScriptedModel([call("manage", input="get the invoice paid"), reply("done")]),
        tools=[manager.as_tool(name="manage")],
    )
    async with Runtime.open(":memory:", agents=[head, manager, payer]) as rt:
        run_id = await rt.unbound.submit(
            system_prompt="Run the office.",
            messages=["the invoice"],
            tools=head.tools,
            agent=head,
            scope=SCOPE,
        )
        result = await rt.unbound.result(run_id)
        pending = await rt.gates.list(scope=SCOPE)
        runs = {r.agent_name: r for r in await rt.runs.list()}
    assert isinstance(result.exit, Failed) and result.exit.kind == "gate_not_supported"
    assert pending == [] and paid == []
    assert runs["manager"].status == runs["payer"].status == "cancelled"
    assert (runs["manager"].exit or {})["reason"] == (
        "its parent run ended (failed: gate_not_supported)"
    )
