"""Run events in the store: recorded as a run emits them, followed from any process.

:func:`record_events` writes the events of a segment this process advances to the store's
:class:`~reverie.store.run_events.RunEventLog` (in order, batched as they come). Any process can
then :func:`follow_events`: replay what is stored, then follow new events as they are appended
(woken by the store: at once in this process and through ``NOTIFY`` on PostgreSQL; by polling
on SQLite) until the run settles (ends, or blocks on a gate).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

from reverie.core.events import RunEvent, RunFinished, event_to_dict
from reverie.errors import NotFoundError
from reverie.runtime.events import EventBus
from reverie.store.base import TERMINAL_STATUSES, RunRecord, Store
from reverie.store.run_events import MAX_RUN_EVENTS, RunEventLog

__all__ = [
    "FOLLOW_POLL_S",
    "RECORD_FLUSH_S",
    "StoredEvent",
    "follow_events",
    "last_seq",
    "record_events",
    "run_settled",
]

log = logging.getLogger("reverie.runtime")

FOLLOW_POLL_S = 0.25
"""How often a follower looks for events when nothing woke it (SQLite across processes)."""

RECORD_FLUSH_S = 0.05
"""How long the first event of a batch waits for the rest before the batch is stored: a live
follower sees a run's events at most this much later, in return for one store write per batch
instead of one per event or so."""

_SETTLED_POLLS = 8
"""Looks at a settled run whose events do not end with ``run_finished`` before the follower
rebuilds ``run_finished`` from the stored exit (its recorder died, or no segment ran: a blocked
run cancelled)."""

_PAGE = 500

StoredEvent = tuple[int | None, Mapping[str, Any]]
"""``(seq, event object)``; ``seq`` is ``None`` for a ``run_finished`` rebuilt from the exit."""


async def record_events(
    events: RunEventLog, run_id: str, bus: EventBus, *, flush_s: float = RECORD_FLUSH_S
) -> None:
    """Store every event of ``bus`` (from its first) until it closes.

    Events are written in batches: after the segment's first batch, the first event of a batch
    waits up to ``flush_s`` for more (a step emits several, and each write is a store
    transaction), and the bus closing writes what is left at once. A failing write is logged
    and the events are dropped: watching a run never fails it.
    """
    queue = bus.listen()
    try:
        ended = started = stopping = False
        while not ended and not stopping:
            batch: list[RunEvent | None] = []
            try:
                batch.append(await queue.get())
                # The segment's first events (its run_started) are stored at once: a new
                # follower starts at the latest run_started it finds in the store.
                if started and batch[0] is not None and flush_s > 0:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(flush_s):
                            await bus.wait_closed()
            except asyncio.CancelledError:
                stopping = True  # the runtime is closing: store what was emitted, then stop
            while not queue.empty():
                batch.append(queue.get_nowait())
            ended, started = bool(batch) and batch[-1] is None, True
            objects = [event_to_dict(e) for e in batch if e is not None]
            if not objects:
                continue
            try:
                await events.append_run_events(run_id, objects)
            except Exception as exc:
                log.warning("run %s: %d event(s) not stored: %s", run_id, len(objects), exc)
        if stopping:
            raise asyncio.CancelledError
    finally:
        bus.forget(queue)


async def run_settled(store: Store, run: RunRecord) -> bool:
    """Ended, or blocked on a gate still waiting for a person (not one resolved since)."""
    if run.status in TERMINAL_STATUSES:
        return True
    if run.status != "blocked":
        return False
    ref = (run.exit or {}).get("gate_ref")
    if ref is None:
        return True
    try:
        return (await store.get_gate(str(ref))).status == "pending"
    except NotFoundError:
        return True


async def last_seq(events: RunEventLog, run_id: str) -> int:
    """The seq of the run's latest stored event (0: none)."""
    stored = await events.run_events(run_id, limit=MAX_RUN_EVENTS)
    return stored[-1].seq if stored else 0


async def _segment_start(events: RunEventLog, run_id: str) -> int:
    """The seq just before the run's latest ``run_started`` (0: from the first event)."""
    stored = await events.run_events(run_id, limit=MAX_RUN_EVENTS)
    starts = [r.seq for r in stored if r.kind == "run_started"]
    return starts[-1] - 1 if starts else 0


async def follow_events(
    store: Store, run_id: str, *, after_seq: int | None = None, poll_s: float = FOLLOW_POLL_S
) -> AsyncIterator[StoredEvent]:
    """The run's stored events after ``after_seq``, then new ones live, until the run settles.

    Args:
        store: The runtime's store; it must be a :class:`RunEventLog`.
        run_id: The run.
        after_seq: Resume after this event (an SSE ``Last-Event-ID``); ``None``: from the start
            of the run's latest segment. Events dropped by the bound are skipped.
        poll_s: Longest wait between two looks when no append wakes the follower.

    Yields:
        ``(seq, event)`` in order. The last is the ``run_finished`` that ends the run's latest
        segment once the run has settled.
    """
    assert isinstance(store, RunEventLog)
    events: RunEventLog = store
    if after_seq is None:
        after_seq = await _segment_start(events, run_id)
    previous = await events.run_events(run_id, after_seq=max(0, after_seq - 1), limit=1)
    last_kind = previous[0].kind if previous and previous[0].seq == after_seq else None
    idle = 0
    while True:
        batch = await events.run_events(run_id, after_seq=after_seq, limit=_PAGE)
        for record in batch:
            after_seq = record.seq
            yield record.seq, record.data
        if batch:
            last_kind, idle = batch[-1].kind, 0
            if len(batch) == _PAGE:
                continue
        run = await store.get_run(run_id)
        if await run_settled(store, run):
            if last_kind == "run_finished":
                return
            idle += 1
            if idle >= _SETTLED_POLLS:
                finished = RunFinished(run_id=run_id, status=run.status, exit=dict(run.exit or {}))
                yield None, event_to_dict(finished)
                return
            await asyncio.sleep(poll_s / 4)  # the recorder may still be writing
            continue
        await events.wait_run_events(run_id, timeout_s=poll_s)
