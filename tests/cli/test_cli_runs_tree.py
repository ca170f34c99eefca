"""``reverie runs show`` lists a run's subagent runs as a tree; ``runs list`` marks child runs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import Result

from reverie import Agent, Runtime, Scope
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="local", user="tester")


def delegate(tool_name: str, final: str) -> Callable[[ModelRequest], ModelResponse]:
    def answer(request: ModelRequest) -> ModelResponse:
        results = [m.content for m in request.messages if m.role == "tool"]
        return reply(f"{final}: {results[-1]}") if results else call(tool_name, input="go on")

    return answer


def three_levels(home: Path) -> dict[str, str]:
    """A lead run whose researcher run called a checker run, in the CLI's default store."""

    async def main() -> dict[str, str]:
        checker = Agent(name="checker", model=ScriptedModel([reply("checked")]))
        researcher = Agent(
            name="researcher",
            model=ScriptedModel(delegate("check", "researched")),
            tools=[checker.as_tool(name="check")],
        )
        lead = Agent(
            name="lead",
            model=ScriptedModel(delegate("research", "led")),
            tools=[researcher.as_tool(name="research")],
        )
        async with Runtime.open(f"sqlite:///{home / 'reverie.db'}") as rt:
            r = await rt.run(lead, "start", scope=SCOPE)
            assert r.text == "led: researched: checked"
            runs = await rt.store.list_runs(scope=SCOPE)
        by_agent = {run.agent_name: run.run_id for run in runs}
        return by_agent

    return asyncio.run(main())


def test_runs_show_lists_the_subagent_runs_indented_under_their_parent(
    cli: Callable[..., Result], home: Path
) -> None:
    ids = three_levels(home)

    result = cli("runs", "show", ids["lead"])

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    start = lines.index("Subagent runs")
    assert [line.split("  ")[:-1] for line in lines[start + 1 : start + 4]] == [
        ["", ids["lead"], "completed"],
        ["", "", ids["researcher"], "completed"],
        ["", "", "", ids["checker"], "completed"],
    ]
    assert [line.rsplit("  ", 1)[-1] for line in lines[start + 1 : start + 4]] == [
        "lead",
        "researcher",
        "checker",
    ]


def test_runs_show_of_a_child_run_names_its_parent_and_call(
    cli: Callable[..., Result], home: Path
) -> None:
    ids = three_levels(home)

    text = cli("runs", "show", ids["researcher"]).stdout
    payload = json.loads(cli("runs", "show", ids["lead"], "--json").stdout)

    assert f"parent:  {ids['lead']} (call " in text
    assert "user: go on" in text  # the child's own transcript
    [child] = payload["children"]
    assert (child["run_id"], child["agent"], child["status"]) == (
        ids["researcher"],
        "researcher",
        "completed",
    )
    assert [c["run_id"] for c in child["children"]] == [ids["checker"]]
    assert payload["parent_run_id"] is None


def test_runs_list_marks_child_runs(cli: Callable[..., Result], home: Path) -> None:
    ids = three_levels(home)

    table = cli("runs", "list").stdout
    listed = json.loads(cli("runs", "list", "--json").stdout)

    assert f"↳ {ids['researcher']}" in table and f"↳ {ids['checker']}" in table
    assert f"↳ {ids['lead']}" not in table and ids["lead"] in table
    parents = {r["run_id"]: r["parent_run_id"] for r in listed}
    assert parents == {
        ids["lead"]: None,
        ids["researcher"]: ids["lead"],
        ids["checker"]: ids["researcher"],
    }
