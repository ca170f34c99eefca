"""The run event bus's listener queue (runtime/events.py)."""

from __future__ import annotations

import asyncio

import pytest

from reverie.core.events import RunFinished
from reverie.runtime.events import EventQueue


async def test_an_event_queue_refuses_a_second_waiting_reader() -> None:
    queue = EventQueue()
    first = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)  # the first reader waits
    with pytest.raises(RuntimeError, match="one reader"):
        await queue.get()
    event = RunFinished(run_id="run_1", status="completed", exit={})
    queue.put_nowait(event)
    assert await asyncio.wait_for(first, 60) is event  # the first reader is still woken
