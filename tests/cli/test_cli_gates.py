"""``reverie gates``: a blocked run exits 3, is listed, and is approved or denied from the CLI."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from typer.testing import Result

from cli.cli_support import gate_ref


def _blocked_ref(cli: Callable[..., Result]) -> str:
    result = cli("run", "--json", "--agent", "mailer", "email ana")
    assert result.exit_code == 3, result.output
    return gate_ref(result.stdout)


def test_a_run_that_hits_an_approval_tool_exits_3_and_says_how_to_approve(
    cli: Callable[..., Result], mailer_config: Path
) -> None:
    result = cli("run", "--agent", "mailer", "email ana")

    assert result.exit_code == 3, result.output
    assert "send_email" in result.stdout
    ref = json.loads(cli("gates", "list", "--json").stdout)[0]["ref"]
    assert f"reverie gates approve {ref}" in result.stdout
    assert "reverie gates deny" in result.stdout


def test_gates_list_shows_the_pending_gate(cli: Callable[..., Result], mailer_config: Path) -> None:
    ref = _blocked_ref(cli)

    table = cli("gates", "list")
    listed = json.loads(cli("gates", "list", "--json").stdout)

    assert table.exit_code == 0
    assert ref in table.stdout
    assert "send_email" in table.stdout
    assert [g["ref"] for g in listed] == [ref]
    assert listed[0]["status"] == "pending"
    assert listed[0]["arguments"] == {"to": "ana@example.com", "body": "hello"}


def test_gates_approve_resumes_the_run_to_completion(
    cli: Callable[..., Result], mailer_config: Path
) -> None:
    ref = _blocked_ref(cli)

    approved = cli("gates", "approve", ref)

    assert approved.exit_code == 0, approved.output
    assert approved.stdout.strip() == "Done: the email is handled."
    assert json.loads(cli("gates", "list", "--json").stdout) == []
    run = json.loads(cli("runs", "list", "--json").stdout)[0]
    assert run["status"] == "completed"
    shown = json.loads(cli("runs", "show", run["run_id"], "--json").stdout)
    tool_rows = [i for i in shown["transcript"] if i["role"] == "tool"]
    assert [i["content"] for i in tool_rows] == ["sent to ana@example.com"]


def test_gates_deny_tells_the_model_and_the_run_continues(
    cli: Callable[..., Result], mailer_config: Path
) -> None:
    ref = _blocked_ref(cli)

    denied = cli("gates", "deny", ref, "--reason", "not today", "--json")

    assert denied.exit_code == 0, denied.output
    assert json.loads(denied.stdout)["status"] == "completed"
    run_id = json.loads(denied.stdout)["run_id"]
    shown = json.loads(cli("runs", "show", run_id, "--json").stdout)
    tool_rows = [i for i in shown["transcript"] if i["role"] == "tool"]
    assert len(tool_rows) == 1
    assert "sent to" not in tool_rows[0]["content"]
    assert "not today" in tool_rows[0]["content"]
    history = json.loads(cli("gates", "list", "--status", "denied", "--json").stdout)
    assert [g["ref"] for g in history] == [ref]


def test_approving_a_run_whose_agent_is_not_configured_exits_2_and_leaves_the_gate_pending(
    cli: Callable[..., Result], mailer_config: Path, write_config: Callable[[str], Path]
) -> None:
    ref = _blocked_ref(cli)
    write_config("")  # the mailer agent is gone from reverie.toml

    result = cli("gates", "approve", ref)

    assert result.exit_code == 2
    assert "'mailer'" in result.stderr
    assert "[agents.mailer]" in result.stderr
    pending = json.loads(cli("gates", "list", "--json").stdout)
    assert [(g["ref"], g["status"]) for g in pending] == [(ref, "pending")]


def test_approving_a_gate_twice_exits_2(cli: Callable[..., Result], mailer_config: Path) -> None:
    ref = _blocked_ref(cli)
    assert cli("gates", "approve", ref).exit_code == 0

    again = cli("gates", "approve", ref)

    assert again.exit_code == 2
    assert "error:" in again.stderr


def test_approving_an_unknown_gate_exits_2(cli: Callable[..., Result]) -> None:
    result = cli("gates", "approve", "gate_nope")

    assert result.exit_code == 2
    assert "gate_nope" in result.stderr


def test_gates_list_with_no_gates_says_so(cli: Callable[..., Result]) -> None:
    result = cli("gates", "list")

    assert result.exit_code == 0
    assert "No gates." in result.stdout


def test_run_on_a_thread_with_a_blocked_run_exits_75_naming_the_thread_policy(
    cli: Callable[..., Result], mailer_config: Path
) -> None:
    first = json.loads(cli("run", "--json", "--agent", "mailer", "email ana").stdout)
    thread = first["thread_id"]

    busy = cli("run", "--agent", "mailer", "--thread", thread, "and bob")

    assert busy.exit_code == 75, busy.output
    assert first["run_id"] in busy.stderr and "--thread-policy" in busy.stderr


def test_thread_policy_interrupt_cancels_the_blocked_run_and_runs_the_new_turn(
    cli: Callable[..., Result], mailer_config: Path
) -> None:
    first = json.loads(cli("run", "--json", "--agent", "mailer", "email ana").stdout)

    again = cli(
        "run",
        "--json",
        "--agent",
        "mailer",
        "--thread",
        first["thread_id"],
        "--thread-policy",
        "interrupt",
        "email bob",
    )

    assert again.exit_code == 3, again.output  # the new turn blocks on its own gate
    shown = json.loads(cli("runs", "show", "--json", first["run_id"]).stdout)
    assert shown["status"] == "cancelled"


def test_runtime_thread_policy_in_the_config_is_the_default(
    cli: Callable[..., Result], mailer_config: Path
) -> None:
    mailer_config.write_text(
        mailer_config.read_text(encoding="utf-8") + '\n[runtime]\nthread_policy = "interrupt"\n',
        encoding="utf-8",
    )
    first = json.loads(cli("run", "--json", "--agent", "mailer", "email ana").stdout)

    again = cli("run", "--agent", "mailer", "--thread", first["thread_id"], "email bob")

    assert again.exit_code == 3, again.output
    bad = cli("run", "--agent", "mailer", "--thread-policy", "sometimes", "x")
    assert bad.exit_code == 2


def test_cli_json_timestamps_are_iso_8601_utc(
    cli: Callable[..., Result], mailer_config: Path
) -> None:
    # One format with the HTTP API: 2026-12-01T11:22:14.123Z.
    iso_utc = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
    _blocked_ref(cli)
    [run] = json.loads(cli("runs", "list", "--json").stdout)
    [gate] = json.loads(cli("gates", "list", "--json").stdout)
    for value in (run["created_at"], run["updated_at"], gate["created_at"]):
        assert iso_utc.match(value), value


def test_gates_approve_with_edited_arguments_runs_the_edit_and_records_who(
    cli: Callable[..., Result], mailer_config: Path, tmp_path: Path
) -> None:
    ref = _blocked_ref(cli)
    edit = tmp_path / "edit.json"
    edit.write_text(json.dumps({"to": "bob@example.com", "body": "hello"}), encoding="utf-8")

    approved = cli("gates", "approve", ref, "--arguments", f"@{edit}", "--as", "carol", "--json")

    assert approved.exit_code == 0, approved.output
    run_id = json.loads(approved.stdout)["run_id"]
    shown = json.loads(cli("runs", "show", run_id, "--json").stdout)
    [tool_row] = [i for i in shown["transcript"] if i["role"] == "tool"]
    assert "edited arguments" in tool_row["content"]
    assert tool_row["content"].endswith("sent to bob@example.com")
    gate = json.loads(cli("gates", "show", ref, "--json").stdout)
    assert gate["resolved_by"] == "carol"
    assert gate["edited_arguments"] == {"to": "bob@example.com", "body": "hello"}
    assert gate["shown_digest"] and gate["approved_digest"] != gate["shown_digest"]
    table = cli("gates", "show", ref)
    assert table.exit_code == 0 and "carol" in table.stdout and "bob@example.com" in table.stdout


def test_gates_approve_with_inline_arguments_that_do_not_fit_exits_2_and_stays_pending(
    cli: Callable[..., Result], mailer_config: Path
) -> None:
    ref = _blocked_ref(cli)

    refused = cli("gates", "approve", ref, "--arguments", '{"to": 5}')
    not_json = cli("gates", "approve", ref, "--arguments", "{to")

    assert refused.exit_code == 2, refused.output
    assert "do not fit" in refused.output
    assert not_json.exit_code == 2 and "not JSON" in not_json.output
    [gate] = json.loads(cli("gates", "list", "--json").stdout)
    assert gate["ref"] == ref and gate["status"] == "pending"


def test_gates_approve_without_as_records_the_os_user(
    cli: Callable[..., Result], mailer_config: Path
) -> None:
    import getpass

    ref = _blocked_ref(cli)
    assert cli("gates", "approve", ref).exit_code == 0
    gate = json.loads(cli("gates", "show", ref, "--json").stdout)
    assert gate["resolved_by"] == getpass.getuser()
    assert gate["edited_arguments"] is None
    assert gate["shown_digest"] == gate["approved_digest"]
