"""Inputs written by another writer reach a running agent at its next boundary.

The runtime advancing a run learns of its inputs from its own store: a step commit's receipt,
or the read of the queue that stands in for it after a harmless wave (docs/durability.md).
Both must see every input committed before them, whoever committed it: another process on the
same SQLite file (the CLI, a second worker), another store of this process on that file, a
client of the same PostgreSQL database. Nothing this process wrote itself hints that it is
there, so a shortcut that only knows this process's own writes is caught here.

Every test holds a harmless tool call open, has the other writer send while it is held, then
lets it go: what was sent must reach the very next model call (or stop it), exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from reverie import Agent, RunResult, Runtime, Scope
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.store.base import TranscriptItem
from reverie.testing import ScriptedModel, call, reply
from runtime.runtime_support import (
    NEEDS_POSTGRES,
    STARTUP_S,
    Held,
    postgres_database,
    sqlite_database,
)

SCOPE = Scope(tenant="acme", user="ana")

Send = Callable[[str, str, str], Awaitable[None]]
"""``send(run_id, what, text)``: the other writer sends ``what`` (steering, follow_up, cancel,
stop) to the run, and returns once it is committed."""


async def _send_with(rt: Runtime, run_id: str, what: str, text: str) -> None:
    if what in ("steering", "follow_up"):
        await rt.send_input(run_id, what, text)  # type: ignore[arg-type]
    elif what == "cancel":
        await rt.cancel(run_id, reason=text)
    else:
        await rt.request_graceful_stop(run_id, "host")


@contextlib.asynccontextmanager
async def _other_store_here(url: str) -> AsyncIterator[Send]:
    """A second store on the same database, in this process (its own connections)."""
    async with Runtime.open(url) as other:

        async def send(run_id: str, what: str, text: str) -> None:
            await _send_with(other, run_id, what, text)

        yield send


_CHILD = """
import asyncio, sys
from reverie import Runtime
url, run_id, what, text = sys.argv[1:5]
async def main():
    async with Runtime.open(url) as rt:
        if what in ("steering", "follow_up"):
            await rt.send_input(run_id, what, text)
        elif what == "cancel":
            await rt.cancel(run_id, reason=text)
        else:
            await rt.request_graceful_stop(run_id, "host")
asyncio.run(main())
"""


@contextlib.asynccontextmanager
async def _other_process(url: str) -> AsyncIterator[Send]:
    """Another process: a fresh interpreter opens a runtime on the file and sends."""

    async def send(run_id: str, what: str, text: str) -> None:
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _CHILD,
            url,
            run_id,
            what,
            text,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(child.communicate(), STARTUP_S)
        assert child.returncode == 0, err.decode()

    yield send


Writer = Callable[[str], contextlib.AbstractAsyncContextManager[Send]]


WRITERS = [
    pytest.param(sqlite_database, _other_store_here, id="sqlite-another-store"),
    pytest.param(
        sqlite_database, _other_process, id="sqlite-another-process", marks=[pytest.mark.slow]
    ),
    pytest.param(
        postgres_database, _other_store_here, id="postgres-another-store", marks=NEEDS_POSTGRES
    ),
]


def tool_texts(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if m.role == "tool"]


def user_texts(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if m.role == "user"]


Database = Callable[[Path], contextlib.AbstractAsyncContextManager[str]]


Script = Callable[[ModelRequest], ModelResponse]


async def sent_during_waves(
    database: Database,
    writer: Writer,
    tmp_path: Path,
    script: Script,
    sends: list[tuple[str, str]],
) -> tuple[list[ModelRequest], RunResult, list[TranscriptItem]]:
    """Run an agent whose calls are held; the other writer sends ``sends[k]`` while call k waits.

    Returns the requests the model saw, the result and the thread's rows.
    """
    held = Held()
    requests: list[ModelRequest] = []

    def recorded(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return script(request)

    agent = Agent(name="watched", model=ScriptedModel(recorded), tools=[held.tool])
    async with database(tmp_path) as url, Runtime.open(url) as rt, writer(url) as send:
        handle = await rt.start(agent, "go", scope=SCOPE)
        for what, text in sends:
            await held.wait_running()
            await send(handle.run_id, what, text)
            held.release.set()
        result = await asyncio.wait_for(handle.result(), STARTUP_S)
        items = await rt.runs.thread_items(result.thread_id)
    return requests, result, items


def look_once(request: ModelRequest) -> ModelResponse:
    return reply("done") if tool_texts(request) else call("look", n=1)


@pytest.mark.parametrize(("database", "writer"), WRITERS)
async def test_steering_from_another_writer_during_a_harmless_wave_reaches_the_next_model_call(
    database: Database, writer: Writer, tmp_path: Path
) -> None:
    requests, result, items = await sent_during_waves(
        database, writer, tmp_path, look_once, [("steering", "also mind X")]
    )
    assert result.status == "completed", result.exit
    assert [user_texts(r) for r in requests] == [["go"], ["go", "also mind X"]]
    assert [i.content for i in items if i.role == "user"] == ["go", "also mind X"]


@pytest.mark.parametrize(("database", "writer"), WRITERS)
async def test_steering_from_another_writer_at_every_step_reaches_each_next_model_call_once(
    database: Database, writer: Writer, tmp_path: Path
) -> None:
    steps = 4

    def look_steps(request: ModelRequest) -> ModelResponse:
        done = len(tool_texts(request))
        return reply("done") if done == steps else call("look", n=done + 1)

    notes = [f"note {k}" for k in range(1, steps + 1)]
    requests, result, items = await sent_during_waves(
        database, writer, tmp_path, look_steps, [("steering", note) for note in notes]
    )
    assert result.status == "completed", result.exit
    # The model call after step k has seen notes 1..k, each once.
    assert [user_texts(r) for r in requests] == [["go", *notes[:n]] for n in range(steps + 1)]
    assert [i.content for i in items if i.role == "user"] == ["go", *notes]


@pytest.mark.parametrize(("database", "writer"), WRITERS)
async def test_a_follow_up_from_another_writer_during_a_harmless_wave_is_answered_once(
    database: Database, writer: Writer, tmp_path: Path
) -> None:
    def followed(request: ModelRequest) -> ModelResponse:
        if not tool_texts(request):
            return call("look", n=1)
        return reply("and more") if "more please" in user_texts(request) else reply("first")

    requests, result, items = await sent_during_waves(
        database, writer, tmp_path, followed, [("follow_up", "more please")]
    )
    assert (result.status, result.text) == ("completed", "and more")
    # Not steering: the reply comes first, then the follow-up is answered, once.
    assert [user_texts(r) for r in requests] == [["go"], ["go"], ["go", "more please"]]
    assert [i.content for i in items if i.role == "user"] == ["go", "more please"]


@pytest.mark.parametrize(("database", "writer"), WRITERS)
async def test_a_cancel_from_another_writer_during_a_harmless_wave_stops_the_next_model_call(
    database: Database, writer: Writer, tmp_path: Path
) -> None:
    requests, result, _ = await sent_during_waves(
        database, writer, tmp_path, look_once, [("cancel", "from elsewhere")]
    )
    assert (result.status, getattr(result.exit, "reason", None)) == (
        "cancelled",
        "from elsewhere",
    )
    assert len(requests) == 1


@pytest.mark.parametrize(("database", "writer"), WRITERS)
async def test_a_graceful_stop_from_another_writer_during_a_harmless_wave_goes_to_the_finalizer(
    database: Database, writer: Writer, tmp_path: Path
) -> None:
    def until_stopped(request: ModelRequest) -> ModelResponse:
        return reply("summary") if request.tools is None else call("look", n=1)

    requests, result, _ = await sent_during_waves(
        database, writer, tmp_path, until_stopped, [("stop", "")]
    )
    assert (result.status, getattr(result.exit, "reason", None)) == ("completed", "host")
    # The very next model call is the finalizer's (no tools), with the wave's result in it.
    assert [r.tools is None for r in requests] == [False, True]
    assert tool_texts(requests[1]) == ["saw 1"]
