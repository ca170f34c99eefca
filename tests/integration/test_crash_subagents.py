"""Subagents under a real SIGKILL: a crash at any point neither re-runs nor loses the child run.

A worker process starts a lead run whose ``research`` tool is a researcher agent, and is killed
at a chosen point; a fresh process's ``recover()`` (with only the lead agent registered)
finishes both runs from the SQLite file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.crash_support import Crash

pytestmark = [pytest.mark.crash, pytest.mark.slow]


class SubagentCrash(Crash):
    """The crash harness, running the subagent worker script."""

    script = Path(__file__).with_name("subagent_crash_child.py")

    async def start_and_kill(self, scenario: str) -> str:
        worker = self.spawn(scenario, "start")
        await self.wait_for("stopped", worker=worker)
        await worker.kill()
        return self.run_ids()["run_id"]

    async def recover_in_child(self, scenario: str) -> dict[str, Any]:
        return await self.spawn(scenario, "recover").report()

    def sends(self) -> int:
        path = self.markers / "send.count"
        return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


@pytest.fixture
def sub_crash(tmp_path: Path) -> Iterator[SubagentCrash]:
    harness = SubagentCrash(tmp_path)
    try:
        yield harness
    finally:
        harness.cleanup()


async def test_a_crash_while_the_child_runs_is_recovered_into_both_runs_without_a_second_child(
    sub_crash: SubagentCrash,
) -> None:
    lead_id = await sub_crash.start_and_kill("child_midway")
    assert sub_crash.sends() == 1

    report = await sub_crash.recover_in_child("child_midway")

    runs = report["runs"]
    [lead] = [r for r in runs if r["run_id"] == lead_id]
    children = [r for r in runs if r["parent"] == lead_id]
    assert len(runs) == 2 and len(children) == 1  # never a second child run
    assert lead["status"] == "completed" and children[0]["status"] == "completed"
    [result] = [r for r in report["results"] if r["run_id"] == lead_id]
    assert result["text"] == "lead done: child done: sent to bob"
    assert sub_crash.sends() == 1  # the child's side effect ran exactly once
    # Charged once: the lead's 2 model calls and 1 tool call, the child's 2 and 1.
    assert (result["model_calls"], result["capability_calls"]) == (4, 2)


async def test_a_crash_after_the_child_completed_before_the_parents_result_row_loses_nothing(
    sub_crash: SubagentCrash,
) -> None:
    lead_id = await sub_crash.start_and_kill("child_done")
    assert sub_crash.sends() == 1

    report = await sub_crash.recover_in_child("child_done")

    runs = report["runs"]
    children = [r for r in runs if r["parent"] == lead_id]
    assert len(runs) == 2 and len(children) == 1
    assert {r["status"] for r in runs} == {"completed"}
    [result] = report["results"]  # only the lead needed recovering; the child had completed
    assert result["run_id"] == lead_id
    assert result["text"] == "lead done: child done: sent to bob"
    assert sub_crash.sends() == 1
    assert (result["model_calls"], result["capability_calls"]) == (4, 2)  # charged once
