"""How :class:`reverie.store.sqlite.SQLiteStore` talks to its file, below the Store semantics.

Internal to the SQLite backend (imported there as ``schema``):

- :func:`open_connections` opens the writer (WAL, ``synchronous``, ``busy_timeout``, foreign
  keys), applies the migrations of :mod:`reverie.store.migrations`, then opens the
  ``query_only`` reader. :func:`db_errors` turns ``sqlite3`` errors into store errors.
- Statement helpers, one aiosqlite round trip each, and the fence guard of compare-and-set
  writes (:data:`FENCED`, :func:`check_fence`).
- Row codecs: record → column dict for an INSERT, row → record. They are the only code that
  knows every column; keep them in step with the latest migration.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiosqlite

from reverie.core.messages import ToolCall
from reverie.core.scope import Scope
from reverie.errors import ConflictError, LeaseLost, NotFoundError, StoreError
from reverie.store.base import (
    CheckpointRecord,
    GateRecord,
    InputRecord,
    JournalEntry,
    RunRecord,
    ThreadRecord,
    TranscriptItem,
)
from reverie.store.migrations import migrate

Columns = dict[str, Any]
"""Column name → value, ready for an INSERT."""

SYNCHRONOUS_MODES: frozenset[str] = frozenset({"OFF", "NORMAL", "FULL", "EXTRA"})
"""Accepted values of ``PRAGMA synchronous``."""


@contextlib.contextmanager
def db_errors(action: str) -> Iterator[None]:
    """Re-raise ``sqlite3`` errors as store errors (the message names the action, not data).

    A constraint violation becomes :class:`ConflictError`, anything else :class:`StoreError`;
    the original stays in ``__cause__``.
    """
    try:
        yield
    except sqlite3.IntegrityError as exc:
        raise ConflictError(f"SQLite store could not {action}: {exc}") from exc
    except sqlite3.Error as exc:
        raise StoreError(f"SQLite store could not {action}: {exc}") from exc


async def _pragma(db: aiosqlite.Connection, pragma: str) -> Any:
    rows = list(await db.execute_fetchall(f"PRAGMA {pragma}"))
    return rows[0][0] if rows else None


async def _connect(path: Path, busy_ms: int, *pragmas: str) -> aiosqlite.Connection:
    # isolation_level=None: autocommit, so the store issues BEGIN IMMEDIATE/COMMIT itself.
    db = await aiosqlite.connect(path, isolation_level=None, timeout=busy_ms / 1000)
    try:
        db.row_factory = sqlite3.Row
        for pragma in (f"busy_timeout = {busy_ms}", *pragmas):
            await _pragma(db, pragma)
    except BaseException:
        await db.close()
        raise
    return db


async def _enable_wal(db: aiosqlite.Connection, busy_ms: int) -> str:
    """Switch the file to WAL and return the journal mode now in force.

    The switch needs an exclusive lock and SQLite may answer SQLITE_BUSY at once, without its
    busy handler (two processes opening a fresh file together), so retry up to the timeout.
    """
    deadline = time.monotonic() + busy_ms / 1000
    while True:
        try:
            return str(await _pragma(db, "journal_mode = WAL")).lower()
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.01)


async def close_all(*connections: aiosqlite.Connection | None) -> None:
    """Close every connection given (``None`` entries are skipped)."""
    for db in connections:
        if db is not None:
            await db.close()


async def open_connections(
    path: Path, *, synchronous: str, busy_ms: int
) -> tuple[aiosqlite.Connection, aiosqlite.Connection]:
    """Open and migrate the database; return ``(writer, reader)``.

    On any failure both connections are closed before the error propagates (``sqlite3``
    errors unwrapped: the caller wraps them with :func:`db_errors`).

    Raises:
        StoreError: The file system does not support WAL, or the schema is newer than this
            build.
    """
    writer = reader = None
    try:
        writer = await _connect(path, busy_ms)
        if await _enable_wal(writer, busy_ms) != "wal":
            raise StoreError(f"{path}: the file system does not support WAL mode")
        await _pragma(writer, f"synchronous = {synchronous}")
        await _pragma(writer, "foreign_keys = ON")
        await migrate(writer, label=str(path))
        reader = await _connect(path, busy_ms, "query_only = ON")
    except BaseException:
        await close_all(reader, writer)
        raise
    return writer, reader


# statement helpers --------------------------------------------------------------------------
def marks(n: int) -> str:
    """``n`` comma-separated ``?`` placeholders."""
    return ",".join("?" * n)


def where(scope: Scope | None, statuses: Sequence[str] | None) -> tuple[str, list[Any]]:
    """The WHERE clause of the list queries: scope means tenant and user, as in MemoryStore."""
    clauses: list[str] = []
    params: list[Any] = []
    if scope is not None:
        clauses.append("scope_tenant = ? AND scope_user = ?")
        params += [scope.tenant, scope.user]
    if statuses is not None:
        clauses.append(f"status IN ({marks(len(statuses))})")
        params += statuses
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


async def rows(db: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
    """Every row of one statement."""
    return list(await db.execute_fetchall(sql, params))


async def one(db: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> sqlite3.Row | None:
    """The first row of one statement, or ``None``."""
    found = await rows(db, sql, params)
    return found[0] if found else None


async def execute(db: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> int:
    """Run one statement and return the number of rows it changed."""
    async with db.execute(sql, params) as cursor:
        return cursor.rowcount


async def insert(db: aiosqlite.Connection, table: str, rows: Sequence[Columns]) -> None:
    """Insert rows (all with the same columns) in one round trip."""
    if not rows:
        return
    # Table and column names come from this package's codecs, never from callers.
    sql = f"INSERT INTO {table} ({', '.join(rows[0])}) VALUES ({marks(len(rows[0]))})"
    async with db.executemany(sql, [tuple(row.values()) for row in rows]):
        pass


async def get_run(db: aiosqlite.Connection, run_id: str) -> RunRecord:
    """The run, read on ``db`` (inside a transaction), or :class:`NotFoundError`."""
    row = await one(db, "SELECT * FROM runs WHERE run_id = ?", (run_id,))
    if row is None:
        raise NotFoundError(f"run {run_id} not found")
    return row_run(row)


def first_int(row: sqlite3.Row) -> int:
    """The first column as an int."""
    return int(row[0])


FENCED = "EXISTS (SELECT 1 FROM runs WHERE run_id = ? AND fence = ?)"
"""Guard of a one-statement compare-and-set write; parameters ``(run_id, fence)``."""


def raise_if_stale(run_id: str, fence: int, current: int | None) -> None:
    """:class:`NotFoundError` if the run is missing, :class:`LeaseLost` if ``fence`` is stale."""
    if current is None:
        raise NotFoundError(f"run {run_id} not found")
    if current != fence:
        raise LeaseLost(f"run {run_id}: fencing token {fence} is stale (now {current})")


async def check_fence(db: aiosqlite.Connection, run_id: str, fence: int) -> None:
    """Raise unless ``fence`` is current: the compare of a compare-and-set transaction."""
    row = await one(db, "SELECT fence FROM runs WHERE run_id = ?", (run_id,))
    raise_if_stale(run_id, fence, None if row is None else row["fence"])


# row codecs ---------------------------------------------------------------------------------
def dumps(value: Any) -> str:
    """JSON text for a JSON column; :class:`StoreError` (naming no data) if it cannot be."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"value is not JSON-serialisable ({type(exc).__name__})") from exc


def _loads_opt(text: str | None) -> Any:
    return json.loads(text) if text is not None else None


def scope_columns(scope: Scope) -> Columns:
    """The four scope columns."""
    return {
        "scope_tenant": scope.tenant,
        "scope_user": scope.user,
        "scope_agent": scope.agent,
        "scope_project": scope.project,
    }


def row_scope(row: sqlite3.Row) -> Scope:
    """The scope stored in a row's scope columns."""
    return Scope(
        tenant=row["scope_tenant"],
        user=row["scope_user"],
        agent=row["scope_agent"],
        project=row["scope_project"],
    )


def thread_columns(rec: ThreadRecord) -> Columns:
    """Columns of a ``threads`` row."""
    return {"thread_id": rec.thread_id, **scope_columns(rec.scope), "created_at": rec.created_at}


def row_thread(row: sqlite3.Row) -> ThreadRecord:
    """A ``threads`` row as a record."""
    return ThreadRecord(
        thread_id=row["thread_id"], scope=row_scope(row), created_at=row["created_at"]
    )


def item_columns(rec: TranscriptItem, *, created_at: float) -> Columns:
    """Columns of an ``items`` row."""
    return {
        "ref": rec.ref,
        "thread_id": rec.thread_id,
        "seq": rec.seq,
        "run_id": rec.run_id,
        "role": rec.role,
        "content": rec.content,
        "tool_calls": dumps([c.to_dict() for c in rec.tool_calls]),
        "tool_call_id": rec.tool_call_id,
        "name": rec.name,
        "input_id": rec.input_id,
        "meta": dumps(dict(rec.meta)),
        "superseded": int(rec.superseded),
        "created_at": created_at,
    }


def row_item(row: sqlite3.Row) -> TranscriptItem:
    """An ``items`` row as a record."""
    return TranscriptItem(
        ref=row["ref"],
        seq=row["seq"],
        thread_id=row["thread_id"],
        run_id=row["run_id"],
        role=row["role"],
        content=row["content"],
        tool_calls=tuple(ToolCall.from_dict(c) for c in json.loads(row["tool_calls"])),
        tool_call_id=row["tool_call_id"],
        name=row["name"],
        input_id=row["input_id"],
        meta=json.loads(row["meta"]),
        superseded=bool(row["superseded"]),
    )


class ItemCache:
    """Decoded transcript items by ref, oldest first, at most ``size`` of them.

    Rows never change once written except for ``superseded`` (checked on every read), so the
    cache is safe even with other processes writing the file; it spares decoding the whole
    prompt window on every model call.
    """

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._items: dict[str, TranscriptItem] = {}

    def __len__(self) -> int:
        return len(self._items)

    def decode(self, row: sqlite3.Row) -> TranscriptItem:
        """The item of an ``items`` row, decoded once."""
        cached = self._items.get(row["ref"])
        if cached is not None and not row["superseded"]:
            return cached
        item = row_item(row)
        if not item.superseded:
            self._items[item.ref] = item
            if len(self._items) > self._size:
                del self._items[next(iter(self._items))]  # the oldest entry
        return item


def exit_column(exit: Mapping[str, Any] | None) -> str | None:
    """The ``runs.exit`` column."""
    return dumps(dict(exit)) if exit is not None else None


def run_columns(rec: RunRecord) -> Columns:
    """Columns of a ``runs`` row."""
    return {
        "run_id": rec.run_id,
        "thread_id": rec.thread_id,
        **scope_columns(rec.scope),
        "agent_name": rec.agent_name,
        "profile": rec.profile,
        "family_id": rec.family_id,
        "status": rec.status,
        "exit": exit_column(rec.exit),
        "created_at": rec.created_at,
        "updated_at": rec.updated_at,
        "lease_owner": rec.lease_owner,
        "lease_expires_at": rec.lease_expires_at,
        "fence": rec.fence,
        "cancel_requested": int(rec.cancel_requested),
        "idempotency_key": rec.idempotency_key,
        "has_actor": int(rec.has_actor),
        "meta": dumps(dict(rec.meta)),
    }


def row_run(row: sqlite3.Row) -> RunRecord:
    """A ``runs`` row as a record."""
    return RunRecord(
        run_id=row["run_id"],
        thread_id=row["thread_id"],
        scope=row_scope(row),
        agent_name=row["agent_name"],
        profile=row["profile"],
        family_id=row["family_id"],
        status=row["status"],
        exit=_loads_opt(row["exit"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        lease_owner=row["lease_owner"],
        lease_expires_at=row["lease_expires_at"],
        fence=row["fence"],
        cancel_requested=bool(row["cancel_requested"]),
        idempotency_key=row["idempotency_key"],
        has_actor=bool(row["has_actor"]),
        meta=json.loads(row["meta"]),
    )


def row_checkpoint(row: sqlite3.Row) -> CheckpointRecord:
    """A ``checkpoints`` row as a record (the payload stays opaque bytes)."""
    return CheckpointRecord(
        run_id=row["run_id"],
        kind=row["kind"],
        payload=bytes(row["payload"]),
        created_at=row["created_at"],
    )


def row_journal(row: sqlite3.Row) -> JournalEntry:
    """A ``journal`` row as a record."""
    return JournalEntry(
        run_id=row["run_id"],
        call_id=row["call_id"],
        tool=row["tool"],
        state=row["state"],
        outcome=_loads_opt(row["outcome"]),
    )


def input_columns(rec: InputRecord, *, created_at: float) -> Columns:
    """Columns of an ``inputs`` row."""
    return {
        "run_id": rec.run_id,
        "cursor": rec.cursor,
        "input_id": rec.input_id,
        "kind": rec.kind,
        "payload": dumps(dict(rec.payload)),
        "acked": int(rec.acked),
        "created_at": created_at,
    }


def row_input(row: sqlite3.Row) -> InputRecord:
    """An ``inputs`` row as a record."""
    return InputRecord(
        run_id=row["run_id"],
        cursor=row["cursor"],
        input_id=row["input_id"],
        kind=row["kind"],
        payload=json.loads(row["payload"]),
        acked=bool(row["acked"]),
    )


def gate_columns(rec: GateRecord) -> Columns:
    """Columns of a ``gates`` row."""
    return {
        "ref": rec.ref,
        "run_id": rec.run_id,
        "call_id": rec.call_id,
        "tool": rec.tool,
        "arguments": dumps(dict(rec.arguments)),
        "kind": rec.kind,
        "status": rec.status,
        "reason": rec.reason,
        **scope_columns(rec.scope),
        "created_at": rec.created_at,
        "resolved_at": rec.resolved_at,
    }


def row_gate(row: sqlite3.Row) -> GateRecord:
    """A ``gates`` row as a record."""
    return GateRecord(
        ref=row["ref"],
        run_id=row["run_id"],
        call_id=row["call_id"],
        tool=row["tool"],
        arguments=json.loads(row["arguments"]),
        kind=row["kind"],
        status=row["status"],
        reason=row["reason"],
        scope=row_scope(row),
        created_at=row["created_at"],
        resolved_at=row["resolved_at"],
    )
