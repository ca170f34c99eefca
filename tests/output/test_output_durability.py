"""Typed runs keep reverie's guarantees: gates wait for a person, results outlive the process."""

from __future__ import annotations

from pathlib import Path

from output.output_support import SCOPE, Verdict
from reverie import Agent, Runtime, tool
from reverie.loop.finish import STRUCTURED_RESULT_TOOL
from reverie.testing import ScriptedModel, call


@tool(effects={"write"}, needs_approval=True)
def merge(pr: int) -> str:
    """Merge a pull request (a person approves it first)."""
    return f"merged {pr}"


async def test_an_approval_gate_blocks_a_typed_run_and_approving_it_ends_with_the_output() -> None:
    model = ScriptedModel(
        [call("merge", pr=42), call(STRUCTURED_RESULT_TOOL, verdict="approve", score=9)]
    )
    agent = Agent(name="judge", model=model, tools=[merge], output_type=Verdict)
    async with Runtime.open(":memory:") as rt:
        blocked = await rt.run(agent, "Merge and judge PR 42.", scope=SCOPE)
        assert blocked.status == "blocked" and blocked.gate is not None
        assert blocked.output is None
        r = await rt.approve(blocked.gate.ref)

    assert r.status == "completed" and r.output == Verdict(verdict="approve", score=9)
    told = [m.content for m in model.requests[1].messages if m.role == "tool"]
    assert told == ["merged 42"]


async def test_another_process_without_the_agent_reads_the_output_as_plain_json(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'typed.db'}"
    model = ScriptedModel([call(STRUCTURED_RESULT_TOOL, verdict="reject", score=2)])
    agent = Agent(name="judge", model=model, output_type=Verdict)
    async with Runtime.open(url) as rt:
        r = await rt.run(agent, "Judge.", scope=SCOPE)
    async with Runtime.open(url) as elsewhere:
        plain = await elsewhere.get_result(r.run_id)
    async with Runtime.open(url, agents=[agent]) as registered:
        typed = await registered.get_result(r.run_id)

    assert plain.output == {"verdict": "reject", "score": 2}
    assert typed.output == Verdict(verdict="reject", score=2)
