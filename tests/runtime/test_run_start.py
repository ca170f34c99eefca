"""A run started here begins its first segment in the transaction that starts it.

``Runtime.start`` of a run this runtime advances now (a slot of ``max_concurrent_runs`` free)
makes one store operation, ``start_segment``: the run is durable, ``running`` and leased by this
runtime before the handle is returned, and its segment makes no ``begin_segment``. A run that
waits for a slot starts ``queued`` and unleased, as before; every rule of a run's start holds
on both paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
from pathlib import Path
from typing import Any

import pytest

from reverie import Agent, Runtime, Scope
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.errors import ThreadBusy
from reverie.store.memory import MemoryStore
from reverie.store.sqlite import SQLiteStore
from reverie.testing import ScriptedModel, reply
from runtime.runtime_support import CountingStore
from runtime.test_runtime_recover import dead_pid

SCOPE = Scope(tenant="acme", user="ana")
WAIT_S = 30.0


def backend(kind: str, tmp_path: Path) -> Any:
    return MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "start.db")


class Gate:
    """A model that answers once :attr:`go` is set, saying when it was asked."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.go = asyncio.Event()

    async def __call__(self, request: ModelRequest) -> ModelResponse:
        self.asked.set()
        await self.go.wait()
        return reply("done")


class Killed(BaseException):
    """Not an Exception: nothing in the runtime turns it into a result (a dying process)."""


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_run_started_here_is_running_and_leased_before_start_returns(
    kind: str, tmp_path: Path
) -> None:
    store = CountingStore(backend(kind, tmp_path))
    model = Gate()
    async with Runtime(store) as rt:
        handle = await rt.start(Agent(name="a", model=ScriptedModel(model)), "go", scope=SCOPE)
        run = await store.get_run(handle.run_id)
        assert (run.status, run.fence) == ("running", 1)
        assert run.lease_owner is not None and run.lease_expires_at is not None
        model.go.set()
        result = await handle.result()
    assert result.status == "completed"
    assert (store.counts["start_segment"], store.counts["start_run"]) == (1, 0)
    assert store.counts["begin_segment"] == 0


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_run_started_with_no_slot_free_starts_queued_and_unleased(
    kind: str, tmp_path: Path
) -> None:
    store = CountingStore(backend(kind, tmp_path))
    first, second = Gate(), Gate()
    async with Runtime(store, max_concurrent_runs=1) as rt:
        a = await rt.start(Agent(name="a", model=ScriptedModel(first)), "go", scope=SCOPE)
        await asyncio.wait_for(first.asked.wait(), WAIT_S)
        b = await rt.start(Agent(name="b", model=ScriptedModel(second)), "go", scope=SCOPE)
        waiting = await store.get_run(b.run_id)
        assert (waiting.status, waiting.lease_owner) == ("queued", None)
        first.go.set()
        second.go.set()
        results = [await a.result(), await b.result()]
    assert [r.status for r in results] == ["completed", "completed"]
    starts = ("start_segment", "start_run", "begin_segment", "end_segment")
    assert [store.counts[name] for name in starts] == [1, 1, 1, 2]


async def test_a_start_refused_for_a_busy_thread_gives_its_slot_back() -> None:
    store = CountingStore(MemoryStore())
    active, later = Gate(), Gate()
    async with Runtime(store, max_concurrent_runs=2) as rt:
        a = await rt.start(Agent(name="a", model=ScriptedModel(active)), "go", scope=SCOPE)
        await asyncio.wait_for(active.asked.wait(), WAIT_S)
        agent = Agent(name="b", model=ScriptedModel([reply("never")]))
        for _ in range(3):  # each refusal gives its slot back, or the third start would wait
            with pytest.raises(ThreadBusy):
                await rt.start(agent, "again", scope=SCOPE, thread_id=a.thread_id)
        c = await rt.start(Agent(name="c", model=ScriptedModel(later)), "go", scope=SCOPE)
        started = await store.get_run(c.run_id)
        assert started.status == "running" and started.lease_owner is not None
        active.go.set()
        later.go.set()
        assert [(await h.result()).status for h in (a, c)] == ["completed", "completed"]
    assert store.counts["start_run"] == store.counts["begin_segment"] == 0


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_repeated_keyed_start_returns_the_same_run_and_starts_no_second(
    kind: str, tmp_path: Path
) -> None:
    store = backend(kind, tmp_path)
    model = Gate()
    agent = Agent(name="a", model=ScriptedModel(model))
    async with Runtime(store) as rt:
        first = await rt.start(agent, "go", scope=SCOPE, idempotency_key="k1")
        joined = await rt.start(agent, "go", scope=SCOPE, idempotency_key="k1")
        assert (joined.run_id, joined.thread_id) == (first.run_id, first.thread_id)
        model.go.set()
        result = await first.result()
        assert (await joined.result()).run_id == result.run_id
        again = await rt.start(agent, "go", scope=SCOPE, idempotency_key="k1")
        assert (await again.result()).text == "done"
        runs = await store.list_runs(scope=SCOPE)
    assert [r.run_id for r in runs] == [first.run_id]
    assert [r.status for r in runs] == ["completed"]


class _DiesAfterTheStart:
    """A store whose process 'dies' once the run's start (with its segment) has committed."""

    def __init__(self, inner: MemoryStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if name != "start_segment":
            return target

        async def dies(*args: Any, **kwargs: Any) -> Any:
            await target(*args, **kwargs)
            raise Killed("after the run started, before its handle")

        return dies


async def test_a_run_whose_starter_died_right_after_starting_it_is_recovered() -> None:
    store = MemoryStore()
    rt = Runtime(_DiesAfterTheStart(store))
    await rt.__aenter__()
    agent = Agent(name="a", model=ScriptedModel([reply("3")]))
    with pytest.raises(Killed):
        await rt.run(agent, "go", scope=SCOPE)
    with contextlib.suppress(Killed):
        await rt.aclose()
    [started] = await store.list_runs(statuses=["running"])
    assert started.lease_owner is not None
    # Its starter is a process of this host that no longer exists.
    owner = f"{socket.gethostname()}:{dead_pid()}:deadbeef"
    store._runs[started.run_id] = dataclasses.replace(started, lease_owner=owner)
    async with Runtime(store, agents=[agent]) as fresh:
        results = await fresh.recover()
    assert [(r.run_id, r.status, r.text) for r in results] == [(started.run_id, "completed", "3")]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_runtime_closed_while_a_run_it_started_waits_leaves_the_run_free_to_resume(
    kind: str, tmp_path: Path
) -> None:
    store = backend(kind, tmp_path)
    agent = Agent(name="a", model=ScriptedModel(Gate()))  # never answers
    async with Runtime(store) as rt:
        handle = await rt.start(agent, "go", scope=SCOPE)
    async with Runtime(store) as fresh:
        run = await fresh.store.get_run(handle.run_id)
        assert (run.status, run.lease_owner) == ("running", None)
        again = Agent(name="a", model=ScriptedModel([reply("resumed")]))
        fresh.register(again)
        result = await fresh.resume(handle.run_id)
    assert (result.status, result.text) == ("completed", "resumed")
