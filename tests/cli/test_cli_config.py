"""``reverie.toml``: loading, validation, and errors that name the file, the key and the fix."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from cli.cli_support import HERE
from reverie.config import (
    build_agents,
    default_config_path,
    key_env_for,
    load_config,
    register_hooks,
    reverie_home,
    store_url,
)
from reverie.core.limits import Limits
from reverie.errors import ConfigError
from reverie.hooks import HookRegistry
from reverie.models.openai import OpenAIChatModel
from reverie.testing import ScriptedModel

TOOLS_PATH = json.dumps(str(HERE))


def _error(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return str(info.value)


# ---------------------------------------------------------------------------------- locations
def test_reverie_home_defaults_to_dot_reverie(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REVERIE_HOME", raising=False)

    assert reverie_home() == Path("~/.reverie").expanduser()
    assert default_config_path() == Path("~/.reverie/reverie.toml").expanduser()


def test_a_missing_default_file_is_an_empty_configuration(home: Path) -> None:
    config = load_config()

    assert config.agents == {}
    assert not config.exists
    assert config.source == str(home / "reverie.toml")
    assert store_url(config) == f"sqlite:///{home / 'reverie.db'}"


def test_an_explicit_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.toml: file not found\. Fix: "):
        load_config(tmp_path / "nope.toml")


# ---------------------------------------------------------------------------------- content
def test_a_full_file_loads_into_agents_with_tools_limits_and_models(
    tmp_path: Path, write_script: Callable[..., Path]
) -> None:
    script = write_script([{"reply": "hi"}])
    path = tmp_path / "reverie.toml"
    path.write_text(
        f"""
pythonpath = [{TOOLS_PATH}]

[store]
url = "sqlite:///data/runs.db"

[agents.helper]
model = "together:meta-llama/Llama-3-70b"
instructions = "Be brief."
tools = ["reverie.cli.demo_tools:add", "cli_fixture_tools:TOOLS", "cli_fixture_tools:shout"]
limits = {{ max_iterations = 5, max_usd = 0.5, wall_clock_s = 30 }}
on_limit = "fail"
on_drift = "continue"

[agents.offline]
model = "scripted:{script.name}"

[models.together]
base_url = "https://api.together.xyz/v1"
api_key_env = "TOGETHER_API_KEY"

[prices."together:meta-llama/Llama-3-70b"]
input_per_mtok = 0.9
output_per_mtok = 0.9

[auth.tokens]
reserved = "for reverie serve"
""",
        encoding="utf-8",
    )

    config = load_config(path)
    agents = {a.name: a for a in build_agents(config)}

    helper = agents["helper"]
    assert [t.descriptor.name for t in helper.tools] == ["add", "send_email", "shout"]
    assert helper.instructions == "Be brief."
    assert helper.limits == Limits(max_iterations=5, max_usd=0.5, wall_clock_s=30)
    assert helper.on_limit == "fail"
    assert helper.on_drift == "continue"
    assert agents["offline"].on_drift == "refuse"  # the default
    assert isinstance(helper.model, OpenAIChatModel)
    assert helper.model.name == "together:meta-llama/Llama-3-70b"
    assert isinstance(agents["offline"].model, ScriptedModel)  # relative to the file's dir
    assert store_url(config) == f"sqlite:///{tmp_path / 'data' / 'runs.db'}"
    assert store_url(config, "sqlite:///other.db") == "sqlite:///other.db"
    price = config.price_table().price_for("together:meta-llama/Llama-3-70b")
    assert price is not None and price.input_per_mtok == 0.9
    assert key_env_for("together:x", config) == "TOGETHER_API_KEY"
    assert config.auth == {"tokens": {"reserved": "for reverie serve"}}
    assert str(HERE) in sys.path


def test_a_missing_model_names_file_key_and_fix(tmp_path: Path) -> None:
    path = tmp_path / "reverie.toml"

    message = _error(path, '[agents.helper]\ninstructions = "x"\n')

    assert message == (
        f'{path}: agents.helper.model: missing. Fix: set model = "openai:gpt-4.1-mini"'
    )


def test_invalid_toml_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "reverie.toml"

    message = _error(path, '[store]\nurl = "x"\n[agents.helper\nmodel = 1\n')

    assert message.startswith(f"{path}: line 3, column ")
    assert "invalid TOML" in message
    assert "Fix: correct the syntax on line 3" in message


@pytest.mark.parametrize(
    ("text", "key", "fix"),
    [
        ('[agents.a]\nmodel = "openai:x"\nmodle = 1\n', "agents.a.modle", "agents.a takes model"),
        ("nonsense = 1\n", "nonsense", "the top level takes pythonpath, store, agents"),
        ('[agents.a]\nmodel = "nope"\n', "agents.a.model", 'set model = "openai:gpt-4.1-mini"'),
        ("[agents.a]\nmodel = 3\n", "agents.a.model", "set model ="),
        (
            '[agents.a]\nmodel = "openai:x"\non_limit = "stop"\n',
            "agents.a.on_limit",
            'set on_limit = "finalize"',
        ),
        (
            '[agents.a]\nmodel = "openai:x"\non_drift = "ignore"\n',
            "agents.a.on_drift",
            'set on_drift = "refuse" or on_drift = "continue"',
        ),
        (
            '[agents.a]\nmodel = "openai:x"\nlimits = { max_iterations = 0 }\n',
            "agents.a.limits.max_iterations",
            "at least 1",
        ),
        (
            '[agents.a]\nmodel = "openai:x"\nlimits = { max_iterations = "3" }\n',
            "agents.a.limits.max_iterations",
            "at least 1",
        ),
        (
            '[agents.a]\nmodel = "openai:x"\ntools = ["os:nothing_here"]\n',
            "agents.a.tools[0]",
            "package.module:attribute",
        ),
        (
            '[agents.a]\nmodel = "openai:x"\ntools = ["no_such_module_xyz:f"]\n',
            "agents.a.tools[0]",
            "pythonpath",
        ),
        (
            f'pythonpath = [{TOOLS_PATH}]\n[agents.a]\nmodel = "openai:x"\n'
            'tools = ["cli_fixture_tools:NOT_A_TOOL"]\n',
            "agents.a.tools[0]",
            "@tool function",
        ),
        (
            '[agents.a]\nmodel = "ollama:x"\nlimits = { max_usd = 1.0 }\n'
            '[agents.b]\nmodel = "openai-compat:http://h/v1#m"\nlimits = { max_usd = 1.0 }\n',
            "agents.b.limits.max_usd",
            '[prices."openai-compat:http://h/v1#m"]',
        ),
        ('[models.hermes]\nbase_url = "http://h/v1"\n', "models.hermes", "another name"),
        ('[models.x]\nbase_url = "ftp://h"\n', "models.x.base_url", "https://host/v1"),
        (
            '[models.x]\nbase_url = "http://h/v1"\napi_key_env = "sk-secret-value"\n',
            "models.x.api_key_env",
            "never the key itself",
        ),
        (
            '[prices."openai:gpt-4o"]\ninput_per_mtok = 1\n',
            'prices."openai:gpt-4o".output_per_mtok',
            "output_per_mtok",
        ),
        ("[store]\nurl = 5\n", "store.url", "sqlite:///"),
        ("hooks = 3\n", "hooks", "[[hooks]]"),
    ],
)
def test_every_error_names_the_file_the_key_and_the_fix(
    tmp_path: Path, text: str, key: str, fix: str
) -> None:
    path = tmp_path / "reverie.toml"

    message = _error(path, text)

    assert message.startswith(f"{path}: {key}: "), message
    assert "Fix: " in message
    assert fix in message.split("Fix: ", 1)[1]


def test_errors_never_quote_a_value_that_may_be_a_secret(tmp_path: Path) -> None:
    message = _error(
        tmp_path / "reverie.toml",
        '[models.x]\nbase_url = "http://h/v1"\napi_key_env = "sk-secret-value"\n',
    )

    assert "sk-secret-value" not in message


def test_hooks_are_validated_on_load_and_registered_as_trusted(tmp_path: Path) -> None:
    bad = _error(tmp_path / "bad.toml", '[[hooks]]\npoint = "nowhere"\n')
    assert "[[hooks]] entry 1" in bad and "Fix:" in bad

    path = tmp_path / "reverie.toml"
    path.write_text(
        f"pythonpath = [{TOOLS_PATH}]\n"
        '[[hooks]]\npoint = "before_capability"\ncallable = "cli_fixture_tools:shout"\n'
        'name = "shout"\n',
        encoding="utf-8",
    )
    registry = HookRegistry()

    registered = register_hooks(load_config(path), registry)

    assert [r.name for r in registered] == ["shout"]


def test_key_env_for_names_the_variable_each_spec_reads() -> None:
    assert key_env_for("openai:gpt-4.1-mini") == "OPENAI_API_KEY"
    assert key_env_for("anthropic:claude-sonnet-4-5") == "ANTHROPIC_API_KEY"
    assert key_env_for("hermes:openai:x") == "OPENAI_API_KEY"
    assert key_env_for("ollama:llama3.1") is None
    assert key_env_for("openai-compat:http://h/v1#m") is None
    assert key_env_for("scripted:x.json") is None


# ---------------------------------------------------------------------------------- CLI
@pytest.mark.parametrize(
    "command",
    [
        ("run", "hi"),
        ("run", "--model", "ollama:x", "hi"),
        ("runs", "list"),
        ("runs", "show", "run_x"),
        ("runs", "resume", "run_x"),
        ("runs", "cancel", "run_x"),
        ("gates", "list"),
        ("gates", "approve", "gate_x"),
        ("gates", "deny", "gate_x"),
        ("doctor",),
    ],
)
def test_a_broken_reverie_toml_fails_every_command_with_file_key_fix_and_exit_2(
    cli: Callable[..., Result], write_config: Callable[[str], Path], command: tuple[str, ...]
) -> None:
    path = write_config('[agents.helper]\ninstructions = "no model"\n')

    result = cli(*command)

    assert result.exit_code == 2, result.output
    assert f"{path}: agents.helper.model: missing. Fix: set model = " in result.stderr


def test_config_option_reads_another_file(
    cli: Callable[..., Result], tmp_path: Path, write_script: Callable[..., Path]
) -> None:
    script = write_script([{"reply": "from the other file"}])
    other = tmp_path / "other.toml"
    other.write_text(f'[agents.x]\nmodel = "scripted:{script}"\n', encoding="utf-8")

    result = cli("run", "--config", str(other), "hi")

    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "from the other file"


def test_an_unsupported_store_url_names_its_origin_and_exits_2(
    cli: Callable[..., Result], write_config: Callable[[str], Path]
) -> None:
    path = write_config('[store]\nurl = "mysql://db"\n')

    from_file = cli("runs", "list")
    from_option = cli("runs", "list", "--store", "mysql://db")

    assert from_file.exit_code == 2
    assert f"{path}: store.url: " in from_file.stderr
    assert from_option.exit_code == 2
    assert "--store: " in from_option.stderr


def test_extension_manifests_register_their_hooks_as_installed(tmp_path: Path) -> None:
    ext = tmp_path / "ext"
    ext.mkdir()
    (ext / "audit.toml").write_text(
        '[[hooks]]\npoint = "before_capability"\ncallable = "cli_fixture_tools:shout"\n'
        'name = "ext-shout"\n',
        encoding="utf-8",
    )
    path = tmp_path / "reverie.toml"
    path.write_text(
        f'pythonpath = [{TOOLS_PATH}]\nextensions = ["ext/audit.toml"]\n', encoding="utf-8"
    )
    registry = HookRegistry()

    registered = register_hooks(load_config(path), registry)

    assert [(r.name, r.trust) for r in registered] == [("ext-shout", "installed")]


def test_a_missing_extension_manifest_names_the_file_key_and_fix(tmp_path: Path) -> None:
    path = tmp_path / "reverie.toml"
    path.write_text('extensions = ["nope.toml"]\n', encoding="utf-8")

    with pytest.raises(ConfigError) as caught:
        register_hooks(load_config(path), HookRegistry())

    assert "extensions" in str(caught.value) and "nope.toml" in str(caught.value)
    assert "Fix:" in str(caught.value)


def test_the_operator_promotes_installed_hooks_by_id_in_reverie_toml(tmp_path: Path) -> None:
    ext = tmp_path / "ext"
    ext.mkdir()
    (ext / "audit.toml").write_text(
        '[[hooks]]\npoint = "before_capability"\ncallable = "cli_fixture_tools:shout"\n'
        'name = "ext-shout"\n',
        encoding="utf-8",
    )
    path = tmp_path / "reverie.toml"
    path.write_text(
        f'pythonpath = [{TOOLS_PATH}]\nextensions = ["ext/audit.toml"]\n'
        'promoted_hooks = ["ext-shout"]\n',
        encoding="utf-8",
    )
    registry = HookRegistry()
    register_hooks(load_config(path), registry)
    promoted = registry.get("ext-shout")
    assert promoted is not None and promoted.promoted and not promoted.summary_only

    path.write_text(
        f'pythonpath = [{TOOLS_PATH}]\nextensions = ["ext/audit.toml"]\n'
        'promoted_hooks = ["nobody"]\n',
        encoding="utf-8",
    )
    fresh = HookRegistry()
    with pytest.raises(ConfigError) as caught:
        register_hooks(load_config(path), fresh)
    assert "promoted_hooks" in str(caught.value) and "'nobody'" in str(caught.value)
    assert len(fresh) == 0  # nothing half-registered
