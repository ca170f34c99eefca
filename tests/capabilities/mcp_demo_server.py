"""A tiny MCP server for the MCP toolset tests, run over stdio with ``sys.executable``."""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

server: MCPServer[object] = MCPServer("demo", log_level="ERROR")


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def shout(text: str) -> str:
    """Upper-case the text (no annotations: a tool with unknown effects)."""
    return text.upper()


@server.tool()
def refuse(reason: str) -> str:
    """Always fail with the given reason."""
    raise ToolError(reason)


@server.tool()
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return "done"


@server.tool()
def whoami() -> str:
    """Fail quoting the credential the server was started with (a careless server)."""
    raise ToolError(f"token {os.environ.get('DEMO_TOKEN')} has no access")


@server.tool()
def crash() -> str:
    """Kill the server process mid-call."""
    os._exit(1)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:  # mcp_demo_server.py --http PORT
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
