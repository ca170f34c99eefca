"""Error text a person reads: what is wrong and what to type, never a Python repr or a
validator's prefix, with a guess for a near miss, and each failure once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from typer.testing import Result

from reverie.testing import FakeOpenAIServer
from reverie.testing.fake_openai import FakeError


def test_a_misspelt_config_key_is_named_with_did_you_mean(
    cli: Callable[..., Result], write_config: Callable[[str], Path]
) -> None:
    write_config('[agents.assistant]\nmodle = "openai:gpt-4.1-mini"\n')

    result = cli("run", "hi")

    assert result.exit_code == 2
    assert "agents.assistant.modle" in result.stderr
    assert "did you mean model?" in result.stderr
    assert "missing" not in result.stderr


def test_a_misspelt_top_level_table_gets_did_you_mean(
    cli: Callable[..., Result], write_config: Callable[[str], Path]
) -> None:
    write_config('[stor]\nurl = "sqlite:///x.db"\n')

    result = cli("runs", "list")

    assert result.exit_code == 2
    assert "stor: unknown key" in result.stderr and "did you mean store?" in result.stderr


def test_a_near_miss_provider_gets_did_you_mean(cli: Callable[..., Result]) -> None:
    result = cli("run", "--model", "opneai:gpt-4.1-mini", "hi")

    assert result.exit_code == 2
    assert "did you mean 'openai:gpt-4.1-mini'?" in result.stderr


def test_a_bare_provider_name_says_a_model_is_missing(cli: Callable[..., Result]) -> None:
    result = cli("run", "--model", "ollama", "hi")

    assert result.exit_code == 2
    assert "'ollama' names a provider but no model" in result.stderr
    assert "openai:ollama" not in result.stderr


def test_config_errors_carry_no_pydantic_value_error_prefix(
    cli: Callable[..., Result], write_config: Callable[[str], Path]
) -> None:
    write_config("[agents.assistant]\nmodel = []\n")

    result = cli("run", "hi")

    assert result.exit_code == 2
    assert "the list names no model" in result.stderr
    assert "Value error" not in result.stderr


def test_an_unpriced_model_is_named_by_its_spec_not_a_python_repr(
    cli: Callable[..., Result], write_config: Callable[[str], Path]
) -> None:
    write_config(
        '[agents.assistant]\nmodel = "openai:gpt-9-unpriced"\n'
        "[agents.assistant.limits]\nmax_usd = 1.0\n"
    )

    result = cli("run", "hi")

    assert result.exit_code == 2
    assert "no price is known for model 'openai:gpt-9-unpriced'" in result.stderr
    assert "ModelSpec(" not in result.stderr


def test_an_authentication_failure_is_printed_once(cli: Callable[..., Result]) -> None:
    with FakeOpenAIServer([FakeError(401)]) as server:
        result = cli("run", "--model", f"openai-compat:{server.base_url}#fake-model", "hi")

    assert result.exit_code == 1
    assert "401" in result.stderr
    assert result.stderr.count("call failed") == 1, result.stderr


def test_top_level_help_lists_every_exit_code(cli: Callable[..., Result]) -> None:
    result = cli("--help")

    text = " ".join(result.stdout.split())
    for code in ("0 completed", "1 failed", "2 configuration", "3 blocked", "4 serve", "75 the"):
        assert code in text, code
    assert "130 cancelled" in text
