"""The CLI as a user runs it: ``python -m reverie.cli.app`` in child processes, default SQLite."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from cli.cli_support import EXAMPLE_SCRIPT, HERE, MAIL_SCRIPT, gate_ref, run_reverie, start_reverie

pytestmark = pytest.mark.slow  # each test starts a Python subprocess


def test_a_scripted_run_completes_offline_in_a_child_process(tmp_path: Path) -> None:
    home = tmp_path / "home"

    result = run_reverie(home, "run", "--model", f"scripted:{EXAMPLE_SCRIPT}", "hi")

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Hello! I asked the add tool: 2 + 3 = 5."
    assert (home / "reverie.db").exists()  # the default store: sqlite:///$REVERIE_HOME/reverie.db


def test_a_run_blocked_in_one_process_is_approved_from_another(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    script = tmp_path / "mail.json"
    script.write_text(json.dumps(MAIL_SCRIPT), encoding="utf-8")
    (home / "reverie.toml").write_text(
        f"pythonpath = [{json.dumps(str(HERE))}]\n"
        "[agents.mailer]\n"
        f"model = {json.dumps('scripted:' + str(script))}\n"
        'tools = ["cli_fixture_tools:send_email"]\n',
        encoding="utf-8",
    )

    blocked = run_reverie(home, "run", "--json", "email ana")
    assert blocked.returncode == 3, blocked.stderr
    ref = gate_ref(blocked.stdout)

    listed = run_reverie(home, "gates", "list")
    assert listed.returncode == 0, listed.stderr
    assert ref in listed.stdout

    approved = run_reverie(home, "gates", "approve", ref)
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.strip() == "Done: the email is handled."

    runs = json.loads(run_reverie(home, "runs", "list", "--json").stdout)
    assert [r["status"] for r in runs] == ["completed"]


def test_a_broken_config_exits_2_with_file_key_and_fix_in_a_child_process(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    config = home / "reverie.toml"
    config.write_text('[agents.helper]\nmodel = "openai:gpt-4.1-mini"\nlimits = 3\n')

    result = run_reverie(home, "runs", "list")

    assert result.returncode == 2
    assert f"{config}: agents.helper.limits: " in result.stderr
    assert "Fix: write limits = {" in result.stderr
    assert "Traceback" not in result.stderr


def test_ctrl_c_cancels_the_run_not_just_the_program(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    script = tmp_path / "wait.json"
    script.write_text(json.dumps([{"call": "wait", "arguments": {"seconds": 60}}]))
    (home / "reverie.toml").write_text(
        f"pythonpath = [{json.dumps(str(HERE))}]\n"
        "[agents.waiter]\n"
        f"model = {json.dumps('scripted:' + str(script))}\n"
        'tools = ["cli_fixture_tools:wait"]\n',
        encoding="utf-8",
    )
    child = start_reverie(home, "run", "wait a minute")
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            runs = json.loads(run_reverie(home, "runs", "list", "--json").stdout or "[]")
            if runs and runs[0]["status"] == "running":
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the run never started")

        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()

    assert child.returncode == 130, stderr
    assert "Run cancelled" in stderr
    runs = json.loads(run_reverie(home, "runs", "list", "--json").stdout)
    assert [r["status"] for r in runs] == ["cancelled"]
