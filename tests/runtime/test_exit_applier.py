"""The exit applier (DESIGN §3.6): validates every exit; an invalid one is ``Failed(driver_bug)``,
never success; it is the only writer of terminal status."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import pytest

from reverie import Agent, RunResult, Runtime, Scope
from reverie.core.events import RunEvent, RunFinished
from reverie.core.exits import Blocked, Cancelled, Completed, Failed, LoopExit
from reverie.core.transcript import NewItem
from reverie.hooks import AfterTurnContext, HookDispatcher
from reverie.loop.family import default_families
from reverie.loop.state import LoopExecutionState
from reverie.loop.strategies import ContextPlan
from reverie.runtime.applier import ExitApplier
from reverie.runtime.events import EventBus
from reverie.store.base import GateRecord, RunRecord
from reverie.testing import ScriptedModel, reply

SCOPE = Scope(tenant="acme", user="ana")


@pytest.fixture
async def rt() -> AsyncIterator[Runtime]:
    async with Runtime.open(":memory:") as runtime:
        yield runtime


async def new_run(rt: Runtime, run_id: str = "run-1") -> RunRecord:
    thread_id = f"thr-{run_id}"
    await rt.store.create_thread(thread_id, SCOPE)
    run = await rt.store.create_run(
        RunRecord(run_id=run_id, thread_id=thread_id, scope=SCOPE, agent_name="a")
    )
    return await rt.store.set_run_status(run.run_id, "running", fence=None)


async def assistant_row(
    rt: Runtime, run: RunRecord, text: str, role: Literal["assistant", "user"] = "assistant"
) -> str:
    (row,) = await rt.store.append_items(
        run.thread_id, run.run_id, [NewItem(role=role, content=text)], fence=None
    )
    return row.ref


async def apply(rt: Runtime, run: RunRecord, exit_: LoopExit) -> tuple[RunResult, list[RunEvent]]:
    bus = EventBus()
    seen: list[RunEvent] = []
    original = bus.emit

    def record(event: RunEvent) -> None:
        seen.append(event)
        original(event)

    bus.emit = record  # type: ignore[method-assign]
    applier = ExitApplier(rt.store, HookDispatcher(rt.hooks))
    result = await applier.apply(run, exit_, fence=None, bus=bus)
    return result, seen


async def assert_driver_bug(rt: Runtime, run: RunRecord, exit_: LoopExit, why: str) -> None:
    result, events = await apply(rt, run, exit_)

    assert result.status == "failed"
    assert isinstance(result.exit, Failed)
    assert result.exit.kind == "driver_bug"
    assert why in result.exit.safe_summary
    assert result.text is None
    stored = await rt.store.get_run(run.run_id)
    assert stored.status == "failed"
    assert stored.exit is not None
    assert stored.exit["kind"] == "driver_bug"
    finished = [e for e in events if isinstance(e, RunFinished)]
    assert [e.status for e in finished] == ["failed"]


async def test_completed_exit_without_reply_refs_is_recorded_as_driver_bug(rt: Runtime) -> None:
    run = await new_run(rt)
    await assert_driver_bug(rt, run, Completed(kind="reply", reply_refs=()), "no reply")


async def test_completed_exit_with_empty_reply_is_recorded_as_driver_bug(rt: Runtime) -> None:
    run = await new_run(rt)
    ref = await assistant_row(rt, run, "   ")
    await assert_driver_bug(rt, run, Completed(reply_refs=(ref,)), "empty")


async def test_completed_exit_with_a_missing_reply_ref_is_recorded_as_driver_bug(
    rt: Runtime,
) -> None:
    run = await new_run(rt)
    await assert_driver_bug(rt, run, Completed(reply_refs=("itm-nope",)), "does not exist")


async def test_completed_exit_whose_reply_is_not_an_assistant_message_is_driver_bug(
    rt: Runtime,
) -> None:
    run = await new_run(rt)
    ref = await assistant_row(rt, run, "I am the user", role="user")
    await assert_driver_bug(rt, run, Completed(reply_refs=(ref,)), "not an assistant message")


async def test_completed_exit_with_another_runs_reply_is_recorded_as_driver_bug(
    rt: Runtime,
) -> None:
    other = await new_run(rt, "run-other")
    ref = await assistant_row(rt, other, "someone else's answer")
    run = await new_run(rt)
    await assert_driver_bug(rt, run, Completed(reply_refs=(ref,)), "not an assistant message")


async def test_completed_exit_with_duplicate_reply_refs_is_recorded_as_driver_bug(
    rt: Runtime,
) -> None:
    run = await new_run(rt)
    ref = await assistant_row(rt, run, "hello")
    await assert_driver_bug(rt, run, Completed(reply_refs=(ref, ref)), "not unique")


async def test_blocked_exit_on_a_nonexistent_gate_is_recorded_as_driver_bug(
    rt: Runtime,
) -> None:
    run = await new_run(rt)
    await assert_driver_bug(rt, run, Blocked(gate_ref="gate-nope"), "does not exist")


async def test_blocked_exit_on_a_resolved_gate_is_recorded_as_driver_bug(rt: Runtime) -> None:
    run = await new_run(rt)
    gate = await rt.store.create_gate(
        GateRecord(
            ref="gate-1",
            run_id=run.run_id,
            call_id="c#0",
            tool="send",
            arguments={},
            kind="approval",
            scope=SCOPE,
            created_at=time.time(),
        ),
        fence=run.fence,
    )
    await rt.store.resolve_gate(gate.ref, "approved", reason=None, now=time.time())
    await assert_driver_bug(rt, run, Blocked(gate_ref=gate.ref), "not pending")


async def test_valid_completed_exit_is_written_as_completed(rt: Runtime) -> None:
    run = await new_run(rt)
    ref = await assistant_row(rt, run, "hello")
    result, _ = await apply(rt, run, Completed(reply_refs=(ref,)))

    assert result.status == "completed"
    assert result.text == "hello"
    assert (await rt.store.get_run(run.run_id)).status == "completed"


async def test_structured_completion_needs_no_text_reply(rt: Runtime) -> None:
    run = await new_run(rt)
    result, _ = await apply(rt, run, Completed(kind="structured", reply_refs=()))

    assert result.status == "completed"


async def test_cancelled_and_failed_exits_are_written_as_they_are(rt: Runtime) -> None:
    run = await new_run(rt)
    result, _ = await apply(rt, run, Cancelled(reason="user left"))
    assert result.status == "cancelled"

    run2 = await new_run(rt, "run-2")
    failed = Failed(kind="model_error", safe_summary="model down")
    result2, _ = await apply(rt, run2, failed)
    assert result2.exit == failed


async def test_invalid_exit_fires_after_turn_as_not_completed(rt: Runtime) -> None:
    seen: list[tuple[bool, str]] = []

    async def audit(ctx: AfterTurnContext) -> None:
        seen.append((ctx.completed, ctx.status))

    rt.hooks.register("after_turn", audit, name="audit")
    run = await new_run(rt)
    await apply(rt, run, Completed(reply_refs=()))

    assert seen == [(False, "failed")]


@dataclass(frozen=True, slots=True)
class ExplodingContext:
    """A context strategy with a bug: the error escapes the executor."""

    def plan(self, state: LoopExecutionState) -> ContextPlan:
        raise RuntimeError("strategy bug")

    def describe(self) -> Mapping[str, Any]:
        return {}


async def test_error_raised_outside_the_executor_goes_through_the_applier() -> None:
    family = replace(default_families()[0], context=ExplodingContext())
    async with Runtime.open(":memory:", families=[family]) as rt:
        model = ScriptedModel([reply("never")])
        h = await rt.start(Agent(name="a", model=model), "hi", scope=SCOPE)
        events = [e async for e in h.events()]
        r = await h.result()

        assert isinstance(r.exit, Failed)
        assert r.exit.kind == "driver_bug"
        assert "RuntimeError" in r.exit.safe_summary
        assert "strategy bug" not in r.exit.safe_summary  # the summary stays safe
        assert (await rt.store.get_run(h.run_id)).status == "failed"
        assert events[-1].kind == "run_finished"
        assert model.requests == []
