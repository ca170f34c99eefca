"""Many concurrent runs on a few PostgreSQL connections (benchmarks/concurrency.py has the figures).

A :class:`PostgresStore` runs at most ``max_connections`` operations at once; the rest wait their
turn (no timeout), so a runtime with far more runs in flight than connections neither deadlocks
nor fails with an exhausted pool. Needs ``REVERIE_TEST_POSTGRES_URL``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import pytest

from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.store.postgres import PostgresStore, temporary_schema
from reverie.testing import ScriptedModel, call, reply

POSTGRES_URL = os.environ.get("REVERIE_TEST_POSTGRES_URL", "")
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        not POSTGRES_URL, reason="set REVERIE_TEST_POSTGRES_URL; .ci/run starts a server"
    ),
]
RUNS = 40
STEPS = 2


@pytest.fixture
async def url() -> AsyncIterator[str]:
    async with temporary_schema(POSTGRES_URL, prefix="reverie_test") as scoped:
        yield scoped


@tool(effects=set())
async def bump(n: int) -> int:
    """Return n + 1."""
    return n + 1


async def test_far_more_concurrent_runs_than_connections_all_complete(url: str) -> None:
    entered = 0
    everyone = asyncio.Event()

    async def answer(request: ModelRequest) -> ModelResponse:
        nonlocal entered
        done = sum(1 for m in request.messages if m.role == "tool")
        if done == 0:
            # Every run reaches its first model call before any goes on: all are in flight.
            entered += 1
            if entered == RUNS:
                everyone.set()
            await everyone.wait()
        return call("bump", n=done) if done < STEPS else reply("done")

    agent = Agent(
        name="many", model=ScriptedModel(answer), tools=[bump], limits=Limits(max_iterations=9)
    )
    store = PostgresStore(url, max_connections=2)
    async with Runtime(store, max_concurrent_runs=RUNS) as rt:
        handles = await asyncio.gather(
            *(rt.start(agent, "go", scope=Scope(tenant="t", user=f"u{i}")) for i in range(RUNS))
        )
        results = await asyncio.gather(*(h.result() for h in handles))
    assert [r.status for r in results] == ["completed"] * RUNS
    assert {r.usage.model_calls for r in results} == {STEPS + 1}
