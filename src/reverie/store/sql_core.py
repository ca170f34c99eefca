"""The SQL of the two SQL backends, written once: statements, decisions and row mapping.

SQLite (:mod:`reverie.store.sqlite`) runs statements synchronously on its writer connection,
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

import abc
import json
import sqlite3
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from reverie.errors import LeaseLost, NotFoundError
from reverie.store.rows import Columns

__all__ = [
    "POSTGRES",
    "SQLITE",
    "Count",
    "Dialect",
    "Exec",
    "Guard",
    "Many",
    "Op",
    "Query",
    "drive",
    "raise_if_stale",
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
class Count:
    """A write whose result is the number of rows it changed."""

    sql: str
    params: Sequence[Any] = ()


@dataclass(frozen=True, slots=True)
class Many:
    """One write statement run for each parameter row (its result: ``None``)."""

    sql: str
    rows: Sequence[Sequence[Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Guard:
    """A statement that checks and writes, or refuses (its result: its rows, or ``None``).

    Only ops of a dialect with :attr:`Dialect.guards` yield one (a step commit's single
    statement, a segment's end), alone, as their first batch: the backend runs it as a
    transaction of its own. A guard that does not hold writes nothing: it raises an error
    quoting :data:`GUARD_REFUSED` (the op is sent ``None`` for it) or returns no rows (the op
    is sent ``[]``); the op may then yield more batches, which run in a new transaction. A
    guard that held (it returned rows) is the op's last batch.
    """

    sql: str
    params: Sequence[Any] = ()


Statement = Query | Exec | Count | Many | Guard
Op = Generator[Sequence[Statement], list[Any], T]
"""An operation: yields batches of statements, is sent their results, returns its answer."""


# dialects -----------------------------------------------------------------------------------
def _same(value: str) -> str:
    return value


def pg_text(value: str) -> str:
    """Free text as PostgreSQL can hold it: ``TEXT`` refuses NUL, so it becomes U+FFFD.

    JSON columns need no such care (the encoder escapes NUL as ``\\u0000``).
    """
    return value.replace("\x00", "\ufffd") if "\x00" in value else value


GUARD_REFUSED = "reverie: guard refused"
"""What the error of a PostgreSQL :class:`Guard` that did not hold quotes."""

EVENTS_CHANNEL = "reverie_run_events"
"""PostgreSQL ``NOTIFY`` channel of appended run events; the payload is the run id."""


@dataclass(frozen=True, slots=True)
class Dialect:
    """What the SQL of one backend spells its own way."""

    name: str
    placeholder: str
    """``?`` (sqlite3) or ``%s`` (psycopg)."""
    lock: str
    """Appended (``{lock}``) to a SELECT of rows the op updates or serialises on."""
    share: str
    """Appended (``{share}``) to the SELECT of a fence that must hold until COMMIT."""
    text: Callable[[str], str]
    """Free text as the database can hold it."""
    array_params: bool
    """``col = ANY(?)`` with one list parameter (else ``col IN (?, …)``, in chunks)."""
    flag: Callable[[bool], Any] = bool
    """A flag as a parameter (SQLite: an ``int``; the ``sqlite3`` module binds a ``bool``
    only after failing to find an adapter for it, ~1 µs a parameter)."""
    events_call: str | None = None
    """An event flush as one statement (``None``: the op's statements, in the writer's
    transaction): its parameters are the runs in order, their numbers of events, their rows as
    JSON (each numbered from 1 within its run) and the bound; its rows, each run's last seq."""
    bytewise: str = ""
    """Appended to an ORDER BY of text that must sort by bytes (SQLite's default)."""
    real: str = "REAL"
    """The column type of epoch seconds."""
    schema_lock: str | None = None
    """Serialises migrations across processes (``None``: the writer's lock does)."""
    json_rows: bool = False
    """A multi-row insert is one statement, its rows one JSON parameter (a statement costs the
    PostgreSQL client a send and the server an execution; SQLite's cost neither)."""
    guards: bool = False
    """The backend runs a :class:`Guard` as a transaction of its own (PostgreSQL, where that
    spares a single-statement write its ``BEGIN`` and ``COMMIT``: two statements of the
    client's CPU and the server's); see :meth:`alone`."""
    step_call: str | None = None
    """A step commit as one statement, run as a :class:`Guard` (its columns: ``head``,
    ``top_cursor``, ``cancel_requested``; its parameters: see
    :func:`reverie.store.sql_ops.prepare_step`). ``None``: the op decides between two batches
    in process (SQLite, whose statements cost no round trip)."""
    version_table_missing: str = (
        "SELECT NOT EXISTS (SELECT 1 FROM sqlite_master"
        " WHERE type = 'table' AND name = 'schema_version') AS missing"
    )
    """One row, one column ``missing``: whether ``schema_version`` is still to be created."""
    _cache: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    _inserts: dict[tuple[str, ...], str] = field(default_factory=dict, compare=False, repr=False)

    def sql(self, statement: str) -> str:
        """``statement`` (written with ``?`` placeholders) in this dialect; locks filled."""
        found = self._cache.get(statement)
        if found is None:
            found = statement.replace("{lock}", self.lock).replace("{share}", self.share)
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

    def alone(self, statement: str, *params: Any) -> Query | Guard:
        """A write op's only write, which returns rows when it wrote and none when it did not:
        a :class:`Guard` where the backend runs one as its own transaction (:attr:`guards`),
        else a :class:`Query` in the op's transaction."""
        if self.guards:
            return Guard(self.sql(statement), params)
        return Query(self.sql(statement), params)

    def count(self, statement: str, *params: Any) -> Count:
        """A :class:`Count` in this dialect."""
        return Count(self.sql(statement), params)

    def insert(self, table: str, columns: Columns, suffix: str = "") -> Count:
        """Insert one row (``suffix``: an ``ON CONFLICT`` clause); counts the rows inserted."""
        return Count(self.sql(insert_sql(table, list(columns)) + suffix), list(columns.values()))

    def insert_many(self, table: str, rows: Sequence[Columns]) -> Statement:
        """Insert rows (all with the same columns): see :meth:`insert_rows`."""
        names = list(rows[0]) if rows else []
        return self.insert_rows(table, names, [tuple(row.values()) for row in rows])

    def insert_rows(
        self, table: str, names: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> Statement:
        """Insert rows of values in the order of ``names``: one prepared statement run per row
        or, with :attr:`json_rows` and more than one row, one statement for them all."""
        if self.json_rows and len(rows) > 1:
            columns = ", ".join(names)
            data = json_records(names, rows)
            return self.exec(
                f"INSERT INTO {table} ({columns}) SELECT {columns}"
                f" FROM json_populate_recordset(NULL::{table}, ?::json)",
                data,
            )
        key = (table, *names)
        sql = self._inserts.get(key)
        if sql is None:
            sql = self._inserts[key] = self.sql(insert_sql(table, names))
        return Many(sql, rows)

    def any_of(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """``column`` is one of ``values``: the clause and its parameters."""
        if self.array_params:
            return f"{column} = ANY(?)", [list(values)]
        return f"{column} IN ({', '.join('?' * len(values))})", list(values)

    def any_of_chunks(self, column: str, values: Sequence[Any]) -> list[tuple[str, list[Any]]]:
        """:meth:`any_of` split so no statement binds more than :data:`CHUNK` values."""
        if self.array_params:
            return [self.any_of(column, values)] if values else []
        return [
            self.any_of(column, values[start : start + CHUNK])
            for start in range(0, len(values), CHUNK)
        ]

    def each_of(self, name: str, values: Sequence[str]) -> list[tuple[str, list[Any]]]:
        """``values`` as a table ``v`` of one text column ``name`` (a FROM item and its
        parameters), split as :meth:`any_of_chunks` is.

        For a per-value scalar subquery, which an index answers value by value: ``MAX(seq)``
        under ``GROUP BY`` reads every row of each group on both databases.
        """
        if self.array_params:
            return [(f"unnest(CAST(? AS TEXT[])) AS v ({name})", [list(values)])] if values else []
        return [
            (
                f"(SELECT column1 AS {name} FROM (VALUES {', '.join(['(?)'] * len(chunk))})) AS v",
                list(chunk),
            )
            for chunk in (values[start : start + CHUNK] for start in range(0, len(values), CHUNK))
        ]


_JSON_ROWS = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
"""Rows of :meth:`Dialect.insert_rows` as JSON (PostgreSQL's JSON has no NaN)."""


def json_records(names: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """``rows`` (values in the order of ``names``) as a JSON array of objects keyed by column:
    one parameter for ``json_populate_recordset``."""
    return _JSON_ROWS.encode([dict(zip(names, row, strict=True)) for row in rows])


CHUNK = 500
"""Values per ``IN (...)`` list, well under SQLite's bound-parameter limit."""

SQLITE = Dialect(
    name="sqlite", placeholder="?", lock="", share="", text=_same, array_params=False, flag=int
)
"""The writer's ``BEGIN IMMEDIATE`` holds the database lock: no row locks."""
POSTGRES = Dialect(
    name="postgres",
    placeholder="%s",
    lock=" FOR NO KEY UPDATE",
    share=" FOR SHARE",
    text=pg_text,
    array_params=True,
    # The event log is best effort (a failed write is dropped, a follower rebuilds a missing
    # run_finished from the run's exit): its commits do not wait for the WAL flush, which the
    # next step commit of the run makes (a server crash may lose the newest events, no step).
    # The function of migration 7 (reverie.store.postgres_schema): the locks, the seqs, the
    # rows, the bound and the NOTIFYs of a flush in one statement, whatever its runs.
    events_call=(
        "SELECT run_id, last FROM reverie_append_events(CAST(? AS TEXT[]), CAST(? AS BIGINT[]),"
        " ?::json, ?::bigint)"
    ),
    bytewise=' COLLATE "C"',
    real="DOUBLE PRECISION",
    # Keyed on the current schema: stores in other schemas of the database migrate apart.
    schema_lock="SELECT pg_advisory_xact_lock(hashtext('reverie.schema:' || current_schema()))",
    version_table_missing="SELECT to_regclass('schema_version') IS NULL AS missing",
    json_rows=True,
    guards=True,
    # The function of migration 5 (reverie.store.postgres_schema): the locks, the checks and
    # every write of a step in one prepared statement. The casts pin the parameters' types
    # (psycopg picks an integer's by its size).
    step_call=(
        "SELECT head, top_cursor, cancel_requested FROM reverie_commit_step(?, ?, ?::bigint,"
        " ?::bigint, ?::boolean, ?::json, ?::json, ?, ?::bytea, ?::bigint, ?::boolean,"
        " ?::bigint, ?::double precision)"
    ),
)
"""READ COMMITTED: rows a decision rests on are locked, and read again after the lock."""


def insert_sql(table: str, names: Sequence[str]) -> str:
    """``INSERT INTO table (names…) VALUES (?…)`` (turn it into a dialect with ``d.sql``)."""
    # Table and column names come from this package's codecs, never from callers.
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"


class OpRunner(abc.ABC):
    """What runs ops: a backend's connection class (it comes first in the store's bases)."""

    dialect: ClassVar[Dialect]

    @abc.abstractmethod
    async def _write_op(self, action: str, make: Callable[[], Op[T]]) -> T:
        """Run the op ``make()`` builds in one write transaction (it may be built twice)."""

    @abc.abstractmethod
    async def _read_op(self, action: str, make: Callable[[], Op[T]]) -> T:
        """Run a read-only op outside a transaction (each statement its own snapshot)."""

    async def _brief_read_op(self, action: str, make: Callable[[], Op[T]]) -> T:
        """A read of a few rows by an index (a run's newest inputs), made at a loop boundary.

        A backend may run it where it costs least (SQLite: on the event loop, no thread hop).
        """
        return await self._read_op(action, make)


# the synchronous driver (SQLite) --------------------------------------------------------------
def _query(db: sqlite3.Connection, statement: Any) -> Any:
    return db.execute(statement.sql, statement.params).fetchall()


def _count(db: sqlite3.Connection, statement: Any) -> Any:
    return db.execute(statement.sql, statement.params).rowcount


def _exec(db: sqlite3.Connection, statement: Any) -> Any:
    db.execute(statement.sql, statement.params)


def _many(db: sqlite3.Connection, statement: Any) -> Any:
    if statement.rows:
        db.executemany(statement.sql, statement.rows)


def _guard(db: sqlite3.Connection, statement: Any) -> Any:
    raise TypeError("a Guard is for one-trip dialects; SQLite ops decide in process")


_RUN: dict[type, Callable[[sqlite3.Connection, Any], Any]] = {
    Query: _query,
    Count: _count,
    Exec: _exec,
    Many: _many,
    Guard: _guard,
}
"""How the synchronous driver runs each kind of statement (by its exact class: a step commit
runs a handful, and one lookup is cheaper than a chain of ``isinstance``)."""


def drive(db: sqlite3.Connection, op: Op[T]) -> T:
    """Run ``op`` on a ``sqlite3`` connection (inside the caller's transaction)."""
    try:
        batch = next(op)
        while True:
            batch = op.send([_RUN[type(statement)](db, statement) for statement in batch])
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
