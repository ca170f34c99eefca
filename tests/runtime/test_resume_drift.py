"""A run never resumes silently under changed instructions, tools or loop family.

Every checkpoint records digests of the agent's instructions, of each of its tools and of the
loop family it selects; a resume (after an approval, or a crash) compares them with the
agent's now and follows ``Agent.on_drift``: ``refuse`` (the default), ``continue`` (recorded),
or a hook that decides (docs/durability.md#drift-on-resume).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx

from reverie import Agent, Runtime, Scope, tool
from reverie.core.events import RunEvent
from reverie.core.exits import Failed
from reverie.loop.family import LoopFamily, default_families
from reverie.loop.strategies import RepetitionStop
from reverie.runtime.drift import ResumeDrift
from reverie.serve import background_server, create_app
from reverie.store.memory import MemoryStore
from reverie.store.sqlite import SQLiteStore
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="acme", user="ana")
TOKEN = "tok-ana-drift-5c1e"


def deploy_tool(ran: list[str]) -> Any:
    @tool(effects={"write"}, needs_approval=True)
    async def deploy(target: str) -> str:
        """Deploy to a target."""
        ran.append(target)
        return f"deployed {target}"

    return deploy


@tool(effects=set())
def status() -> str:
    """Report the status."""
    return "green"


def mailer(ran: list[str], **changes: Any) -> Agent:
    """The agent that blocks on ``deploy``; ``changes`` make its later definitions."""
    model = ScriptedModel([call("deploy", target="prod"), reply("shipped")])
    fields: dict[str, Any] = {
        "name": "deployer",
        "model": model,
        "instructions": "You deploy.",
        "tools": [deploy_tool(ran), status],
    }
    fields.update(changes)
    return Agent(**fields)


def resumed(ran: list[str], **changes: Any) -> Agent:
    """A later definition of the agent, in a process that resumes its run: its model answers
    the run's next request (after the approved call) with the final reply."""
    return mailer(ran, **{"model": ScriptedModel([reply("shipped")]), **changes})


async def blocked_run(store: Any, ran: list[str]) -> tuple[str, str]:
    """A run of the first definition, blocked on its gate; (run id, gate ref)."""
    async with Runtime(store) as rt:
        r = await rt.run(mailer(ran), "ship it", scope=SCOPE)
    assert r.status == "blocked" and r.gate is not None
    return r.run_id, r.gate.ref


async def approve_under(store: Any, agent: Agent, ref: str, **kw: Any) -> tuple[Any, list[Any]]:
    """Approve ``ref`` in a new runtime that knows ``agent``; the result and its events."""
    async with Runtime(store, agents=[agent], **kw) as rt:
        events: list[RunEvent] = []

        def seen(ctx: Any) -> None:
            events.append(ctx.event)

        rt.hooks.register("event", seen, name="seen", event_kinds={"resume_drift"})
        r = await rt.approve(ref)
    return r, events


async def test_a_resume_under_changed_instructions_is_refused_by_default() -> None:
    ran: list[str] = []
    store = MemoryStore()
    _, ref = await blocked_run(store, ran)
    later = resumed(ran, instructions="You deploy, and you never ask.")

    r, events = await approve_under(store, later, ref)

    assert r.status == "failed"
    assert isinstance(r.exit, Failed) and r.exit.kind == "resume_drift"
    assert "instructions changed" in r.exit.safe_summary
    assert ran == []  # the approved call never ran under the changed agent
    assert later.model.requests == []  # type: ignore[union-attr]
    [drift] = r.drift
    assert (drift.instructions, drift.tools, drift.family, drift.action) == (
        True,
        (),
        False,
        "refuse",
    )
    assert [(e.kind, e.action, e.instructions) for e in events] == [
        ("resume_drift", "refuse", True)
    ]


async def test_a_resume_refusal_names_the_tools_that_were_added_removed_or_changed() -> None:
    ran: list[str] = []
    store = MemoryStore()
    _, ref = await blocked_run(store, ran)

    @tool(name="deploy", effects={"write"}, needs_approval=False)
    async def deploy_unguarded(target: str) -> str:
        """Deploy to a target."""
        ran.append(target)
        return "deployed"

    @tool(effects={"write"})
    def wipe() -> str:
        """Wipe everything."""
        return "wiped"

    later = resumed(ran, tools=[deploy_unguarded, wipe])

    r, _ = await approve_under(store, later, ref)

    assert isinstance(r.exit, Failed) and r.exit.kind == "resume_drift"
    [drift] = r.drift
    assert (drift.tools_added, drift.tools_removed, drift.tools_changed) == (
        ("wipe",),
        ("status",),
        ("deploy",),  # it no longer needs approval
    )
    assert not drift.instructions and not drift.family
    summary = r.exit.safe_summary
    assert "wipe (added)" in summary and "status (removed)" in summary
    assert "deploy (changed)" in summary
    assert ran == []


async def test_a_resume_is_refused_when_the_agents_loop_family_changed() -> None:
    ran: list[str] = []
    store = MemoryStore()
    _, ref = await blocked_run(store, ran)
    careful = LoopFamily(id="careful", stop=RepetitionStop(repeat_threshold=2))
    later = resumed(ran, family="careful")

    r, _ = await approve_under(store, later, ref, families=[*default_families(), careful])

    assert isinstance(r.exit, Failed) and r.exit.kind == "resume_drift"
    [drift] = r.drift
    assert drift.family and not drift.instructions and drift.tools == ()
    assert drift.family_before is not None and drift.family_before.startswith("default@")
    assert drift.family_now is not None and drift.family_now.startswith("careful@")
    assert "loop family changed (default -> careful)" in r.exit.safe_summary
    assert ran == []


async def test_a_resume_under_drift_with_continue_goes_on_and_records_the_drift() -> None:
    ran: list[str] = []
    store = MemoryStore()
    run_id, ref = await blocked_run(store, ran)
    later = resumed(ran, instructions="You deploy carefully.", on_drift="continue")

    r, events = await approve_under(store, later, ref)

    assert (r.status, r.text) == ("completed", "shipped")
    assert ran == ["prod"]
    [drift] = r.drift
    assert drift.action == "continue" and drift.instructions
    assert [(e.kind, e.action) for e in events] == [("resume_drift", "continue")]
    async with Runtime(store) as rt:
        record = await rt.runs.get(run_id)
    assert record.exit is not None
    assert [d["action"] for d in record.exit["drift"]] == ["continue"]
    assert "instructions changed" in record.exit["drift"][0]["summary"]


async def test_a_continued_drift_is_carried_by_the_runs_later_checkpoints() -> None:
    ran: list[str] = []
    store = MemoryStore()
    twice = ScriptedModel(
        [call("deploy", target="a"), call("deploy", target="b"), reply("both shipped")]
    )
    first = mailer(ran, model=twice)
    async with Runtime(store) as rt:
        r = await rt.run(first, "ship twice", scope=SCOPE)
    assert r.gate is not None
    later = mailer(ran, model=twice, instructions="Changed.", on_drift="continue")
    async with Runtime(store, agents=[later]) as rt:
        second = await rt.approve(r.gate.ref)  # drift found and accepted; blocks again
        assert second.status == "blocked" and second.gate is not None
        done = await rt.approve(second.gate.ref)  # no new drift: the definition is the same

    assert (done.status, done.text) == ("completed", "both shipped")
    assert [d.action for d in second.drift] == ["continue"]
    assert [d.action for d in done.drift] == ["continue"]  # the earlier one, still recorded
    assert ran == ["a", "b"]


async def test_a_run_cancelled_while_blocked_keeps_the_drift_it_went_on_with() -> None:
    ran: list[str] = []
    store = MemoryStore()
    twice = ScriptedModel([call("deploy", target="a"), call("deploy", target="b"), reply("ok")])
    async with Runtime(store) as rt:
        r = await rt.run(mailer(ran, model=twice), "ship twice", scope=SCOPE)
    assert r.gate is not None
    later = mailer(ran, model=twice, instructions="Changed.", on_drift="continue")
    async with Runtime(store, agents=[later]) as rt:
        second = await rt.approve(r.gate.ref)
        assert second.status == "blocked"
        cancelled = await rt.cancel(second.run_id)

    assert cancelled is not None and cancelled.status == "cancelled"
    assert [(d.action, d.instructions) for d in cancelled.drift] == [("continue", True)]


async def test_a_drift_hook_receives_what_changed_and_decides() -> None:
    ran: list[str] = []
    seen: list[ResumeDrift] = []

    async def migrate(drift: ResumeDrift) -> str:
        seen.append(drift)
        # Wording changes are fine; a different tool surface is not.
        return "refuse" if drift.tools else "continue"

    store = MemoryStore()
    _, ref = await blocked_run(store, ran)
    reworded = resumed(ran, instructions="You deploy, briefly.", on_drift=migrate)
    ok, _ = await approve_under(store, reworded, ref)

    _, ref2 = await blocked_run(store, ran)
    fewer = resumed(ran, tools=[deploy_tool(ran)], on_drift=migrate)
    refused, _ = await approve_under(store, fewer, ref2)

    assert ok.status == "completed" and ok.drift[0].action == "continue"
    assert isinstance(refused.exit, Failed) and refused.exit.kind == "resume_drift"
    assert [(d.instructions, d.tools_removed) for d in seen] == [(True, ()), (False, ("status",))]
    assert ran == ["prod"]


async def test_a_drift_hook_that_raises_refuses_the_resume() -> None:
    ran: list[str] = []

    def broken(drift: ResumeDrift) -> str:
        raise RuntimeError("no migration for this")

    store = MemoryStore()
    _, ref = await blocked_run(store, ran)
    r, _ = await approve_under(store, resumed(ran, instructions="New.", on_drift=broken), ref)

    assert isinstance(r.exit, Failed) and r.exit.kind == "resume_drift"
    assert ran == []


async def test_an_unchanged_agent_in_another_process_resumes_without_drift() -> None:
    ran: list[str] = []
    store = MemoryStore()
    _, ref = await blocked_run(store, ran)

    r, events = await approve_under(store, resumed(ran), ref)

    assert (r.status, r.drift, events) == ("completed", (), [])
    assert ran == ["prod"]


async def test_a_checkpoint_from_before_definitions_resumes_as_before() -> None:
    ran: list[str] = []
    store = MemoryStore()
    run_id, ref = await blocked_run(store, ran)
    # A checkpoint written by an earlier version carries no definition.
    cp = await store.load_checkpoint(run_id)
    assert cp is not None
    payload = json.loads(cp.payload)
    del payload["definition"]
    run = await store.get_run(run_id)
    await store.save_checkpoint(run_id, cp.kind, json.dumps(payload).encode(), fence=run.fence)

    r, events = await approve_under(store, resumed(ran, instructions="Changed."), ref)

    assert (r.status, r.drift, events) == ("completed", (), [])
    assert ran == ["prod"]


class StopAfterModelStep:
    """A store whose first ``BeforeModel`` step commit after arming lands, then never answers:
    the process advancing the run stops there, as in a crash."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.landed = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def commit_step(self, run_id: str, step: Any, *, fence: int) -> Any:
        receipt = await self._inner.commit_step(run_id, step, fence=fence)
        if step.checkpoint_kind == "BeforeModel" and not self.landed.is_set():
            self.landed.set()
            await asyncio.Event().wait()
        return receipt


async def test_a_crash_resume_under_changed_instructions_is_refused(tmp_path: Path) -> None:
    inner = SQLiteStore(tmp_path / "crash.db")
    crashing = StopAfterModelStep(inner)
    first = Agent(name="a", model=ScriptedModel([reply("done")]), instructions="Be brief.")
    rt = Runtime(crashing)
    await rt.__aenter__()
    handle = await rt.start(first, "go", scope=SCOPE)
    await asyncio.wait_for(crashing.landed.wait(), 30)
    await rt.aclose()

    later = Agent(name="a", model=ScriptedModel([reply("done")]), instructions="Be verbose.")
    async with Runtime(SQLiteStore(tmp_path / "crash.db"), agents=[later]) as fresh:
        [r] = await fresh.recover()

    assert r.run_id == handle.run_id
    assert isinstance(r.exit, Failed) and r.exit.kind == "resume_drift"
    assert r.drift[0].instructions
    assert later.model.requests == []  # type: ignore[union-attr]


async def test_get_run_over_http_shows_the_drift_a_resume_refused() -> None:
    ran: list[str] = []
    store = MemoryStore()
    run_id, ref = await blocked_run(store, ran)
    later = resumed(ran, instructions="Changed.")
    async with Runtime(store, agents=[later]) as rt:
        app = create_app(rt, agents={later.name: later}, tokens={TOKEN: SCOPE})
        async with (
            background_server(app) as url,
            httpx.AsyncClient(
                base_url=url, headers={"authorization": f"Bearer {TOKEN}"}, timeout=20.0
            ) as client,
        ):
            approved = await client.post(f"/v1/gates/{ref}/approve")
            shown = (await client.get(f"/v1/runs/{run_id}")).json()

    assert approved.status_code < 500, approved.text
    assert shown["status"] == "failed"
    assert shown["exit"]["kind"] == "resume_drift"
    [drift] = shown["drift"]
    assert (drift["action"], drift["instructions"]) == ("refuse", True)
    assert "instructions changed" in drift["summary"]
    assert ran == []
