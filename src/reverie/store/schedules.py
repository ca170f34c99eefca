"""Schedules in the store: their rows, the claim of an occurrence, and the in-memory backend.

A schedule row holds its spec (as JSON, read by :mod:`reverie.runtime.schedules`), whether it is
paused, and ``next_at``: the epoch second of the next occurrence nobody has claimed yet. An
occurrence is claimed by :meth:`ScheduleStore.claim_occurrences`, a compare-and-swap on
``next_at`` that writes the claimed occurrences' rows in the same transaction: of any number of
processes claiming the same occurrence, exactly one advances the schedule and gets the rows
(DESIGN §20, one run per schedule occurrence). An occurrence row starts ``claimed`` and
becomes ``started`` (with its run id) or ``skipped``; a claimed row whose claimer died is
picked up by the next tick anywhere, and since its run is started under the occurrence's
idempotency key, two processes finishing one claim still start one run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

from reverie.core.scope import Scope

__all__ = [
    "MemorySchedules",
    "OccurrenceRecord",
    "OccurrenceStatus",
    "ScheduleRecord",
    "ScheduleStore",
]

OccurrenceStatus = Literal["claimed", "started", "skipped"]
"""Claimed (its run not started yet), started (``run_id`` names it), or skipped (overlap)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleRecord:
    """A schedule row."""

    name: str
    scope: Scope
    spec: Mapping[str, Any]
    """The schedule's settings (cron or interval, zone, agent, input, policies) as JSON."""
    next_at: float
    """Epoch seconds of the next occurrence not yet claimed."""
    paused: bool = False
    created_at: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class OccurrenceRecord:
    """One occurrence of a schedule that some process claimed."""

    name: str
    at: float
    """The occurrence's time (epoch seconds)."""
    key: str
    """The idempotency key its run is started under (derived from schedule and time)."""
    status: OccurrenceStatus = "claimed"
    run_id: str | None = None
    claimed_at: float = 0.0
    meta: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class ScheduleStore(Protocol):
    """The schedule tables of a store (every built-in backend has them)."""

    async def insert_schedule(self, schedule: ScheduleRecord) -> bool:
        """Insert the schedule; False (and nothing written) when its name exists."""
        ...

    async def update_schedule(self, schedule: ScheduleRecord) -> bool:
        """Replace the spec, scope, ``next_at`` and paused flag of an existing schedule."""
        ...

    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        """The schedule of that name, or None."""
        ...

    async def list_schedules(self) -> list[ScheduleRecord]:
        """Every schedule, by name."""
        ...

    async def delete_schedule(self, name: str) -> bool:
        """Delete the schedule and its occurrence rows; False when there was none."""
        ...

    async def claim_occurrences(
        self,
        name: str,
        *,
        expected_next_at: float,
        next_at: float,
        occurrences: Sequence[OccurrenceRecord],
    ) -> bool:
        """Advance an unpaused schedule from ``expected_next_at`` and record ``occurrences``.

        One transaction: True when this call advanced the schedule (its occurrence rows are
        written); False when the schedule is paused, gone, or another claim moved it first
        (nothing written).
        """
        ...

    async def insert_occurrence(self, occurrence: OccurrenceRecord) -> bool:
        """Record an occurrence outside the schedule's course (run-now); False if it exists."""
        ...

    async def pending_occurrences(self, name: str) -> list[OccurrenceRecord]:
        """The schedule's occurrences still ``claimed``, oldest first."""
        ...

    async def settle_occurrence(
        self, name: str, at: float, status: OccurrenceStatus, *, run_id: str | None
    ) -> bool:
        """Move a ``claimed`` occurrence to ``started``/``skipped``; False if already settled."""
        ...

    async def occurrences(self, name: str, *, limit: int = 50) -> list[OccurrenceRecord]:
        """The schedule's occurrences, newest first."""
        ...


class MemorySchedules:
    """The :class:`ScheduleStore` of :class:`~reverie.store.MemoryStore` (one process)."""

    def __init__(self) -> None:
        super().__init__()
        self._schedules: dict[str, ScheduleRecord] = {}
        self._occurrences: dict[str, dict[float, OccurrenceRecord]] = {}

    async def insert_schedule(self, schedule: ScheduleRecord) -> bool:
        if schedule.name in self._schedules:
            return False
        self._schedules[schedule.name] = schedule
        self._occurrences[schedule.name] = {}
        return True

    async def update_schedule(self, schedule: ScheduleRecord) -> bool:
        old = self._schedules.get(schedule.name)
        if old is None:
            return False
        self._schedules[schedule.name] = replace(schedule, created_at=old.created_at)
        return True

    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        return self._schedules.get(name)

    async def list_schedules(self) -> list[ScheduleRecord]:
        return [self._schedules[n] for n in sorted(self._schedules)]

    async def delete_schedule(self, name: str) -> bool:
        self._occurrences.pop(name, None)
        return self._schedules.pop(name, None) is not None

    async def claim_occurrences(
        self,
        name: str,
        *,
        expected_next_at: float,
        next_at: float,
        occurrences: Sequence[OccurrenceRecord],
    ) -> bool:
        current = self._schedules.get(name)
        if current is None or current.paused or current.next_at != expected_next_at:
            return False
        self._schedules[name] = replace(current, next_at=next_at)
        rows = self._occurrences[name]
        for occurrence in occurrences:
            rows.setdefault(occurrence.at, occurrence)
        return True

    async def insert_occurrence(self, occurrence: OccurrenceRecord) -> bool:
        rows = self._occurrences.get(occurrence.name)
        if rows is None or occurrence.at in rows:
            return False
        rows[occurrence.at] = occurrence
        return True

    async def pending_occurrences(self, name: str) -> list[OccurrenceRecord]:
        rows = self._occurrences.get(name, {})
        return [rows[at] for at in sorted(rows) if rows[at].status == "claimed"]

    async def settle_occurrence(
        self, name: str, at: float, status: OccurrenceStatus, *, run_id: str | None
    ) -> bool:
        rows = self._occurrences.get(name, {})
        row = rows.get(at)
        if row is None or row.status != "claimed":
            return False
        rows[at] = replace(row, status=status, run_id=run_id)
        return True

    async def occurrences(self, name: str, *, limit: int = 50) -> list[OccurrenceRecord]:
        rows = self._occurrences.get(name, {})
        return [rows[at] for at in sorted(rows, reverse=True)[:limit]]
