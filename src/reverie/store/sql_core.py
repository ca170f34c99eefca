"""The SQL of the two SQL backends, written once: statements, decisions and row mapping.

SQLite (:mod:`reverie.store.sqlite`) runs statements synchronously on its writer thread,
PostgreSQL (:mod:`reverie.store.postgres`) asynchronously over ``psycopg``. So that neither
holds its own copy of what a store operation reads, decides and writes, an operation is
written here once as an **op**: a generator that yields batches of statements and is sent
back their results. Each backend only *drives* ops (:func:`drive` for SQLite, and
:func:`reverie.store.postgres_connections.drive` for PostgreSQL): it runs the statements of a
batch on its connection and sends the results in, until the op returns its answer. A batch
holds statements whose results the op needs together; PostgreSQL sends one batch in one
round trip (pipeline mode). Statements the op needs no result of (:class:`Exec`) are sent
without waiting, so PostgreSQL sends them with the ``COMMIT``.

What differs between the two is a :class:`Dialect`: the placeholder (statements are written
with ``?`` and turned into ``%s`` for ``psycopg``), the row locks (SQLite's writer holds the
database write lock for the whole transaction, so it needs none) and the text PostgreSQL cannot
hold. Ops run inside a transaction the backend opened; they must have no effect outside it (the
SQLite writer may run an op twice, the first run rolled back).
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from reverie.errors import LeaseLost, NotFoundError, TranscriptConflict, UsageError
from reverie.store.base import StepReceipt, StepWrite, TranscriptItem
from reverie.store.rows import Columns, dumps

__all__ = [
    "POSTGRES",
    "SQLITE",
    "Dialect",
    "Exec",
    "Many",
    "Op",
    "Query",
    "commit_step",
    "drive",
    "thread_head",
]

T = TypeVar("T")


# statements ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Query:
    """A statement whose rows the op reads (its result: the list of rows)."""

    sql: str
    params: Sequence[Any] = ()


@dataclass(frozen=True, slots=True)
class Exec:
    """A write whose result the op does not need (its result: ``None``)."""

    sql: str
    params: Sequence[Any] = ()


@dataclass(frozen=True, slots=True)
class Many:
    """One write statement run for each parameter row (its result: ``None``)."""

    sql: str
    rows: Sequence[Sequence[Any]] = field(default_factory=list)


Statement = Query | Exec | Many
Op = Generator[Sequence[Statement], list[Any], T]
"""An operation: yields batches of statements, is sent their results, returns its answer."""


# dialects -----------------------------------------------------------------------------------
def _same(value: str) -> str:
    return value


def _pg_text(value: str) -> str:
    # PostgreSQL TEXT refuses NUL: it becomes U+FFFD (JSON columns escape it instead).
    return value.replace("\x00", "\ufffd") if "\x00" in value else value


@dataclass(frozen=True, slots=True)
class Dialect:
    """What the SQL of one backend spells its own way."""

    name: str
    placeholder: str
    """``?`` (sqlite3) or ``%s`` (psycopg)."""
    lock: str
    """Appended to a SELECT that must lock the rows it reads until COMMIT (``""``: no need)."""
    text: Callable[[str], str]
    """Free text as the database can hold it."""
    _cache: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def sql(self, statement: str) -> str:
        """``statement`` (written with ``?`` placeholders) in this dialect; ``{lock}`` filled."""
        found = self._cache.get(statement)
        if found is None:
            found = statement.replace("{lock}", self.lock)
            if self.placeholder != "?":
                found = found.replace("%", "%%").replace("?", self.placeholder)
            self._cache[statement] = found
        return found

    def query(self, statement: str, *params: Any) -> Query:
        """A :class:`Query` in this dialect."""
        return Query(self.sql(statement), params)

    def exec(self, statement: str, *params: Any) -> Exec:
        """An :class:`Exec` in this dialect."""
        return Exec(self.sql(statement), params)


SQLITE = Dialect(name="sqlite", placeholder="?", lock="", text=_same)
"""The writer's ``BEGIN IMMEDIATE`` holds the database lock: no row locks."""
POSTGRES = Dialect(name="postgres", placeholder="%s", lock=" FOR NO KEY UPDATE", text=_pg_text)
"""READ COMMITTED: rows a decision rests on are locked, and read again after the lock."""


# the synchronous driver (SQLite) --------------------------------------------------------------
def _run(db: sqlite3.Connection, statement: Statement) -> Any:
    if isinstance(statement, Query):
        return db.execute(statement.sql, statement.params).fetchall()
    if isinstance(statement, Exec):
        db.execute(statement.sql, statement.params)
    elif statement.rows:
        db.executemany(statement.sql, statement.rows)
    return None


def drive(db: sqlite3.Connection, op: Op[T]) -> T:
    """Run ``op`` on a ``sqlite3`` connection (inside the caller's transaction)."""
    try:
        batch = next(op)
        while True:
            batch = op.send([_run(db, statement) for statement in batch])
    except StopIteration as stop:
        result: T = stop.value
        return result


# fences -------------------------------------------------------------------------------------
def raise_if_stale(run_id: str, fence: int, current: int | None) -> None:
    """:class:`NotFoundError` if the run is missing, :class:`LeaseLost` if ``fence`` is stale."""
    if current is None:
        raise NotFoundError(f"run {run_id} not found")
    if current != fence:
        raise LeaseLost(f"run {run_id}: fencing token {fence} is stale (now {current})")


# transcript ---------------------------------------------------------------------------------
_HEAD = (
    "SELECT EXISTS (SELECT 1 FROM threads WHERE thread_id = ?) AS found,"
    " (SELECT COALESCE(MAX(seq), 0) FROM items WHERE thread_id = ?) AS head"
)


def thread_head(d: Dialect, thread_id: str) -> Op[int]:
    """The thread's highest seq, superseded rows included; :class:`NotFoundError` if missing."""
    [[row]] = yield [d.query(_HEAD, thread_id, thread_id)]
    if not row["found"]:
        raise NotFoundError(f"thread {thread_id} not found")
    return int(row["head"])


ITEM_COLUMNS = (
    "ref",
    "thread_id",
    "seq",
    "run_id",
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "name",
    "input_id",
    "meta",
    "superseded",
    "created_at",
)
"""The columns of an ``items`` row, in the order of :func:`item_row`."""


def item_row(d: Dialect, rec: TranscriptItem, *, created_at: float) -> tuple[Any, ...]:
    """The values of an ``items`` row, in the order of :data:`ITEM_COLUMNS`."""
    return (
        rec.ref,
        rec.thread_id,
        rec.seq,
        rec.run_id,
        rec.role,
        d.text(rec.content),
        dumps([c.to_dict() for c in rec.tool_calls]),
        rec.tool_call_id,
        rec.name,
        rec.input_id,
        dumps(dict(rec.meta)),
        rec.superseded,
        created_at,
    )


def insert_sql(table: str, names: Sequence[str]) -> str:
    """``INSERT INTO table (names…) VALUES (?…)`` (turn it into a dialect with ``d.sql``)."""
    # Table and column names come from this package's codecs, never from callers.
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"


def columns_insert(d: Dialect, table: str, rows: Sequence[Columns]) -> Many:
    """Insert rows (all with the same columns) with one prepared statement."""
    names = list(rows[0]) if rows else []
    return Many(d.sql(insert_sql(table, names)), [tuple(row.values()) for row in rows])


# the step commit ----------------------------------------------------------------------------
_LOCK_THREAD = "SELECT 1 AS found FROM threads WHERE thread_id = ?{lock}"
_LOCK_RUN = "SELECT fence, cancel_requested FROM runs WHERE run_id = ?{lock}"
# After the locks, in a statement of its own: under READ COMMITTED its snapshot is taken once
# both are held, so it sees every append and enqueue committed before.
_STEP_TOPS = (
    "SELECT (SELECT COALESCE(MAX(seq), 0) FROM items WHERE thread_id = ?) AS head,"
    " (SELECT COALESCE(MAX(cursor), 0) FROM inputs WHERE run_id = ?) AS top_cursor"
)
_JOURNAL_STARTED = (
    "INSERT INTO journal (run_id, call_id, tool, state, outcome, updated_at)"
    " VALUES (?, ?, ?, 'started', ?, ?) ON CONFLICT (run_id, call_id) DO NOTHING"
)
_JOURNAL_FINISHED = (
    "INSERT INTO journal (run_id, call_id, tool, state, outcome, updated_at)"
    " VALUES (?, ?, ?, 'finished', ?, ?) ON CONFLICT (run_id, call_id) DO UPDATE"
    " SET state = 'finished', outcome = excluded.outcome, updated_at = excluded.updated_at,"
    " tool = CASE WHEN excluded.tool = '' THEN journal.tool ELSE excluded.tool END"
)
_SAVE_CHECKPOINT = (
    "INSERT INTO checkpoints (run_id, kind, payload, created_at) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (run_id) DO UPDATE SET kind = excluded.kind, payload = excluded.payload,"
    " created_at = excluded.created_at"
)
_ACK = "UPDATE inputs SET acked = TRUE WHERE run_id = ? AND cursor <= ? AND NOT acked"
_SEAL = "UPDATE runs SET inputs_sealed = TRUE WHERE run_id = ?"


def _check_items(step: StepWrite, head: int) -> None:
    if step.after_seq != head:
        raise TranscriptConflict(
            f"thread {step.thread_id} ends at seq {head}, not {step.after_seq}"
        )
    for expected, item in enumerate(step.items, start=head + 1):
        if item.seq != expected or item.thread_id != step.thread_id:
            raise UsageError(f"step item {item.ref} must have seq {expected}")


def commit_step(d: Dialect, run_id: str, step: StepWrite, *, fence: int) -> Op[StepReceipt]:
    """:meth:`reverie.store.base.Store.commit_step`: every check, then every write."""
    thread, run, [tops] = yield [
        d.query(_LOCK_THREAD, step.thread_id),
        d.query(_LOCK_RUN, run_id),
        d.query(_STEP_TOPS, step.thread_id, run_id),
    ]
    if not thread:
        raise NotFoundError(f"thread {step.thread_id} not found")
    raise_if_stale(run_id, fence, int(run[0]["fence"]) if run else None)
    head = int(tops["head"])
    if step.items:
        _check_items(step, head)
    waiting = step.guard_cursor is not None and int(tops["top_cursor"]) > step.guard_cursor
    now = time.time()
    writes: list[Statement] = []
    for entry in step.journal:
        outcome = None if entry.outcome is None else dumps(dict(entry.outcome))
        sql = _JOURNAL_STARTED if entry.state == "started" else _JOURNAL_FINISHED
        writes.append(d.exec(sql, run_id, entry.call_id, entry.tool, outcome, now))
    if step.items:
        rows = [item_row(d, item, created_at=now) for item in step_items(run_id, step)]
        writes.append(Many(d.sql(insert_sql("items", ITEM_COLUMNS)), rows))
    if not waiting:
        if step.checkpoint is not None and step.checkpoint_kind is not None:
            payload = bytes(step.checkpoint)
            writes.append(d.exec(_SAVE_CHECKPOINT, run_id, step.checkpoint_kind, payload, now))
        if step.ack_cursor is not None:
            writes.append(d.exec(_ACK, run_id, step.ack_cursor))
        if step.seal:
            writes.append(d.exec(_SEAL, run_id))
    if writes:
        yield writes
    return StepReceipt(
        head_seq=head + len(step.items),
        inputs_waiting=waiting,
        cancel_requested=bool(run[0]["cancel_requested"]),
    )


def step_items(run_id: str, step: StepWrite) -> list[TranscriptItem]:
    """The items a step writes, as they read back (their ``run_id`` is the run's)."""
    return [
        item if item.run_id == run_id else dataclasses.replace(item, run_id=run_id)
        for item in step.items
    ]
