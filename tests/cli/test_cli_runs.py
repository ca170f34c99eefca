"""``reverie runs list|show|resume|cancel``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import Result

from cli.cli_support import EXAMPLE_SCRIPT, gate_ref
from reverie.core.ids import new_id
from reverie.core.scope import DEFAULT_TENANT, Scope
from reverie.store import NewItem, RunRecord, open_store


def _completed_run(cli: Callable[..., Result]) -> str:
    result = cli("run", "--json", "--model", f"scripted:{EXAMPLE_SCRIPT}", "What is 2 + 3?")
    assert result.exit_code == 0, result.output
    return str(json.loads(result.stdout)["run_id"])


def test_runs_list_shows_the_run(cli: Callable[..., Result]) -> None:
    run_id = _completed_run(cli)

    table = cli("runs", "list")
    listed = json.loads(cli("runs", "list", "--json").stdout)

    assert table.exit_code == 0
    assert run_id in table.stdout
    assert "completed" in table.stdout
    assert "assistant" in table.stdout
    assert [(r["run_id"], r["status"], r["agent"]) for r in listed] == [
        (run_id, "completed", "assistant")
    ]


def test_runs_list_filters_by_status(cli: Callable[..., Result], mailer_config: Path) -> None:
    assert cli("run", "--agent", "mailer", "email ana").exit_code == 3
    spec = f"scripted:{EXAMPLE_SCRIPT}"
    assert cli("run", "--model", spec, "hi").exit_code == 0

    blocked = json.loads(cli("runs", "list", "--status", "blocked", "--json").stdout)
    both = json.loads(cli("runs", "list", "-s", "blocked", "-s", "completed", "--json").stdout)

    assert [r["status"] for r in blocked] == ["blocked"]
    assert sorted(r["status"] for r in both) == ["blocked", "completed"]


def test_runs_list_rejects_an_unknown_status(cli: Callable[..., Result]) -> None:
    assert cli("runs", "list", "--status", "sleeping").exit_code == 2


def test_runs_list_with_no_runs_says_so(cli: Callable[..., Result]) -> None:
    result = cli("runs", "list")

    assert result.exit_code == 0
    assert "No runs." in result.stdout


def test_runs_show_prints_status_exit_and_transcript(cli: Callable[..., Result]) -> None:
    run_id = _completed_run(cli)

    result = cli("runs", "show", run_id)

    assert result.exit_code == 0, result.output
    out = result.stdout
    assert run_id in out
    assert "completed" in out
    assert "exit:    reply" in out
    assert "user: What is 2 + 3?" in out
    assert 'add({"a": 2, "b": 3})' in out
    assert "tool add: 5" in out
    assert "assistant: Hello! I asked the add tool: 2 + 3 = 5." in out


def test_runs_show_json_has_the_exit_and_transcript(cli: Callable[..., Result]) -> None:
    run_id = _completed_run(cli)

    payload = json.loads(cli("runs", "show", run_id, "--json").stdout)

    assert payload["status"] == "completed"
    assert payload["exit"]["kind"] == "reply"
    assert [i["role"] for i in payload["transcript"]] == ["user", "assistant", "tool", "assistant"]
    assert payload["transcript"][1]["tool_calls"][0]["name"] == "add"


def test_runs_show_of_a_blocked_run_names_the_pending_gate(
    cli: Callable[..., Result], mailer_config: Path
) -> None:
    blocked = cli("run", "--json", "--agent", "mailer", "email ana")
    ref = gate_ref(blocked.stdout)
    run_id = json.loads(blocked.stdout)["run_id"]

    result = cli("runs", "show", run_id)

    assert "blocked" in result.stdout
    assert f"reverie gates approve {ref}" in result.stdout


def test_runs_show_of_an_unknown_run_exits_2(cli: Callable[..., Result]) -> None:
    result = cli("runs", "show", "run_nope")

    assert result.exit_code == 2
    assert "run_nope" in result.stderr


def test_runs_cancel_cancels_a_blocked_run(cli: Callable[..., Result], mailer_config: Path) -> None:
    blocked = cli("run", "--json", "--agent", "mailer", "email ana")
    run_id = json.loads(blocked.stdout)["run_id"]

    result = cli("runs", "cancel", run_id)

    assert result.exit_code == 0, result.output
    assert "cancelled" in result.stdout
    shown = json.loads(cli("runs", "show", run_id, "--json").stdout)
    assert shown["status"] == "cancelled"


def test_runs_cancel_json_reports_the_new_status(
    cli: Callable[..., Result], mailer_config: Path
) -> None:
    run_id = json.loads(cli("run", "--json", "--agent", "mailer", "email ana").stdout)["run_id"]

    result = cli("runs", "cancel", run_id, "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "cancelled"


def test_runs_cancel_of_a_completed_run_exits_1(cli: Callable[..., Result]) -> None:
    run_id = _completed_run(cli)

    result = cli("runs", "cancel", run_id)

    assert result.exit_code == 1
    assert "already ended" in result.stderr


def test_runs_resume_of_a_blocked_run_reports_it_still_blocked(
    cli: Callable[..., Result], mailer_config: Path
) -> None:
    blocked = cli("run", "--json", "--agent", "mailer", "email ana")
    run_id = json.loads(blocked.stdout)["run_id"]

    result = cli("runs", "resume", run_id, "--json")

    assert result.exit_code == 3
    assert json.loads(result.stdout)["gate"]["ref"] == gate_ref(blocked.stdout)


def test_runs_resume_of_a_finished_run_prints_its_result(cli: Callable[..., Result]) -> None:
    run_id = _completed_run(cli)

    result = cli("runs", "resume", run_id)

    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "Hello! I asked the add tool: 2 + 3 = 5."


def test_runs_resume_continues_a_run_whose_process_died_before_it_ran(
    cli: Callable[..., Result], home: Path
) -> None:
    # A run row and its user message, as a process leaves them when it dies at once.
    async def orphan() -> str:
        store = open_store(f"sqlite:///{home / 'reverie.db'}")
        await store.open()
        try:
            scope = Scope(tenant="local", user="tester")
            thread_id = new_id("thr")
            await store.create_thread(thread_id, scope)
            run = await store.create_run(
                RunRecord(
                    run_id=new_id("run"), thread_id=thread_id, scope=scope, agent_name="assistant"
                )
            )
            await store.append_items(
                thread_id, run.run_id, [NewItem(role="user", content="hi")], fence=None
            )
            return run.run_id
        finally:
            await store.close()

    run_id = asyncio.run(orphan())

    without_model = cli("runs", "resume", run_id)
    resumed = cli("runs", "resume", run_id, "--model", f"scripted:{EXAMPLE_SCRIPT}")

    assert without_model.exit_code == 2
    assert "'assistant'" in without_model.stderr
    assert resumed.exit_code == 0, resumed.output
    assert resumed.stdout.strip() == "Hello! I asked the add tool: 2 + 3 = 5."


def test_runs_show_names_the_drift_a_resume_refused(
    cli: Callable[..., Result], mailer_config: Path
) -> None:
    blocked = cli("run", "--json", "--agent", "mailer", "email ana")
    assert blocked.exit_code == 3, blocked.output
    ref = gate_ref(blocked.stdout)
    run_id = str(json.loads(blocked.stdout)["run_id"])
    # The operator changes the agent's instructions while the run waits for its approval.
    text = mailer_config.read_text(encoding="utf-8")
    mailer_config.write_text(
        text.replace('"You send emails."', '"You send emails to anyone."'), encoding="utf-8"
    )

    approved = cli("gates", "approve", ref)
    shown = cli("runs", "show", run_id)
    as_json = json.loads(cli("runs", "show", run_id, "--json").stdout)

    assert approved.exit_code != 0
    assert "resume_drift" in shown.stdout
    assert "drift:   resume refused: the instructions changed" in shown.stdout
    assert as_json["exit"]["kind"] == "resume_drift"
    assert [(d["action"], d["instructions"]) for d in as_json["exit"]["drift"]] == [
        ("refuse", True)
    ]


def test_runs_show_shows_the_cached_share_of_the_input(
    cli: Callable[..., Result], home: Path
) -> None:
    from reverie import Agent, Runtime, Scope, tool
    from reverie.models.openai import OpenAIChatModel
    from reverie.testing import FakeOpenAIServer, call

    @tool(effects=set())
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    async def run() -> str:
        instructions = "Follow the house rules in every answer. " * 200
        async with FakeOpenAIServer([call("add", a=1, b=2), "3"]) as srv:
            model = OpenAIChatModel("m", base_url=srv.base_url, api_key="k")
            agent = Agent(name="calc", model=model, tools=[add], instructions=instructions)
            async with Runtime.open(f"sqlite:///{home / 'reverie.db'}") as rt:
                r = await rt.run(agent, "add", scope=Scope(tenant=DEFAULT_TENANT, user="tester"))
        assert r.usage.cache_read_tokens > 0
        share = r.usage.cache_read_tokens / r.usage.input_tokens
        return f"{r.run_id} {share:.0%}"

    run_id, share = asyncio.run(run()).split()
    result = cli("runs", "show", run_id)
    assert result.exit_code == 0, result.output
    assert f"({share} cached)" in result.stdout
