"""DESIGN §6 guards on resume: one worker at a time, no resume against changed code or bad rows."""

from __future__ import annotations

import dataclasses
import sqlite3
from contextlib import closing
from types import ModuleType

import pytest

from integration.crash_support import Crash
from reverie import Agent, Runtime
from reverie.core.exits import Failed
from reverie.errors import CorruptCheckpointError
from reverie.loop.family import default_families
from reverie.loop.strategies import DefaultRecovery
from reverie.testing import ScriptedModel, reply

pytestmark = [pytest.mark.crash, pytest.mark.slow]


async def test_two_workers_racing_to_resume_a_run_exactly_one_advances_it(crash: Crash) -> None:
    ids = await crash.start_and_kill_at("race", "send-1.started")
    workers = [crash.spawn("race", "resume", ids["run_id"], name) for name in ("a", "b")]
    for name, worker in zip(("a", "b"), workers, strict=True):
        await crash.wait_for(f"ready-{name}", worker=worker)
    crash.touch("go")  # both call rt.resume(run_id) now

    reports = [await worker.report() for worker in workers]

    completed = [r for r in reports if r.get("status") == "completed"]
    refused = [r for r in reports if r.get("error") in ("RunBusy", "LeaseLost")]
    assert len(completed) == 1 and len(refused) == 1, reports
    assert crash.executions("send") == 1
    rows = await crash.transcript(ids["thread_id"])
    assert [(i.role, i.seq) for i in rows] == [
        ("user", 1),
        ("assistant", 2),
        ("tool", 3),
        ("assistant", 4),
    ]
    assert rows[-1].content == completed[0]["text"]
    async with Runtime.open(crash.url) as rt:
        assert (await rt.store.get_run(ids["run_id"])).status == "completed"


async def test_a_resume_whose_family_definition_changed_fails_with_checkpoint_unavailable(
    crash: Crash, child: ModuleType
) -> None:
    ids = await crash.start_and_kill_at("idempotent", "fetch-1.started")
    default, *others = default_families()
    changed = dataclasses.replace(default, recovery=DefaultRecovery(max_tool_retries=7))
    assert changed.identity.digest != default.identity.digest
    agent = child.Scenario("idempotent", crash.markers, "resume").agent

    async with Runtime.open(crash.url, agents=[agent], families=[changed, *others]) as rt:
        r = await rt.resume(ids["run_id"])

    assert r.status == "failed"
    assert isinstance(r.exit, Failed) and r.exit.kind == "checkpoint_unavailable"
    # Never silently against changed code: nothing of the run ran again.
    assert crash.executions("fetch") == 1
    assert crash.model_requests(role="resume") == []


async def test_a_corrupt_checkpoint_is_a_typed_error_naming_the_run_and_the_runtime_stays_usable(
    crash: Crash, child: ModuleType
) -> None:
    ids = await crash.start_and_kill_at("idempotent", "fetch-1.started")
    with closing(sqlite3.connect(crash.db)) as db, db:
        changed = db.execute(
            "UPDATE checkpoints SET payload = ? WHERE run_id = ?",
            (b"\x00\xffnot a checkpoint{", ids["run_id"]),
        ).rowcount
    assert changed == 1
    agent = child.Scenario("idempotent", crash.markers, "resume").agent

    async with Runtime.open(crash.url, agents=[agent]) as rt:
        with pytest.raises(CorruptCheckpointError, match=ids["run_id"]) as caught:
            await rt.resume(ids["run_id"])
        assert caught.value.run_id == ids["run_id"]
        assert crash.executions("fetch") == 1

        other = Agent(name="other", model=ScriptedModel([reply("still working")]))
        r = await rt.run(other, "hello", scope=child.SCOPE)
        assert r.status == "completed" and r.text == "still working"
