"""The run event log (``RunEventLog``): every backend stores a run's events in order, numbered
across segments, bounded, and wakes followers when events are appended."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from conformance.conftest import BACKENDS, opened
from reverie.store import MemoryStore, SQLiteStore, Store
from reverie.store.run_events import RunEventBatches, RunEventLog


def log_of(store: Store) -> RunEventLog:
    assert isinstance(store, RunEventLog)
    return store


def event(kind: str, **fields: object) -> dict[str, object]:
    return {"kind": kind, "run_id": "run-1", **fields}


async def test_every_backend_keeps_a_runs_events_in_order_numbered_from_one(store: Store) -> None:
    log = log_of(store)
    last = await log.append_run_events(
        "run-1", [event("run_started"), event("text_delta", text="a")]
    )
    again = await log.append_run_events("run-1", [event("run_finished", status="completed")])
    await log.append_run_events("run-2", [event("run_started")])
    stored = await log.run_events("run-1")
    assert (last, again) == (2, 3)
    assert [(r.seq, r.kind) for r in stored] == [
        (1, "run_started"),
        (2, "text_delta"),
        (3, "run_finished"),
    ]
    assert stored[1].data == {"kind": "text_delta", "run_id": "run-1", "text": "a"}
    assert stored[0].created_at > 0
    assert [r.seq for r in await log.run_events("run-1", after_seq=1, limit=1)] == [2]
    assert [r.run_id for r in await log.run_events("run-2")] == ["run-2"]
    assert await log.run_events("nope") == []


async def test_run_events_are_bounded_per_run_oldest_dropped(store: Store) -> None:
    log = log_of(store)
    for index in range(5):
        await log.append_run_events("run-1", [event("text_delta", text=str(index))], keep=3)
    stored = await log.run_events("run-1")
    assert [r.seq for r in stored] == [3, 4, 5]  # numbering goes on; the oldest are gone


async def test_an_append_wakes_a_follower_of_that_run(store: Store) -> None:
    log = log_of(store)
    waiting = asyncio.ensure_future(log.wait_run_events("run-1", timeout_s=60))
    await asyncio.sleep(0)
    assert not waiting.done()
    await log.append_run_events("run-1", [event("run_started")])
    await asyncio.wait_for(waiting, 30)
    # A wait without an append ends at its timeout.
    await log.wait_run_events("run-1", timeout_s=0.01)


BATCHING = [param for param in BACKENDS if param.id != "memory"]
"""The backends that append many runs' events in one transaction (``RunEventBatches``); the
memory store appends one run at a time, and the runtime falls back to that for it."""


@pytest.fixture(params=BATCHING)
async def batching(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """An opened store of each backend that batches, closed after the test."""
    async with opened(request.param, tmp_path) as backend:
        yield backend


def batches_of(store: Store) -> RunEventBatches:
    assert isinstance(store, RunEventBatches)
    return store


def test_only_the_memory_store_appends_run_events_one_run_at_a_time() -> None:
    assert not isinstance(MemoryStore(), RunEventBatches)
    assert isinstance(SQLiteStore(Path("unopened.db")), RunEventBatches)


async def test_a_batch_appends_each_runs_events_after_its_last_one(batching: Store) -> None:
    log, batches = log_of(batching), batches_of(batching)
    await log.append_run_events("run-1", [event("run_started")])
    last = await batches.append_event_batches(
        {
            "run-1": [event("text_delta", text="a"), event("run_finished")],
            "run-2": [event("run_started")],
            "run-3": [],
        }
    )
    assert dict(last) == {"run-1": 3, "run-2": 1, "run-3": 0}
    assert [(r.seq, r.kind) for r in await log.run_events("run-1")] == [
        (1, "run_started"),
        (2, "text_delta"),
        (3, "run_finished"),
    ]
    assert (await log.run_events("run-1"))[1].data == {
        "kind": "text_delta",
        "run_id": "run-1",
        "text": "a",
    }
    assert [(r.seq, r.kind) for r in await log.run_events("run-2")] == [(1, "run_started")]
    assert await log.run_events("run-3") == []


async def test_a_batch_keeps_the_newest_events_of_each_run(batching: Store) -> None:
    log, batches = log_of(batching), batches_of(batching)
    await log.append_run_events("run-1", [event("text_delta", text=str(i)) for i in range(3)])
    await batches.append_event_batches(
        {"run-1": [event("text_delta", text="3")], "run-2": [event("run_started")] * 2}, keep=2
    )
    assert [r.seq for r in await log.run_events("run-1")] == [3, 4]
    assert [r.seq for r in await log.run_events("run-2")] == [1, 2]


async def test_a_batch_wakes_the_followers_of_each_of_its_runs(batching: Store) -> None:
    log, batches = log_of(batching), batches_of(batching)
    waiting = [
        asyncio.ensure_future(log.wait_run_events(run_id, timeout_s=60))
        for run_id in ("run-1", "run-2")
    ]
    await asyncio.sleep(0)
    await batches.append_event_batches(
        {"run-1": [event("run_started")], "run-2": [event("run_started")]}
    )
    await asyncio.wait_for(asyncio.gather(*waiting), 30)
