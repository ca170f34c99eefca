"""Shutdown and start-up of ``run_server`` (what ``reverie serve`` runs), with a real SIGTERM:
open streams drain for the configured grace, then their turns are cancelled as ``server
shutdown``; at start the app resumes runs whose worker died."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from reverie import Agent, Runtime, tool
from reverie.core.messages import ModelRequest
from reverie.serve import create_app, run_server
from reverie.serve.context import ServeContext
from reverie.store.memory import MemoryStore
from reverie.testing import ScriptedModel, call, reply
from serve.serve_support import ANA, ANA_TOKEN, TIMEOUT_S, TOKENS

pytestmark = pytest.mark.skipif(
    sys.platform == "win32", reason="SIGTERM to this process needs POSIX signals"
)

REPLY = "Done waiting."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Gate:
    """A tool that blocks until released, saying when it started."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    def agent(self) -> Agent:
        @tool(effects=set())
        async def wait_here() -> str:
            """Wait."""
            self.entered.set()
            await self.release.wait()
            return "released"

        model = ScriptedModel([call("wait_here"), reply(REPLY)])
        return Agent(name="slow", model=model, instructions="Wait.", tools=[wait_here])


@contextlib.asynccontextmanager
async def serving_in_foreground(
    rt: Runtime, agent: Agent, *, grace_s: float, recover: bool = False
) -> AsyncIterator[tuple[str, ServeContext, asyncio.Task[None]]]:
    """``run_server`` in this loop (main thread: it installs its SIGTERM handler)."""
    app = create_app(
        rt, agents={agent.name: agent}, tokens=TOKENS, shutdown_grace_s=grace_s, recover=recover
    )
    port = free_port()
    task = asyncio.create_task(run_server(app, host="127.0.0.1", port=port, log_level="warning"))
    try:
        async with asyncio.timeout(TIMEOUT_S):
            while True:
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                except OSError:
                    await asyncio.sleep(0.02)
                    continue
                writer.close()
                await writer.wait_closed()
                break
        yield f"http://127.0.0.1:{port}", app.state.reverie, task
    finally:
        if not task.done():
            os.kill(os.getpid(), signal.SIGTERM)
        async with asyncio.timeout(TIMEOUT_S * 2):
            await task


async def stream_completion(url: str, lines: list[str]) -> None:
    body = {"model": "slow", "messages": [{"role": "user", "content": "wait"}], "stream": True}
    headers = {"authorization": f"Bearer {ANA_TOKEN}"}
    async with (
        httpx.AsyncClient(base_url=url, headers=headers, timeout=TIMEOUT_S * 2) as client,
        client.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        with contextlib.suppress(httpx.HTTPError):
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    lines.append(line[len("data: ") :])


def text_of(lines: list[str]) -> str:
    chunks = [json.loads(d) for d in lines if d != "[DONE]"]
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


async def test_on_sigterm_an_open_stream_drains_within_the_grace_and_its_run_completes() -> None:
    gate = Gate()
    lines: list[str] = []
    async with Runtime.open(":memory:") as rt:
        async with serving_in_foreground(rt, gate.agent(), grace_s=60) as (url, ctx, server):
            client = asyncio.create_task(stream_completion(url, lines))
            await asyncio.wait_for(gate.entered.wait(), TIMEOUT_S)
            os.kill(os.getpid(), signal.SIGTERM)
            # The server noticed the shutdown and the stream is still open: let the run end.
            await asyncio.wait_for(ctx.stopping.wait(), TIMEOUT_S)
            assert not server.done() and not client.done()
            gate.release.set()
            await asyncio.wait_for(client, TIMEOUT_S)
        [run] = await rt.store.list_runs(scope=ANA)
    assert lines[-1] == "[DONE]" and text_of(lines) == REPLY
    assert run.status == "completed"


async def test_after_the_grace_a_streamed_turn_is_cancelled_as_server_shutdown() -> None:
    gate = Gate()
    lines: list[str] = []
    async with Runtime.open(":memory:") as rt:
        async with serving_in_foreground(rt, gate.agent(), grace_s=0.2) as (url, _, server):
            client = asyncio.create_task(stream_completion(url, lines))
            await asyncio.wait_for(gate.entered.wait(), TIMEOUT_S)
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.wait_for(server, TIMEOUT_S * 2)  # the tool is never released
        await asyncio.wait_for(client, TIMEOUT_S)
        [run] = await rt.store.list_runs(scope=ANA)
        handle = rt.attach(run.run_id)
        if handle is not None:
            await asyncio.wait_for(handle.result(), TIMEOUT_S)
        result = await rt.get_result(run.run_id)
    assert "[DONE]" not in lines
    assert result.status == "cancelled"
    assert result.exit.reason == "server shutdown"  # type: ignore[union-attr]


async def test_the_app_resumes_runs_whose_worker_died_when_it_starts() -> None:
    store = MemoryStore()
    in_call = asyncio.Event()
    never = asyncio.Event()

    async def stuck(request: ModelRequest) -> Any:
        in_call.set()
        await never.wait()
        return reply("unreachable")

    # A server process ran the turn and died: its lease names a process that is gone.
    first = Runtime(store)
    await first.__aenter__()
    handle = await first.start(Agent(name="slow", model=ScriptedModel(stuck)), "go", scope=ANA)
    await in_call.wait()
    await first.aclose()
    dead = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await dead.wait()
    owner = f"{socket.gethostname()}:{dead.pid}:cafe"
    await store.acquire_lease(handle.run_id, owner, ttl_s=300, now=time.time(), force=True)

    answered = asyncio.Event()

    def recovered(request: ModelRequest) -> Any:
        answered.set()
        return reply("recovered")

    agent = Agent(name="slow", model=ScriptedModel(recovered))
    async with Runtime(store) as rt:
        async with serving_in_foreground(rt, agent, grace_s=1, recover=True):
            await asyncio.wait_for(answered.wait(), TIMEOUT_S)
            resumed = rt.attach(handle.run_id)
            if resumed is not None:
                await asyncio.wait_for(resumed.result(), TIMEOUT_S)
        result = await rt.get_result(handle.run_id)
    assert result.text == "recovered"
