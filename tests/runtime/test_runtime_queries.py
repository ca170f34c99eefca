"""``rt.runs`` and ``rt.gates``: the read-only views the command line and the server use."""

from __future__ import annotations

from pathlib import Path

import pytest

from reverie import Agent, Runtime, Scope, tool
from reverie.errors import NotFoundError
from reverie.testing import ScriptedModel, call, reply

ANA = Scope(tenant="acme", user="ana")
BOB = Scope(tenant="acme", user="bob")


@tool(effects={"write"}, needs_approval=True)
async def send_email(to: str) -> str:
    """Send an email."""
    return f"sent to {to}"


def mailer() -> Agent:
    model = ScriptedModel([call("send_email", to="bob@x"), reply("done")])
    return Agent(name="mailer", model=model, tools=[send_email])


async def test_a_record_of_another_owner_answers_as_a_missing_one() -> None:
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(mailer(), "mail bob", scope=ANA)
        assert r.gate is not None
        assert (await rt.runs.get(r.run_id, scope=ANA)).run_id == r.run_id
        assert (await rt.gates.get(r.gate.ref, scope=ANA)).run_id == r.run_id
        assert (await rt.runs.thread(r.thread_id, scope=ANA)).thread_id == r.thread_id
        with pytest.raises(NotFoundError):
            await rt.runs.get(r.run_id, scope=BOB)
        with pytest.raises(NotFoundError):
            await rt.gates.get(r.gate.ref, scope=BOB)
        with pytest.raises(NotFoundError):
            await rt.runs.thread(r.thread_id, scope=BOB)
        with pytest.raises(NotFoundError):
            await rt.runs.thread_items(r.thread_id, scope=BOB)
        with pytest.raises(NotFoundError):
            async for _ in rt.runs.events(r.run_id, scope=BOB):
                pass


async def test_without_a_scope_every_owners_records_are_listed() -> None:
    async with Runtime.open(":memory:") as rt:
        mine = await rt.run(mailer(), "mail bob", scope=ANA)
        theirs = await rt.run(mailer(), "mail bob", scope=BOB)
        assert {r.run_id for r in await rt.runs.list()} == {mine.run_id, theirs.run_id}
        assert [r.run_id for r in await rt.runs.list(scope=BOB)] == [theirs.run_id]
        assert len(await rt.gates.list()) == 2
        assert [g.run_id for g in await rt.gates.list(scope=ANA)] == [mine.run_id]


async def test_gates_list_pending_ones_unless_told_otherwise() -> None:
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(mailer(), "mail bob", scope=ANA)
        assert r.gate is not None
        await rt.approve(r.gate.ref)
        assert await rt.gates.list(scope=ANA) == []
        assert [g.status for g in await rt.gates.list(scope=ANA, status=None)] == ["approved"]


async def test_a_runs_transcript_and_events_are_read_through_rt_runs(tmp_path: Path) -> None:
    async with Runtime.open(f"sqlite:///{tmp_path}/r.db") as rt:
        agent = Agent(name="a", model=ScriptedModel([reply("hello")]))
        r = await rt.run(agent, "hi", scope=ANA)
        items = await rt.runs.thread_items(r.thread_id, scope=ANA)
        assert [i.role for i in items] == ["user", "assistant"]
        assert [i.role for i in await rt.runs.thread_items(r.thread_id, last=1)] == ["assistant"]
        assert rt.runs.keeps_events
        kinds = [data["kind"] async for _, data in rt.runs.events(r.run_id, scope=ANA)]
        assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
