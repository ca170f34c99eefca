"""Ids on the command line: kept whole in 80-column tables, and any unique prefix accepted."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from cli.cli_support import EXAMPLE_SCRIPT


def _run(cli: Callable[..., Result], *args: str) -> dict[str, object]:
    result = cli("run", "--json", *args)
    assert result.exit_code in (0, 3), result.output
    payload: dict[str, object] = json.loads(result.stdout)
    return payload


def _completed(cli: Callable[..., Result]) -> str:
    return str(_run(cli, "--model", f"scripted:{EXAMPLE_SCRIPT}", "What is 2 + 3?")["run_id"])


def _blocked_gate(cli: Callable[..., Result]) -> tuple[str, str]:
    payload = _run(cli, "--agent", "mailer", "email ana")
    gate = payload["gate"]
    assert isinstance(gate, dict)
    return str(gate["ref"]), str(payload["run_id"])


def _unique_prefix(target: str, others: list[str]) -> str:
    for length in range(len("run_") + 1, len(target) + 1):
        prefix = target[:length]
        if not any(other.startswith(prefix) for other in others if other != target):
            return prefix
    raise AssertionError("ids are unique")


def _common_prefix(ids: list[str]) -> str:
    first, last = min(ids), max(ids)
    size = 0
    while size < min(len(first), len(last)) and first[size] == last[size]:
        size += 1
    return first[:size]


def test_runs_list_keeps_run_ids_whole_on_an_80_column_terminal(
    cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, mailer_config: Path
) -> None:
    run_ids = [_completed(cli), _completed(cli), _blocked_gate(cli)[1]]
    monkeypatch.setenv("COLUMNS", "80")

    result = cli("runs", "list")

    assert result.exit_code == 0, result.output
    for run_id in run_ids:
        assert run_id in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert "STATUS" in result.stdout


def test_gates_list_keeps_gate_refs_whole_on_an_80_column_terminal(
    cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, mailer_config: Path
) -> None:
    refs = [_blocked_gate(cli)[0], _blocked_gate(cli)[0]]
    monkeypatch.setenv("COLUMNS", "80")

    result = cli("gates", "list")

    assert result.exit_code == 0, result.output
    for ref in refs:
        assert ref in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 80


def test_a_wide_terminal_shows_every_column(
    cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = _completed(cli)
    monkeypatch.setenv("COLUMNS", "200")

    result = cli("runs", "list")

    header = result.stdout.splitlines()[0]
    for column in ("RUN", "STATUS", "AGENT", "SCOPE", "UPDATED", "EXIT"):
        assert column in header
    assert run_id in result.stdout


def test_runs_show_accepts_a_unique_prefix_of_the_run_id(cli: Callable[..., Result]) -> None:
    first, second = _completed(cli), _completed(cli)
    prefix = _unique_prefix(second, [first, second])

    result = cli("runs", "show", "--json", prefix)

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["run_id"] == second


def test_a_prefix_without_the_run_underscore_works_too(cli: Callable[..., Result]) -> None:
    run_id = _completed(cli)

    result = cli("runs", "show", "--json", run_id.removeprefix("run_")[:14])

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["run_id"] == run_id


def test_an_ambiguous_run_prefix_lists_the_candidates_and_exits_2(
    cli: Callable[..., Result],
) -> None:
    ids = [_completed(cli), _completed(cli)]

    result = cli("runs", "show", _common_prefix(ids))

    assert result.exit_code == 2
    assert "ambiguous" in result.stderr
    for run_id in ids:
        assert run_id in result.stderr


def test_an_unknown_run_prefix_is_not_found_and_exits_2(cli: Callable[..., Result]) -> None:
    _completed(cli)

    result = cli("runs", "show", "run_ffff")

    assert result.exit_code == 2
    assert "no run 'run_ffff'" in result.stderr


def test_runs_cancel_and_resume_accept_a_prefix(
    cli: Callable[..., Result], mailer_config: Path
) -> None:
    _ref, blocked = _blocked_gate(cli)
    done = _completed(cli)

    resumed = cli("runs", "resume", "--json", _unique_prefix(done, [done, blocked]))
    cancelled = cli("runs", "cancel", "--json", _unique_prefix(blocked, [done, blocked]))

    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["run_id"] == done
    assert cancelled.exit_code == 0, cancelled.output
    assert json.loads(cancelled.stdout) == {
        "run_id": blocked,
        "status": "cancelled",
        "message": f"run {blocked} is cancelled",
    }


def test_gates_approve_and_deny_accept_a_unique_prefix(
    cli: Callable[..., Result], mailer_config: Path
) -> None:
    first, first_run = _blocked_gate(cli)
    second, second_run = _blocked_gate(cli)

    approved = cli("gates", "approve", "--json", _unique_prefix(first, [first, second]))
    denied = cli("gates", "deny", "--json", _unique_prefix(second, [first, second]))

    assert approved.exit_code == 0, approved.output
    assert json.loads(approved.stdout)["run_id"] == first_run
    assert denied.exit_code == 0, denied.output
    assert json.loads(denied.stdout)["run_id"] == second_run


def test_an_ambiguous_gate_prefix_lists_the_candidates_and_exits_2(
    cli: Callable[..., Result], mailer_config: Path
) -> None:
    refs = [_blocked_gate(cli)[0], _blocked_gate(cli)[0]]

    result = cli("gates", "approve", _common_prefix(refs))

    assert result.exit_code == 2
    assert "ambiguous" in result.stderr
    for ref in refs:
        assert ref in result.stderr
    pending = json.loads(cli("gates", "list", "--json").stdout)
    assert sorted(g["ref"] for g in pending) == sorted(refs)


def test_run_thread_accepts_a_unique_prefix_of_the_thread_id(cli: Callable[..., Result]) -> None:
    first = _run(cli, "--model", f"scripted:{EXAMPLE_SCRIPT}", "What is 2 + 3?")
    other = _run(cli, "--model", f"scripted:{EXAMPLE_SCRIPT}", "And again?")
    thread = str(first["thread_id"])
    prefix = _unique_prefix(thread, [thread, str(other["thread_id"])])

    follow = _run(cli, "--model", f"scripted:{EXAMPLE_SCRIPT}", "--thread", prefix, "More?")

    assert follow["thread_id"] == thread


def test_a_thread_of_another_scope_is_not_found_by_prefix(cli: Callable[..., Result]) -> None:
    theirs = _run(cli, "--model", f"scripted:{EXAMPLE_SCRIPT}", "--user", "bob", "hi")
    thread = str(theirs["thread_id"])

    result = cli(
        "run",
        "--model",
        f"scripted:{EXAMPLE_SCRIPT}",
        "--user",
        "ana",
        "--thread",
        thread[:12],
        "x",
    )

    assert result.exit_code == 2
    assert "no thread" in result.stderr


def _short_column(stdout: str, full: str) -> str:
    """The ``ID`` cell of the table row that shows ``full``."""
    row = next(line for line in stdout.splitlines() if full in line)
    return row.split()[0]


def test_eight_characters_copied_from_runs_list_name_the_run(
    cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Made within the same millisecond-ish: their ids share the whole time prefix.
    ids = [_completed(cli) for _ in range(3)]
    monkeypatch.setenv("COLUMNS", "80")
    listed = cli("runs", "list")

    for run_id in ids:
        short = _short_column(listed.stdout, run_id)
        assert len(short) == 8

        shown = cli("runs", "show", "--json", short)

        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.stdout)["run_id"] == run_id


def test_the_last_eight_characters_of_an_id_name_it_too(cli: Callable[..., Result]) -> None:
    first, second = _completed(cli), _completed(cli)

    shown = cli("runs", "show", "--json", second[-8:])

    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["run_id"] == second
    assert first != second


def test_eight_characters_copied_from_gates_list_approve_the_gate(
    cli: Callable[..., Result], mailer_config: Path
) -> None:
    ref, _run_id = _blocked_gate(cli)
    _blocked_gate(cli)
    listed = cli("gates", "list")

    approved = cli("gates", "approve", _short_column(listed.stdout, ref))

    assert approved.exit_code == 0, approved.output
    assert "Done: the email is handled." in approved.stdout


def test_a_short_form_of_a_thread_continues_it(cli: Callable[..., Result]) -> None:
    payload = _run(cli, "--model", f"scripted:{EXAMPLE_SCRIPT}", "What is 2 + 3?")
    thread = str(payload["thread_id"])
    _completed(cli)

    again = _run(
        cli, "--model", f"scripted:{EXAMPLE_SCRIPT}", "--thread", thread.rsplit("_", 1)[-1][:8], "x"
    )

    assert again["thread_id"] == thread
