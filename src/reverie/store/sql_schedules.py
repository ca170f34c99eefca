"""The schedule tables (:class:`~reverie.store.schedules.ScheduleStore`) of both SQL stores.

The tables are those of schema version 9 (:mod:`reverie.store.migrations`,
:mod:`reverie.store.postgres_schema`). The claim is a compare-and-swap on ``next_at``
(``UPDATE … WHERE next_at = expected``) followed, in the same transaction, by the occurrence
rows: on SQLite the writer's lock orders claimers; on PostgreSQL a second claimer waits on the
row lock, re-checks the condition against the first one's row and changes nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from reverie.store import rows as codec
from reverie.store.schedules import OccurrenceRecord, OccurrenceStatus, ScheduleRecord
from reverie.store.sql_core import Dialect, Op, OpRunner

__all__ = ["SQLSchedules"]

_COLUMNS = "name, scope_tenant, scope_user, scope_agent, scope_project, spec, next_at, paused"
_OCCURRENCE = "name, occurs_at, run_key, status, run_id, claimed_at"


def _schedule(row: codec.Row) -> ScheduleRecord:
    return ScheduleRecord(
        name=row["name"],
        scope=codec.row_scope(row),
        spec=json.loads(row["spec"]),
        next_at=float(row["next_at"]),
        paused=bool(row["paused"]),
        created_at=float(row["created_at"]),
    )


def _occurrence(row: codec.Row) -> OccurrenceRecord:
    return OccurrenceRecord(
        name=row["name"],
        at=float(row["occurs_at"]),
        key=row["run_key"],
        status=row["status"],
        run_id=row["run_id"],
        claimed_at=float(row["claimed_at"]),
    )


def _values(s: ScheduleRecord) -> list[Any]:
    scope = s.scope
    return [
        s.name,
        scope.tenant,
        scope.user,
        scope.agent or "",
        scope.project or "",
        json.dumps(dict(s.spec), sort_keys=True),
        s.next_at,
        int(s.paused),
    ]


def _occurrence_values(o: OccurrenceRecord) -> list[Any]:
    return [o.name, o.at, o.key, o.status, o.run_id, o.claimed_at or time.time()]


# ops ----------------------------------------------------------------------------------------
def insert_schedule(d: Dialect, s: ScheduleRecord) -> Op[bool]:
    """Insert unless the name exists."""
    [inserted] = yield [
        d.count(
            f"INSERT INTO schedules ({_COLUMNS}, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT DO NOTHING",
            *_values(s),
            s.created_at or time.time(),
        )
    ]
    return bool(inserted)


def update_schedule(d: Dialect, s: ScheduleRecord) -> Op[bool]:
    """Replace everything but the name and the creation time."""
    name, *rest = _values(s)
    [changed] = yield [
        d.count(
            "UPDATE schedules SET scope_tenant = ?, scope_user = ?, scope_agent = ?,"
            " scope_project = ?, spec = ?, next_at = ?, paused = ? WHERE name = ?",
            *rest,
            name,
        )
    ]
    return bool(changed)


def claim_occurrences(
    d: Dialect,
    name: str,
    expected_next_at: float,
    next_at: float,
    occurrences: Sequence[OccurrenceRecord],
) -> Op[bool]:
    """Compare-and-swap ``next_at``, then write the claimed rows (only when the swap held)."""
    [moved] = yield [
        d.count(
            "UPDATE schedules SET next_at = ? WHERE name = ? AND next_at = ? AND paused = 0",
            next_at,
            name,
            expected_next_at,
        )
    ]
    if not moved:
        return False
    if occurrences:
        yield [
            d.insert_rows(
                "schedule_occurrences",
                [c.strip() for c in _OCCURRENCE.split(",")],
                [_occurrence_values(o) for o in occurrences],
            )
        ]
    return True


def insert_occurrence(d: Dialect, o: OccurrenceRecord) -> Op[bool]:
    """Insert an occurrence of an existing schedule, unless it exists."""
    [found] = yield [d.query("SELECT 1 AS one FROM schedules WHERE name = ?", o.name)]
    if not found:
        return False
    [inserted] = yield [
        d.count(
            f"INSERT INTO schedule_occurrences ({_OCCURRENCE}) VALUES (?, ?, ?, ?, ?, ?)"
            " ON CONFLICT DO NOTHING",
            *_occurrence_values(o),
        )
    ]
    return bool(inserted)


def delete_schedule(d: Dialect, name: str) -> Op[bool]:
    """Delete the schedule and its occurrence rows."""
    [_, deleted] = yield [
        d.exec("DELETE FROM schedule_occurrences WHERE name = ?", name),
        d.count("DELETE FROM schedules WHERE name = ?", name),
    ]
    return bool(deleted)


def settle_occurrence(
    d: Dialect, name: str, at: float, status: OccurrenceStatus, run_id: str | None
) -> Op[bool]:
    """Settle a claimed occurrence (only a claimed one)."""
    [changed] = yield [
        d.count(
            "UPDATE schedule_occurrences SET status = ?, run_id = ?"
            " WHERE name = ? AND occurs_at = ? AND status = 'claimed'",
            status,
            run_id,
            name,
            at,
        )
    ]
    return bool(changed)


def select_schedules(d: Dialect, where: str, *params: Any) -> Op[list[ScheduleRecord]]:
    """Schedules matching ``where``, by name."""
    [rows] = yield [
        d.query(f"SELECT {_COLUMNS}, created_at FROM schedules {where} ORDER BY name", *params)
    ]
    return [_schedule(row) for row in rows]


def select_occurrences(d: Dialect, tail: str, *params: Any) -> Op[list[OccurrenceRecord]]:
    """Occurrence rows matching ``tail`` (a WHERE and ORDER BY clause)."""
    [rows] = yield [d.query(f"SELECT {_OCCURRENCE} FROM schedule_occurrences {tail}", *params)]
    return [_occurrence(row) for row in rows]


class SQLSchedules(OpRunner):
    """The ``ScheduleStore`` methods of both SQL stores."""

    async def insert_schedule(self, schedule: ScheduleRecord) -> bool:
        return await self._write_op(
            "add a schedule", lambda: insert_schedule(self.dialect, schedule)
        )

    async def update_schedule(self, schedule: ScheduleRecord) -> bool:
        return await self._write_op(
            "update a schedule", lambda: update_schedule(self.dialect, schedule)
        )

    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        found = await self._read_op(
            "read a schedule", lambda: select_schedules(self.dialect, "WHERE name = ?", name)
        )
        return found[0] if found else None

    async def list_schedules(self) -> list[ScheduleRecord]:
        return await self._read_op("list schedules", lambda: select_schedules(self.dialect, ""))

    async def delete_schedule(self, name: str) -> bool:
        return await self._write_op(
            "delete a schedule", lambda: delete_schedule(self.dialect, name)
        )

    async def claim_occurrences(
        self,
        name: str,
        *,
        expected_next_at: float,
        next_at: float,
        occurrences: Sequence[OccurrenceRecord],
    ) -> bool:
        return await self._write_op(
            "claim schedule occurrences",
            lambda: claim_occurrences(self.dialect, name, expected_next_at, next_at, occurrences),
        )

    async def insert_occurrence(self, occurrence: OccurrenceRecord) -> bool:
        return await self._write_op(
            "record a schedule occurrence", lambda: insert_occurrence(self.dialect, occurrence)
        )

    async def pending_occurrences(self, name: str) -> list[OccurrenceRecord]:
        return await self._read_op(
            "read pending occurrences",
            lambda: select_occurrences(
                self.dialect, "WHERE name = ? AND status = 'claimed' ORDER BY occurs_at", name
            ),
        )

    async def settle_occurrence(
        self, name: str, at: float, status: OccurrenceStatus, *, run_id: str | None
    ) -> bool:
        return await self._write_op(
            "settle a schedule occurrence",
            lambda: settle_occurrence(self.dialect, name, at, status, run_id),
        )

    async def occurrences(self, name: str, *, limit: int = 50) -> list[OccurrenceRecord]:
        return await self._read_op(
            "read schedule history",
            lambda: select_occurrences(
                self.dialect, "WHERE name = ? ORDER BY occurs_at DESC LIMIT ?", name, limit
            ),
        )
