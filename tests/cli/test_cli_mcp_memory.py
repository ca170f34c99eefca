"""``reverie mcp-memory``: a Typer command like the others, guarded over HTTP as ``serve`` is.

Through the CLI (the in-process runner and real subprocesses) and over real HTTP with the
official ``mcp`` SDK client.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from typer.testing import Result

from cli.cli_support import run_reverie
from reverie.memory.mcp_server import NO_AUTH_WARNING, NO_CREDENTIAL

TOKEN = "mcp-memory-secret-7f3a"
FLAGS = ("--http", "--host", "--token-env", "--no-auth", "--store", "--config")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_mcp_memory_help_lists_its_flags_with_dash_h_and_double_dash_help(
    cli: Callable[..., Result], flag: str
) -> None:
    result = cli("mcp-memory", flag)
    assert result.exit_code == 0
    for name in FLAGS:
        assert name in result.stdout
    assert "Serve reverie's memory over MCP" in result.stdout


def test_mcp_memory_is_listed_among_the_commands(cli: Callable[..., Result]) -> None:
    result = cli("--help")
    assert "mcp-memory" in result.stdout


def test_http_without_a_credential_refuses_to_start_with_the_typed_message(home: Path) -> None:
    store = f"sqlite:///{home / 'memory.db'}"
    result = run_reverie(home, "mcp-memory", "--http", str(_free_port()), "--store", store)
    assert result.returncode == 2
    assert result.stderr.strip() == f"reverie mcp-memory: {NO_CREDENTIAL}"
    assert not (home / "memory.db").exists()  # refused before the store was opened


def test_a_token_env_that_is_not_set_refuses_to_start_naming_the_variable(home: Path) -> None:
    result = run_reverie(
        home, "mcp-memory", "--http", str(_free_port()), "--token-env", "NO_SUCH_TOKEN_VAR"
    )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "reverie mcp-memory: environment variable NO_SUCH_TOKEN_VAR is not set"
    )


async def _wait_for_port(port: int, proc: asyncio.subprocess.Process) -> None:
    async with asyncio.timeout(60):
        while True:
            assert proc.returncode is None, "the server exited during start-up"
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            await writer.wait_closed()
            return


async def _start(*args: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "reverie",
        "mcp-memory",
        *args,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )


@pytest.fixture
async def guarded(tmp_path: Path) -> AsyncIterator[str]:
    """``reverie mcp-memory --http PORT --token-env MEM_TOKEN``: the endpoint URL."""
    port = _free_port()
    env = {**os.environ, "MEM_TOKEN": TOKEN}
    proc = await _start(
        "--http",
        str(port),
        "--token-env",
        "MEM_TOKEN",
        "--store",
        f"sqlite:///{tmp_path / 'memory.db'}",
        env=env,
    )
    try:
        await _wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        await proc.wait()


async def _list_tools(
    url: str, headers: dict[str, str], statuses: list[int] | None = None
) -> list[str]:
    """The tools the official SDK client lists (the HTTP statuses it got go to ``statuses``)."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def seen(response: httpx2.Response) -> None:
        if statuses is not None:
            statuses.append(response.status_code)

    async with (
        httpx2.AsyncClient(headers=headers, timeout=30, event_hooks={"response": [seen]}) as http,
        asyncio.timeout(60),
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        listing = await client.list_tools()
    return sorted(tool.name for tool in listing.tools)


@pytest.mark.slow
async def test_the_right_bearer_token_lists_the_memory_tools_over_http(guarded: str) -> None:
    tools = await _list_tools(guarded, {"Authorization": f"Bearer {TOKEN}"})
    assert tools == ["memory_add_session", "memory_search"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "missing bearer token: send 'Authorization: Bearer <token>'"),
        ({"Authorization": "Bearer not-the-token"}, "invalid bearer token"),
        ({"Authorization": f"Basic {TOKEN}"}, "invalid bearer token"),
    ],
    ids=["missing", "wrong", "not-bearer"],
)
async def test_a_wrong_or_missing_token_is_answered_with_the_401_of_reverie_serve(
    guarded: str, headers: dict[str, str], message: str
) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.post(guarded, json={}, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="reverie"'
    body: dict[str, Any] = response.json()
    assert body == await _serve_401(headers)
    assert body["error"]["message"] == message
    assert TOKEN not in response.text


@pytest.mark.slow
async def test_the_sdk_client_with_a_wrong_token_lists_no_tools(guarded: str) -> None:
    statuses: list[int] = []
    with pytest.raises(Exception):  # noqa: B017 (the SDK's error type is its own business)
        await _list_tools(guarded, {"Authorization": "Bearer not-the-token"}, statuses)
    assert statuses and set(statuses) == {401}


async def _serve_401(headers: dict[str, str]) -> dict[str, Any]:
    """What ``reverie serve``'s own middleware answers the same request with."""
    from starlette.responses import PlainTextResponse
    from starlette.types import Receive, Scope, Send

    from reverie.serve.auth import BearerAuth, TokenTable

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        await PlainTextResponse("reached")(scope, receive, send)

    from reverie import Scope as Owner

    app = BearerAuth(route, tokens=TokenTable({"another-token-123": Owner(tenant="t", user="u")}))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://serve") as client:
        response = await client.post("/v1/chat/completions", json={}, headers=headers)
    assert response.status_code == 401
    answer: dict[str, Any] = response.json()
    return answer


@pytest.mark.slow
async def test_no_auth_serves_http_without_a_credential_and_warns(tmp_path: Path) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "MEM_TOKEN"}
    proc = await _start(
        "--http", str(port), "--no-auth", "--store", f"sqlite:///{tmp_path / 'm.db'}", env=env
    )
    try:
        assert proc.stderr is not None
        async with asyncio.timeout(60):
            warning = (await proc.stderr.readline()).decode().strip()
        await _wait_for_port(port, proc)
        tools = await _list_tools(f"http://127.0.0.1:{port}/mcp", {})
    finally:
        proc.terminate()
        await proc.wait()
    assert warning == NO_AUTH_WARNING.format(host="127.0.0.1", port=port)
    assert tools == ["memory_add_session", "memory_search"]
