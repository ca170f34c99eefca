"""``output_type`` of a configured agent (docs/output.md): typed runs from ``reverie.toml``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from cli.cli_support import HERE
from reverie.config import build_agents, load_config
from reverie.errors import ConfigError

PYTHONPATH = f"pythonpath = [{json.dumps(str(HERE))}]\n"


def test_a_configured_output_type_makes_run_json_show_the_validated_output(
    cli: Callable[..., Result],
    write_config: Callable[[str], Path],
    write_script: Callable[..., Path],
) -> None:
    script = write_script(
        [{"call": "structured_result", "arguments": {"verdict": "approve", "score": 8}}]
    )
    write_config(
        PYTHONPATH + f'[agents.judge]\nmodel = "scripted:{script}"\n'
        'output_type = "cli_fixture_tools:Verdict"\n'
    )

    result = cli("run", "--json", "Judge this.")

    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["status"] == "completed"
    assert payload["exit"]["kind"] == "structured"
    assert payload["output"] == {"verdict": "approve", "score": 8}


def test_a_configured_json_schema_output_type_is_used_as_is(
    write_config: Callable[[str], Path],
) -> None:
    path = write_config(
        PYTHONPATH + '[agents.t]\nmodel = "openai:x"\noutput_type = "cli_fixture_tools:TICKET"\n'
    )

    [agent] = build_agents(load_config(path))

    assert agent.output_type == {
        "type": "object",
        "properties": {"title": {"type": "string"}},
        "required": ["title"],
    }
    assert agent.on_limit == "fail"


@pytest.mark.parametrize(
    ("ref", "says"),
    [
        ("cli_fixture_tools:NOT_A_TOOL", "pydantic model class or a JSON Schema"),
        ("cli_fixture_tools:NOT_AN_OBJECT_SCHEMA", '"type": "object"'),
        ("cli_fixture_tools:Nope", "does not exist"),
        ("not a reference", "package.module:attribute"),
    ],
)
def test_a_bad_configured_output_type_names_the_key_and_the_fix(
    write_config: Callable[[str], Path], ref: str, says: str
) -> None:
    path = write_config(PYTHONPATH + f'[agents.t]\nmodel = "openai:x"\noutput_type = "{ref}"\n')

    with pytest.raises(ConfigError) as info:
        build_agents(load_config(path))

    message = str(info.value)
    assert "agents.t.output_type" in message and says in message
    assert "Fix:" in message
