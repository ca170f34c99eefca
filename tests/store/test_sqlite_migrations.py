"""Migrations of the SQLite schema: an older database opens with its rows and constraints intact,
and the schema serves every query of the transcript, the journal and the checkpoints by a key."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reverie import Agent, Limits, Runtime, tool
from reverie.core.messages import Role
from reverie.core.scope import Scope
from reverie.store import (
    NewItem,
    RunRecord,
    SQLiteStore,
    ThreadRecord,
    TranscriptItem,
    rows as codec,
)
from reverie.store.migrations import MIGRATIONS, SCHEMA_VERSION, migrate_op
from reverie.store.sql_core import SQLITE, Op, drive, insert_sql
from reverie.store.sql_ops import ITEM_COLUMNS, item_row
from reverie.testing import ScriptedModel, call, reply

ANA = Scope(tenant="acme", user="ana")


def _schema_5_database(path: Path) -> None:
    """A file as reverie left it at schema 5: a thread, a run, two items, a checkpoint and two
    journal records, written with the store's own row codecs."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA foreign_keys = ON")
        db.execute("BEGIN IMMEDIATE")
        assert drive(db, _migrate_to_5(path)) == 0
        thread = codec.thread_columns(ThreadRecord(thread_id="thr-1", scope=ANA, created_at=1.0))
        db.execute(insert_sql("threads", list(thread)), list(thread.values()))
        run = codec.run_columns(
            RunRecord(run_id="run-1", thread_id="thr-1", scope=ANA, agent_name="a")
        )
        db.execute(insert_sql("runs", list(run)), list(run.values()))
        roles: tuple[tuple[int, Role], ...] = ((1, "user"), (2, "assistant"))
        for seq, role in roles:
            item = TranscriptItem(
                ref=f"itm-{seq}",
                thread_id="thr-1",
                seq=seq,
                run_id="run-1",
                role=role,
                content=f"message {seq}",
            )
            db.execute(insert_sql("items", ITEM_COLUMNS), item_row(SQLITE, item, created_at=2.0))
        db.execute(
            "INSERT INTO checkpoints (run_id, kind, payload, created_at) VALUES (?, ?, ?, ?)",
            ("run-1", "BeforeModel", b"\x00state\xff" * 200, 3.0),
        )
        db.executemany(
            "INSERT INTO journal (run_id, call_id, tool, state, outcome, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            [
                ("run-1", "call-1", "send", "finished", '{"ok":true}', 4.0),
                ("run-1", "call-2", "send", "started", None, 5.0),
            ],
        )
        db.execute("COMMIT")
    finally:
        db.close()


def _migrate_to_5(path: Path) -> Op[int]:
    return migrate_op(SQLITE, [m for m in MIGRATIONS if m.version <= 5], label=str(path))


def _raw(path: Path, fn: Callable[[sqlite3.Connection], Any]) -> Any:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA foreign_keys = ON")
        return fn(db)
    finally:
        db.close()


async def test_a_schema_5_database_keeps_every_row_and_constraint_through_migration_6(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    _schema_5_database(path)
    async with SQLiteStore(path) as store:
        items = await store.thread_items("thr-1")
        assert [(i.ref, i.seq, i.role, i.content) for i in items] == [
            ("itm-1", 1, "user", "message 1"),
            ("itm-2", 2, "assistant", "message 2"),
        ]
        assert [i.ref for i in await store.get_items(["itm-2", "itm-1"])] == ["itm-2", "itm-1"]
        checkpoint = await store.load_checkpoint("run-1")
        assert checkpoint is not None
        assert (checkpoint.kind, checkpoint.payload) == ("BeforeModel", b"\x00state\xff" * 200)
        journal = await store.journal_get("run-1", ["call-1", "call-2"])
        assert {k: (e.state, e.outcome) for k, e in journal.items()} == {
            "call-1": ("finished", {"ok": True}),
            "call-2": ("started", None),
        }
        # The primary key still decides: a second "started" record of a finished call is a
        # no-op, and "finished" completes a started one.
        fence = await store.acquire_lease("run-1", "me", ttl_s=30, now=10.0)
        await store.journal_started("run-1", "call-1", "send", fence=fence)
        await store.journal_finished("run-1", "call-2", {"ok": 2}, fence=fence)
        journal = await store.journal_get("run-1", ["call-1", "call-2"])
        assert {k: (e.state, e.outcome) for k, e in journal.items()} == {
            "call-1": ("finished", {"ok": True}),
            "call-2": ("finished", {"ok": 2}),
        }
        appended = await store.append_items(
            "thr-1", "run-1", [NewItem(role="user", content="3")], fence=fence
        )
        assert appended[0].seq == 3

    def constraints(db: sqlite3.Connection) -> dict[str, Any]:
        found: dict[str, Any] = {
            "version": db.execute("SELECT MAX(version) FROM schema_version").fetchone()[0],
            "integrity": db.execute("PRAGMA integrity_check").fetchall(),
            "foreign_keys": db.execute("PRAGMA foreign_key_check").fetchall(),
            "journal_without_rowid": db.execute(
                "SELECT wr FROM pragma_table_list WHERE name = 'journal'"
            ).fetchone()[0],
            "items_indexes": sorted(
                row[1] for row in db.execute("PRAGMA index_list('items')").fetchall()
            ),
        }
        for name, sql, params in (
            (
                "journal_key",
                "INSERT INTO journal (run_id, call_id, tool, state, updated_at)"
                " VALUES (?, ?, 't', 'started', 0)",
                ("run-1", "call-1"),
            ),
            (
                "journal_run",
                "INSERT INTO journal (run_id, call_id, tool, state, updated_at)"
                " VALUES (?, ?, 't', 'started', 0)",
                ("run-missing", "call-9"),
            ),
            (
                "checkpoint_key",
                "INSERT INTO checkpoints (run_id, kind, payload, created_at) VALUES (?, 'Final',"
                " x'00', 0)",
                ("run-1",),
            ),
            (
                "item_seq",
                "INSERT INTO items (ref, thread_id, seq, role, content, tool_calls, meta,"
                " created_at) VALUES ('itm-x', ?, ?, 'user', '', '[]', '{}', 0)",
                ("thr-1", 1),
            ),
        ):
            with pytest.raises(sqlite3.IntegrityError) as refused:
                db.execute(sql, params)
            found[name] = str(refused.value).split(":")[0]
        return found

    assert _raw(path, constraints) == {
        "version": SCHEMA_VERSION,
        "integrity": [("ok",)],
        "foreign_keys": [],
        "journal_without_rowid": 1,
        "items_indexes": ["sqlite_autoindex_items_1", "sqlite_autoindex_items_2"],
        "journal_key": "UNIQUE constraint failed",
        "journal_run": "FOREIGN KEY constraint failed",
        "checkpoint_key": "UNIQUE constraint failed",
        "item_seq": "UNIQUE constraint failed",
    }


@tool(effects={"write"})
async def note(n: int) -> int:
    """Record n (a side effect: journaled)."""
    return n


_TABLES = re.compile(r"\b(items|journal|checkpoints)\b")


async def test_every_transcript_journal_and_checkpoint_read_or_update_is_served_by_an_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_statements: list[str]
) -> None:
    statements = sqlite_statements
    path = tmp_path / "plans.db"
    agent = Agent(
        name="planner",
        model=ScriptedModel([call("note", n=1), call("note", n=2), reply("done")]),
        tools=[note],
        limits=Limits(max_iterations=10),
    )
    async with Runtime.open(f"sqlite:///{path}") as rt:
        result = await rt.run(agent, "go", scope=ANA)
        assert result.status == "completed", result.exit
        store = rt.store
        run = await store.get_run(result.run_id)
        items = await store.thread_items(run.thread_id)
        await store.get_items([items[0].ref])
        await store.thread_items(run.thread_id, upto_seq=2)
        await store.thread_items(run.thread_id, last=2)
        await store.thread_head(run.thread_id)
        await store.supersede_items_after(run.thread_id, run.run_id, items[-1].seq)
        await store.journal_get(run.run_id, ["x", "y"])
        await store.load_checkpoint(run.run_id)
    monkeypatch.undo()

    looked_at = {
        s
        for s in statements
        if s.lstrip().upper().startswith(("SELECT", "UPDATE", "DELETE")) and _TABLES.search(s)
    }
    assert any("FROM items" in s for s in looked_at)  # the workload reached every table
    assert any("FROM journal" in s for s in looked_at)
    assert any("FROM checkpoints" in s for s in looked_at)

    def plans(db: sqlite3.Connection) -> dict[str, list[str]]:
        return {
            s: [row[3] for row in db.execute(f"EXPLAIN QUERY PLAN {s}").fetchall()]
            for s in sorted(looked_at)
        }

    scans = {
        s: steps
        for s, steps in _raw(path, plans).items()
        if any(re.match(r"SCAN (items|journal|checkpoints)\b", step) for step in steps)
    }
    assert scans == {}
