"""``[agents.NAME.compaction]`` in reverie.toml (docs/compaction.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reverie import Compaction
from reverie.config import build_agents, load_config
from reverie.errors import ConfigError
from reverie.models.openai import OpenAIChatModel


def agents_of(tmp_path: Path, text: str) -> dict[str, object]:
    path = tmp_path / "reverie.toml"
    path.write_text(text)
    return {a.name: a.compaction for a in build_agents(load_config(path))}


def test_a_compaction_table_turns_compaction_on_with_its_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    found = agents_of(
        tmp_path,
        """
[agents.plain]
model = "openai:gpt-4.1-mini"

[agents.long]
model = "openai:gpt-4.1-mini"
compaction = { trigger_tokens = 50000, keep_last_turns = 2, model = "openai:gpt-4.1-nano" }

[agents.defaults]
model = "openai:gpt-4.1-mini"
[agents.defaults.compaction]
""",
    )
    assert found["plain"] is None
    long = found["long"]
    assert isinstance(long, Compaction)
    assert long.trigger_tokens == 50_000 and long.keep_last_turns == 2
    assert isinstance(long.model, OpenAIChatModel)
    assert found["defaults"] == Compaction()


def test_compaction_enabled_false_turns_it_off(tmp_path: Path) -> None:
    found = agents_of(
        tmp_path,
        """
[agents.a]
model = "openai:gpt-4.1-mini"
compaction = { enabled = false, trigger_tokens = 1000 }
""",
    )
    assert found["a"] is None


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ("keep_last_turns = 0", "agents.a.compaction.keep_last_turns"),
        ("trigger_tokens = 0", "agents.a.compaction.trigger_tokens"),
        ('trigger_tokens = "many"', "agents.a.compaction.trigger_tokens"),
        ("summary_model = 1", "agents.a.compaction"),
        ('model = "nosuch:model"', "agents.a.compaction.model"),
    ],
)
def test_a_bad_compaction_setting_names_the_file_the_key_and_the_fix(
    tmp_path: Path, setting: str, key: str
) -> None:
    path = tmp_path / "reverie.toml"
    path.write_text(f'[agents.a]\nmodel = "openai:gpt-4.1-mini"\ncompaction = {{ {setting} }}\n')
    with pytest.raises(ConfigError) as info:
        build_agents(load_config(path))
    message = str(info.value)
    assert str(path) in message and key in message and "Fix:" in message
