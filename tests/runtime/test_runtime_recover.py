"""``Runtime.recover()``: runs whose worker died are resumed (DESIGN §6)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from reverie import Agent, Runtime, Scope, tool
from reverie.core.messages import ModelRequest
from reverie.store.memory import MemoryStore
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="acme", user="ana")


@tool(effects=set())
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


async def strand_a_run(store: MemoryStore) -> str:
    """Start a run, let it reach a model call, then stop its worker without cleanup."""
    in_call = asyncio.Event()
    never = asyncio.Event()

    async def stuck(request: ModelRequest) -> Any:
        if not any(m.role == "tool" for m in request.messages):
            return call("add", a=1, b=2)
        in_call.set()
        await never.wait()
        return reply("unreachable")

    rt = Runtime(store)
    await rt.__aenter__()
    handle = await rt.start(
        Agent(name="calc", model=ScriptedModel(stuck), tools=[add]), "go", scope=SCOPE
    )
    await in_call.wait()
    await rt.aclose()
    return handle.run_id


async def test_recover_resumes_a_run_whose_worker_process_is_gone() -> None:
    store = MemoryStore()
    run_id = await strand_a_run(store)
    # The lease now belongs to a process of this host that no longer exists (unexpired).
    owner = f"{socket.gethostname()}:{dead_pid()}:deadbeef"
    await store.acquire_lease(run_id, owner, ttl_s=300, now=time.time(), force=True)
    agent = Agent(name="calc", model=ScriptedModel([reply("3")]), tools=[add])
    async with Runtime(store, agents=[agent]) as rt:
        results = await rt.recover()
    assert [(r.run_id, r.status, r.text) for r in results] == [(run_id, "completed", "3")]


def zombie_pid() -> tuple[subprocess.Popen[bytes], int]:
    """A child that has exited but is not reaped yet (state Z): it still answers kill(pid, 0)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    status = Path(f"/proc/{proc.pid}/status")
    while "State:\tZ" not in status.read_text() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "State:\tZ" in status.read_text()
    return proc, proc.pid


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs procfs")
async def test_recover_takes_over_a_run_whose_worker_is_a_zombie_process() -> None:
    store = MemoryStore()
    run_id = await strand_a_run(store)
    proc, pid = zombie_pid()
    try:
        owner = f"{socket.gethostname()}:{pid}:deadbeef"
        await store.acquire_lease(run_id, owner, ttl_s=300, now=time.time(), force=True)
        agent = Agent(name="calc", model=ScriptedModel([reply("3")]), tools=[add])
        async with Runtime(store, agents=[agent]) as rt:
            results = await rt.recover()
    finally:
        proc.wait()
    assert [(r.run_id, r.status) for r in results] == [(run_id, "completed")]


async def test_recover_resumes_a_run_whose_lease_expired() -> None:
    store = MemoryStore()
    run_id = await strand_a_run(store)
    # A worker on another machine took it and vanished: its lease ran out an hour ago.
    await store.acquire_lease(run_id, "elsewhere:1:x", ttl_s=1, now=time.time() - 3600, force=True)
    agent = Agent(name="calc", model=ScriptedModel([reply("3")]), tools=[add])
    async with Runtime(store, agents=[agent]) as rt:
        results = await rt.recover()
    assert [r.status for r in results] == ["completed"]


async def test_recover_leaves_runs_held_by_a_live_worker_alone() -> None:
    store = MemoryStore()
    run_id = await strand_a_run(store)
    await store.acquire_lease(run_id, "elsewhere:1:x", ttl_s=300, now=time.time(), force=True)
    agent = Agent(name="calc", model=ScriptedModel([reply("3")]), tools=[add])
    async with Runtime(store, agents=[agent]) as rt:
        assert await rt.recover() == []
    assert (await store.get_run(run_id)).status == "running"


class _Killed(BaseException):
    """Not an Exception: nothing in the runtime turns it into a result (a dying process)."""


class _DiesBeforeTheLease:
    """A store whose process 'dies' (an uncaught BaseException) as the run's lease is taken."""

    def __init__(self, inner: MemoryStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "start_segment":
            # Not offered: runs start queued and unleased (as with no slot free, or a store
            # that does not start a segment with its run), so the lease is taken after.
            raise AttributeError(name)
        target = getattr(self._inner, name)
        if name not in ("acquire_lease", "begin_segment"):  # the ops that take a lease
            return target

        async def dies(*args: Any, **kwargs: Any) -> Any:
            raise _Killed("between creating the run and taking its lease")

        return dies


async def test_recover_resumes_a_queued_run_whose_creator_died_before_taking_its_lease() -> None:
    store = MemoryStore()
    rt = Runtime(_DiesBeforeTheLease(store))
    await rt.__aenter__()
    agent = Agent(name="calc", model=ScriptedModel([reply("3")]), tools=[add])
    with pytest.raises(_Killed):
        await rt.run(agent, "go", scope=SCOPE)
    with contextlib.suppress(_Killed):
        await rt.aclose()
    [queued] = await store.list_runs(statuses=["queued"])
    # Its creator is a process of this host that no longer exists.
    owner = f"{socket.gethostname()}:{dead_pid()}:deadbeef"
    store._runs[queued.run_id] = dataclasses.replace(queued, lease_owner=owner)
    async with Runtime(store, agents=[agent]) as fresh:
        results = await fresh.recover()
    assert [(r.run_id, r.status, r.text) for r in results] == [(queued.run_id, "completed", "3")]


async def test_recover_resumes_a_queued_run_whose_leaseholder_died_before_marking_it_running() -> (
    None
):
    store = MemoryStore()
    rt = Runtime(_DiesBeforeTheLease(store))
    await rt.__aenter__()
    agent = Agent(name="calc", model=ScriptedModel([reply("3")]), tools=[add])
    with pytest.raises(_Killed):
        await rt.run(agent, "go", scope=SCOPE)
    with contextlib.suppress(_Killed):
        await rt.aclose()
    [queued] = await store.list_runs(statuses=["queued"])
    # A worker of this host took the lease (unexpired) and died before it marked the run running.
    owner = f"{socket.gethostname()}:{dead_pid()}:deadbeef"
    await store.acquire_lease(queued.run_id, owner, ttl_s=300, now=time.time())
    async with Runtime(store, agents=[agent]) as fresh:
        results = await fresh.recover()
    assert [(r.run_id, r.status, r.text) for r in results] == [(queued.run_id, "completed", "3")]
