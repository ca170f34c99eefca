"""Fixtures for the CLI tests: an isolated ``$REVERIE_HOME``, a runner, config and script files.

Every test gets its own ``REVERIE_HOME`` under ``tmp_path``, so the default store
(``sqlite:///$REVERIE_HOME/reverie.db``) and the default ``reverie.toml`` are the test's own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from cli.cli_support import HERE, MAIL_SCRIPT
from reverie.cli.app import app


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
