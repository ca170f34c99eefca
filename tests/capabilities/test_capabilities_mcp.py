"""DESIGN §9.4: MCP servers as toolsets; server failures are tool errors, never crashes."""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reverie.capabilities import Capability, MCPToolset, ToolContext, tools_by_name
from reverie.core.capability import CallCompleted, CallFailed, CallOutcome
from reverie.errors import CapabilityError, UsageError

pytestmark = pytest.mark.slow  # each test starts a Python subprocess

SERVER = [sys.executable, str(Path(__file__).with_name("mcp_demo_server.py"))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
async def http_server_url() -> AsyncIterator[str]:
    """The demo server over streamable HTTP, on a free local port."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        *SERVER, "--http", str(port), stdout=asyncio.subprocess.DEVNULL
    )
    try:
        async with asyncio.timeout(20):
            while True:  # wait until it accepts connections
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                except OSError:
                    await asyncio.sleep(0.05)
                    continue
                writer.close()
                await writer.wait_closed()
                break
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        await proc.wait()


def failed(outcome: CallOutcome) -> CallFailed:
    assert isinstance(outcome, CallFailed), outcome
    return outcome


async def test_mcp_toolset_lists_and_calls_a_stdio_server(ctx: ToolContext) -> None:
    async with MCPToolset(SERVER) as ts:
        tools = tools_by_name(ts.tools())
        assert set(tools) == {"add", "shout", "refuse", "slow", "whoami", "crash"}
        add = tools["add"]
        assert isinstance(add, Capability)
        assert add.descriptor.description == "Add two integers."
        assert add.descriptor.parameters["properties"]["a"]["type"] == "integer"
        assert await add.invoke({"a": 2, "b": 3}, ctx) == CallCompleted(output="5")


async def test_mcp_prefix_names_tools_prefix_underscore_name(ctx: ToolContext) -> None:
    async with MCPToolset(SERVER, prefix="demo") as ts:
        tools = tools_by_name(ts.tools())
        assert "demo_add" in tools
        assert tools["demo_add"].remote_name == "add"
        assert await tools["demo_shout"].invoke({"text": "hi"}, ctx) == CallCompleted(output="HI")


async def test_mcp_read_only_hint_maps_to_read_effect_and_idempotent_hint_to_idempotent() -> None:
    async with MCPToolset(SERVER) as ts:
        tools = tools_by_name(ts.tools())
    add = tools["add"].descriptor
    assert add.effects == frozenset({"read"})
    assert add.concurrency == "safe_for_parallel"
    assert add.idempotent is True


async def test_mcp_tool_without_hints_is_exclusive_and_not_idempotent() -> None:
    async with MCPToolset(SERVER) as ts:
        shout = tools_by_name(ts.tools())["shout"].descriptor
    assert shout.effects is None
    assert shout.concurrency == "exclusive"
    assert shout.idempotent is False


async def test_mcp_is_error_result_is_a_permanent_failure(ctx: ToolContext) -> None:
    async with MCPToolset(SERVER) as ts:
        refuse = tools_by_name(ts.tools())["refuse"]
        outcome = failed(await refuse.invoke({"reason": "no way"}, ctx))
    assert outcome.error_kind == "permanent"
    assert "no way" in outcome.message


async def test_mcp_calls_may_come_from_concurrent_tasks(ctx: ToolContext) -> None:
    async with MCPToolset(SERVER) as ts:
        add = tools_by_name(ts.tools())["add"]
        async with asyncio.TaskGroup() as tg:
            calls = [tg.create_task(add.invoke({"a": i, "b": i}, ctx)) for i in range(5)]
    assert [c.result() for c in calls] == [CallCompleted(output=str(2 * i)) for i in range(5)]


async def test_mcp_call_that_outlives_the_timeout_is_unavailable(ctx: ToolContext) -> None:
    # A short bound on the call only: starting the server on a loaded machine may take longer.
    async with MCPToolset(SERVER, timeout_s=1.0, connect_timeout_s=120.0) as ts:
        tools = tools_by_name(ts.tools())
        outcome = failed(await tools["slow"].invoke({"seconds": 30}, ctx))
        assert outcome.error_kind == "unavailable"
        assert "timed out" in outcome.message
        # The session survives a timed-out call.
        assert await tools["add"].invoke({"a": 1, "b": 1}, ctx) == CallCompleted(output="2")


async def test_mcp_server_dying_mid_call_is_unavailable_not_an_exception(
    ctx: ToolContext,
) -> None:
    async with MCPToolset(SERVER) as ts:
        tools = tools_by_name(ts.tools())
        outcome = failed(await tools["crash"].invoke({}, ctx))
        assert outcome.error_kind == "unavailable"
        after = failed(await tools["add"].invoke({"a": 1, "b": 1}, ctx))
        assert after.error_kind == "unavailable"


async def test_mcp_toolset_over_streamable_http(http_server_url: str, ctx: ToolContext) -> None:
    async with MCPToolset(url=http_server_url, prefix="web") as ts:
        tools = tools_by_name(ts.tools())
        assert tools["web_add"].descriptor.effects == frozenset({"read"})
        assert await tools["web_add"].invoke({"a": 4, "b": 5}, ctx) == CallCompleted(output="9")


async def test_mcp_unreachable_url_raises_unavailable_at_connect() -> None:
    with pytest.raises(CapabilityError, match="could not connect") as info:
        async with MCPToolset(url=f"http://127.0.0.1:{free_port()}/mcp", timeout_s=5):
            pass  # pragma: no cover - never reached
    assert info.value.kind == "unavailable"


async def test_mcp_dead_server_command_raises_unavailable_at_connect() -> None:
    dead = MCPToolset([sys.executable, "-c", "import sys; sys.exit(3)"], prefix="dead")
    with pytest.raises(CapabilityError, match="could not connect to MCP server 'dead'") as info:
        async with dead:
            pass  # pragma: no cover - never reached
    assert info.value.kind == "unavailable"


async def test_mcp_missing_executable_raises_unavailable_at_connect() -> None:
    with pytest.raises(CapabilityError, match="could not connect") as info:
        async with MCPToolset(["/nonexistent/reverie-mcp-server"]):
            pass  # pragma: no cover - never reached
    assert info.value.kind == "unavailable"


async def test_mcp_silent_server_fails_at_connect_within_the_timeout() -> None:
    silent = MCPToolset([sys.executable, "-c", "import sys; sys.stdin.read()"], timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(CapabilityError, match=r"no answer within 0\.5s"):
        async with silent:
            pass  # pragma: no cover - never reached
    assert time.monotonic() - started < 60  # bounded, not the 30 s default per call


async def test_mcp_connect_timeout_bounds_connecting_apart_from_the_calls() -> None:
    silent = MCPToolset(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        timeout_s=3600.0,
        connect_timeout_s=0.5,
    )
    with pytest.raises(CapabilityError, match=r"no answer within 0\.5s"):
        async with silent:
            pass  # pragma: no cover - never reached


async def test_mcp_tool_called_after_close_is_unavailable(ctx: ToolContext) -> None:
    async with MCPToolset(SERVER) as ts:
        add = tools_by_name(ts.tools())["add"]
    assert failed(await add.invoke({"a": 1, "b": 1}, ctx)).error_kind == "unavailable"


async def test_mcp_non_finite_argument_is_input_invalid(ctx: ToolContext) -> None:
    async with MCPToolset(SERVER) as ts:
        add = tools_by_name(ts.tools())["add"]
        outcome = failed(await add.invoke({"a": float("nan"), "b": 1}, ctx))
    assert outcome.error_kind == "input_invalid"


def test_mcp_tools_before_entering_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="async with"):
        MCPToolset(SERVER).tools()


@pytest.mark.parametrize(
    "make",
    [
        lambda: MCPToolset(),
        lambda: MCPToolset(SERVER, url="http://localhost/mcp"),
        lambda: MCPToolset([]),
        lambda: MCPToolset(url="http://localhost/mcp", env={"A": "b"}),
        lambda: MCPToolset(SERVER, prefix="bad prefix"),
        lambda: MCPToolset(SERVER, timeout_s=0),
        lambda: MCPToolset(SERVER, connect_timeout_s=0),
    ],
)
def test_mcp_toolset_options_must_describe_one_server(make: object) -> None:
    assert callable(make)
    with pytest.raises(UsageError):
        make()


async def test_a_configured_credential_quoted_back_by_the_server_is_masked_in_the_outcome(
    ctx: ToolContext,
) -> None:
    secret = "demo-CANARY-token-3141"
    async with MCPToolset(SERVER, env={"DEMO_TOKEN": secret}, timeout_s=20.0) as ts:
        outcome = failed(await tools_by_name(ts.tools())["whoami"].invoke({}, ctx))
    assert outcome.message.endswith("token *** has no access")
    assert secret not in outcome.message
