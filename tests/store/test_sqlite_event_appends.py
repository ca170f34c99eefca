"""An append of run events finds each run's last seq through the key's index: the work does not
grow with the events the run keeps (up to ``MAX_RUN_EVENTS``, ten thousand)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from reverie.store import SQLiteStore


def _instructions(path: Path, sql: str) -> int:
    """SQLite VM instructions ``sql`` takes (a count, not a time: the same on any machine)."""
    db = sqlite3.connect(path)
    try:
        counted = [0]

        def tick() -> int:
            counted[0] += 1
            return 0

        db.set_progress_handler(tick, 1)
        db.execute(sql).fetchall()
        return counted[0]
    finally:
        db.close()


async def test_appending_events_reads_a_runs_last_seq_in_work_independent_of_how_many_it_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_statements: list[str]
) -> None:
    statements = sqlite_statements
    path = tmp_path / "events.db"
    async with SQLiteStore(path) as store:
        await store.append_run_events("run-few", [{"kind": "k", "n": n} for n in range(3)])
        await store.append_run_events("run-many", [{"kind": "k", "n": n} for n in range(5000)])
        statements.clear()
        assert await store.append_event_batches({"run-few": [{"kind": "k"}]}) == {"run-few": 4}
        few = [s for s in statements if s.startswith("SELECT") and "run_events" in s]
        statements.clear()
        assert await store.append_event_batches({"run-many": [{"kind": "k"}]}) == {"run-many": 5001}
        many = [s for s in statements if s.startswith("SELECT") and "run_events" in s]
    monkeypatch.undo()
    assert len(few) == len(many) == 1
    # The same statement for either run; reading 5,000 rows would take thousands more steps.
    assert _instructions(path, many[0]) <= _instructions(path, few[0]) + 5
