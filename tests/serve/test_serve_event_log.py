"""``GET /v1/runs/{id}/events`` from the store's run event log: SSE ids, ``Last-Event-ID``
resume, earlier segments replayable, and a run advanced by another process streamed live."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest

from reverie import Agent, Runtime, tool
from reverie.serve import background_server, create_app
from reverie.testing import ScriptedModel, call, reply
from serve.serve_support import ANA, ANA_TOKEN, TIMEOUT_S, TOKENS, serving
from serve.test_serve_runs import mailer

POSTGRES_URL = os.environ.get("REVERIE_TEST_POSTGRES_URL", "")


async def sse_events(
    client: httpx.AsyncClient,
    run_id: str,
    *,
    last_event_id: str | None = None,
    stop_after: int | None = None,
) -> list[tuple[str | None, dict[str, Any]]]:
    """``(id, event)`` pairs of the run's event stream (until it ends, or ``stop_after``)."""
    headers = {} if last_event_id is None else {"last-event-id": last_event_id}
    out: list[tuple[str | None, dict[str, Any]]] = []
    current: str | None = None
    async with (
        asyncio.timeout(TIMEOUT_S),
        client.stream("GET", f"/v1/runs/{run_id}/events", headers=headers) as response,
    ):
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if line.startswith("id: "):
                current = line[len("id: ") :]
            elif line.startswith("data: "):
                out.append((current, json.loads(line[len("data: ") :])))
                current = None
                if stop_after is not None and len(out) >= stop_after:
                    break
    return out


async def test_events_carry_ids_and_a_client_resumes_after_last_event_id() -> None:
    agent = Agent(name="helper", model=ScriptedModel([reply("done and dusted")]))
    async with serving(agent) as srv:
        result = await srv.rt.run(agent, "hi", scope=ANA)
        everything = await sse_events(srv.ana, result.run_id)
        first = await sse_events(srv.ana, result.run_id, stop_after=2)
        rest = await sse_events(srv.ana, result.run_id, last_event_id=first[-1][0])
        bad = await srv.ana.get(
            f"/v1/runs/{result.run_id}/events", headers={"last-event-id": "1e3"}
        )

    ids = [int(i) for i, _ in everything if i is not None]
    assert ids == list(range(1, len(everything) + 1))
    assert first + rest == everything
    assert everything[-1][1]["kind"] == "run_finished"
    assert bad.status_code == 400


async def test_events_of_earlier_segments_of_a_resumed_run_are_replayable() -> None:
    async with serving(mailer([])) as srv:
        started = (await srv.ana.post("/v1/runs", json={"agent": "mailer", "input": "mail"})).json()
        run_id = started["run_id"]
        blocked = await sse_events(srv.ana, run_id)
        [gate] = (await srv.ana.get("/v1/gates")).json()["data"]
        await srv.ana.post(f"/v1/gates/{gate['ref']}/approve")
        latest = await sse_events(srv.ana, run_id)
        replayed = await sse_events(srv.ana, run_id, last_event_id="0")

    kinds = [e["kind"] for _, e in replayed]
    assert kinds.count("run_started") == 2 and kinds.count("run_finished") == 2
    assert [e["status"] for _, e in replayed if e["kind"] == "run_finished"] == [
        "blocked",
        "completed",
    ]
    assert replayed == blocked + latest  # a new stream starts at the latest segment
    assert latest[0][1] == {"kind": "run_started", "run_id": run_id, "resumed": True}


def _sqlite(tmp: Path) -> AbstractAsyncContextManager[str]:
    @contextlib.asynccontextmanager
    async def url() -> AsyncIterator[str]:
        yield f"sqlite:///{tmp / 'shared.db'}"

    return url()


def _postgres(tmp: Path) -> AbstractAsyncContextManager[str]:
    from reverie.store.postgres import temporary_schema

    return temporary_schema(POSTGRES_URL, prefix="reverie_events")


@pytest.mark.parametrize(
    "shared_url",
    [
        pytest.param(_sqlite, id="sqlite"),
        pytest.param(
            _postgres,
            id="postgres",
            marks=[
                pytest.mark.postgres,
                pytest.mark.skipif(not POSTGRES_URL, reason="set REVERIE_TEST_POSTGRES_URL"),
            ],
        ),
    ],
)
async def test_a_run_advanced_by_another_runtime_streams_live_from_the_store(
    shared_url: Callable[[Path], AbstractAsyncContextManager[str]], tmp_path: Path
) -> None:
    release = asyncio.Event()
    entered = asyncio.Event()

    @tool(effects={"read"})
    async def lookup(key: str) -> str:
        """Look a key up."""
        entered.set()
        await release.wait()
        return f"value of {key}"

    def agent() -> Agent:
        model = ScriptedModel([call("lookup", key="k"), reply("The value is known.")])
        return Agent(name="waiter", model=model, tools=[lookup])

    worker_agent = agent()
    headers = {"authorization": f"Bearer {ANA_TOKEN}"}
    # The worker: its own runtime and store connection; nothing shared but the database.
    async with (
        shared_url(tmp_path) as url,
        Runtime.open(url, agents=[worker_agent]) as worker,
        Runtime.open(url) as served,
    ):
        app = create_app(served, agents={"waiter": agent()}, tokens=TOKENS)
        async with (
            background_server(app) as base,
            httpx.AsyncClient(base_url=base, headers=headers) as client,
        ):
            handle = await worker.start(worker_agent, "look", scope=ANA)
            await asyncio.wait_for(entered.wait(), TIMEOUT_S)
            # Live: the events so far arrive while the worker's run is still in its tool.
            live = await sse_events(client, handle.run_id, stop_after=3)
            assert not release.is_set()
            release.set()
            rest = await sse_events(client, handle.run_id, last_event_id=live[-1][0])
            result = await handle.result()
            stored = await sse_events(client, handle.run_id, last_event_id="0")

    kinds = [e["kind"] for _, e in live + rest]
    assert live + rest == stored
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert "tool_started" in kinds and "tool_finished" in kinds
    assert result.status == "completed"
