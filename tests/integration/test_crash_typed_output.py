"""Typed output under a real SIGKILL (docs/output.md): an answer is never lost or re-asked.

The start process is killed after the model's structured answer was validated and the run's
Final checkpoint committed, but before its terminal status was written; a fresh process resumes.
"""

from __future__ import annotations

import pytest

from integration.crash_support import Crash
from reverie import Runtime

pytestmark = [pytest.mark.crash, pytest.mark.slow]


async def test_killed_before_the_status_write_resume_ends_with_the_same_validated_output(
    crash: Crash,
) -> None:
    ids = await crash.start_and_kill_at("typed", "terminal.reached")
    assert len(crash.model_requests(role="start")) == 1
    checkpoint = await crash.checkpoint(ids["run_id"])
    assert checkpoint is not None and checkpoint.kind == "Final"
    async with Runtime.open(crash.url) as rt:
        assert (await rt.store.get_run(ids["run_id"])).status == "running"  # never written

    r = await crash.resume_in_child("typed", ids["run_id"])

    assert r["status"] == "completed" and r["exit_kind"] == "structured", r
    assert r["output"] == {"verdict": "approve", "score": 7}
    assert r["output_type"] == "CrashVerdict"  # rebuilt as the agent's model class
    assert crash.model_requests(role="resume") == []  # the model is not asked again
    # A second resume of the finished run returns the same output and asks nothing.
    again = await crash.resume_in_child("typed", ids["run_id"])
    assert again == r
    assert crash.model_requests(role="resume") == []
