"""DESIGN §9.4: MCP servers as toolsets; server failures are tool errors, never crashes."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
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


async def eventually(condition: Callable[[], bool], *, within_s: float = 60.0) -> None:
    """Wait until ``condition()`` holds (a generous bound: the machine may be loaded)."""
    async with asyncio.timeout(within_s):
        while True:
            if condition():
                return
            await asyncio.sleep(0.02)


def failed(outcome: CallOutcome) -> CallFailed:
    assert isinstance(outcome, CallFailed), outcome
    return outcome


async def test_mcp_toolset_lists_and_calls_a_stdio_server(ctx: ToolContext) -> None:
    async with MCPToolset(SERVER) as ts:
        tools = tools_by_name(ts.tools())
        assert {"add", "shout", "refuse", "slow", "whoami", "crash", "pid"} <= set(tools)
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


async def test_mcp_server_dying_mid_call_is_unavailable_and_the_next_call_recovers(
    ctx: ToolContext,
) -> None:
    async with MCPToolset(SERVER) as ts:
        tools = tools_by_name(ts.tools())
        # Not idempotent: the server may have acted, so the call is not re-run.
        outcome = failed(await tools["crash"].invoke({}, ctx))
        assert outcome.error_kind == "unavailable"
        assert await tools["add"].invoke({"a": 1, "b": 1}, ctx) == CallCompleted(output="2")
        assert ts.restarts == 1


async def test_mcp_stdio_server_killed_is_detected_restarted_and_the_next_call_recovers(
    ctx: ToolContext,
) -> None:
    async with MCPToolset(SERVER) as ts:
        tools = tools_by_name(ts.tools())
        first = await tools["pid"].invoke({}, ctx)
        assert isinstance(first, CallCompleted)
        os.kill(int(first.output), signal.SIGKILL)
        # Detected without a call: the session is dropped when the server's stdout closes.
        await eventually(lambda: not ts.connected)
        second = await tools["pid"].invoke({}, ctx)
        assert isinstance(second, CallCompleted)
        assert second.output != first.output  # a new server process answered
        assert ts.connected
        assert ts.restarts == 1


async def test_mcp_restart_backs_off_while_the_server_keeps_failing_then_recovers(
    ctx: ToolContext, tmp_path: Path
) -> None:
    refuse = tmp_path / "refuse-to-start"
    toolset = MCPToolset(
        SERVER,
        env={"DEMO_REFUSE_START_IF": str(refuse)},
        restart_backoff_s=0.2,
        max_restart_backoff_s=0.4,
    )
    async with toolset as ts:
        tools = tools_by_name(ts.tools())
        running = await tools["pid"].invoke({}, ctx)
        assert isinstance(running, CallCompleted)
        refuse.touch()  # from now on the server exits at start-up
        os.kill(int(running.output), signal.SIGKILL)
        await eventually(lambda: not ts.connected)
        down = failed(await tools["add"].invoke({"a": 1, "b": 1}, ctx))
        assert down.error_kind == "unavailable"
        assert "restart" in down.message
        refuse.unlink()
        await eventually(lambda: ts.connected)
        assert await tools["add"].invoke({"a": 1, "b": 1}, ctx) == CallCompleted(output="2")
        assert ts.restarts == 1


async def test_mcp_idempotent_call_whose_connection_is_lost_is_rerun_on_the_restarted_server(
    ctx: ToolContext, tmp_path: Path
) -> None:
    async with MCPToolset(SERVER) as ts:
        die_once = tools_by_name(ts.tools())["die_once"]
        assert die_once.descriptor.idempotent
        outcome = await die_once.invoke({"marker": str(tmp_path / "died")}, ctx)
        assert outcome == CallCompleted(output="survived")
        assert (tmp_path / "died").exists()  # the first server really died mid-call
        assert ts.restarts == 1


async def test_mcp_closed_toolset_does_not_restart_its_server(ctx: ToolContext) -> None:
    async with MCPToolset(SERVER) as ts:
        add = tools_by_name(ts.tools())["add"]
    assert not ts.connected
    assert failed(await add.invoke({"a": 1, "b": 1}, ctx)).error_kind == "unavailable"
    assert ts.restarts == 0


async def test_mcp_read_only_hint_without_idempotent_hint_is_idempotent_and_safe_for_parallel() -> (
    None
):
    async with MCPToolset(SERVER) as ts:
        pid = tools_by_name(ts.tools())["pid"].descriptor
    assert pid.effects == frozenset({"read"})
    assert pid.concurrency == "safe_for_parallel"
    assert pid.idempotent is True


async def test_mcp_is_error_result_carrying_invalid_params_is_input_invalid(
    ctx: ToolContext,
) -> None:
    async with MCPToolset(SERVER) as ts:
        reject = tools_by_name(ts.tools())["reject_like_typescript"]
        outcome = failed(await reject.invoke({"text": "x"}, ctx))
    assert outcome.error_kind == "input_invalid"
    assert "Input validation error" in outcome.message


async def test_mcp_connect_and_each_call_have_separate_timeouts(ctx: ToolContext) -> None:
    async with MCPToolset(SERVER, timeout_s=2.0, connect_timeout_s=60.0) as ts:
        assert (ts.timeout_s, ts.connect_timeout_s) == (2.0, 60.0)
        tools = tools_by_name(ts.tools())
        assert tools["slow"].descriptor.timeout_s == 2.0
        outcome = failed(await tools["slow"].invoke({"seconds": 60}, ctx))
        assert outcome.error_kind == "unavailable"
        assert "timed out after 2.0s" in outcome.message


async def test_mcp_allow_and_deny_lists_pick_the_offered_tools() -> None:
    async with MCPToolset(
        SERVER, allow_tools=["add", "shout", "absent"], deny_tools=["shout"]
    ) as ts:
        assert [t.descriptor.name for t in ts.tools()] == ["add"]
        assert "shout" in ts.listed_tools


async def test_mcp_cwd_sets_the_stdio_server_working_directory(
    ctx: ToolContext, tmp_path: Path
) -> None:
    async with MCPToolset(SERVER, cwd=tmp_path) as ts:
        outcome = await tools_by_name(ts.tools())["workdir"].invoke({}, ctx)
    assert outcome == CallCompleted(output=str(tmp_path))  # pytest resolves tmp_path


async def test_mcp_toolset_over_streamable_http(http_server_url: str, ctx: ToolContext) -> None:
    async with MCPToolset(url=http_server_url, prefix="web") as ts:
        tools = tools_by_name(ts.tools())
        assert tools["web_add"].descriptor.effects == frozenset({"read"})
        assert await tools["web_add"].invoke({"a": 4, "b": 5}, ctx) == CallCompleted(output="9")


async def start_http_server(port: int) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        *SERVER, "--http", str(port), stdout=asyncio.subprocess.DEVNULL
    )
    async with asyncio.timeout(60):
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            await writer.wait_closed()
            return proc


async def test_mcp_http_server_that_goes_away_is_reconnected_once_it_is_back(
    ctx: ToolContext,
) -> None:
    port = free_port()
    proc = await start_http_server(port)
    try:
        toolset = MCPToolset(
            url=f"http://127.0.0.1:{port}/mcp", restart_backoff_s=0.1, max_restart_backoff_s=0.5
        )
        async with toolset as ts:
            add = tools_by_name(ts.tools())["add"]
            assert await add.invoke({"a": 1, "b": 1}, ctx) == CallCompleted(output="2")
            proc.kill()
            await proc.wait()
            down = failed(await add.invoke({"a": 1, "b": 2}, ctx))
            assert down.error_kind == "unavailable"
            assert not ts.connected
            proc = await start_http_server(port)
            await eventually(lambda: ts.connected)
            assert await add.invoke({"a": 1, "b": 3}, ctx) == CallCompleted(output="4")
            assert ts.restarts == 1
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


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
    silent = MCPToolset(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], connect_timeout_s=1.0
    )
    started = time.monotonic()
    with pytest.raises(CapabilityError, match=r"no answer within 1\.0s"):
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
        lambda: MCPToolset(url="http://localhost/mcp", cwd="/"),
        lambda: MCPToolset(SERVER, allow_tools="add"),
        lambda: MCPToolset(SERVER, restart_backoff_s=5, max_restart_backoff_s=1),
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


async def test_an_mcp_result_nested_too_deep_is_a_permanent_tool_error(ctx: ToolContext) -> None:
    async with MCPToolset(SERVER) as ts:
        deep = tools_by_name(ts.tools())["deep"]
        shallow = await deep.invoke({"levels": 3}, ctx)
        outcome = failed(await deep.invoke({"levels": 100}, ctx))
    assert shallow == CallCompleted(output='{"top":{"down":{"down":{"down":"bottom"}}}}')
    assert outcome.error_kind == "permanent"
    assert "nested more than 64 levels deep" in outcome.message
