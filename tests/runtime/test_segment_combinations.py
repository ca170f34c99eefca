"""A segment's start and end when something else happens at once (docs/durability.md).

A cancel landing while ``Store.begin_segment`` or ``Store.end_segment`` is in flight, and a
crash (an exception, the task cancelled as at a shutdown) between ``end_segment`` and the
``after_turn`` hooks. The store is real (memory, SQLite, PostgreSQL when
``REVERIE_TEST_POSTGRES_URL`` is set); :class:`Paused` wraps it and holds one call on an
:class:`asyncio.Event`, before the call runs or after it committed.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from reverie import Agent, Runtime, Scope, tool
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.errors import StoreError
from reverie.hooks import AfterTurnContext
from reverie.store import MemoryStore, SQLiteStore, Store
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="acme", user="ana")
POSTGRES_URL = os.environ.get("REVERIE_TEST_POSTGRES_URL", "")
WAIT_S = 60.0
"""Generous: the machine may be loaded; nothing here waits for time to pass."""


@pytest.fixture(
    params=[
        pytest.param("memory", id="memory"),
        pytest.param("sqlite", id="sqlite"),
        pytest.param(
            "postgres",
            id="postgres",
            marks=[
                pytest.mark.postgres,
                pytest.mark.skipif(not POSTGRES_URL, reason="set REVERIE_TEST_POSTGRES_URL"),
            ],
        ),
    ]
)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A real store, not opened (the runtime opens and closes it; a fresh one reopens it)."""
    if request.param == "memory":
        yield _Reopenable(MemoryStore())
    elif request.param == "sqlite":
        yield SQLiteStore(tmp_path / "segments.db")
    else:
        from reverie.store.postgres import PostgresStore, temporary_schema

        async with temporary_schema(POSTGRES_URL, prefix="reverie_segments") as url:
            yield PostgresStore(url)


class _Reopenable:
    """A memory store that a second runtime can open after the first closed it (its rows are
    the "disk" a restarted process finds)."""

    def __init__(self, inner: MemoryStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def close(self) -> None:
        """Kept open: the next runtime finds what the first left."""


class Paused:
    """A real store whose first ``op`` call (that ``when`` accepts) waits for :attr:`go`.

    ``landed=False``: it waits before the call runs; ``True``: after the call committed, before
    its caller gets the answer. ``then`` replaces the answer (raise to lose it).
    """

    def __init__(
        self,
        inner: Any,
        op: str,
        *,
        landed: bool,
        when: Callable[[tuple[Any, ...]], bool] = lambda args: True,
        then: Callable[[Any], Any] = lambda answer: answer,
    ) -> None:
        self._inner = inner
        self._op = op
        self._landed = landed
        self._when = when
        self._then = then
        self._armed = True
        self.reached = asyncio.Event()
        self.go = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        if name == "start_segment" and self._op == "begin_segment":
            # Not offered: a run starts queued (as with no slot free) and its segment begins
            # in a begin_segment of its own, the call held here.
            raise AttributeError(name)
        target = getattr(self._inner, name)
        if name != self._op:
            return target

        async def paused(*args: Any, **kwargs: Any) -> Any:
            if not (self._armed and self._when(args)):
                return await target(*args, **kwargs)
            self._armed = False
            if not self._landed:
                self.reached.set()
                await self.go.wait()
            answer = await target(*args, **kwargs)
            if self._landed:
                self.reached.set()
                await self.go.wait()
            return self._then(answer)

        return paused


async def _reached(paused: Paused) -> None:
    await asyncio.wait_for(paused.reached.wait(), WAIT_S)


def _replier(text: str = "done") -> Agent:
    return Agent(name="replier", model=ScriptedModel([reply(text)]))


@tool(effects={"write"}, needs_approval=True)
def deploy() -> str:
    """Deploys (after an approval)."""
    return "deployed"


def _gated() -> Agent:
    def script(request: ModelRequest) -> ModelResponse:
        if any(m.role == "tool" for m in request.messages):
            return reply("shipped")
        return call("deploy")

    return Agent(name="gated", model=ScriptedModel(script), tools=[deploy])


# a cancel while begin_segment is in flight ------------------------------------------------
@pytest.mark.parametrize("landed", [False, True], ids=["before", "landed"])
async def test_a_cancel_while_the_segment_begins_ends_the_run_cancelled_before_any_model_call(
    backend: Store, landed: bool
) -> None:
    store = Paused(backend, "begin_segment", landed=landed)
    model = ScriptedModel([reply("never")])
    async with Runtime(store) as rt:
        handle = await rt.start(Agent(name="a", model=model), "go", scope=SCOPE)
        await _reached(store)
        assert await rt.cancel(handle.run_id, reason="stop") is None  # its segment ends it
        store.go.set()
        result = await asyncio.wait_for(handle.result(), WAIT_S)
        run = await rt.store.get_run(handle.run_id)
        rows = await rt.store.thread_items(handle.thread_id)
    assert (result.status, getattr(result.exit, "reason", None)) == ("cancelled", "stop")
    assert (run.status, run.lease_owner) == ("cancelled", None)
    assert model.requests == []
    assert [(r.role, r.content) for r in rows] == [("user", "go")]


# a cancel while end_segment is in flight ------------------------------------------------------
@pytest.mark.parametrize("landed", [False, True], ids=["before", "landed"])
async def test_a_cancel_while_a_completed_run_ends_leaves_it_completed_and_the_thread_free(
    backend: Store, landed: bool
) -> None:
    store = Paused(backend, "end_segment", landed=landed)
    async with Runtime(store) as rt:
        handle = await rt.start(_replier(), "go", scope=SCOPE)
        await _reached(store)
        assert await rt.cancel(handle.run_id, reason="stop") is None
        store.go.set()
        result = await asyncio.wait_for(handle.result(), WAIT_S)
        run = await rt.store.get_run(handle.run_id)
        # The thread is free: the next turn starts (the default policy rejects a busy thread).
        nxt = await rt.run(_replier("again"), "more", scope=SCOPE, thread_id=handle.thread_id)
    assert (result.status, result.text) == ("completed", "done")
    assert (run.status, run.lease_owner) == ("completed", None)
    assert (nxt.status, nxt.text) == ("completed", "again")


@pytest.mark.parametrize("landed", [False, True], ids=["before", "landed"])
async def test_a_cancel_while_a_run_ends_blocked_ends_it_cancelled_and_closes_its_gate(
    backend: Store, landed: bool
) -> None:
    store = Paused(backend, "end_segment", landed=landed, when=lambda args: args[1] == "blocked")
    async with Runtime(store) as rt:
        handle = await rt.start(_gated(), "ship it", scope=SCOPE)
        await _reached(store)
        assert await rt.cancel(handle.run_id, reason="stop") is None  # left to its segment
        store.go.set()
        result = await asyncio.wait_for(handle.result(), WAIT_S)
        run = await rt.store.get_run(handle.run_id)
        gates = await rt.store.list_gates(scope=SCOPE, status=None)
    # Not left blocked with its gate open for a person to approve after the cancel.
    assert (result.status, getattr(result.exit, "reason", None)) == ("cancelled", "stop")
    assert (run.status, run.lease_owner) == ("cancelled", None)
    assert [g.status for g in gates if g.run_id == handle.run_id] == ["denied"]


async def test_a_cancel_from_another_process_while_a_run_ends_blocked_ends_it_cancelled(
    backend: Store,
) -> None:
    # Another process's cancel finds the run leased by this one: it records the request and
    # leaves the ending to the segment, which must not end it blocked.
    store = Paused(backend, "end_segment", landed=False, when=lambda args: args[1] == "blocked")
    async with Runtime(store) as rt:
        handle = await rt.start(_gated(), "ship it", scope=SCOPE)
        await _reached(store)
        await rt.store.request_cancel(handle.run_id)  # what the other process's cancel writes
        store.go.set()
        result = await asyncio.wait_for(handle.result(), WAIT_S)
        run = await rt.store.get_run(handle.run_id)
    assert result.status == "cancelled"
    assert (run.status, run.lease_owner) == ("cancelled", None)


# a crash between end_segment and the after_turn hooks -----------------------------------------
def _audit(rt: Runtime, seen: list[str]) -> None:
    async def audit(ctx: AfterTurnContext) -> None:
        seen.append(ctx.run_id)

    rt.hooks.register("after_turn", audit, name="audit")


async def test_after_turn_fires_once_when_nothing_crashes(backend: Store) -> None:
    # The baseline of the two tests below: the same run, the hook fires.
    seen: list[str] = []
    async with Runtime(backend) as rt:
        _audit(rt, seen)
        result = await rt.run(_replier(), "go", scope=SCOPE)
    assert seen == [result.run_id]


async def test_a_lost_answer_to_end_segment_leaves_the_run_ended_and_its_hooks_unrun(
    backend: Store,
) -> None:
    def lost(answer: Any) -> Any:
        raise StoreError("the connection dropped after COMMIT")

    store = Paused(backend, "end_segment", landed=True, then=lost)
    store.go.set()
    seen: list[str] = []
    async with Runtime(store) as rt:
        _audit(rt, seen)
        handle = await rt.start(_replier(), "go", scope=SCOPE)
        with pytest.raises(StoreError, match="dropped"):
            await asyncio.wait_for(handle.result(), WAIT_S)
        stored = await rt.get_result(handle.run_id)
        run = await rt.store.get_run(handle.run_id)
    async with Runtime(backend, agents=[_replier()]) as fresh:
        _audit(fresh, seen)
        assert await fresh.recover() == []  # a terminal run is not resumed
        again = await fresh.get_result(handle.run_id)
    assert (stored.status, stored.text) == (again.status, again.text) == ("completed", "done")
    assert (run.status, run.lease_owner) == ("completed", None)
    assert seen == []  # after_turn runs at most once: never for a turn whose end was lost


async def test_a_shutdown_while_end_segment_answers_leaves_the_run_ended_and_its_hooks_unrun(
    backend: Store,
) -> None:
    store = Paused(backend, "end_segment", landed=True)
    seen: list[str] = []
    rt = Runtime(store)
    await rt.__aenter__()
    _audit(rt, seen)
    handle = await rt.start(_replier(), "go", scope=SCOPE)
    await _reached(store)
    await rt.aclose()  # the process stops: the segment's task is cancelled at that await
    async with Runtime(backend, agents=[_replier()]) as fresh:
        _audit(fresh, seen)
        assert await fresh.recover() == []
        result = await fresh.get_result(handle.run_id)
        run = await fresh.store.get_run(handle.run_id)
    assert (result.status, result.text) == ("completed", "done")
    assert (run.status, run.lease_owner) == ("completed", None)
    assert seen == []


# a start with the interrupt policy, racing ---------------------------------------------------
def _stuck(started: asyncio.Event) -> Agent:
    @tool(effects={"write"})
    async def wait_forever() -> str:
        """Never returns by itself (a cancel interrupts it)."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    return Agent(name="stuck", model=ScriptedModel([call("wait_forever")]), tools=[wait_forever])


async def test_two_interrupting_starts_on_one_thread_leave_one_run_active_at_a_time(
    backend: Store,
) -> None:
    started = asyncio.Event()
    async with Runtime(backend) as rt:
        first = await rt.start(_stuck(started), "go", scope=SCOPE)
        await asyncio.wait_for(started.wait(), WAIT_S)
        handles = await asyncio.wait_for(
            asyncio.gather(
                *(
                    rt.start(
                        _replier(text),
                        text,
                        scope=SCOPE,
                        thread_id=first.thread_id,
                        thread_policy="interrupt",
                    )
                    for text in ("b", "c")
                )
            ),
            WAIT_S,
        )
        results = [await asyncio.wait_for(h.result(), WAIT_S) for h in (first, *handles)]
        runs = [await rt.store.get_run(h.run_id) for h in (first, *handles)]
        rows = await rt.store.thread_items(first.thread_id)
    assert len({h.run_id for h in handles}) == 2  # two new runs, neither joined the other
    assert results[0].status == "cancelled"
    # The later start interrupted the earlier one (or found it ended): the last one completes.
    statuses = sorted(r.status for r in results[1:])
    assert statuses in (["cancelled", "completed"], ["completed", "completed"])
    assert all(r.status in ("completed", "cancelled") for r in runs) and len(runs) == 3
    # Every tool call of the thread has its one result (the interrupted call's too).
    calls = [c.id for r in rows for c in r.tool_calls]
    results_for = [r.tool_call_id or "" for r in rows if r.role == "tool"]
    assert sorted(calls) == sorted(results_for)


@pytest.mark.parametrize("landed", [False, True], ids=["before", "landed"])
async def test_an_interrupting_start_racing_the_active_runs_completion_starts_after_it(
    backend: Store, landed: bool
) -> None:
    ending = Paused(backend, "end_segment", landed=landed)
    async with Runtime(ending) as rt:
        first = await rt.start(_replier("first"), "go", scope=SCOPE)
        await _reached(ending)  # its status is being written
        second = asyncio.create_task(
            rt.start(
                _replier("second"),
                "next",
                scope=SCOPE,
                thread_id=first.thread_id,
                thread_policy="interrupt",
            )
        )
        await asyncio.sleep(0)
        ending.go.set()
        handle = await asyncio.wait_for(second, WAIT_S)
        results = [await asyncio.wait_for(h.result(), WAIT_S) for h in (first, handle)]
        stored = await rt.store.get_run(first.run_id)
    # The end being written stands: the interrupt does not turn a completed run cancelled.
    assert [(r.status, r.text) for r in results] == [
        ("completed", "first"),
        ("completed", "second"),
    ]
    assert (stored.status, stored.lease_owner) == ("completed", None)


async def test_an_interrupting_start_while_the_active_run_begins_its_segment_cancels_it_first(
    backend: Store,
) -> None:
    beginning = Paused(backend, "begin_segment", landed=False)
    # The interrupt's cancel queues its input last, after firing the segment's token.
    queued = Paused(beginning, "enqueue_input", landed=True)
    model = ScriptedModel([reply("never")])
    async with Runtime(queued) as rt:
        first = await rt.start(Agent(name="a", model=model), "go", scope=SCOPE)
        await _reached(beginning)  # queued, its segment about to take the lease
        second = asyncio.create_task(
            rt.start(
                _replier("second"),
                "next",
                scope=SCOPE,
                thread_id=first.thread_id,
                thread_policy="interrupt",
            )
        )
        await _reached(queued)  # the interrupt's cancel reached the run
        queued.go.set()
        beginning.go.set()
        handle = await asyncio.wait_for(second, WAIT_S)
        results = [await asyncio.wait_for(h.result(), WAIT_S) for h in (first, handle)]
    assert [r.status for r in results] == ["cancelled", "completed"]
    assert model.requests == []  # the interrupted run never called its model


async def test_a_cancel_that_read_the_run_running_does_not_rewrite_its_completion(
    backend: Store,
) -> None:
    # The cancel's request lands while the run is still running; the run completes before the
    # cancel goes on (it finds no segment here): the completion stands.
    ending = Paused(backend, "end_segment", landed=False)
    requested = Paused(ending, "request_cancel", landed=True)
    async with Runtime(requested) as rt:
        handle = await rt.start(_replier("done"), "go", scope=SCOPE)
        await _reached(ending)
        cancelling = asyncio.create_task(rt.cancel(handle.run_id, reason="stop"))
        await _reached(requested)  # the request is written; the run still reads running
        ending.go.set()
        result = await asyncio.wait_for(handle.result(), WAIT_S)
        requested.go.set()
        outcome = await asyncio.wait_for(cancelling, WAIT_S)
        stored = await rt.store.get_run(handle.run_id)
    assert (result.status, result.text) == ("completed", "done")
    assert outcome is None or outcome.status == "completed"
    assert (stored.status, stored.lease_owner) == ("completed", None)


# a lease taken, after the caller read the run, by a worker that died -----------------------
def _dead_owner() -> str:
    """A lease owner naming a process of this host that has exited (and was reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return f"{socket.gethostname()}:{proc.pid}:deadbeef"


async def test_a_lease_a_worker_took_after_the_run_was_read_and_died_is_taken_over_at_once(
    backend: Store,
) -> None:
    # The segment read the run with no lease on it; before its begin_segment, a worker takes
    # the lease (unexpired for five minutes) and dies. The segment takes it over now.
    store = Paused(backend, "begin_segment", landed=False)
    async with Runtime(store) as rt:
        handle = await rt.start(_replier(), "go", scope=SCOPE)
        await _reached(store)
        await backend.acquire_lease(handle.run_id, _dead_owner(), ttl_s=300, now=time.time())
        store.go.set()
        result = await asyncio.wait_for(handle.result(), WAIT_S)
        run = await rt.store.get_run(handle.run_id)
    assert (result.status, result.text) == ("completed", "done")
    assert (run.status, run.lease_owner) == ("completed", None)


async def test_a_cancel_of_a_blocked_run_takes_over_the_lease_of_a_worker_that_died_since(
    backend: Store,
) -> None:
    # The cancel reads the blocked run (no lease); a worker resuming it takes the lease and
    # dies before the cancel takes it: the cancel ends the run now, not once the lease expires.
    requested = Paused(backend, "request_cancel", landed=True)
    async with Runtime(requested) as rt:
        blocked = await rt.run(_gated(), "ship it", scope=SCOPE)
        cancelling = asyncio.create_task(rt.cancel(blocked.run_id, reason="stop"))
        await _reached(requested)
        await backend.acquire_lease(blocked.run_id, _dead_owner(), ttl_s=300, now=time.time())
        requested.go.set()
        result = await asyncio.wait_for(cancelling, WAIT_S)
        run = await rt.store.get_run(blocked.run_id)
    assert result is not None and result.status == "cancelled"
    assert (run.status, run.lease_owner) == ("cancelled", None)
