"""``reverie run``: one-shot runs, agent choice, exit codes, ``--json``, the no-model message."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import Result

from cli.cli_support import EXAMPLE_SCRIPT


def test_run_with_a_scripted_model_completes_offline_and_prints_the_reply(
    cli: Callable[..., Result],
) -> None:
    result = cli("run", "--model", f"scripted:{EXAMPLE_SCRIPT}", "hi")

    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "Hello! I asked the add tool: 2 + 3 = 5."
    assert "completed" in result.stderr


def test_run_json_prints_status_text_ids_usage_and_gate(cli: Callable[..., Result]) -> None:
    result = cli("run", "--json", "--model", f"scripted:{EXAMPLE_SCRIPT}", "hi")

    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["status"] == "completed"
    assert payload["text"] == "Hello! I asked the add tool: 2 + 3 = 5."
    assert payload["run_id"].startswith("run_")
    assert payload["thread_id"].startswith("thr_")
    assert payload["usage"]["model_calls"] == 2
    assert payload["usage"]["capability_calls"] == 1
    assert payload["gate"] is None


def test_run_without_an_agent_or_model_prints_what_to_set_and_exits_2(
    cli: Callable[..., Result], home: Path
) -> None:
    result = cli("run", "hi")

    assert result.exit_code == 2
    assert result.stdout == ""
    message = result.stderr
    assert "--model" in message
    assert str(home / "reverie.toml") in message
    assert 'model = "openai:gpt-4.1-mini"' in message
    assert "OPENAI_API_KEY" in message
    assert 'model = "ollama:llama3.1"' in message


def test_run_uses_the_only_configured_agent(
    cli: Callable[..., Result],
    write_config: Callable[[str], Path],
    write_script: Callable[..., Path],
) -> None:
    script = write_script([{"reply": "configured agent here"}])
    write_config(f'[agents.solo]\nmodel = "scripted:{script}"\n')

    result = cli("run", "--json", "hello")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["text"] == "configured agent here"
    listed = json.loads(cli("runs", "list", "--json").stdout)
    assert listed[0]["agent"] == "solo"


def test_run_with_several_agents_asks_for_agent_and_exits_2(
    cli: Callable[..., Result],
    write_config: Callable[[str], Path],
    write_script: Callable[..., Path],
) -> None:
    script = write_script([{"reply": "x"}])
    write_config(
        f'[agents.one]\nmodel = "scripted:{script}"\n[agents.two]\nmodel = "scripted:{script}"\n'
    )

    result = cli("run", "hello")

    assert result.exit_code == 2
    assert "--agent" in result.stderr
    assert "one, two" in result.stderr


def test_run_with_an_unknown_agent_names_it_and_exits_2(cli: Callable[..., Result]) -> None:
    result = cli("run", "--agent", "ghost", "hello")

    assert result.exit_code == 2
    assert "'ghost'" in result.stderr
    assert "[agents.ghost]" in result.stderr


def test_model_option_overrides_the_chosen_agents_model(
    cli: Callable[..., Result],
    write_config: Callable[[str], Path],
    write_script: Callable[..., Path],
) -> None:
    write_config('[agents.helper]\nmodel = "openai:gpt-4.1-mini"\n')
    script = write_script([{"reply": "from the override"}])

    result = cli("run", "--agent", "helper", "--model", f"scripted:{script}", "--json", "hi")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["text"] == "from the override"


def test_a_failed_run_exits_1_with_the_reason_on_stderr(
    cli: Callable[..., Result], write_script: Callable[..., Path]
) -> None:
    # One step only: the model call after the tool result finds the script exhausted.
    script = write_script([{"call": "add", "arguments": {"a": 1, "b": 2}}], "short.json")

    result = cli("run", "--model", f"scripted:{script}", "hi")

    assert result.exit_code == 1
    assert "Run failed" in result.stderr
    assert "short.json" in result.stderr


def test_a_scripted_model_error_fails_the_run_json_shows_the_exit(
    cli: Callable[..., Result], write_script: Callable[..., Path]
) -> None:
    script = write_script([{"error": "content_filtered", "message": "no"}])

    result = cli("run", "--json", "--model", f"scripted:{script}", "hi")

    assert result.exit_code == 1
    payload = json.loads(result.stdout)
    assert payload["status"] == "failed"
    assert payload["exit"]["kind"] == "model_error"


def test_tenant_and_user_options_set_the_runs_scope(cli: Callable[..., Result]) -> None:
    spec = f"scripted:{EXAMPLE_SCRIPT}"
    assert cli("run", "--model", spec, "hi").exit_code == 0
    assert cli("run", "--model", spec, "--tenant", "acme", "--user", "ana", "hi").exit_code == 0

    runs = json.loads(cli("runs", "list", "--json").stdout)
    scopes = {(r["tenant"], r["user"]) for r in runs}
    assert scopes == {("local", "tester"), ("acme", "ana")}
    mine = json.loads(cli("runs", "list", "--json", "--tenant", "acme", "--user", "ana").stdout)
    assert [(r["tenant"], r["user"]) for r in mine] == [("acme", "ana")]


def test_thread_option_continues_the_conversation(
    cli: Callable[..., Result], write_script: Callable[..., Path]
) -> None:
    script = write_script([{"reply": "noted"}])
    spec = f"scripted:{script}"
    first = json.loads(cli("run", "--json", "--model", spec, "remember 7").stdout)

    second = cli("run", "--json", "--model", spec, "--thread", first["thread_id"], "and?")

    assert second.exit_code == 0, second.output
    assert json.loads(second.stdout)["thread_id"] == first["thread_id"]


def test_an_invalid_model_spec_exits_2(cli: Callable[..., Result]) -> None:
    result = cli("run", "--model", "nonsense", "hi")

    assert result.exit_code == 2
    assert "invalid model spec 'nonsense'" in result.stderr


def test_a_missing_script_file_exits_2_naming_the_file(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    missing = tmp_path / "nope.json"

    result = cli("run", "--model", f"scripted:{missing}", "hi")

    assert result.exit_code == 2
    assert str(missing) in result.stderr
    assert "Fix:" in result.stderr


def test_store_option_selects_the_store(cli: Callable[..., Result], tmp_path: Path) -> None:
    db = tmp_path / "elsewhere.db"
    spec = f"scripted:{EXAMPLE_SCRIPT}"

    assert cli("run", "--store", f"sqlite:///{db}", "--model", spec, "hi").exit_code == 0

    assert db.exists()
    assert json.loads(cli("runs", "list", "--json").stdout) == []
    elsewhere = json.loads(cli("runs", "list", "--json", "--store", f"sqlite:///{db}").stdout)
    assert len(elsewhere) == 1


def test_run_stream_writes_the_models_text_as_it_comes_and_the_reply_once(
    cli: Callable[..., Result], write_script: Callable[..., Path]
) -> None:
    # Progress text that comes with a call is streamed too; without --stream only the reply
    # is printed.
    script = write_script(
        [
            {"calls": [["add", {"a": 2, "b": 3}]], "text": "Let me add that up."},
            {"reply": "It is 5."},
        ]
    )

    streamed = cli("run", "--stream", "--model", f"scripted:{script}", "What is 2 + 3?")
    plain = cli("run", "--model", f"scripted:{script}", "What is 2 + 3?")

    assert streamed.exit_code == 0, streamed.output
    assert streamed.stdout == "Let me add that up.\nIt is 5.\n"
    assert plain.stdout == "It is 5.\n"
    assert "completed" in streamed.stderr


def test_run_stream_with_json_is_a_usage_error(cli: Callable[..., Result]) -> None:
    result = cli("run", "--stream", "--json", "--model", f"scripted:{EXAMPLE_SCRIPT}", "hi")

    assert result.exit_code == 2
    assert "--stream and --json" in result.stderr
