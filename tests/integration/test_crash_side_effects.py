"""DESIGN §6 side-effect journal under a real SIGKILL: no side effect runs twice because of a crash.

A child process starts the run and is killed while a tool is running (its journal row says
``started``, never ``finished``); a fresh process resumes the run from the file.
"""

from __future__ import annotations

import pytest

from integration.crash_support import Crash, contents

pytestmark = [pytest.mark.crash, pytest.mark.slow]


async def test_killed_during_a_non_idempotent_tool_it_runs_once_and_the_model_hears_outcome_unknown(
    crash: Crash,
) -> None:
    ids = await crash.start_and_kill_at("non_idempotent", "send-1.started")
    assert crash.executions("send") == 1

    r = await crash.resume_in_child("non_idempotent", ids["run_id"])

    assert r["status"] == "completed", r
    assert crash.executions("send") == 1  # never twice
    [after_resume] = crash.model_requests(role="resume")
    [result] = contents(after_resume, "tool")
    assert result.startswith("interrupted: outcome unknown")
    assert r["text"] == f"done: {result}"
    tool_rows = [i for i in await crash.transcript(ids["thread_id"]) if i.role == "tool"]
    assert [row.content for row in tool_rows] == [result]

    # A second resume of the finished run changes nothing and runs nothing.
    again = await crash.resume_in_child("non_idempotent", ids["run_id"])
    assert again == r
    assert crash.executions("send") == 1


async def test_killed_during_an_idempotent_tool_it_is_re_run_and_the_run_completes_with_its_output(
    crash: Crash,
) -> None:
    ids = await crash.start_and_kill_at("idempotent", "fetch-1.started")
    assert crash.executions("fetch") == 1

    r = await crash.resume_in_child("idempotent", ids["run_id"])

    assert r["status"] == "completed", r
    assert crash.executions("fetch") == 2  # re-run: safe for an idempotent tool
    [after_resume] = crash.model_requests(role="resume")
    assert contents(after_resume, "tool") == ["content of https://example.test/a"]
    assert r["text"] == "done: content of https://example.test/a"
    rows = await crash.transcript(ids["thread_id"])
    assert [(i.role, i.content) for i in rows if i.role != "assistant"] == [
        ("user", "please run idempotent"),
        ("tool", "content of https://example.test/a"),
    ]
