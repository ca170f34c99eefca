"""Curation is opt-in (DESIGN §13): interval parse rules, start-up errors, on-demand passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from curation.curation_support import (
    ANA,
    DUPLICATES,
    TIDY,
    curator,
    settled_passes,
    turns,
    user_agent,
)
from reverie import Runtime
from reverie.cli.common import open_session
from reverie.config import load_config
from reverie.errors import ConfigError, UsageError
from reverie.memory import MCPMemory, NativeMemory, memory_from_config, parse_memory_manifest
from reverie.memory.curation import CURATION_HOOK_NAME, TurnCounter

NO_OPS = """
[memory]
name = "acme-memory"
lanes = ["profile_read"]
tools = ["memory_read", "memory_write"]
"""


def native_without_ops() -> NativeMemory:
    provider = NativeMemory()
    provider._manifest = parse_memory_manifest(NO_OPS, source="acme.toml")
    return provider


@pytest.mark.parametrize("bad", [0, 1, -3, True, "10", 2.5])
def test_curation_interval_below_two_or_not_a_whole_number_is_a_parse_error_naming_the_key(
    bad: object,
) -> None:
    with pytest.raises(ConfigError) as parsed:
        memory_from_config({"provider": "native", "curation_interval_turns": bad}, source="r.toml")
    assert "r.toml" in str(parsed.value) and "curation_interval_turns" in str(parsed.value)
    with pytest.raises(ConfigError) as opened:
        Runtime.open(":memory:", memory=NativeMemory(), curation_interval_turns=bad)  # type: ignore[arg-type]
    assert "curation_interval_turns" in str(opened.value) and "at least 2" in str(opened.value)


@pytest.mark.parametrize("bad", ["0", "1"])
def test_curation_interval_in_reverie_toml_of_0_or_1_fails_loading_naming_file_and_key(
    tmp_path: Path, bad: str
) -> None:
    path = tmp_path / "reverie.toml"
    path.write_text(f'[memory]\nprovider = "native"\ncuration_interval_turns = {bad}\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert str(path) in message and "curation_interval_turns" in message and "Fix:" in message


def test_an_interval_set_while_the_provider_declares_no_pass_is_a_startup_error_naming_it() -> None:
    remote = MCPMemory(command=["reverie", "mcp-memory"])
    with pytest.raises(ConfigError) as caught:
        Runtime.open(":memory:", memory=remote, curation_interval_turns=5)
    assert "'mcp'" in str(caught.value) and "curation_interval_turns" in str(caught.value)
    with pytest.raises(ConfigError, match="'acme-memory'"):
        Runtime.open(":memory:", memory=native_without_ops(), curation_interval_turns=5)
    with pytest.raises(ConfigError, match="memory is off"):
        Runtime.open(":memory:", curation_interval_turns=5)


def test_a_declared_pass_whose_prompt_is_missing_is_a_startup_error_naming_the_provider(
    tmp_path: Path,
) -> None:
    provider = NativeMemory()
    provider._manifest = parse_memory_manifest(
        NO_OPS
        + '[[memory.scheduled_ops]]\ntrigger = "after_turn"\ninterval_turns = 4\n'
        + 'pass = { prompt = "missing.md", tools = ["memory_read"], max_model_calls = 4 }\n',
        base_dir=tmp_path,
    )
    with pytest.raises(ConfigError) as caught:
        Runtime.open(":memory:", memory=provider, curation_interval_turns=4)
    assert "'acme-memory'" in str(caught.value) and "missing.md" in str(caught.value)


def test_a_curation_model_that_is_not_a_model_spec_is_a_startup_error() -> None:
    with pytest.raises(ConfigError):
        Runtime.open(
            ":memory:", memory=NativeMemory(), curation_interval_turns=2, curation_model="nope"
        )


async def test_without_an_interval_the_curation_hook_is_never_registered() -> None:
    async with Runtime.open(":memory:", memory=NativeMemory()) as rt:
        assert CURATION_HOOK_NAME not in rt.hooks
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
        await turns(rt, user_agent(), ANA, 12)  # more than the manifest's interval of 10
        assert await settled_passes(rt, ANA) == []
    async with Runtime.open(":memory:", memory=NativeMemory(), curation_interval_turns=2) as rt:
        registration = rt.hooks.get(CURATION_HOOK_NAME)
        assert registration is not None
        assert (registration.point, registration.trust) == ("after_turn", "builtin")


async def test_an_on_demand_pass_runs_for_a_scope_and_returns_its_record() -> None:
    async with Runtime.open(":memory:", memory=NativeMemory()) as rt:
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
        with pytest.raises(UsageError, match="needs a model"):
            await rt.memory.curate(ANA)
        record = await rt.memory.curate(ANA, model=curator())
        assert record.pass_id.startswith("memory-curation-acme-ana-now_")
        assert record.report["status"] == "completed" and record.report["changed"] is True
        assert (await rt.memory.read(ANA)).text == TIDY
        assert await rt.memory.passes(ANA) == [record]
    async with Runtime.open(":memory:", memory=MCPMemory(command=["reverie-nowhere"])) as rt:
        with pytest.raises(UsageError, match="declares no curation pass"):
            await rt.memory.curate(ANA, model=curator())


def test_turn_counter_is_due_every_nth_turn_per_owner_and_bounded() -> None:
    counter = TurnCounter(3, max_owners=2)
    ana, bob, eve = ("acme", "ana"), ("acme", "bob"), ("acme", "eve")
    assert [counter.count(ana) for _ in range(6)] == [False, False, True] * 2
    counter.count(bob)
    counter.count(eve)  # evicts ana, the least recently active
    assert len(counter) == 2 and counter.get(ana) == 0 and counter.get(bob) == 1
    assert ana not in counter
    counter.seed(ana, 7)  # turns found in the store: at most one short of a pass
    assert counter.get(ana) == 2 and len(counter) == 2 and bob not in counter
    assert counter.count(ana) is True


async def test_reverie_toml_memory_table_gives_the_cli_runtime_its_provider_and_curation(
    tmp_path: Path,
) -> None:
    script = tmp_path / "curator.json"
    script.write_text(json.dumps([{"reply": "not used"}]))
    path = tmp_path / "reverie.toml"
    path.write_text(
        '[store]\nurl = "sqlite:///rt.db"\n\n'
        '[memory]\nprovider = "native"\ncuration_interval_turns = 3\n'
        'curation_model = "scripted:curator.json"\n'
    )
    config = load_config(path)
    async with open_session(config, None, memory=True) as session:
        rt = session.rt
        assert isinstance(rt.memory.provider, NativeMemory)
        assert CURATION_HOOK_NAME in rt.hooks
        assert rt._curator is not None and rt._curator.interval == 3
        chosen = rt._curator.model
        assert chosen is not None and not isinstance(chosen, str)
        assert chosen.name.startswith("scripted")
    async with open_session(config, None) as session:
        assert session.rt.memory.provider is None  # commands that only list runs skip memory
    path.write_text(
        '[memory]\nprovider = "mcp"\ncuration_interval_turns = 3\n'
        '[memory.mcp]\ncommand = ["reverie", "mcp-memory"]\n'
    )
    config = load_config(path)
    with pytest.raises(ConfigError, match="'mcp'"):
        async with open_session(config, None, memory=True):
            pass
