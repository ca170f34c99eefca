"""DESIGN §12/§13: provider manifests declare lanes, tools and scheduled ops; the rules hold."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from memory.memory_support import ANA
from reverie import Agent, Runtime
from reverie.core.messages import Message
from reverie.core.scope import Scope
from reverie.errors import ConfigError
from reverie.memory import (
    EMPTY,
    LaneResult,
    MCPMemory,
    MemoryManifest,
    MemorySnippet,
    NativeMemory,
    Snippets,
    load_memory_manifest,
    parse_memory_manifest,
)
from reverie.memory.curation import load_pass_prompt
from reverie.memory.manifest import PassSpec, ScheduledOp
from reverie.store.base import Store
from reverie.testing import ScriptedModel, reply

HEAD = """
[memory]
name = "acme"
lanes = ["long_term"]
tools = ["memory_read", "memory_write", "memory_search"]
"""

PASS = 'pass = { prompt = "p.md", tools = ["memory_read", "memory_write"], max_model_calls = 10 }'


def op(*lines: str) -> str:
    return HEAD + "\n[[memory.scheduled_ops]]\n" + "\n".join(lines) + "\n"


def test_native_manifest_declares_its_lanes_tools_and_the_curation_op() -> None:
    manifest = NativeMemory().manifest
    assert manifest.name == "native"
    assert manifest.lanes == {"profile_read", "long_term", "record_interaction"}
    assert manifest.tools == ("memory_read", "memory_write", "memory_search")
    curation = manifest.op_for("after_turn")
    assert curation is not None and curation.interval_turns == 10
    assert curation.pass_.tools == ("memory_read", "memory_write")
    assert curation.pass_.max_model_calls == 10
    assert manifest.base_dir is not None
    assert (Path(manifest.base_dir) / curation.pass_.prompt).is_file()


def test_mcp_manifest_declares_search_and_record_only() -> None:
    manifest = MCPMemory(url="http://127.0.0.1:1/mcp").manifest
    assert manifest.lanes == {"long_term", "record_interaction"}
    assert manifest.tools == ("memory_search",)
    no_record = MCPMemory(url="http://127.0.0.1:1/mcp", record_tool=None).manifest
    assert not no_record.declares("record_interaction")


def test_a_valid_scheduled_op_is_parsed_and_kept() -> None:
    manifest = parse_memory_manifest(op('trigger = "after_turn"', "interval_turns = 3", PASS))
    [scheduled] = manifest.scheduled_ops
    assert (scheduled.trigger, scheduled.interval_turns) == ("after_turn", 3)
    assert scheduled.pass_.prompt == "p.md"


@pytest.mark.parametrize(
    ("lines", "fragment"),
    [
        (('trigger = "nightly"', "interval_turns = 3", PASS), "trigger"),
        (('trigger = "after_turn"', "interval_turns = 1", PASS), "interval_turns"),
        (
            (
                'trigger = "after_turn"',
                "interval_turns = 3",
                'pass = { prompt = "p.md", tools = ["memory_read"], max_model_calls = 17 }',
            ),
            "max_model_calls",
        ),
        (('trigger = "after_turn"', "interval_turns = 3"), "exactly one of 'pass' and 'tool'"),
        (
            ('trigger = "after_turn"', "interval_turns = 3", 'tool = "memory_tidy"'),
            "not supported",
        ),
        (
            ('trigger = "after_turn"', "interval_turns = 3", PASS, 'tool = "memory_tidy"'),
            "exactly one",
        ),
    ],
)
def test_scheduled_op_rules_are_enforced(lines: tuple[str, ...], fragment: str) -> None:
    with pytest.raises(ConfigError, match="scheduled_ops") as caught:
        parse_memory_manifest(op(*lines), source="acme.toml")
    assert fragment in str(caught.value)
    assert "acme.toml" in str(caught.value)


def test_unknown_trigger_is_an_error_never_dropped() -> None:
    with pytest.raises(ConfigError, match="trigger"):
        parse_memory_manifest(op('trigger = "on_boot"', "interval_turns = 3", PASS))


def test_one_op_per_trigger() -> None:
    text = op('trigger = "after_turn"', "interval_turns = 3", PASS)
    text += "\n[[memory.scheduled_ops]]\n" + 'trigger = "after_turn"\ninterval_turns = 5\n' + PASS
    with pytest.raises(ConfigError, match="one per trigger"):
        parse_memory_manifest(text)


def test_pass_tools_must_be_declared_by_the_same_manifest() -> None:
    text = op(
        'trigger = "after_turn"',
        "interval_turns = 3",
        'pass = { prompt = "p.md", tools = ["memory_delete"], max_model_calls = 2 }',
    )
    with pytest.raises(ConfigError, match="memory_delete"):
        parse_memory_manifest(text)


@pytest.mark.parametrize("trust", ["installed", "self_authored"])
def test_only_first_party_manifests_may_declare_a_pass(trust: str) -> None:
    text = op('trigger = "after_turn"', "interval_turns = 3", PASS)
    with pytest.raises(ConfigError, match="first-party"):
        parse_memory_manifest(text, trust=trust)  # type: ignore[arg-type]
    assert parse_memory_manifest(text, trust="trusted").scheduled_ops


def test_unknown_lane_or_tool_or_key_is_an_error() -> None:
    with pytest.raises(ConfigError, match="lanes"):
        parse_memory_manifest('[memory]\nname = "x"\nlanes = ["telepathy"]\n')
    with pytest.raises(ConfigError, match="tools"):
        parse_memory_manifest('[memory]\nname = "x"\ntools = ["memory_delete"]\n')
    with pytest.raises(ConfigError, match="colour"):
        parse_memory_manifest('[memory]\nname = "x"\ncolour = "red"\n')
    with pytest.raises(ConfigError, match="invalid TOML"):
        parse_memory_manifest("[memory\n")


def test_load_memory_manifest_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "memory.toml"
    path.write_text(op('trigger = "after_turn"', "interval_turns = 4", PASS), encoding="utf-8")
    manifest = load_memory_manifest(path, trust="trusted")
    assert manifest.source == str(path) and manifest.base_dir == str(tmp_path)
    with pytest.raises(ConfigError, match="cannot be read"):
        load_memory_manifest(tmp_path / "missing.toml")


class SpyProvider:
    """A provider that records which lanes the host called."""

    def __init__(self, manifest: MemoryManifest) -> None:
        self._manifest = manifest
        self.calls: list[str] = []

    @property
    def manifest(self) -> MemoryManifest:
        return self._manifest

    async def bind(self, store: Store) -> None:
        self.calls.append("bind")

    async def aclose(self) -> None:
        self.calls.append("aclose")

    async def profile_read(self, scope: Scope) -> LaneResult:
        self.calls.append("profile_read")
        return EMPTY

    async def read_long_term(self, scope: Scope, query: str, max_snippets: int) -> LaneResult:
        self.calls.append("long_term")
        return Snippets([MemorySnippet(text="recalled", scope=scope)])

    async def read_short_term(self, scope: Scope, thread_id: str) -> LaneResult:
        self.calls.append("short_term")
        return EMPTY

    async def record_interaction(self, scope: Scope, messages: Sequence[Message]) -> None:
        self.calls.append("record_interaction")


async def test_the_host_calls_only_the_lanes_the_manifest_declares() -> None:
    manifest = parse_memory_manifest('[memory]\nname = "spy"\nlanes = ["long_term"]\n')
    spy = SpyProvider(manifest)
    model = ScriptedModel([reply("ok")])
    async with Runtime.open(":memory:", memory=spy) as rt:
        r = await rt.run(Agent(name="a", model=model), "hello", scope=ANA)
    assert r.status == "completed"
    assert spy.calls == ["bind", "long_term", "aclose"]
    assert model.requests[0].tools is not None and model.requests[0].tools == ()


async def test_every_declared_lane_is_called() -> None:
    manifest = parse_memory_manifest(
        '[memory]\nname = "spy"\n'
        'lanes = ["profile_read", "long_term", "short_term", "record_interaction"]\n'
    )
    spy = SpyProvider(manifest)
    async with Runtime.open(":memory:", memory=spy) as rt:
        await rt.run(Agent(name="a", model=ScriptedModel([reply("ok")])), "hello", scope=ANA)
    assert sorted(set(spy.calls) - {"bind", "aclose"}) == [
        "long_term",
        "profile_read",
        "record_interaction",
        "short_term",
    ]


def _pass(**overrides: object) -> PassSpec:
    fields: dict[str, object] = {"prompt": "p.md", "tools": ("memory_read",), "max_model_calls": 4}
    fields.update(overrides)
    return PassSpec(**fields)  # type: ignore[arg-type]


def test_a_manifest_built_in_code_is_checked_like_one_parsed_from_toml() -> None:
    with pytest.raises(ConfigError, match="max_model_calls"):
        _pass(max_model_calls=500)
    with pytest.raises(ConfigError, match="max_model_calls"):
        _pass(max_model_calls=0)
    with pytest.raises(ConfigError, match="tools"):
        _pass(tools=("memory_delete",))
    with pytest.raises(ConfigError, match="interval_turns"):
        ScheduledOp(trigger="after_turn", interval_turns=1, pass_=_pass())
    with pytest.raises(ConfigError, match="trigger"):
        ScheduledOp(trigger="nightly", interval_turns=3, pass_=_pass())  # type: ignore[arg-type]
    op_ = ScheduledOp(trigger="after_turn", interval_turns=3, pass_=_pass())
    with pytest.raises(ConfigError, match="one per trigger"):
        MemoryManifest(
            name="acme", lanes=frozenset(), tools=("memory_read",), scheduled_ops=(op_, op_)
        )
    with pytest.raises(ConfigError, match="not tools this manifest declares"):
        MemoryManifest(name="acme", lanes=frozenset(), tools=(), scheduled_ops=(op_,))
    with pytest.raises(ConfigError, match="first-party"):
        MemoryManifest(
            name="acme",
            lanes=frozenset(),
            tools=("memory_read",),
            scheduled_ops=(op_,),
            trust="installed",
        )
    with pytest.raises(ConfigError, match="lanes"):
        MemoryManifest(name="acme", lanes=frozenset({"telepathy"}), tools=())  # type: ignore[arg-type]
    built = MemoryManifest(
        name="acme", lanes=frozenset(), tools=("memory_read",), scheduled_ops=(op_,)
    )
    assert built.op_for("after_turn") == op_ and built.trust == "trusted"


@pytest.mark.parametrize("prompt", ["/etc/passwd", "../secret.md", "prompts/../../x.md", "~/p.md"])
def test_the_prompt_path_is_confined_to_the_manifests_own_directory(prompt: str) -> None:
    with pytest.raises(ConfigError, match="inside the manifest's own directory"):
        _pass(prompt=prompt)
    text = op(
        'trigger = "after_turn"',
        "interval_turns = 3",
        f'pass = {{ prompt = "{prompt}", tools = ["memory_read"], max_model_calls = 2 }}',
    )
    with pytest.raises(ConfigError, match="inside the manifest's own directory") as caught:
        parse_memory_manifest(text, source="acme.toml")
    assert "acme.toml" in str(caught.value)


def test_a_prompt_symlink_that_escapes_the_manifests_directory_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("follow these secret instructions", encoding="utf-8")
    home = tmp_path / "provider"
    home.mkdir()
    (home / "p.md").symlink_to(outside)
    (home / "inside.md").write_text("tidy the document", encoding="utf-8")
    escaping = ScheduledOp(trigger="after_turn", interval_turns=3, pass_=_pass())
    with pytest.raises(ConfigError, match="outside the manifest's directory"):
        load_pass_prompt(escaping, provider="acme", base_dir=str(home))
    inside = ScheduledOp(trigger="after_turn", interval_turns=3, pass_=_pass(prompt="inside.md"))
    assert load_pass_prompt(inside, provider="acme", base_dir=str(home)) == "tidy the document"


def test_load_memory_manifest_defaults_to_installed_trust(tmp_path: Path) -> None:
    path = tmp_path / "memory.toml"
    path.write_text(op('trigger = "after_turn"', "interval_turns = 3", PASS), encoding="utf-8")
    with pytest.raises(ConfigError, match="first-party") as caught:
        load_memory_manifest(path)
    assert "installed" in str(caught.value)
    trusted = load_memory_manifest(path, trust="trusted")
    assert trusted.trust == "trusted" and trusted.scheduled_ops
    assert trusted.base_dir == str(tmp_path)
