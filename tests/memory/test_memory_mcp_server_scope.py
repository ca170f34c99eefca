"""``reverie mcp-memory`` applies the Scope rule: an empty field is a tool error, not "unset"."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import date
from typing import Any

import pytest
from mcp import Client

from memory.memory_support import ANA
from reverie.memory import NativeMemory
from reverie.memory.mcp_server import build_server
from reverie.store import SQLiteStore


@pytest.fixture
async def server(tmp_path: Any) -> AsyncIterator[Any]:
    store = SQLiteStore(tmp_path / "memory.db")
    await store.open()
    await store.append_log(ANA, date(2025, 1, 2), "user: ana likes zebra tea")
    try:
        yield build_server(NativeMemory(store=store))
    finally:
        await store.close()


@pytest.mark.parametrize(
    "fields",
    [
        {"tenant": "", "user": "ana"},
        {"tenant": "acme", "user": ""},
        {"tenant": "acme", "user": "ana", "agent": ""},
        {"tenant": "acme", "user": "ana", "project": ""},
    ],
)
async def test_mcp_memory_server_refuses_empty_scope_fields_with_a_tool_error(
    server: Any, fields: dict[str, str]
) -> None:
    async with Client(server) as client:
        search = await client.call_tool("memory_search", {**fields, "query": "zebra"})
        record = await client.call_tool(
            "memory_add_session",
            {**fields, "messages": [{"role": "user", "content": "hello"}]},
        )

    for result in (search, record):
        assert result.is_error
        text = "".join(getattr(block, "text", "") for block in result.content)
        assert "non-empty" in text
        assert "zebra" not in text


async def test_mcp_memory_server_reads_the_unset_scope_when_agent_is_omitted(server: Any) -> None:
    async with Client(server) as client:
        result = await client.call_tool(
            "memory_search", {"tenant": "acme", "user": "ana", "query": "zebra"}
        )

    assert not result.is_error
    assert isinstance(result.structured_content, dict)
    rows = result.structured_content["rows"]
    assert [row["text"] for row in rows] == ["user: ana likes zebra tea"]
    assert rows[0]["agent"] is None
