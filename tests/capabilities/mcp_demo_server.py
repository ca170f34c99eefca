"""A tiny MCP server for the MCP toolset tests, run over stdio with ``sys.executable``."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations

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


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def pid() -> int:
    """The server's process id (read-only, no idempotent hint)."""
    return os.getpid()


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def workdir() -> str:
    """The server's working directory."""
    return os.getcwd()


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def die_once(marker: str) -> str:
    """Exit mid-call the first time (creating ``marker``); answer once ``marker`` exists."""
    if not os.path.exists(marker):
        with open(marker, "w", encoding="utf-8") as handle:
            handle.write(str(os.getpid()))
        os._exit(1)
    return "survived"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def getenv(name: str) -> str:
    """The value of an environment variable of the server ("" when unset)."""
    return os.environ.get(name, "")


@server.tool()
def kill_pidfile(path: str) -> str:
    """SIGKILL the process whose pid is the last line of ``path``; answer once it is dead."""
    with open(path, encoding="utf-8") as handle:
        pid = int(handle.read().split()[-1])
    os.kill(pid, signal.SIGKILL)
    for _ in range(3000):  # up to a minute: a zombie (not reaped by its parent) is dead too
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.02)
    return f"killed {pid}"


@server.tool()
def reject_like_typescript(text: str) -> CallToolResult:
    """Fail the way TypeScript servers report rejected arguments: an error result, -32602."""
    message = (
        "MCP error -32602: Input validation error: Invalid arguments for tool "
        "reject_like_typescript: expected a number"
    )
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


@server.tool()
def deep(levels: int) -> CallToolResult:
    """Answer structured content nested ``levels`` deep and no content blocks."""
    value: object = "bottom"
    for _ in range(levels):
        value = {"down": value}
    return CallToolResult(content=[], structured_content={"top": value})


if __name__ == "__main__":
    if os.environ.get("DEMO_REFUSE_START_IF") and os.path.exists(
        os.environ["DEMO_REFUSE_START_IF"]
    ):
        sys.exit(3)  # lets a test make restarts fail, then succeed again
    if sys.argv[1:2] == ["--http"]:  # mcp_demo_server.py --http PORT
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
