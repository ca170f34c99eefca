"""``reverie doctor``: config, store, models and keys (never their values), hooks."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result


@pytest.fixture
def good_config(write_config: Callable[[str], Path], write_script: Callable[..., Path]) -> Path:
    script = write_script([{"reply": "hi"}])
    return write_config(
        f"""
[agents.cloud]
model = "openai:gpt-4.1-mini"
tools = ["reverie.cli.demo_tools:add"]

[agents.offline]
model = "scripted:{script}"
"""
    )


def test_doctor_passes_on_a_good_config_and_never_prints_the_key(
    cli: Callable[..., Result], good_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-very-secret")

    result = cli("doctor", "--offline")

    assert result.exit_code == 0, result.output
    assert "OPENAI_API_KEY is set" in result.stdout
    assert "needs no API key" in result.stdout
    assert "FAIL" not in result.stdout
    assert "sk-test-very-secret" not in result.output


def test_doctor_json_reports_each_check(
    cli: Callable[..., Result], good_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-very-secret")

    report = json.loads(cli("doctor", "--offline", "--json").stdout)

    assert report["ok"] is True
    names = [c["name"] for c in report["checks"]]
    assert names[:2] == ["config", "store"]
    assert "agent cloud key" in names
    assert "agent offline" in names


def test_doctor_fails_when_a_key_variable_is_not_set(
    cli: Callable[..., Result], good_config: Path
) -> None:
    result = cli("doctor")

    assert result.exit_code == 1
    assert "OPENAI_API_KEY is not set" in result.stdout


def test_doctor_fails_when_the_store_cannot_open(
    cli: Callable[..., Result], good_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a sqlite database" * 100)

    result = cli("doctor", "--store", f"sqlite:///{garbage}", "--json")

    assert result.exit_code == 1
    store = next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "store")
    assert store["status"] == "fail"


def test_doctor_with_no_config_warns_that_no_agent_is_configured(
    cli: Callable[..., Result],
) -> None:
    result = cli("doctor")

    assert result.exit_code == 0, result.output
    assert "none configured" in result.stdout


def test_doctor_on_a_broken_config_exits_2(
    cli: Callable[..., Result], write_config: Callable[[str], Path]
) -> None:
    path = write_config("[agents.x\n")

    result = cli("doctor")

    assert result.exit_code == 2
    assert f"{path}: line 1" in result.stderr


def test_doctor_contacts_each_model_endpoint(
    cli: Callable[..., Result],
    write_config: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reverie.testing import FakeOpenAIServer

    monkeypatch.setenv("FAKE_KEY", "sk-fake-secret")
    with FakeOpenAIServer([]) as srv:
        write_config(
            f"""
[models.local]
base_url = "{srv.base_url}"
api_key_env = "FAKE_KEY"

[agents.helper]
model = "local:fake-model"
"""
        )
        result = cli("doctor")
    assert result.exit_code == 0, result.output
    assert "answers and accepts the key" in result.stdout
    assert "sk-fake-secret" not in result.output


def test_doctor_fails_when_a_model_endpoint_is_unreachable(
    cli: Callable[..., Result],
    write_config: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("FAKE_KEY", "sk-fake-secret")
    write_config(
        f"""
[models.local]
base_url = "http://127.0.0.1:{port}/v1"
api_key_env = "FAKE_KEY"

[agents.helper]
model = "local:fake-model"
"""
    )
    result = cli("doctor", "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    assert failed and failed[0]["name"] == "agent helper endpoint"
    assert "sk-fake-secret" not in result.output


def test_doctor_probe_reports_what_a_llama_cpp_python_like_endpoint_supports(
    cli: Callable[..., Result],
    write_config: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from typing import Any

    from reverie.testing import FakeOpenAIServer, call
    from reverie.testing.fake_openai import FakeStep

    def script(body: dict[str, Any]) -> FakeStep:
        if isinstance(body.get("tool_choice"), dict):
            return call("echo", word="hi")
        return '{"answer": "OK"}' if body.get("response_format") else "OK"

    monkeypatch.setenv("FAKE_KEY", "sk-fake-secret")
    quirks = {
        "null_content": False,
        "usage_in_streams": False,
        "structured_output": "json_object",
        "streaming_tool_calls": False,
    }
    with FakeOpenAIServer(script, **quirks) as srv:
        write_config(
            f"""
[models.local]
base_url = "{srv.base_url}"
api_key_env = "FAKE_KEY"

[agents.helper]
model = "local:fake-model"
"""
        )
        result = cli("doctor", "--probe", "--json")
    assert result.exit_code == 0, result.output
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    probe = "probe local:fake-model"
    assert checks[f"{probe}: plain reply"]["status"] == "ok"
    assert checks[f"{probe}: streamed tools"]["detail"] == "HTTP 200, then nothing"
    assert checks[f"{probe}: null content"]["status"] == "warn"
    assert checks[f"{probe}: declare"]["detail"] == (
        'structured_output = "json_object", usage_in_streams = false, null_content = false, '
        "parallel_tool_calls = true, streaming_tool_calls = false"
    )
    assert "sk-fake-secret" not in result.output
