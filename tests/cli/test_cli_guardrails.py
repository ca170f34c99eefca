"""Built-in guardrails switched on from ``reverie.toml``'s ``[guardrails]`` (DESIGN §20)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from typer.testing import Result

from cli.cli_support import HERE


def _config(
    write_config: Callable[[str], Path],
    write_script: Callable[..., Path],
    script: list[dict[str, Any]],
    guardrails: str,
    tools: str = "[]",
) -> Path:
    path = write_script(script, "guarded.json")
    return write_config(
        f"""
pythonpath = [{json.dumps(str(HERE))}]

[guardrails]
{guardrails}

[agents.guarded]
model = {json.dumps("scripted:" + str(path))}
tools = {tools}
"""
    )


def _transcript(cli: Callable[..., Result], run_id: str) -> list[dict[str, Any]]:
    shown = json.loads(cli("runs", "show", run_id, "--json").stdout)
    rows: list[dict[str, Any]] = shown["transcript"]
    return rows


def test_the_pii_redactor_from_reverie_toml_redacts_emails_and_phones_in_and_out(
    cli: Callable[..., Result],
    write_config: Callable[[str], Path],
    write_script: Callable[..., Path],
) -> None:
    _config(
        write_config,
        write_script,
        [{"reply": "Call Bob on +1 415 555 0134 or write bob@example.com."}],
        "redact_pii = true",
    )

    result = cli("run", "--json", "--agent", "guarded", "I am ana@example.com, 020 7946 0958")

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["text"] == "Call Bob on [phone] or write [email]."
    rows = _transcript(cli, out["run_id"])
    stored = json.dumps(rows)
    for leaked in ("bob@example.com", "ana@example.com", "415 555", "7946"):
        assert leaked not in stored
    assert [r["content"] for r in rows if r["role"] == "user"] == ["I am [email], [phone]"]


def test_the_max_length_guardrail_from_reverie_toml_refuses_long_input_and_long_replies(
    cli: Callable[..., Result],
    write_config: Callable[[str], Path],
    write_script: Callable[..., Path],
) -> None:
    _config(
        write_config,
        write_script,
        [{"reply": "x" * 50}],
        "max_input_chars = 20\nmax_reply_chars = 10",
    )

    too_long_input = cli("run", "--agent", "guarded", "a message over twenty characters")
    too_long_reply = cli("run", "--json", "--agent", "guarded", "short")

    assert too_long_input.exit_code == 1, too_long_input.output
    assert "reverie.max-input-length" in too_long_input.output
    assert too_long_reply.exit_code == 1, too_long_reply.output
    failed = json.loads(too_long_reply.stdout)
    assert failed["exit"]["kind"] == "guardrail_tripped"
    assert "x" * 11 not in too_long_reply.stdout


def test_the_injection_marker_check_withholds_tool_output_from_the_model(
    cli: Callable[..., Result],
    write_config: Callable[[str], Path],
    write_script: Callable[..., Path],
) -> None:
    _config(
        write_config,
        write_script,
        [{"call": "fetch_page", "arguments": {"url": "https://x.test"}}, {"reply": "done"}],
        "injection_markers = true",
        tools='["cli_fixture_tools:fetch_page"]',
    )

    result = cli("run", "--json", "--agent", "guarded", "read the page")

    assert result.exit_code == 0, result.output
    rows = _transcript(cli, json.loads(result.stdout)["run_id"])
    [tool_row] = [r for r in rows if r["role"] == "tool"]
    assert "withheld" in tool_row["content"]
    assert "evil@example.com" not in json.dumps(rows)
