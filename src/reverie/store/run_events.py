"""The run event log: a run's typed events (DESIGN §17), stored so that any process can replay
and follow them.

A store that implements :class:`RunEventLog` keeps, per run, the JSON objects of its events with
a sequence number that counts from 1 across every segment of the run (a resumed run goes on
numbering), bounded to the newest :data:`MAX_RUN_EVENTS`. Appends wake the waiters of
:meth:`RunEventLog.wait_run_events` in the appending process at once; other processes see them
when they next look: PostgreSQL wakes them with ``NOTIFY``, SQLite by polling. A store that
also implements :class:`RunEventBatches` appends the events of many runs in one transaction
(the SQL stores: what a process recording a thousand runs at once writes per flush).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = ["MAX_RUN_EVENTS", "EventWaiters", "RunEventBatches", "RunEventLog", "RunEventRecord"]

MAX_RUN_EVENTS = 10_000
"""Events kept per run: older ones are dropped as new ones arrive."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunEventRecord:
    """One stored event of a run."""

    run_id: str
    seq: int
    """From 1, across the run's segments; the SSE event id."""
    kind: str
    data: Mapping[str, Any]
    """The event's fields (``kind`` first), as ``GET /v1/runs/{id}/events`` sends them."""
    created_at: float


@runtime_checkable
class RunEventLog(Protocol):
    """What a store offers to persist and follow run events."""

    async def append_run_events(
        self, run_id: str, events: Sequence[Mapping[str, Any]], *, keep: int = MAX_RUN_EVENTS
    ) -> int:
        """Append events after the run's last one; keep the newest ``keep``; the last seq."""
        ...

    async def run_events(
        self, run_id: str, *, after_seq: int = 0, limit: int = 1000
    ) -> list[RunEventRecord]:
        """Stored events with a seq above ``after_seq``, oldest first, at most ``limit``."""
        ...

    async def wait_run_events(self, run_id: str, *, timeout_s: float) -> None:
        """Return when events of the run may have been appended, or after ``timeout_s``."""
        ...


@runtime_checkable
class RunEventBatches(Protocol):
    """A run event log that appends the events of many runs in one operation."""

    async def append_event_batches(
        self, batches: Mapping[str, Sequence[Mapping[str, Any]]], *, keep: int = MAX_RUN_EVENTS
    ) -> Mapping[str, int]:
        """As :meth:`RunEventLog.append_run_events` for each run of ``batches`` (run id → its
        events), in one transaction; the last seq of each run."""
        ...


class EventWaiters:
    """In-process wake-ups of :meth:`RunEventLog.wait_run_events`, by run."""

    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = {}

    def wake(self, run_id: str) -> None:
        """Events of ``run_id`` were appended."""
        for event in self._waiters.get(run_id, ()):
            event.set()

    async def wait(self, run_id: str, timeout_s: float) -> None:
        """Until :meth:`wake` for ``run_id``, or ``timeout_s``."""
        event = asyncio.Event()
        self._waiters.setdefault(run_id, set()).add(event)
        try:
            async with asyncio.timeout(timeout_s):
                await event.wait()
        except TimeoutError:
            pass
        finally:
            waiting = self._waiters.get(run_id)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._waiters[run_id]
