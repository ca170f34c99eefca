"""Run events in the store: recorded as a run emits them, followed from any process.

:class:`EventRecorder` writes the events of the segments this process advances to the store's
:class:`~reverie.store.run_events.RunEventLog` (each run's in order, batched as they come, the
runs' batches together). Any process can
then :func:`follow_events`: replay what is stored, then follow new events as they are appended
(woken by the store: at once in this process and through ``NOTIFY`` on PostgreSQL; by polling
on SQLite) until the run settles (ends, or blocks on a gate).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from reverie.core.events import RunEvent, RunFinished, event_to_dict
from reverie.errors import NotFoundError
from reverie.runtime.events import EventBus
from reverie.store.base import TERMINAL_STATUSES, RunRecord, Store
from reverie.store.run_events import MAX_RUN_EVENTS, RunEventBatches, RunEventLog

__all__ = [
    "FOLLOW_POLL_S",
    "RECORD_FLUSH_S",
    "EventRecorder",
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


class EventRecorder:
    """Stores the events of every segment a runtime advances: one writer for all of them.

    :meth:`record` taps a segment's bus; :meth:`finish` says it closed. Events wait in memory
    and are written in flushes, each of which takes what every run emitted meanwhile (one
    transaction for all of them on a store that implements :class:`RunEventBatches`, else one
    append per run):

    - a segment's first events (its ``run_started``) are flushed at once: a new follower starts
      at the latest ``run_started`` it finds in the store;
    - after that, the first event that finds nothing waiting waits up to ``flush_s`` for more
      (a step emits several events; a thousand runs emit them together);
    - a segment's last events (its bus closed) are flushed at once, and :meth:`drain` flushes
      what is left.

    The writer is a task that lives while something is to be written. A failing write is logged
    and its events are dropped (a failing batch is tried again run by run first): watching a
    run never fails it.
    """

    def __init__(self, events: RunEventLog, *, flush_s: float = RECORD_FLUSH_S) -> None:
        self._events = events
        self._batches = events if isinstance(events, RunEventBatches) else None
        self._flush_s = flush_s
        self._pending: dict[str, list[RunEvent]] = {}
        """Run id → its events not yet taken by a flush, in the order emitted."""
        self._first: set[str] = set()
        """Runs whose segment's first events are not taken yet."""
        self._due = False
        self._timer: asyncio.TimerHandle | None = None
        self._writer: asyncio.Task[None] | None = None
        self._taps: dict[str, tuple[EventBus, Callable[[RunEvent], None]]] = {}
        """Run id → the bus it is recorded from and the listener tapped on it."""

    def record(self, run_id: str, bus: EventBus) -> None:
        """Store every event of ``bus`` (from its first) until :meth:`finish`."""
        queue = bus.listen()  # the events so far (none, for a segment just launched)
        bus.forget(queue)
        self._first.add(run_id)
        closed = False
        while not queue.empty():
            event = queue.get_nowait()
            if event is None:
                closed = True
            else:
                self._add(run_id, event)
        if closed:
            self.finish(run_id)
        else:
            listener = functools.partial(self._add, run_id)
            self._taps[run_id] = (bus, listener)
            bus.tap(listener)

    def finish(self, run_id: str) -> None:
        """Stop recording ``run_id`` (its bus closed) and store its last events at once."""
        tapped = self._taps.pop(run_id, None)
        if tapped is not None:
            bus, listener = tapped
            bus.untap(listener)
        self._first.discard(run_id)
        if run_id in self._pending:
            self._flush_now()

    async def drain(self) -> None:
        """Store every event emitted so far (before the store closes)."""
        while self._pending or self._writer is not None:
            if self._pending:
                self._flush_now()
            if (writer := self._writer) is not None:
                await asyncio.shield(writer)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _add(self, run_id: str, event: RunEvent) -> None:
        # The bus's tap: called in emit, once per event of every recorded run.
        pending = self._pending.get(run_id)
        if pending is None:
            self._pending[run_id] = [event]
        else:
            pending.append(event)
        if run_id in self._first or self._flush_s <= 0:
            if not self._due or self._writer is None:  # else the writer already has it
                self._flush_now()
        elif self._timer is None and not self._due:
            self._timer = asyncio.get_running_loop().call_later(self._flush_s, self._flush_now)

    def _flush_now(self) -> None:
        self._due = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        try:
            while self._due:
                self._due = False
                taken, self._pending = self._pending, {}
                self._first.difference_update(taken)
                if taken:
                    await self._store(taken)
        finally:
            self._writer = None

    async def _store(self, taken: dict[str, list[RunEvent]]) -> None:
        batches = {run_id: [event_to_dict(e) for e in events] for run_id, events in taken.items()}
        if self._batches is not None and len(batches) > 1:
            try:
                await self._batches.append_event_batches(batches)
                return
            except Exception as exc:
                log.debug("%d runs' events not stored together (%s); run by run", len(batches), exc)
        for run_id, objects in batches.items():
            try:
                await self._events.append_run_events(run_id, objects)
            except Exception as exc:
                log.warning("run %s: %d event(s) not stored: %s", run_id, len(objects), exc)


async def record_events(
    events: RunEventLog, run_id: str, bus: EventBus, *, flush_s: float = RECORD_FLUSH_S
) -> None:
    """Store every event of ``bus`` (from its first) until it closes (an
    :class:`EventRecorder` of one run; see there for the batches).

    Cancelled (the runtime closing), it stores what was emitted, then stops.
    """
    recorder = EventRecorder(events, flush_s=flush_s)
    recorder.record(run_id, bus)
    try:
        await bus.wait_closed()
    finally:
        recorder.finish(run_id)
        await recorder.drain()


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
