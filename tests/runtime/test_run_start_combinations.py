"""A run started with its segment (``start_segment``), combined with what can reach it at once.

``Runtime.start`` returns the handle of a run already ``running`` and leased while its segment's
task has not run yet. Everything a caller may do with the handle at once — cancel it, stop it,
steer it, send a follow-up, start a second run on its thread — must behave as it does for a run
whose segment began on its own: nothing lost, nothing twice, the lease given back. The model
holds its first answer until the test lets it go, so the run cannot end before the caller acts
(on the in-memory store the caller acts before the segment's task first runs; on SQLite the
caller's own store operation may let it start first).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from reverie import Agent, RunHandle, RunResult, Runtime, Scope
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.store.memory import MemoryStore
from reverie.store.sqlite import SQLiteStore
from reverie.testing import ScriptedModel, reply
from runtime.runtime_support import CountingStore

SCOPE = Scope(tenant="acme", user="ana")
WAIT_S = 30.0

pytestmark = pytest.mark.parametrize("kind", ["memory", "sqlite"])


def backend(kind: str, tmp_path: Path) -> CountingStore:
    return CountingStore(
        MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "combinations.db")
    )


class Recording:
    """A model that replies ``reply-N`` to its N-th request and keeps every request; the first
    answer waits for :attr:`go`."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []
        self.go = asyncio.Event()

    async def __call__(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if len(self.requests) == 1:
            await self.go.wait()
        return reply(f"reply-{len(self.requests)}")

    def texts(self, index: int) -> list[str]:
        return [m.content for m in self.requests[index].messages if m.role == "user"]


async def user_texts(rt: Runtime, thread_id: str) -> list[str]:
    rows = await rt.store.thread_items(thread_id)
    return [str(r.content) for r in rows if r.role == "user"]


async def released(rt: Runtime, run_id: str) -> Any:
    run = await rt.store.get_run(run_id)
    assert run.lease_owner is None, f"run {run_id} still leased by {run.lease_owner}"
    return run


@dataclass
class Acted:
    """What a run started with its segment came to, after the caller acted on its handle."""

    store: CountingStore
    model: Recording
    result: RunResult
    run: Any
    """The stored run record, its lease given back."""
    rows: list[Any]
    """The thread's rows."""
    stored: RunResult
    """The result as read back from the store."""

    @property
    def texts(self) -> list[str]:
        return [str(r.content) for r in self.rows if r.role == "user"]


async def acted_on_at_start(
    kind: str, tmp_path: Path, act: Callable[[RunHandle], Awaitable[Any]]
) -> Acted:
    """Start a run whose first model answer is held, ``act`` on its handle, then let it go."""
    store = backend(kind, tmp_path)
    model = Recording()
    async with Runtime(store) as rt:
        handle = await rt.start(Agent(name="a", model=ScriptedModel(model)), "go", scope=SCOPE)
        await act(handle)
        model.go.set()
        result = await asyncio.wait_for(handle.result(), WAIT_S)
        run = await released(rt, handle.run_id)
        rows = await rt.store.thread_items(handle.thread_id)
        stored = await rt.get_result(handle.run_id)
    return Acted(store, model, result, run, rows, stored)


async def test_a_run_cancelled_right_after_its_start_ends_cancelled_with_no_reply(
    kind: str, tmp_path: Path
) -> None:
    done = await acted_on_at_start(kind, tmp_path, lambda h: h.cancel())
    assert (done.result.status, done.run.status) == ("cancelled", "cancelled")
    assert [r.role for r in done.rows] == ["user"]  # no answer of the model was kept
    assert len(done.model.requests) <= 1
    if kind == "memory":
        assert done.model.requests == []  # cancelled before its segment's task first ran
    assert done.store.counts["start_segment"] == 1


async def test_a_graceful_stop_before_its_started_segment_ran_still_ends_the_run_once(
    kind: str, tmp_path: Path
) -> None:
    done = await acted_on_at_start(kind, tmp_path, lambda h: h.request_graceful_stop())
    assert done.run.status == done.result.status == done.stored.status
    assert done.result.status in ("completed", "stopped")
    assert len(done.model.requests) <= 2  # the held call and the finalizer's at most
    assert done.store.counts["end_segment"] == 1


async def test_steering_sent_before_its_started_segment_ran_is_delivered_once(
    kind: str, tmp_path: Path
) -> None:
    done = await acted_on_at_start(kind, tmp_path, lambda h: h.steer("and be brief"))
    texts, model = done.texts, done.model
    assert done.result.status == "completed"
    assert texts.count("and be brief") == 1
    assert texts.index("go") < texts.index("and be brief")
    # The steering reached a model call, and no request carried it twice.
    carried = [model.texts(i).count("and be brief") for i in range(len(model.requests))]
    assert max(carried) == 1


async def test_a_follow_up_sent_before_its_started_segment_ran_is_answered_once_after_the_reply(
    kind: str, tmp_path: Path
) -> None:
    done = await acted_on_at_start(kind, tmp_path, lambda h: h.follow_up("one more thing"))
    model = done.model
    assert done.result.status == "completed"
    assert done.texts == ["go", "one more thing"]
    assert model.texts(0) == ["go"]
    assert model.texts(-1) == ["go", "one more thing"]
    assert done.result.text == f"reply-{len(model.requests)}"


async def test_an_interrupting_start_before_the_first_runs_segment_ran_cancels_it_and_runs(
    kind: str, tmp_path: Path
) -> None:
    store = backend(kind, tmp_path)
    first_model, second_model = Recording(), Recording()
    async with Runtime(store) as rt:
        first = await rt.start(
            Agent(name="a", model=ScriptedModel(first_model)), "first", scope=SCOPE
        )
        second = await asyncio.wait_for(
            rt.start(
                Agent(name="b", model=ScriptedModel(second_model)),
                "second",
                scope=SCOPE,
                thread_id=first.thread_id,
                thread_policy="interrupt",
            ),
            WAIT_S,
        )
        first_model.go.set()
        second_model.go.set()
        results = [await asyncio.wait_for(h.result(), WAIT_S) for h in (first, second)]
        runs = [await released(rt, h.run_id) for h in (first, second)]
        texts = await user_texts(rt, first.thread_id)
    assert first.run_id != second.run_id
    assert (results[0].status, runs[0].status) == ("cancelled", "cancelled")
    assert (results[1].status, runs[1].status) == ("completed", "completed")
    assert texts == ["first", "second"]
    assert second_model.texts(-1)[-1] == "second"


async def test_an_enqueued_start_before_the_first_runs_segment_ran_joins_it_once(
    kind: str, tmp_path: Path
) -> None:
    store = backend(kind, tmp_path)
    model = Recording()
    async with Runtime(store) as rt:
        first = await rt.start(Agent(name="a", model=ScriptedModel(model)), "first", scope=SCOPE)
        joined = await rt.start(
            Agent(name="a", model=ScriptedModel(model)),
            "second",
            scope=SCOPE,
            thread_id=first.thread_id,
            thread_policy="enqueue",
        )
        model.go.set()
        result = await asyncio.wait_for(first.result(), WAIT_S)
        await released(rt, first.run_id)
        texts = await user_texts(rt, first.thread_id)
    assert joined.run_id == first.run_id
    assert result.status == "completed"
    assert texts == ["first", "second"]
    assert model.texts(-1) == ["first", "second"]
    assert result.text == f"reply-{len(model.requests)}"
