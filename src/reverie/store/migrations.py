"""The versioned schema of the SQLite store (ordered migrations) and the runner of both SQL stores.

The database records every migration it has applied in ``schema_version``. ``open()`` applies
the missing ones inside one ``BEGIN IMMEDIATE`` transaction, so two processes opening a fresh
file at once cannot both migrate it, and a failed migration leaves the file as it was. A
database whose recorded version is newer than :data:`SCHEMA_VERSION` was written by a newer
reverie: it is refused rather than read with assumptions that may no longer hold.

Rules for adding a migration: append a new :class:`Migration` with the next version; never edit
one that has shipped; keep the row codecs in :mod:`reverie.store.sqlite_schema` in step.

Scope is stored as four columns (``scope_tenant``, ``scope_user``, ``scope_agent``,
``scope_project``) rather than ``user``, which PostgreSQL reserves, so the PostgreSQL backend can
keep the same column names. JSON columns hold ``json.dumps`` text, timestamps are REAL epoch
seconds, flags are INTEGER 0/1 and checkpoint payloads are BLOBs.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass

from reverie.errors import StoreError
from reverie.store.sql_core import SQLITE, Dialect, Exec, Op, Query, drive

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Migration", "migrate", "migrate_op"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Migration:
    """One step of the schema."""

    version: int
    """Strictly increasing, starting at 1."""
    name: str
    """A short description, recorded next to the version."""
    statements: tuple[str, ...]
    """DDL run in order inside the migration transaction (one statement each)."""


_V1 = Migration(
    version=1,
    name="initial schema",
    statements=(
        """
        CREATE TABLE threads (
            thread_id     TEXT PRIMARY KEY,
            scope_tenant  TEXT NOT NULL,
            scope_user    TEXT NOT NULL,
            scope_agent   TEXT,
            scope_project TEXT,
            created_at    REAL NOT NULL
        )
        """,
        # run_id is not a foreign key: a transcript row may name a run the store has not seen
        # (the protocol only checks the run when a fence is given).
        """
        CREATE TABLE items (
            ref          TEXT PRIMARY KEY,
            thread_id    TEXT NOT NULL REFERENCES threads(thread_id),
            seq          INTEGER NOT NULL,
            run_id       TEXT,
            role         TEXT NOT NULL,
            content      TEXT NOT NULL,
            tool_calls   TEXT NOT NULL,
            tool_call_id TEXT,
            name         TEXT,
            input_id     TEXT,
            meta         TEXT NOT NULL,
            superseded   INTEGER NOT NULL DEFAULT 0,
            created_at   REAL NOT NULL,
            UNIQUE (thread_id, seq)
        )
        """,
        "CREATE INDEX items_by_run ON items (run_id, seq)",
        """
        CREATE TABLE runs (
            run_id           TEXT PRIMARY KEY,
            thread_id        TEXT NOT NULL,
            scope_tenant     TEXT NOT NULL,
            scope_user       TEXT NOT NULL,
            scope_agent      TEXT,
            scope_project    TEXT,
            agent_name       TEXT NOT NULL,
            profile          TEXT NOT NULL,
            family_id        TEXT NOT NULL,
            status           TEXT NOT NULL,
            exit             TEXT,
            created_at       REAL NOT NULL,
            updated_at       REAL NOT NULL,
            lease_owner      TEXT,
            lease_expires_at REAL,
            fence            INTEGER NOT NULL DEFAULT 0,
            cancel_requested INTEGER NOT NULL DEFAULT 0,
            idempotency_key  TEXT UNIQUE,
            has_actor        INTEGER NOT NULL DEFAULT 1,
            meta             TEXT NOT NULL,
            inputs_sealed    INTEGER NOT NULL DEFAULT 0
        )
        """,
        "CREATE INDEX runs_by_scope ON runs (scope_tenant, scope_user, created_at, run_id)",
        "CREATE INDEX runs_by_status ON runs (status, created_at, run_id)",
        "CREATE INDEX runs_by_thread ON runs (thread_id)",
        """
        CREATE TABLE checkpoints (
            run_id     TEXT PRIMARY KEY REFERENCES runs(run_id),
            kind       TEXT NOT NULL,
            payload    BLOB NOT NULL,
            created_at REAL NOT NULL
        )
        """,
        """
        CREATE TABLE journal (
            run_id     TEXT NOT NULL REFERENCES runs(run_id),
            call_id    TEXT NOT NULL,
            tool       TEXT NOT NULL,
            state      TEXT NOT NULL,
            outcome    TEXT,
            updated_at REAL NOT NULL,
            PRIMARY KEY (run_id, call_id)
        )
        """,
        # The primary key (run_id, cursor) serves poll_inputs.
        """
        CREATE TABLE inputs (
            run_id     TEXT NOT NULL REFERENCES runs(run_id),
            cursor     INTEGER NOT NULL,
            input_id   TEXT NOT NULL,
            kind       TEXT NOT NULL,
            payload    TEXT NOT NULL,
            acked      INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            PRIMARY KEY (run_id, cursor),
            UNIQUE (run_id, input_id)
        )
        """,
        """
        CREATE TABLE gates (
            ref           TEXT PRIMARY KEY,
            run_id        TEXT NOT NULL REFERENCES runs(run_id),
            call_id       TEXT NOT NULL,
            tool          TEXT NOT NULL,
            arguments     TEXT NOT NULL,
            kind          TEXT NOT NULL,
            status        TEXT NOT NULL,
            reason        TEXT,
            scope_tenant  TEXT NOT NULL,
            scope_user    TEXT NOT NULL,
            scope_agent   TEXT,
            scope_project TEXT,
            created_at    REAL NOT NULL,
            resolved_at   REAL,
            UNIQUE (run_id, call_id)
        )
        """,
        "CREATE INDEX gates_by_status ON gates (status, created_at, ref)",
        "CREATE INDEX gates_by_scope ON gates (scope_tenant, scope_user, created_at, ref)",
    ),
)

_MEMORY_SCOPE = """
            scope_tenant  TEXT NOT NULL,
            scope_user    TEXT NOT NULL,
            scope_agent   TEXT NOT NULL,
            scope_project TEXT NOT NULL,"""
# Memory tables store an unset agent/project as '' (not NULL) so the scope can be part of a
# primary key: SQLite treats every NULL as distinct in a UNIQUE constraint.

_V2 = Migration(
    version=2,
    name="memory: documents, versions, daily log, full-text index, curation passes",
    statements=(
        f"""
        CREATE TABLE memory_documents ({_MEMORY_SCOPE}
            path          TEXT NOT NULL,
            text          TEXT NOT NULL,
            version       INTEGER NOT NULL,
            updated_at    REAL NOT NULL,
            PRIMARY KEY (scope_tenant, scope_user, scope_agent, scope_project, path)
        )
        """,
        f"""
        CREATE TABLE memory_document_versions ({_MEMORY_SCOPE}
            path          TEXT NOT NULL,
            version       INTEGER NOT NULL,
            text          TEXT NOT NULL,
            created_at    REAL NOT NULL,
            PRIMARY KEY (scope_tenant, scope_user, scope_agent, scope_project, path, version)
        )
        """,
        # What search reads: log entries (kind 'log', ref = the day) and the current text of
        # each document (kind 'document', ref = its path, updated in place on every write).
        # scope_token is a digest of the full scope, indexed by FTS so a search intersects
        # with the scope's rows inside the index instead of filtering every match.
        f"""
        CREATE TABLE memory_entries (
            id            INTEGER PRIMARY KEY AUTOINCREMENT,{_MEMORY_SCOPE}
            scope_token   TEXT NOT NULL,
            kind          TEXT NOT NULL,
            ref           TEXT NOT NULL,
            body          TEXT NOT NULL,
            created_at    REAL NOT NULL
        )
        """,
        "CREATE INDEX memory_entries_by_ref ON memory_entries"
        " (scope_tenant, scope_user, scope_agent, scope_project, kind, ref, id)",
        "CREATE VIRTUAL TABLE memory_fts USING fts5(scope_token, body,"
        " content='memory_entries', content_rowid='id', tokenize='unicode61')",
        """
        CREATE TRIGGER memory_entries_ai AFTER INSERT ON memory_entries BEGIN
            INSERT INTO memory_fts (rowid, scope_token, body)
            VALUES (new.id, new.scope_token, new.body);
        END
        """,
        """
        CREATE TRIGGER memory_entries_ad AFTER DELETE ON memory_entries BEGIN
            INSERT INTO memory_fts (memory_fts, rowid, scope_token, body)
            VALUES ('delete', old.id, old.scope_token, old.body);
        END
        """,
        """
        CREATE TRIGGER memory_entries_au AFTER UPDATE ON memory_entries BEGIN
            INSERT INTO memory_fts (memory_fts, rowid, scope_token, body)
            VALUES ('delete', old.id, old.scope_token, old.body);
            INSERT INTO memory_fts (rowid, scope_token, body)
            VALUES (new.id, new.scope_token, new.body);
        END
        """,
        f"""
        CREATE TABLE memory_passes (
            pass_id       TEXT PRIMARY KEY,{_MEMORY_SCOPE}
            run_id        TEXT NOT NULL,
            report        TEXT NOT NULL,
            created_at    REAL NOT NULL
        )
        """,
        "CREATE INDEX memory_passes_by_scope ON memory_passes"
        " (scope_tenant, scope_user, scope_agent, scope_project, created_at)",
    ),
)

_V3 = Migration(
    version=3,
    name="run events: each run's typed events, replayable from any process",
    statements=(
        """
        CREATE TABLE run_events (
            run_id      TEXT NOT NULL,
            seq         INTEGER NOT NULL,
            kind        TEXT NOT NULL,
            data        TEXT NOT NULL,
            created_at  REAL NOT NULL,
            PRIMARY KEY (run_id, seq)
        ) WITHOUT ROWID
        """,
    ),
)

_V4 = Migration(
    version=4,
    name="memory: completed-turn counts per owner (curation cadence)",
    statements=(
        """
        CREATE TABLE memory_turn_counts (
            scope_tenant  TEXT NOT NULL,
            scope_user    TEXT NOT NULL,
            turns         INTEGER NOT NULL,
            updated_at    REAL NOT NULL,
            PRIMARY KEY (scope_tenant, scope_user)
        )
        """,
    ),
)

_V5 = Migration(
    version=5,
    name="the step commit as one statement (a PostgreSQL function; nothing to do on SQLite)",
    statements=(),
)
"""Kept so both backends number their migrations alike: the next shared one is 6 on both."""

_V6 = Migration(
    version=6,
    name="fewer B-trees per step commit: journal keyed by its primary key, no items_by_run",
    statements=(
        # Every page a step commit dirties is written to the WAL by its COMMIT and copied again
        # by the next checkpoint. A rowid table with a composite primary key is two B-trees
        # (the rows, and the key's index), so a journal record dirtied a page of each; keyed
        # by its primary key it is one. SQLite cannot change a table's kind in place: build,
        # copy, drop, rename (nothing references journal, so no foreign key is touched).
        # checkpoints stays a rowid table: its ~1 KB payloads are past what a WITHOUT ROWID
        # leaf holds in place (about a quarter page), so each save would spill to an overflow
        # page, and its key's index is not written when a checkpoint is replaced.
        """
        CREATE TABLE journal_v6 (
            run_id     TEXT NOT NULL REFERENCES runs(run_id),
            call_id    TEXT NOT NULL,
            tool       TEXT NOT NULL,
            state      TEXT NOT NULL,
            outcome    TEXT,
            updated_at REAL NOT NULL,
            PRIMARY KEY (run_id, call_id)
        ) WITHOUT ROWID
        """,
        "INSERT INTO journal_v6 (run_id, call_id, tool, state, outcome, updated_at)"
        " SELECT run_id, call_id, tool, state, outcome, updated_at FROM journal",
        "DROP TABLE journal",
        "ALTER TABLE journal_v6 RENAME TO journal",
        # No query reads items by run alone: a run's rows are always looked up within their
        # thread, through UNIQUE (thread_id, seq). The index only cost every append a page.
        "DROP INDEX items_by_run",
    ),
)

_V7 = Migration(
    version=7,
    name="an event flush as one statement (a PostgreSQL function; nothing to do on SQLite)",
    statements=(),
)
"""Kept so both backends number their migrations alike (SQLite's writer lock already makes a
flush one transaction of statements that cost no round trip)."""

_V8 = Migration(
    version=8,
    name="gates: who resolved, digests of the arguments shown and approved, edited arguments",
    statements=(
        "ALTER TABLE gates ADD COLUMN resolved_by TEXT",
        "ALTER TABLE gates ADD COLUMN shown_digest TEXT",
        "ALTER TABLE gates ADD COLUMN approved_digest TEXT",
        "ALTER TABLE gates ADD COLUMN edited_arguments TEXT",
    ),
)


_V9 = Migration(
    version=9,
    name="schedules and their claimed occurrences",
    statements=(
        """
        CREATE TABLE schedules (
            name          TEXT PRIMARY KEY,
            scope_tenant  TEXT NOT NULL,
            scope_user    TEXT NOT NULL,
            scope_agent   TEXT NOT NULL,
            scope_project TEXT NOT NULL,
            spec          TEXT NOT NULL,
            next_at       REAL NOT NULL,
            paused        INTEGER NOT NULL DEFAULT 0,
            created_at    REAL NOT NULL
        )
        """,
        # One row per claimed occurrence: the primary key is what makes a claim exactly once
        # (the claim writes it in the transaction that advances schedules.next_at).
        """
        CREATE TABLE schedule_occurrences (
            name       TEXT NOT NULL REFERENCES schedules (name),
            occurs_at  REAL NOT NULL,
            run_key    TEXT NOT NULL,
            status     TEXT NOT NULL,
            run_id     TEXT,
            claimed_at REAL NOT NULL,
            PRIMARY KEY (name, occurs_at)
        )
        """,
    ),
)

MIGRATIONS: tuple[Migration, ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9)
"""Every migration, oldest first."""

SCHEMA_VERSION: int = MIGRATIONS[-1].version
"""The newest schema this build knows; a database recording a higher one is refused."""


def migrate_op(d: Dialect, migrations: Sequence[Migration], *, label: str) -> Op[int]:
    """Bring the schema up to the last of ``migrations``; the version found before.

    Runs inside the caller's transaction, which must hold the database against other
    migrating processes (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: the dialect's
    ``schema_lock``, taken first). The version table is created only when missing, so a role
    without CREATE may open an up-to-date database.

    Raises:
        StoreError: The database was created by a newer reverie (its version is above the
            newest of ``migrations``).
    """
    newest = migrations[-1].version
    if d.schema_lock is not None:
        yield [Exec(d.schema_lock)]
    [[row]] = yield [Query(d.version_table_missing)]
    if row["missing"]:
        yield [
            Exec(
                "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
                f" applied_at {d.real} NOT NULL)"
            )
        ]
    [[row]] = yield [Query("SELECT COALESCE(MAX(version), 0) AS found FROM schema_version")]
    found = int(row["found"])
    if found > newest:
        raise StoreError(
            f"database {label} has schema version {found}, newer than the newest this "
            f"build of reverie supports ({newest}); upgrade reverie to open it"
        )
    for migration in migrations:
        if migration.version <= found:
            continue
        for statement in migration.statements:
            yield [Exec(statement)]
        yield [
            d.exec(
                "INSERT INTO schema_version (version, name, applied_at) VALUES (?, ?, ?)",
                migration.version,
                migration.name,
                time.time(),
            )
        ]
    return found


def migrate(db: sqlite3.Connection, *, label: str) -> int:
    """Bring the SQLite schema up to :data:`SCHEMA_VERSION` and return the version found before.

    ``db`` must be in autocommit mode (``isolation_level=None``) with no open transaction; the
    whole migration is one ``BEGIN IMMEDIATE`` transaction, rolled back on any error. It runs
    on the writer's thread, before the writer serves any other operation.

    Args:
        db: The writer connection.
        label: Names the database in error messages (its path).

    Raises:
        StoreError: The database was created by a newer reverie (its schema version is above
            :data:`SCHEMA_VERSION`).
        sqlite3.Error: The file is not a usable database; the caller wraps it.
    """
    try:
        db.execute("BEGIN IMMEDIATE")
        found = drive(db, migrate_op(SQLITE, MIGRATIONS, label=label))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            with contextlib.suppress(sqlite3.Error):  # keep the error that got us here
                db.execute("ROLLBACK")
        raise
    return found
