"""Model fallback under a real SIGKILL: a resume continues on the model the run fell back to.

The ``fallback`` scenario's agent has two models: a primary that is always ``unavailable`` and
a fallback that answers. The start process falls back, the fallback calls ``fetch``, and the
process is killed while the tool runs; a fresh process resumes the run.
"""

from __future__ import annotations

import json

import pytest

from integration.crash_support import Crash, contents

pytestmark = [pytest.mark.crash, pytest.mark.slow]


def primary_requests(crash: Crash) -> list[str]:
    path = crash.markers / "primary.jsonl"
    return [json.loads(line)["role"] for line in path.read_text(encoding="utf-8").splitlines()]


async def test_a_crash_after_the_fallback_answered_resumes_on_the_fallback_model(
    crash: Crash,
) -> None:
    ids = await crash.start_and_kill_at("fallback", "fetch-1.started")
    assert primary_requests(crash) == ["start"]  # asked once, then the run fell back
    cp = await crash.checkpoint(ids["run_id"])
    assert cp is not None and cp.kind == "BeforeSideEffect"
    state = json.loads(cp.payload)["state"]
    assert state["slots"]["model_state"]["index"] == 1
    assert state["budget"]["by_model"]["scripted:primary"]["model_calls"] == 1

    r = await crash.resume_in_child("fallback", ids["run_id"])

    assert r["status"] == "completed", r
    assert r["text"] == "done: content of https://example.test/a"
    assert primary_requests(crash) == ["start"]  # the resume never asked the primary
    [after_resume] = crash.model_requests(role="resume")
    assert contents(after_resume, "tool") == ["content of https://example.test/a"]
