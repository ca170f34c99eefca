"""The native provider's lanes on the store, its configuration, and the public names."""

from __future__ import annotations

import datetime as dt

import pytest

import reverie.memory
from memory.memory_support import ANA, BOB
from reverie import Runtime
from reverie.core.messages import Message
from reverie.errors import ConfigError, UsageError
from reverie.memory import EMPTY, MCPMemory, NativeMemory, Snippets, memory_from_config
from reverie.store import MemoryStore


@pytest.fixture
async def native() -> NativeMemory:
    memory = NativeMemory()
    await memory.bind(MemoryStore())
    return memory


async def test_profile_read_is_the_standing_document(native: NativeMemory) -> None:
    assert await native.profile_read(ANA) == EMPTY
    await native.documents.write_document(ANA, "MEMORY.md", "likes tea", 0)
    result = await native.profile_read(ANA)
    assert isinstance(result, Snippets)
    [snippet] = result.items
    assert (snippet.text, snippet.scope, snippet.source) == ("likes tea", ANA, "MEMORY.md")
    assert await native.profile_read(BOB) == EMPTY


async def test_long_term_searches_the_log_and_documents_but_not_memory_md(
    native: NativeMemory,
) -> None:
    await native.documents.write_document(ANA, "MEMORY.md", "teal standing", 0)
    await native.documents.write_document(ANA, "notes/colours.md", "teal notes", 0)
    await native.record_interaction(
        ANA,
        [
            Message(role="user", content="teal is my colour"),
            Message(role="assistant", content="ok"),
        ],
    )
    result = await native.read_long_term(ANA, "teal", 5)
    assert isinstance(result, Snippets)
    sources = {s.source for s in result.items}
    today = dt.datetime.now(dt.UTC).date().isoformat()
    assert sources == {"notes/colours.md", f"log/{today}"}
    assert all(s.scope == ANA for s in result.items)
    assert await native.read_long_term(BOB, "teal", 5) == EMPTY


async def test_record_interaction_writes_todays_log_cleaned(native: NativeMemory) -> None:
    await native.record_interaction(
        ANA,
        [
            Message(role="system", content="system text is not recorded"),
            Message(role="user", content="my password=hunter2\x00 ok"),
            Message(role="tool", content="tool output is not recorded"),
            Message(role="assistant", content="noted"),
        ],
    )
    [entry] = await native.documents.read_log(ANA, dt.datetime.now(dt.UTC).date())
    assert entry.text == "user: my password=[redacted] ok\nassistant: noted"


async def test_one_provider_follows_the_runtime_it_is_opened_with() -> None:
    memory = NativeMemory()
    async with Runtime.open(":memory:", memory=memory) as rt:
        await rt.memory.write(ANA, "MEMORY.md", "first runtime", expected_version=0)
    async with Runtime.open(":memory:", memory=memory) as rt:
        assert (await rt.memory.read(ANA, "MEMORY.md")).version == 0
    fixed_store = MemoryStore()
    pinned = NativeMemory(store=fixed_store)
    async with Runtime.open(":memory:", memory=pinned) as rt:
        await rt.memory.write(ANA, "MEMORY.md", "pinned", expected_version=0)
    assert await fixed_store.read_document(ANA, "MEMORY.md") is not None


async def test_unbound_native_memory_says_so() -> None:
    with pytest.raises(UsageError, match="not bound"):
        NativeMemory().documents  # noqa: B018


async def test_native_memory_needs_a_store_with_documents() -> None:
    class Bare:
        pass

    with pytest.raises(ConfigError, match="memory documents"):
        await NativeMemory().bind(Bare())  # type: ignore[arg-type]


async def test_runtime_refuses_something_that_is_not_a_provider() -> None:
    with pytest.raises(UsageError, match="memory provider"):
        Runtime.open(":memory:", memory="native")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="memory_budget_bytes"):
        Runtime.open(":memory:", memory=NativeMemory(), memory_budget_bytes=0)


def test_memory_from_config_builds_the_named_provider() -> None:
    off = memory_from_config({})
    assert off.provider is None
    native = memory_from_config({"provider": "native", "budget_bytes": 4000})
    assert isinstance(native.provider, NativeMemory) and native.budget_bytes == 4000
    remote = memory_from_config(
        {
            "provider": "mcp",
            "mcp": {"command": ["reverie", "mcp-memory"], "credential_env": "MEM_TOKEN"},
            "curation_interval_turns": 10,
        }
    )
    assert isinstance(remote.provider, MCPMemory)
    assert remote.provider.search_tool == "memory_search" and remote.curation_interval_turns == 10


@pytest.mark.parametrize(
    ("section", "fragment"),
    [
        ({"provider": "mcp"}, "[memory.mcp]"),
        ({"provider": "mcp", "mcp": {}}, "exactly one of command"),
        ({"provider": "mcp", "mcp": {"url": "http://x/mcp", "command": ["x"]}}, "exactly one"),
        ({"provider": "vector-db"}, "provider"),
        ({"provider": "native", "colour": 1}, "colour"),
        ({"curation_interval_turns": 1}, "curation_interval_turns"),
    ],
)
def test_memory_config_errors_name_the_key(section: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        memory_from_config(section, source="acme.toml")
    assert "acme.toml" in str(caught.value) and fragment in str(caught.value)


def test_memory_all_is_exactly_the_public_names() -> None:
    assert sorted(reverie.memory.__all__) == sorted(
        [
            "EMPTY",
            "LANES",
            "MEMORY_TOOLS",
            "STANDING_DOCUMENT",
            "AssembledContext",
            "Document",
            "DocumentProvider",
            "DocumentStore",
            "Empty",
            "Lane",
            "LaneResult",
            "MCPMemory",
            "MemoryBudgets",
            "MemoryConfig",
            "MemoryManifest",
            "MemoryProvider",
            "MemorySnippet",
            "NativeMemory",
            "PassSpec",
            "RuntimeMemory",
            "ScheduledOp",
            "Snippets",
            "Unavailable",
            "assemble_context",
            "load_memory_manifest",
            "memory_from_config",
            "memory_tools",
            "parse_memory_manifest",
            "redact_credentials",
            "strip_control",
        ]
    )
    for name in reverie.memory.__all__:
        assert getattr(reverie.memory, name) is not None
