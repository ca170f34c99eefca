"""Rows from a memory-over-MCP server: any answer is the run's snippets, empty or unavailable."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent

from fuzz.strategies import DEEP_TEXT, FUZZ, JSON, TEXT, objects_with
from reverie.core.scope import Scope
from reverie.memory import Empty, MCPMemory, Snippets, Unavailable
from reverie.serve import background_server

ANA = Scope(tenant="acme", user="ana")
ROW_KEYS = ["tenant", "user", "agent", "project", "text", "score", "source"]

ROW = (
    objects_with(ROW_KEYS)
    | st.fixed_dictionaries(
        {"tenant": st.just("acme"), "user": st.just("ana"), "text": TEXT},
        optional={"agent": JSON, "project": JSON, "score": JSON},
    )
    | JSON
)
PAYLOAD = (
    st.fixed_dictionaries({"rows": st.lists(ROW, max_size=5) | JSON})
    | st.fixed_dictionaries({"results": st.lists(ROW, max_size=5)})
    | JSON
)
ANSWER = (
    PAYLOAD.map(json.dumps)
    | TEXT
    | st.text(max_size=60)
    | DEEP_TEXT
    | DEEP_TEXT.map(
        lambda deep: f'{{"rows": [{{"tenant": "acme", "user": "ana", "text": "t", "x": {deep}}}]}}'
    )
)
"""What the server's search tool sends back, as the text of its one content block (nested past
the limit too)."""


@pytest.fixture
async def memory() -> AsyncIterator[tuple[MCPMemory, deque[str]]]:
    """MCPMemory on a real streamable-HTTP MCP server whose search answers are queued."""
    answers: deque[str] = deque()
    server: MCPServer[Any] = MCPServer("fuzz-memory", log_level="ERROR")

    @server.tool()
    async def memory_search(
        tenant: str,
        user: str,
        query: str,
        agent: str | None = None,
        project: str | None = None,
        limit: int = 5,
    ) -> CallToolResult:
        """Answer with the next queued text."""
        text = answers.popleft() if answers else '{"rows": []}'
        return CallToolResult(content=[TextContent(type="text", text=text)])

    async with background_server(server.streamable_http_app()) as url:
        provider = MCPMemory(url=f"{url}/mcp", record_tool=None, timeout_s=20)
        try:
            yield provider, answers
        finally:
            await provider.aclose()


@settings(parent=FUZZ, max_examples=40)
@given(ANSWER)
async def test_any_search_answer_is_snippets_of_the_runs_scope_or_unavailable(
    memory: tuple[MCPMemory, deque[str]], answer: str
) -> None:
    provider, answers = memory
    answers.clear()  # an earlier failing example may have left answers behind
    answers.append(answer)

    result = await provider.read_long_term(ANA, "tea", 5)

    assert isinstance(result, Snippets | Empty | Unavailable)
    if isinstance(result, Snippets):
        assert all(snippet.scope == ANA for snippet in result.items)
        assert all(isinstance(snippet.text, str) for snippet in result.items)
    # The provider keeps serving: an honest answer right after is read.
    answers.append(json.dumps({"rows": [{"tenant": "acme", "user": "ana", "text": "likes tea"}]}))
    after = await provider.read_long_term(ANA, "tea", 5)
    assert isinstance(after, Snippets)
    assert [snippet.text for snippet in after.items] == ["likes tea"]
