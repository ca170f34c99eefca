"""Fixtures for the CLI tests: an isolated ``$REVERIE_HOME``, a runner, config and script files.

Every test gets its own ``REVERIE_HOME`` under ``tmp_path``, so the default store
(``sqlite:///$REVERIE_HOME/reverie.db``) and the default ``reverie.toml`` are the test's own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from reverie.cli.app import app

HERE = Path(__file__).resolve().parent
"""This directory: it holds ``cli_fixture_tools.py``, which test configs import."""
REPO = HERE.parent.parent
EXAMPLE_SCRIPT = REPO / "examples" / "scripted_hello.json"

MAIL_SCRIPT: list[dict[str, Any]] = [
    {"call": "send_email", "arguments": {"to": "ana@example.com", "body": "hello"}},
    {"reply": "Done: the email is handled."},
]
"""A turn that calls the gated ``send_email`` tool, then replies."""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty ``$REVERIE_HOME`` (no reverie.toml yet), and no provider keys set."""
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("REVERIE_HOME", str(path))
    monkeypatch.setenv("USER", "tester")
    for variable in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    return path


@pytest.fixture
def cli(home: Path) -> Callable[..., Result]:
    """Invoke ``reverie ARGS...`` in process; returns the click ``Result``."""
    runner = CliRunner()

    def invoke(*args: str) -> Result:
        return runner.invoke(app, list(args), catch_exceptions=False)

    return invoke


@pytest.fixture
def write_script(tmp_path: Path) -> Callable[..., Path]:
    """Write a scripted-model JSON file; returns its path."""

    def write(steps: Sequence[dict[str, Any]], name: str = "script.json") -> Path:
        path = tmp_path / name
        path.write_text(json.dumps(list(steps)), encoding="utf-8")
        return path

    return write


@pytest.fixture
def write_config(home: Path) -> Callable[[str], Path]:
    """Write ``$REVERIE_HOME/reverie.toml``; returns its path."""

    def write(text: str) -> Path:
        path = home / "reverie.toml"
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture
def mailer_config(write_config: Callable[[str], Path], write_script: Callable[..., Path]) -> Path:
    """A reverie.toml with agent ``mailer``: scripted model, the gated ``send_email`` tool."""
    script = write_script(MAIL_SCRIPT, "mail.json")
    return write_config(
        f"""
pythonpath = [{json.dumps(str(HERE))}]

[agents.mailer]
model = {json.dumps("scripted:" + str(script))}
instructions = "You send emails."
tools = ["cli_fixture_tools:send_email"]
"""
    )


def run_reverie(home: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``python -m reverie.cli.app ARGS...`` in a child process with ``REVERIE_HOME=home``."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["REVERIE_HOME"] = str(home)
    env["USER"] = "tester"
    env["COLUMNS"] = "200"
    return subprocess.run(
        [sys.executable, "-m", "reverie.cli.app", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def gate_ref(result: Result) -> str:
    """The gate ref a blocked ``reverie run --json`` printed."""
    payload = json.loads(result.stdout)
    assert payload["status"] == "blocked", payload
    return str(payload["gate"]["ref"])
