"""``reverie mcp-memory``: native memory over MCP, used by ``MCPMemory`` as a separate process.

The same recall scenario as the native provider, end to end through the MCP contract
(DESIGN §12: the contract has a second implementer).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

import reverie
from memory.memory_support import ANA, BOB, EVE, MEMORY_SERVER, memory_message, prompt_text
from reverie import Agent, Runtime
from reverie.memory import MCPMemory, Snippets, Unavailable
from reverie.testing import ScriptedModel, call, reply

pytestmark = pytest.mark.slow  # each test starts a Python subprocess

CLI_SERVER = [sys.executable, "-m", "reverie.cli.app", "mcp-memory"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'memory-server.db'}"


async def recall_scenario(memory: MCPMemory) -> None:
    """Ana says something in one conversation; a later one recalls it; Bob and Eve do not."""
    async with Runtime.open(":memory:", memory=memory) as rt:
        first = await rt.run(
            Agent(name="a", model=ScriptedModel([reply("Noted, teal.")])),
            "My favourite colour is teal.",
            scope=ANA,
        )
        later = ScriptedModel([call("memory_search", query="favourite colour"), reply("Teal.")])
        again = await rt.run(
            Agent(name="a", model=later), "What is my favourite colour?", scope=ANA
        )
        others = []
        for scope in (BOB, EVE):
            model = ScriptedModel([call("memory_search", query="favourite colour"), reply("?")])
            await rt.run(Agent(name="a", model=model), "What is my favourite colour?", scope=scope)
            others.append(model)
    assert first.status == again.status == "completed"
    assert again.thread_id != first.thread_id
    remembered = memory_message(later.requests[0])
    assert remembered is not None and "favourite colour is teal" in remembered.content
    assert "favourite colour is teal" in prompt_text(later.requests[1])  # the tool result
    for model in others:
        assert all("teal" not in prompt_text(request) for request in model.requests)
    assert memory.security_events == 0


@pytest.mark.parametrize("command", [MEMORY_SERVER, CLI_SERVER], ids=["module", "cli"])
async def test_mcp_provider_recalls_against_reverie_mcp_memory_over_stdio(
    command: list[str], store_url: str
) -> None:
    memory = MCPMemory(command=[*command, "--store", store_url], timeout_s=20)
    await recall_scenario(memory)


async def test_reverie_mcp_memory_reports_reverie_version_in_server_info(store_url: str) -> None:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=CLI_SERVER[0], args=[*CLI_SERVER[1:], "--store", store_url]
    )
    async with asyncio.timeout(60), Client(params) as client:
        info = client.server_info
    assert info is not None
    assert info.name == "reverie-memory"
    assert info.version == reverie.__version__


@pytest.fixture
async def http_server(store_url: str) -> AsyncIterator[str]:
    """``reverie mcp-memory --http PORT --token-env MEM_TOKEN`` on a free port."""
    port = free_port()
    env = {**os.environ, "MEM_TOKEN": "http-secret-123"}
    proc = await asyncio.create_subprocess_exec(
        *MEMORY_SERVER,
        "--http",
        str(port),
        "--token-env",
        "MEM_TOKEN",
        "--store",
        store_url,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
    )
    try:
        async with asyncio.timeout(20):
            while True:
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


async def test_mcp_provider_recalls_over_streamable_http_with_a_bearer_credential(
    http_server: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("CLIENT_TOKEN", "http-secret-123")
    memory = MCPMemory(url=http_server, credential_env="CLIENT_TOKEN", timeout_s=20)
    await recall_scenario(memory)
    assert "http-secret-123" not in caplog.text


async def test_http_without_a_credential_refuses_to_start_unless_no_auth_is_given(
    store_url: str,
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "MEM_TOKEN"}
    refused = await asyncio.create_subprocess_exec(
        *CLI_SERVER,
        "--http",
        str(port),
        "--store",
        store_url,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(30):
        _, err = await refused.communicate()
    message = err.decode()
    assert refused.returncode == 2
    assert "every tenant" in message and "--token-env" in message and "--no-auth" in message

    opened = await asyncio.create_subprocess_exec(
        *CLI_SERVER,
        "--http",
        str(port),
        "--no-auth",
        "--store",
        store_url,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert opened.stderr is not None
        async with asyncio.timeout(30):
            warning = (await opened.stderr.readline()).decode()
            while True:
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                except OSError:
                    await asyncio.sleep(0.05)
                    continue
                writer.close()
                await writer.wait_closed()
                break
            async with httpx.AsyncClient() as client:
                response = await client.post(f"http://127.0.0.1:{port}/mcp", json={})
    finally:
        opened.terminate()
        await opened.wait()
    assert "WITHOUT a credential" in warning and "every tenant" in warning
    assert response.status_code != 401


async def test_http_server_refuses_requests_without_the_token(
    http_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.post(http_server, json={})
    assert response.status_code == 401
    monkeypatch.setenv("CLIENT_TOKEN", "wrong")
    wrong = MCPMemory(url=http_server, credential_env="CLIENT_TOKEN", timeout_s=5)
    try:
        result = await wrong.read_long_term(ANA, "anything", 5)
    finally:
        await wrong.aclose()
    assert isinstance(result, Unavailable)


async def test_server_rows_carry_their_scope_fields(store_url: str) -> None:
    from reverie.store import open_store

    store = open_store(store_url)
    await store.open()
    try:
        from datetime import date

        await store.append_log(ANA, date(2025, 1, 2), "user: zebra facts")  # type: ignore[attr-defined]
        await store.append_log(BOB, date(2025, 1, 2), "user: zebra secrets")  # type: ignore[attr-defined]
    finally:
        await store.close()
    memory = MCPMemory(command=[*MEMORY_SERVER, "--store", store_url], timeout_s=20)
    try:
        result = await memory.read_long_term(ANA, "zebra", 10)
    finally:
        await memory.aclose()
    assert isinstance(result, Snippets)
    assert [s.text for s in result.items] == ["user: zebra facts"]
    assert all(s.scope == ANA for s in result.items)


async def test_serve_over_http_without_a_token_is_a_usage_error(tmp_path: Path) -> None:
    from reverie.errors import UsageError
    from reverie.memory.mcp_server import serve
    from reverie.store import SQLiteStore

    store = SQLiteStore(tmp_path / "memory.db")
    await store.open()
    try:
        with pytest.raises(UsageError, match="--no-auth"):
            await serve(store, http_port=free_port())
    finally:
        await store.close()
