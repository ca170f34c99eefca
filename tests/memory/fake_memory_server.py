"""Misbehaving memory-over-MCP servers for the MCPMemory tests, run over stdio.

``python fake_memory_server.py MODE`` serves ``memory_search`` and ``memory_add_session``;
MODE picks how ``memory_search`` answers:

- ``honest``: one row in the caller's scope, echoing the arguments it received (and its pid);
- ``foreign``: another user's row, then the caller's;
- ``noscope``: rows without scope fields, then the caller's;
- ``many``: 10,000 rows in the caller's scope;
- ``huge``: one 5 MB row in the caller's scope;
- ``garbage``: text that is not JSON;
- ``wrongshape``: JSON whose rows are not a list;
- ``slow``: nothing for an hour;
- ``error``: an error result;
- ``crash``: the process exits mid-call;
- ``quote``: a protocol error quoting the credential back (``memory_add_session`` too);
- ``structured``, ``text_rows``, ``text_results``, ``text_list``: one row in the caller's
  scope, in each documented envelope: ``structuredContent`` ``{"rows": [...]}``, or JSON text
  ``{"rows": [...]}``, ``{"results": [...]}`` or a bare list.

The same two tools are also served as ``acme_recall`` and ``acme_remember`` (names a
configuration must give), whose rows and records say so.

``memory_add_session`` fails in ``crash``/``error`` modes and records to a file named by the
``FAKE_MEMORY_LOG`` environment variable otherwise. The echo reports a digest of
``FAKE_MEMORY_TOKEN`` (the credential, when the client passed it) as ``given_sha``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent

MODE = sys.argv[1] if len(sys.argv) > 1 else "honest"
server: MCPServer[object] = MCPServer("fake-memory", log_level="ERROR")


def _row(text: str, tenant: str, user: str, **extra: Any) -> dict[str, Any]:
    return {"tenant": tenant, "user": user, "text": text, **extra}


ENVELOPES: dict[str, Any] = {
    "structured": lambda rows: CallToolResult(
        content=[TextContent(type="text", text="see structured content")],
        structured_content={"rows": rows},
    ),
    "text_rows": lambda rows: CallToolResult(
        content=[TextContent(type="text", text=json.dumps({"rows": rows}))]
    ),
    "text_results": lambda rows: CallToolResult(
        content=[TextContent(type="text", text=json.dumps({"results": rows}))]
    ),
    "text_list": lambda rows: CallToolResult(
        content=[TextContent(type="text", text=json.dumps(rows))]
    ),
}
"""The documented response envelopes of a search, each around the given rows."""


@server.tool()
async def acme_recall(
    tenant: str,
    user: str,
    query: str,
    agent: str | None = None,
    project: str | None = None,
    limit: int = 5,
) -> Any:
    """Search under another name: one row saying so, in the caller's scope."""
    row = _row(f"recalled by acme_recall for {query}", tenant, user, agent=agent, project=project)
    return {"rows": [row]}


@server.tool()
def acme_remember(
    tenant: str,
    user: str,
    messages: list[dict[str, str]],
    agent: str | None = None,
    project: str | None = None,
) -> dict[str, str]:
    """Record under another name (to ``FAKE_MEMORY_LOG``, marked with this tool's name)."""
    path = os.environ.get("FAKE_MEMORY_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            entry = {"tool": "acme_remember", "tenant": tenant, "user": user, "messages": messages}
            handle.write(json.dumps(entry) + "\n")
    return {"status": "recorded"}


@server.tool()
async def memory_search(
    tenant: str,
    user: str,
    query: str,
    agent: str | None = None,
    project: str | None = None,
    limit: int = 5,
) -> Any:
    """Search (misbehaving on purpose, see the module docstring)."""
    me = {"agent": agent, "project": project}
    if MODE == "honest":
        token = os.environ.get("FAKE_MEMORY_TOKEN")
        echo = {
            "tenant": tenant,
            "user": user,
            "agent": agent,
            "project": project,
            "query": query,
            "limit": limit,
            "given_sha": hashlib.sha256(token.encode()).hexdigest()[:16] if token else None,
            "pid": os.getpid(),
        }
        return {"rows": [_row("echo " + json.dumps(echo), tenant, user, **me)]}
    if MODE == "foreign":
        return {
            "rows": [
                _row("SECRET of mallory", tenant, "mallory"),
                _row("SECRET of another tenant", "evil-corp", user, **me),
                _row("SECRET with another project", tenant, user, agent=agent, project="x"),
                _row("mine: likes teal", tenant, user, **me),
            ]
        }
    if MODE == "noscope":
        return {
            "rows": [
                {"text": "SECRET without scope"},
                {"tenant": tenant, "text": "SECRET without user"},
                {"tenant": tenant, "user": 42, "text": "SECRET with a numeric user"},
                _row("mine: likes teal", tenant, user, **me),
            ]
        }
    if MODE == "many":
        return {"rows": [_row(f"row {i} " + "x" * 100, tenant, user, **me) for i in range(10_000)]}
    if MODE == "huge":
        return {"rows": [_row("H" * (5 * 1024 * 1024), tenant, user, **me)]}
    if MODE in ENVELOPES:
        return ENVELOPES[MODE]([_row(f"mine via {MODE}", tenant, user, **me)])
    if MODE == "garbage":
        return CallToolResult(content=[TextContent(type="text", text="<<<not json at all>>>")])
    if MODE == "wrongshape":
        return {"rows": "should be a list"}
    if MODE == "slow":
        await asyncio.sleep(3600)
        return {"rows": []}
    if MODE == "error":
        raise ToolError("the backend is down")
    if MODE == "crash":
        os._exit(3)
    if MODE == "quote":
        raise MCPError(-32603, f"token {os.environ.get('FAKE_MEMORY_TOKEN')} is not allowed here")
    raise ToolError(f"unknown mode {MODE}")


@server.tool()
def memory_add_session(
    tenant: str,
    user: str,
    messages: list[dict[str, str]],
    agent: str | None = None,
    project: str | None = None,
) -> dict[str, str]:
    """Record a session (fails in the error and crash modes)."""
    if MODE in ("error", "crash"):
        raise ToolError("cannot record")
    if MODE == "quote":
        raise MCPError(-32603, f"bad credential {os.environ.get('FAKE_MEMORY_TOKEN')}")
    path = os.environ.get("FAKE_MEMORY_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"tenant": tenant, "user": user, "messages": messages}) + "\n")
    return {"status": "recorded"}


if __name__ == "__main__":
    server.run("stdio")
