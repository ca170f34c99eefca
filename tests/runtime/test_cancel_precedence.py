"""Cancellation has precedence wherever it was sent from (DESIGN §5): a cancel sent by another
runtime on the same store while the last allowed iteration's tool runs ends the run
``cancelled``, as an in-process cancel does, never ``failed(iteration_limit)``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.core.exits import Cancelled
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.testing import ScriptedModel, call
from runtime.runtime_support import NEEDS_POSTGRES, STARTUP_S, postgres_database, sqlite_database

SCOPE = Scope(tenant="acme", user="ana")
Database = Callable[[Path], AbstractAsyncContextManager[str]]
MAX_ITERATIONS = 3


@pytest.mark.parametrize(
    "database",
    [
        pytest.param(sqlite_database, id="sqlite"),
        pytest.param(postgres_database, id="postgres", marks=NEEDS_POSTGRES),
    ],
)
@pytest.mark.parametrize("sender", ["here", "another_runtime"])
async def test_cancellation_has_precedence_over_the_iteration_cap_wherever_it_was_sent_from(
    database: Database, sender: str, tmp_path: Path
) -> None:
    last_started = asyncio.Event()
    release = asyncio.Event()

    @tool(effects={"read"})
    async def look(step: int) -> str:
        """Look at one more page."""
        if step == MAX_ITERATIONS - 1:  # the last iteration the cap allows
            last_started.set()
            await release.wait()
        return f"page {step}"

    def script(request: ModelRequest) -> ModelResponse:
        return call("look", step=sum(1 for m in request.messages if m.role == "tool"))

    agent = Agent(
        name="reader",
        model=ScriptedModel(script),
        tools=[look],
        limits=Limits(max_iterations=MAX_ITERATIONS),
        on_limit="fail",
    )
    async with database(tmp_path) as url, Runtime.open(url, agents=[agent]) as worker:
        handle = await worker.start(agent, "read everything", scope=SCOPE)
        await asyncio.wait_for(last_started.wait(), STARTUP_S)
        if sender == "here":
            await worker.cancel(handle.run_id, reason="the user left")
        else:
            async with Runtime.open(url, agents=[agent]) as other:
                await other.cancel(handle.run_id, reason="the user left")
        release.set()
        result = await asyncio.wait_for(handle.result(), STARTUP_S)
    assert result.status == "cancelled", result.exit
    assert isinstance(result.exit, Cancelled) and result.exit.reason == "the user left"
