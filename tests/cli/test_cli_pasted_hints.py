"""Every command the CLI prints works when pasted: it repeats the ``--config``/``--store`` (and
``--model``/``--agent``) it was started with, and those options work before the command too."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from cli.cli_support import EXAMPLE_SCRIPT, HERE, MAIL_SCRIPT
from reverie.cli.app import app


def _invoke(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(app, list(args), input=stdin, catch_exceptions=False)


def _pasted(line: str, command: str) -> list[str]:
    """The words of the ``reverie …`` command printed on ``line`` after ``command``."""
    found = re.search(rf"(reverie {command}.*?)(?:\s+\(|\[|$)", line)
    assert found is not None, line
    words = shlex.split(found.group(1))
    assert words[0] == "reverie"
    return words[1:]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config outside ``$REVERIE_HOME`` (agent ``mailer``, its own store), and an empty home."""
    monkeypatch.setenv("REVERIE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("USER", "tester")
    script = tmp_path / "mail.json"
    script.write_text(json.dumps(MAIL_SCRIPT), encoding="utf-8")
    config = tmp_path / "project" / "mine.toml"
    config.parent.mkdir()
    config.write_text(
        f"pythonpath = [{json.dumps(str(HERE))}]\n"
        f"[store]\nurl = {json.dumps('sqlite:///' + str(tmp_path / 'project.db'))}\n"
        f"[agents.mailer]\nmodel = {json.dumps('scripted:' + str(script))}\n"
        'tools = ["cli_fixture_tools:send_email"]\n',
        encoding="utf-8",
    )
    return config


def test_the_printed_approve_command_of_a_blocked_run_works_when_pasted(project: Path) -> None:
    blocked = _invoke("run", "--config", str(project), "--agent", "mailer", "email ana")
    assert blocked.exit_code == 3, blocked.output
    line = next(ln for ln in blocked.stdout.splitlines() if "approve:" in ln)

    approved = _invoke(*_pasted(line, "gates approve"))

    assert approved.exit_code == 0, approved.output
    assert "Done: the email is handled." in approved.stdout


def test_the_printed_approve_command_keeps_the_store_it_was_given(
    project: Path, tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    blocked = _invoke("run", "-c", str(project), "--store", store, "--agent", "mailer", "email ana")
    assert blocked.exit_code == 3, blocked.output
    line = next(ln for ln in blocked.stdout.splitlines() if "approve:" in ln)
    assert store in line

    approved = _invoke(*_pasted(line, "gates approve"))

    assert approved.exit_code == 0, approved.output


def test_config_and_store_work_before_the_subcommand(project: Path) -> None:
    ran = _invoke("--config", str(project), "run", "--agent", "mailer", "email ana")
    assert ran.exit_code == 3, ran.output

    listed = _invoke("--config", str(project), "runs", "list", "--json")
    gates = _invoke("-c", str(project), "gates", "list", "--json")

    assert listed.exit_code == 0, listed.output
    assert [run["agent"] for run in json.loads(listed.stdout)] == ["mailer"]
    assert len(json.loads(gates.stdout)) == 1


def test_the_printed_chat_continuation_keeps_model_and_config(
    project: Path, tmp_path: Path
) -> None:
    first = _invoke(
        "chat", "--config", str(project), "--model", f"scripted:{EXAMPLE_SCRIPT}", stdin="hi\n"
    )
    assert first.exit_code == 0, first.output
    line = next(ln for ln in first.stdout.splitlines() if "continue it later with" in ln)
    words = _pasted(line, "chat")
    assert "--model" in words and "--config" in words

    again = _invoke(*words, stdin="/thread\n")

    assert again.exit_code == 0, again.output
    thread = words[words.index("--thread") + 1]
    assert f"thread {thread}" in again.stdout
