"""A wave whose calls replay harmlessly settles with no step commit of its own (docs/durability.md).

Its ``BeforeSideEffect`` checkpoint resumes it, so its results ride the next step commit (the
next wave's admit, or the Final one) and a read of the input queue stands in for the settle
commit's receipt. What a settle commit guaranteed still holds: steering sent while the wave runs
reaches the next model call, a stop or a durable cancel is seen before it, and a crash after
the wave runs it again from its admit checkpoint, with every row once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from reverie import Agent, Runtime, Scope, tool
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.store.memory import MemoryStore
from reverie.store.sqlite import SQLiteStore
from reverie.testing import ScriptedModel, call, calls, reply
from runtime.runtime_support import STARTUP_S, CountingStore, Held

SCOPE = Scope(tenant="acme", user="ana")


def backend(kind: str, tmp_path: Path) -> Any:
    return MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "waves.db")


def tool_texts(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if m.role == "tool"]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_steering_sent_while_a_harmless_wave_runs_reaches_the_next_model_call(
    kind: str, tmp_path: Path
) -> None:
    held = Held()
    requests: list[ModelRequest] = []

    def script(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return reply("done") if tool_texts(request) else call("look", n=1)

    agent = Agent(name="steered", model=ScriptedModel(script), tools=[held.tool])
    async with Runtime(backend(kind, tmp_path)) as rt:
        handle = await rt.start(agent, "go", scope=SCOPE)
        await asyncio.wait_for(held.running.wait(), STARTUP_S)
        await handle.steer("also mind X")
        held.release.set()
        result = await handle.result()
        items = await rt.runs.thread_items(result.thread_id)
    assert result.status == "completed"
    assert len(requests) == 2
    assert [m.content for m in requests[1].messages if m.role == "user"] == ["go", "also mind X"]
    assert [i.content for i in items if i.role == "user"] == ["go", "also mind X"]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_stop_requested_while_a_harmless_wave_runs_goes_to_the_finalizer(
    kind: str, tmp_path: Path
) -> None:
    held = Held()
    requests: list[ModelRequest] = []

    def script(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return reply("summary") if request.tools is None else call("look", n=len(requests))

    agent = Agent(name="stopped", model=ScriptedModel(script), tools=[held.tool])
    async with Runtime(backend(kind, tmp_path)) as rt:
        handle = await rt.start(agent, "go", scope=SCOPE)
        await asyncio.wait_for(held.running.wait(), STARTUP_S)
        await handle.request_graceful_stop("host")
        held.release.set()
        result = await handle.result()
    assert (result.status, getattr(result.exit, "reason", None)) == ("completed", "host")
    # The next model call is the finalizer's (no tools), with the wave's result in it.
    assert [r.tools is None for r in requests] == [False, True]
    assert tool_texts(requests[1]) == ["saw 1"]
    assert held.runs == 1


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_durable_cancel_recorded_while_a_harmless_wave_runs_stops_the_next_model_call(
    kind: str, tmp_path: Path
) -> None:
    held = Held()
    requests: list[ModelRequest] = []

    def script(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return reply("done") if tool_texts(request) else call("look", n=1)

    store = backend(kind, tmp_path)
    agent = Agent(name="cancelled", model=ScriptedModel(script), tools=[held.tool])
    async with Runtime(store) as rt:
        handle = await rt.start(agent, "go", scope=SCOPE)
        await asyncio.wait_for(held.running.wait(), STARTUP_S)
        # As another process would: the durable request and its input, no in-process token.
        await store.request_cancel(handle.run_id)
        await store.enqueue_input(handle.run_id, "cancel", {"reason": "elsewhere"}, input_id="c1")
        held.release.set()
        result = await handle.result()
        items = await rt.runs.thread_items(result.thread_id)
    assert (result.status, getattr(result.exit, "reason", None)) == ("cancelled", "elsewhere")
    assert len(requests) == 1  # the read before the next model call saw the cancel
    assert [(i.role, i.content) for i in items if i.role != "assistant"] == [
        ("user", "go"),
        ("tool", "saw 1"),
    ]


class HangingSecondCall:
    """A model whose second request never answers: the segment is shut down under it."""

    def __init__(self) -> None:
        self.second_asked = asyncio.Event()
        self.requests: list[ModelRequest] = []

    async def answer(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if len(self.requests) == 1:
            return calls(("look", {"n": 1}), ("look", {"n": 2}))
        self.second_asked.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_crash_after_a_harmless_wave_runs_it_again_from_its_admit_checkpoint(
    kind: str, tmp_path: Path
) -> None:
    runs: list[int] = []

    @tool(effects={"read"}, idempotent=True)
    def look(n: int) -> str:
        """Look at n."""
        runs.append(n)
        return f"saw {n}"

    store = backend(kind, tmp_path)
    hanging = HangingSecondCall()
    first = Agent(name="looker", model=ScriptedModel(hanging.answer), tools=[look])
    rt = Runtime(store)
    await rt.__aenter__()
    handle = await rt.start(first, "go", scope=SCOPE)
    await asyncio.wait_for(hanging.second_asked.wait(), STARTUP_S)
    checkpoint = await store.load_checkpoint(handle.run_id)
    durable = [i.role for i in await store.thread_items(handle.thread_id)]
    await rt.aclose()  # the segment dies during the model call that followed the wave
    assert checkpoint is not None and checkpoint.kind == "BeforeSideEffect"
    assert runs == [1, 2]
    assert durable == ["user", "assistant"]  # the wave's results were not written yet

    resumed: list[ModelRequest] = []

    def after(request: ModelRequest) -> ModelResponse:
        resumed.append(request)
        return reply("done")

    again = Agent(name="looker", model=ScriptedModel(after), tools=[look])
    async with Runtime(store, agents=[again]) as fresh:
        [result] = await fresh.recover()
        rows = await fresh.store.thread_items(handle.thread_id)
    assert (result.run_id, result.status, result.text) == (handle.run_id, "completed", "done")
    assert runs == [1, 2, 1, 2]  # the wave ran again: nothing of its first run was durable
    assert [tool_texts(r) for r in resumed] == [["saw 1", "saw 2"]]
    assert [(r.role, r.content) for r in rows] == [
        ("user", "go"),
        ("assistant", ""),
        ("tool", "saw 1"),
        ("tool", "saw 2"),
        ("assistant", "done"),
    ]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_wave_with_one_call_that_must_not_repeat_settles_with_its_own_commit(
    kind: str, tmp_path: Path
) -> None:
    @tool(effects=set())
    def peek(n: int) -> int:
        """Return n."""
        return n

    @tool(effects={"write"})
    def send(n: int) -> int:
        """Send n (not safe to repeat)."""
        return n

    def script(request: ModelRequest) -> ModelResponse:
        if tool_texts(request):
            return reply("done")
        return calls(("peek", {"n": 1}), ("send", {"n": 2}))

    store = CountingStore(backend(kind, tmp_path))
    agent = Agent(name="mixed", model=ScriptedModel(script), tools=[peek, send])
    async with Runtime(store) as rt:
        result = await rt.run(agent, "go", scope=SCOPE)
    assert result.status == "completed"
    # BeforeModel, admit, settle (BeforeModel), Final: the wave is not settled later.
    assert store.counts["commit_step"] == 4
    assert store.counts["poll_inputs"] == 0


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_harmless_waves_results_ride_the_admit_of_a_gated_wave_and_survive_its_approval(
    kind: str, tmp_path: Path
) -> None:
    looked: list[int] = []
    sent: list[str] = []

    @tool(effects=set())
    def look(n: int) -> str:
        """Look at n."""
        looked.append(n)
        return f"saw {n}"

    @tool(effects={"write"}, needs_approval=True)
    def send(to: str) -> str:
        """Send (a person approves it first)."""
        sent.append(to)
        return f"sent to {to}"

    def script(request: ModelRequest) -> ModelResponse:
        done = tool_texts(request)
        if not done:
            return call("look", n=1)
        return call("send", to="bob") if len(done) == 1 else reply("all done")

    store = backend(kind, tmp_path)
    agent = Agent(name="gated", model=ScriptedModel(script), tools=[look, send])
    async with Runtime(store) as rt:
        blocked = await rt.run(agent, "go", scope=SCOPE)
        assert blocked.status == "blocked" and blocked.gate is not None
        # The pure wave had no commit of its own: its row rode the gated wave's admit commit.
        durable = [(i.role, i.content) for i in await store.thread_items(blocked.thread_id)]
        assert ("tool", "saw 1") in durable
        result = await rt.approve(blocked.gate.ref)
        rows = await rt.runs.thread_items(result.thread_id)
    assert (result.status, result.text) == ("completed", "all done")
    assert (looked, sent) == ([1], ["bob"])
    assert [(r.role, r.content) for r in rows if r.role != "assistant"] == [
        ("user", "go"),
        ("tool", "saw 1"),
        ("tool", "sent to bob"),
    ]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_follow_up_sent_while_a_harmless_wave_runs_is_delivered_once_after_the_reply(
    kind: str, tmp_path: Path
) -> None:
    held = Held()
    requests: list[ModelRequest] = []

    def script(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        users = [m.content for m in request.messages if m.role == "user"]
        if not tool_texts(request):
            return call("look", n=1)
        return reply("and more") if "more please" in users else reply("first answer")

    agent = Agent(name="followed", model=ScriptedModel(script), tools=[held.tool])
    async with Runtime(backend(kind, tmp_path)) as rt:
        handle = await rt.start(agent, "go", scope=SCOPE)
        await asyncio.wait_for(held.running.wait(), STARTUP_S)
        await handle.follow_up("more please")
        held.release.set()
        result = await handle.result()
        items = await rt.runs.thread_items(result.thread_id)
    assert (result.status, result.text) == ("completed", "and more")
    # The follow-up waits for the reply (it is not steering), then the run goes on once.
    assert [m.content for m in requests[1].messages if m.role == "user"] == ["go"]
    assert [i.content for i in items if i.role == "user"] == ["go", "more please"]
    assert held.runs == 1
