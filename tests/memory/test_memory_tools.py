"""DESIGN §12 memory tools: read/write/search with host-injected scope, CAS, budgets."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from memory.memory_support import ANA, BOB
from reverie.capabilities import Capability, ToolContext
from reverie.core.capability import CallCompleted, CallFailed, CallOutcome
from reverie.core.scope import Scope
from reverie.memory import NativeMemory, memory_tools
from reverie.store import Document, MemoryStore, SQLiteStore, Store

BUDGET = 200


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    backend: Store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "m.db")
    await backend.open()
    try:
        yield backend
    finally:
        await backend.close()


@pytest.fixture
async def memory(store: Store) -> NativeMemory:
    native = NativeMemory(document_budget_bytes=BUDGET)
    await native.bind(store)
    return native


@pytest.fixture
def tools(memory: NativeMemory) -> dict[str, Capability]:
    return {t.name: t for t in memory_tools(memory)}


def ctx(scope: Scope = ANA, name: str = "memory_write") -> ToolContext:
    return ToolContext(run_id="run-1", call_id="call-1", scope=scope, tool_name=name)


async def invoke(
    tools: dict[str, Capability], name: str, scope: Scope = ANA, **arguments: Any
) -> CallOutcome:
    return await tools[name].invoke(arguments, ctx(scope, name))


def ok(outcome: CallOutcome) -> dict[str, Any]:
    assert isinstance(outcome, CallCompleted), outcome
    data: dict[str, Any] = json.loads(outcome.output)
    return data


def failed(outcome: CallOutcome) -> CallFailed:
    assert isinstance(outcome, CallFailed), outcome
    return outcome


def test_scope_is_never_a_model_argument(tools: dict[str, Capability]) -> None:
    for capability in tools.values():
        properties = capability.descriptor.parameters["properties"]
        assert not {"scope", "ctx", "tenant", "user"} & set(properties)
    assert set(tools) == {"memory_read", "memory_write", "memory_search"}


async def test_read_of_a_missing_document_is_version_zero(tools: dict[str, Capability]) -> None:
    data = ok(await invoke(tools, "memory_read", path="MEMORY.md"))
    assert (data["exists"], data["version"], data["content"]) == (False, 0, "")


async def test_replace_needs_expected_version_no_blind_overwrite(
    tools: dict[str, Capability], memory: NativeMemory
) -> None:
    await memory.documents.write_document(ANA, "MEMORY.md", "precious", 0)
    refused = failed(await invoke(tools, "memory_write", target="MEMORY.md", content="clobber"))
    assert refused.error_kind == "input_invalid" and "expected_version" in refused.message
    assert await memory.documents.read_document(ANA, "MEMORY.md") == Document("precious", 1)


async def test_replace_with_the_current_version_is_written(
    tools: dict[str, Capability], memory: NativeMemory
) -> None:
    data = ok(
        await invoke(tools, "memory_write", target="MEMORY.md", content="v1", expected_version=0)
    )
    assert data == {"status": "written", "path": "MEMORY.md", "version": 1}
    read = ok(await invoke(tools, "memory_read", path="MEMORY.md"))
    assert (read["content"], read["version"]) == ("v1", 1)


async def test_stale_version_answers_conflict_and_writes_nothing(
    tools: dict[str, Capability], memory: NativeMemory
) -> None:
    await memory.documents.write_document(ANA, "MEMORY.md", "v1", 0)
    await memory.documents.write_document(ANA, "MEMORY.md", "v2 by the user", 1)
    data = ok(
        await invoke(tools, "memory_write", target="MEMORY.md", content="mine", expected_version=1)
    )
    assert data["status"] == "conflict" and data["current_version"] == 2
    assert (await memory.documents.read_document(ANA, "MEMORY.md")) == Document("v2 by the user", 2)


async def test_memory_write_racing_a_concurrent_write_exactly_one_wins(
    tools: dict[str, Capability], memory: NativeMemory
) -> None:
    await memory.documents.write_document(ANA, "MEMORY.md", "base", 0)
    outcomes = await asyncio.gather(
        *(
            invoke(
                tools, "memory_write", target="MEMORY.md", content=f"edit {i}", expected_version=1
            )
            for i in range(6)
        )
    )
    statuses = [ok(o)["status"] for o in outcomes]
    assert statuses.count("written") == 1 and statuses.count("conflict") == 5
    winner = statuses.index("written")
    doc = await memory.documents.read_document(ANA, "MEMORY.md")
    assert doc == Document(f"edit {winner}", 2)
    # No content lost: every version that was written is in the history.
    history = await memory.documents.history(ANA, "MEMORY.md")
    assert [h.text for h in history] == [f"edit {winner}", "base"]


async def test_concurrent_appends_all_land(
    tools: dict[str, Capability], memory: NativeMemory
) -> None:
    outcomes = await asyncio.gather(
        *(
            invoke(tools, "memory_write", target="notes.md", content=f"n{i}", append=True)
            for i in range(5)
        )
    )
    assert all(ok(o)["status"] == "written" for o in outcomes)
    doc = await memory.documents.read_document(ANA, "notes.md")
    assert doc is not None and sorted(doc.text.split("\n")) == [f"n{i}" for i in range(5)]


async def test_patch_replaces_the_one_occurrence_of_old_string(
    tools: dict[str, Capability], memory: NativeMemory
) -> None:
    await memory.documents.write_document(ANA, "MEMORY.md", "likes tea\nlives in Oslo", 0)
    data = ok(
        await invoke(
            tools, "memory_write", target="MEMORY.md", old_string="tea", new_string="coffee"
        )
    )
    assert data["status"] == "patched" and data["version"] == 2
    doc = await memory.documents.read_document(ANA, "MEMORY.md")
    assert doc is not None and doc.text == "likes coffee\nlives in Oslo"
    missing = failed(
        await invoke(tools, "memory_write", target="MEMORY.md", old_string="tea", new_string="x")
    )
    assert "does not occur" in missing.message
    await memory.documents.write_document(ANA, "dup.md", "a a", 0)
    twice = failed(
        await invoke(tools, "memory_write", target="dup.md", old_string="a", new_string="b")
    )
    assert "occurs 2 times" in twice.message


async def test_patch_with_a_stale_expected_version_is_a_conflict(
    tools: dict[str, Capability], memory: NativeMemory
) -> None:
    await memory.documents.write_document(ANA, "MEMORY.md", "x", 0)
    await memory.documents.write_document(ANA, "MEMORY.md", "y", 1)
    data = ok(
        await invoke(
            tools,
            "memory_write",
            target="MEMORY.md",
            old_string="y",
            new_string="z",
            expected_version=1,
        )
    )
    assert data["status"] == "conflict"


async def test_over_budget_write_is_refused_with_size_and_budget(
    tools: dict[str, Capability], memory: NativeMemory
) -> None:
    await memory.documents.write_document(ANA, "MEMORY.md", "a" * 150, 0)
    refused = failed(
        await invoke(tools, "memory_write", target="MEMORY.md", content="b" * 100, append=True)
    )
    assert "251 bytes" in refused.message
    assert f"budget of {BUDGET} bytes" in refused.message
    assert "150 bytes now" in refused.message
    doc = await memory.documents.read_document(ANA, "MEMORY.md")
    assert doc is not None and doc.version == 1
    refused = failed(
        await invoke(
            tools, "memory_write", target="MEMORY.md", content="c" * 201, expected_version=1
        )
    )
    assert "201 bytes" in refused.message


@pytest.mark.parametrize("path", ["/etc/passwd", "../x", "a/../b", ".hidden", "", "a" * 200])
async def test_invalid_paths_are_refused(tools: dict[str, Capability], path: str) -> None:
    assert failed(await invoke(tools, "memory_read", path=path)).error_kind == "input_invalid"


async def test_tools_only_see_the_scope_of_the_run(
    tools: dict[str, Capability], memory: NativeMemory
) -> None:
    await memory.documents.write_document(BOB, "MEMORY.md", "bob's secret plan", 0)
    await memory.documents.append_log(BOB, __import__("datetime").date(2025, 1, 1), "bob secret")
    assert ok(await invoke(tools, "memory_read", ANA, path="MEMORY.md"))["exists"] is False
    search = ok(await invoke(tools, "memory_search", ANA, query="secret plan"))
    assert search["results"] == []
    written = ok(
        await invoke(
            tools, "memory_write", ANA, target="MEMORY.md", content="x", expected_version=0
        )
    )
    assert written["version"] == 1  # ana's own document, bob's untouched
    assert await memory.documents.read_document(BOB, "MEMORY.md") == Document(
        "bob's secret plan", 1
    )


async def test_search_limit_is_at_most_twenty(tools: dict[str, Capability]) -> None:
    assert tools["memory_search"].descriptor.parameters["properties"]["limit"]["maximum"] == 20
    outcome = await invoke(tools, "memory_search", query="x", limit=21)
    assert failed(outcome).error_kind == "input_invalid"


async def test_search_results_are_cleaned_like_prompt_snippets(
    tools: dict[str, Capability], memory: NativeMemory
) -> None:
    from datetime import date

    await memory.documents.append_log(ANA, date(2025, 1, 1), "db password=hunter2 \x07 works")
    data = ok(await invoke(tools, "memory_search", query="password works"))
    [result] = data["results"]
    assert "hunter2" not in result["text"] and "\x07" not in result["text"]
