"""DESIGN §7 (steering across a crash) and §8 (a blocked run outlives its worker), under SIGKILL."""

from __future__ import annotations

from types import ModuleType

import pytest

from integration.crash_support import Crash, contents
from reverie import Runtime
from reverie.errors import GateResolvedError

pytestmark = [pytest.mark.crash, pytest.mark.slow]

STEERING = "also check the cellar"


async def steer(crash: Crash, run_id: str) -> str:
    """Enqueue steering from this process, as a host would, while the child runs."""
    async with Runtime.open(crash.url) as rt:
        return await rt.send_input(run_id, "steering", STEERING)


async def test_killed_after_steering_was_polled_but_before_the_checkpoint_it_is_delivered_once(
    crash: Crash,
) -> None:
    worker = crash.spawn("steer_before", "start")
    await crash.wait_for("work-1.started", worker=worker)
    ids = crash.run_ids()
    input_id = await steer(crash, ids["run_id"])  # while the tool blocks: not polled yet
    crash.touch("release-1")
    # The child drains the steering (a staged row), then stops in prompt building: after the
    # poll, before the BeforeModel step commit that writes the row with the new cursor.
    await crash.wait_for("hook-1.reached", worker=worker)
    await worker.kill()
    polled = [i for i in await crash.transcript(ids["thread_id"]) if i.input_id == input_id]
    assert polled == []  # staged rows are durable with their step commit, not before
    checkpoint = await crash.checkpoint(ids["run_id"])
    assert checkpoint is not None and checkpoint.kind == "BeforeSideEffect"
    assert all(STEERING not in contents(r, "user") for r in crash.model_requests())

    r = await crash.resume_in_child("steer_before", ids["run_id"])

    assert r["status"] == "completed", r
    [after_resume] = crash.model_requests(role="resume")
    assert contents(after_resume, "user").count(STEERING) == 1
    rows = await crash.transcript(ids["thread_id"])
    assert [i.content for i in rows if i.input_id == input_id] == [STEERING]
    assert [i.content for i in rows if i.role == "user"] == ["please run steer_before", STEERING]
    # An idempotent call's outcome is written with the step commit the kill came before: the
    # resumed wave runs it again (harmless for an idempotent tool; a non-idempotent one has
    # its outcome durable at once, see test_crash_side_effects).
    assert crash.executions("work", step=1) == 2


async def test_killed_after_the_checkpoint_that_delivered_steering_it_is_not_delivered_again(
    crash: Crash,
) -> None:
    worker = crash.spawn("steer_after", "start")
    await crash.wait_for("work-1.started", worker=worker)
    ids = crash.run_ids()
    input_id = await steer(crash, ids["run_id"])
    crash.touch("release-1")
    # The model saw the steering and called a second tool; kill during that call.
    await crash.wait_for("work-2.started", worker=worker)
    await worker.kill()
    before = crash.model_requests(role="start")
    assert [contents(r, "user").count(STEERING) for r in before] == [0, 1]

    r = await crash.resume_in_child("steer_after", ids["run_id"])

    assert r["status"] == "completed", r
    after = crash.model_requests(role="resume")
    assert after and all(contents(r, "user").count(STEERING) == 1 for r in after)
    rows = await crash.transcript(ids["thread_id"])
    assert [i.content for i in rows if i.input_id == input_id] == [STEERING]
    assert [i.content for i in rows if i.role == "user"] == ["please run steer_after", STEERING]
    assert crash.executions("work", step=1) == 1


async def test_killed_while_blocked_on_a_gate_approval_from_another_process_runs_the_tool_once(
    crash: Crash, child: ModuleType
) -> None:
    worker = crash.spawn("gate", "start")
    blocked = await crash.wait_for("blocked.json", worker=worker)
    await worker.kill()  # it sat idle: nothing waits in memory for the gate
    report = crash.read_json(blocked)
    assert report["status"] == "blocked" and report["gate"], report
    assert crash.executions("pay") == 0

    r = await crash.spawn("gate", "approve", report["gate"]).report()

    assert r["status"] == "completed", r
    assert r["text"] == "done: paid 5"
    assert crash.executions("pay") == 1
    # The gate is resolved once, for good: a second approval is a typed error, runs nothing.
    agent = child.Scenario("gate", crash.markers, "approve").agent
    async with Runtime.open(crash.url, agents=[agent]) as rt:
        with pytest.raises(GateResolvedError):
            await rt.approve(report["gate"])
    assert crash.executions("pay") == 1


async def test_killed_after_an_edited_approval_was_stored_the_edited_call_runs_exactly_once(
    crash: Crash,
) -> None:
    worker = crash.spawn("gate_edit", "start")
    blocked = await crash.wait_for("blocked.json", worker=worker)
    await worker.kill()
    report = crash.read_json(blocked)
    assert report["status"] == "blocked" and report["gate"], report

    # The approving process stores the approval with its edit, then dies before the call.
    approver = crash.spawn("gate_edit", "approve_edit", report["gate"], '{"amount": 3}')
    await crash.wait_for("capability-hook.reached", worker=approver)
    await approver.kill()
    assert crash.executions("pay") == 0

    r = await crash.resume_in_child("gate_edit", report["run_id"])

    assert r["status"] == "completed", r
    assert crash.executions("pay") == 1
    assert (crash.markers / "pay.amounts").read_text(encoding="utf-8").split() == ["3"]
    assert "edited arguments" in r["text"] and "amount: 500 -> 3" in r["text"]
    again = await crash.resume_in_child("gate_edit", report["run_id"])
    assert again["status"] == "completed" and crash.executions("pay") == 1
