"""TOML [[hooks]] tables: extension manifests (installed) and reverie.toml (trusted)."""

from __future__ import annotations

import sys
import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from reverie.core.scope import Scope
from reverie.errors import ConfigError
from reverie.hooks import (
    CapabilityHookContext,
    HookDispatcher,
    HookRegistry,
    load_hook_manifest,
    register_config_hooks,
    register_manifest_hooks,
)

EXT_MODULE = "reverie_test_hook_ext"
EXT_SOURCE = """
from reverie.hooks import Deny

def no_rm(ctx):
    return Deny("rm is off") if ctx.tool == "rm" else None

def watch(ctx):
    return None

class Holder:
    @staticmethod
    def nested(ctx):
        return None

NOT_CALLABLE = 3
"""


@pytest.fixture(autouse=True)
def ext_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    (tmp_path / f"{EXT_MODULE}.py").write_text(EXT_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop(EXT_MODULE, None)


def write(tmp_path: Path, body: str, name: str = "manifest.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


async def test_manifest_hooks_register_as_installed_and_run(
    tmp_path: Path, registry: HookRegistry, scope: Scope
) -> None:
    path = write(
        tmp_path,
        f"""
        [[memory.scheduled_ops]]
        trigger = "after_turn"

        [[hooks]]
        point = "before_capability"
        callable = "{EXT_MODULE}:no_rm"
        name = "ext.no-rm"
        phase = "authorization"
        priority = 3
        timeout_ms = 20

        [[hooks]]
        point = "event"
        callable = "{EXT_MODULE}:Holder.nested"
        name = "ext.watch"
        event_kinds = ["tool_started"]
        """,
    )

    added = register_manifest_hooks(registry, path)

    assert [(r.name, r.trust) for r in added] == [
        ("ext.no-rm", "installed"),
        ("ext.watch", "installed"),
    ]
    gate = added[0]
    assert (gate.phase, gate.priority, gate.timeout_s) == ("authorization", 3, 0.02)
    assert added[1].event_kinds == frozenset({"tool_started"})
    ctx = CapabilityHookContext(tool="rm", arguments={}, scope=scope, run_id="r", call_id="c")
    result = await HookDispatcher(registry).gate(ctx, poisoned=frozenset())
    assert (result.decision, result.hook) == ("deny", "ext.no-rm")


def test_config_hooks_register_as_trusted(tmp_path: Path, registry: HookRegistry) -> None:
    path = write(
        tmp_path,
        f"""
        [[hooks]]
        point = "after_turn"
        callable = "{EXT_MODULE}:watch"
        name = "ops.audit"
        timeout_ms = 2000
        """,
        name="reverie.toml",
    )
    config = tomllib.loads(path.read_text())

    added = register_config_hooks(registry, config, source=path)

    assert [(r.name, r.point, r.trust, r.timeout_s) for r in added] == [
        ("ops.audit", "after_turn", "trusted", 2.0)
    ]


def test_document_without_hooks_registers_nothing(tmp_path: Path, registry: HookRegistry) -> None:
    assert register_manifest_hooks(registry, write(tmp_path, "[other]\nx = 1\n")) == ()
    assert register_config_hooks(registry, {}) == ()


_GOOD = f'point = "after_model"\ncallable = "{EXT_MODULE}:watch"\nname = "ext.h"\n'


@pytest.mark.parametrize(
    ("table", "key", "fix"),
    [
        ('point = "before_everything"\n' + _GOOD.split("\n", 1)[1], "point", "set point"),
        ('point = "after_model"\nname = "ext.h"\n', "callable", "set callable"),
        (_GOOD.replace(":watch", ""), "callable", "package.module:attribute"),
        (_GOOD + 'colour = "red"\n', "colour", "remove 'colour'"),
        (_GOOD + 'phase = "later"\n', "phase", "set phase"),
        (_GOOD + 'priority = "high"\n', "priority", "integer"),
        (_GOOD + "timeout_ms = 0\n", "timeout_ms", "positive integer"),
        (_GOOD + "timeout_ms = 5000\n", "timeout_ms", "at most 1000"),
        (_GOOD.replace("after_model", "event"), "event_kinds", "event_kinds = ["),
        (_GOOD + 'event_kinds = ["tool_started"]\n', "event_kinds", "only there"),
        (_GOOD.replace("after_model", "after_turn"), "point", "observer point"),
        (_GOOD.replace(":watch", ":missing"), "callable", "importable function"),
        (_GOOD.replace(":watch", ":NOT_CALLABLE"), "callable", "importable function"),
        (_GOOD.replace(EXT_MODULE, "no_such_module_xyz"), "callable", "importable"),
    ],
)
def test_manifest_errors_name_the_file_the_key_and_the_fix(
    tmp_path: Path, registry: HookRegistry, table: str, key: str, fix: str
) -> None:
    path = write(tmp_path, "[[hooks]]\n" + table)

    with pytest.raises(ConfigError) as info:
        register_manifest_hooks(registry, path)

    message = str(info.value)
    assert str(path) in message
    assert f"key {key!r}" in message
    assert "[[hooks]] entry 1" in message
    assert "Fix:" in message and fix in message
    assert len(registry) == 0


def test_duplicate_hook_name_in_a_manifest_names_the_entry(
    tmp_path: Path, registry: HookRegistry
) -> None:
    path = write(tmp_path, f"[[hooks]]\n{_GOOD}\n[[hooks]]\n{_GOOD}")

    with pytest.raises(ConfigError, match=r"entry 2 \('ext.h'\), key 'name'.*already registered"):
        register_manifest_hooks(registry, path)


def test_manifest_registration_is_all_or_nothing(tmp_path: Path, registry: HookRegistry) -> None:
    second = _GOOD.replace("ext.h", "ext.other").replace("after_model", "after_turn")
    path = write(tmp_path, f"[[hooks]]\n{_GOOD}\n[[hooks]]\n{second}")

    with pytest.raises(ConfigError, match="entry 2"):
        register_manifest_hooks(registry, path)

    assert len(registry) == 0


def test_hooks_that_is_not_an_array_of_tables_is_rejected(
    tmp_path: Path, registry: HookRegistry
) -> None:
    path = write(tmp_path, "[hooks]\npoint = 'after_model'\n")

    with pytest.raises(ConfigError, match=r"key 'hooks' must be an array of tables.*\[\[hooks\]\]"):
        register_manifest_hooks(registry, path)


def test_invalid_toml_names_the_file_and_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "[[hooks]]\npoint = \n")

    with pytest.raises(ConfigError, match=r"manifest\.toml: line 2, column \d+: invalid TOML"):
        load_hook_manifest(path)


def test_missing_manifest_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_hook_manifest(tmp_path / "absent.toml")


def test_config_errors_name_the_config_file(registry: HookRegistry) -> None:
    config = {"hooks": [{"point": "after_model", "name": "x"}]}

    with pytest.raises(ConfigError, match=r"^/etc/reverie\.toml: .*key 'callable'"):
        register_config_hooks(registry, config, source="/etc/reverie.toml")
