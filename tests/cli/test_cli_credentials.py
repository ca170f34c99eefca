"""A missing API key is found before the run starts: no failed run stored, no model call."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

SERVE_TOML = """
[agents.helper]
model = "anthropic:claude-sonnet-4-5"

[auth.tokens]
tok-ana = { tenant = "acme", user = "ana" }
"""


def assert_names_the_variable(result: Result, variable: str, secret: str | None = None) -> None:
    assert result.exit_code == 2, result.output
    assert variable in result.stderr
    assert "no API key" in result.stderr
    assert "Traceback" not in result.output
    if secret is not None:
        assert secret not in result.output


@pytest.mark.parametrize(
    ("spec", "variable"),
    [
        ("openai:gpt-4.1-mini", "OPENAI_API_KEY"),
        ("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
        ("hermes:openai:gpt-4.1-mini", "OPENAI_API_KEY"),
    ],
)
def test_run_checks_the_models_key_before_starting_the_run(
    cli: Callable[..., Result], spec: str, variable: str
) -> None:
    result = cli("run", "--model", spec, "hi")

    assert_names_the_variable(result, variable)
    assert json.loads(cli("runs", "list", "--json").stdout) == []


def test_chat_checks_the_models_key_before_the_first_turn(
    cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-secret-value-123456")

    result = cli("chat", "--model", "anthropic:claude-sonnet-4-5")

    assert_names_the_variable(result, "ANTHROPIC_API_KEY", secret="sk-openai-secret-value-123456")
    assert json.loads(cli("runs", "list", "--json").stdout) == []


def test_serve_checks_every_agents_key_before_listening(
    cli: Callable[..., Result], home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (home / "reverie.toml").write_text(SERVE_TOML, encoding="utf-8")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "   ")

    result = cli("serve", "--port", "0")

    assert_names_the_variable(result, "ANTHROPIC_API_KEY")
    assert "'helper'" in result.stderr


def test_a_model_that_needs_no_key_runs_without_one(
    cli: Callable[..., Result], write_script: Callable[..., Path]
) -> None:
    script = write_script([{"reply": "hello"}])

    result = cli("run", "--model", f"scripted:{script}", "hi")

    assert result.exit_code == 0, result.output
