"""How :class:`reverie.store.sqlite.SQLiteStore` talks to its file, below the Store semantics.

Internal to the SQLite backend (imported there as ``schema``):

- :func:`connect_writer` opens the writer (WAL, ``synchronous``, ``busy_timeout``, foreign
  keys) and applies the migrations of :mod:`reverie.store.migrations`; :func:`connect_reader`
  opens the ``query_only`` reader. Both run on the connection's own thread
  (:mod:`reverie.store.sqlite_writer`). :func:`db_errors` turns ``sqlite3`` errors into store
  errors.
- Synchronous statement helpers, called on a connection's thread inside the operations the
  store hands it (the store's SQL itself is shared with PostgreSQL: :mod:`reverie.store.sql_ops`).
- The decoded-item cache (:class:`ItemCache`); the row codecs are shared with PostgreSQL
  (:mod:`reverie.store.rows`).
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from reverie.errors import ConflictError, StoreError
from reverie.store.base import (
    TranscriptItem,
)
from reverie.store.migrations import migrate
from reverie.store.rows import Columns, row_item

SYNCHRONOUS_MODES: frozenset[str] = frozenset({"OFF", "NORMAL", "FULL", "EXTRA"})
"""Accepted values of ``PRAGMA synchronous``."""


def store_error(action: str, exc: BaseException) -> BaseException:
    """What a store method raises for ``exc``: ``sqlite3`` errors wrapped, others as they are.

    A constraint violation becomes :class:`ConflictError`, any other ``sqlite3`` error
    :class:`StoreError`; the message names the action, not data, and the original is kept in
    ``__cause__``.
    """
    if not isinstance(exc, sqlite3.Error):
        return exc
    kind = ConflictError if isinstance(exc, sqlite3.IntegrityError) else StoreError
    wrapped = kind(f"SQLite store could not {action}: {exc}")
    wrapped.__cause__ = exc
    return wrapped


@contextlib.contextmanager
def db_errors(action: str) -> Iterator[None]:
    """Re-raise ``sqlite3`` errors as store errors (see :func:`store_error`)."""
    try:
        yield
    except sqlite3.Error as exc:
        raise store_error(action, exc) from exc


def _pragma(db: sqlite3.Connection, pragma: str) -> Any:
    row = db.execute(f"PRAGMA {pragma}").fetchone()
    return row[0] if row is not None else None


def _connect(path: Path, busy_ms: int, *pragmas: str, shared: bool = False) -> sqlite3.Connection:
    # isolation_level=None: autocommit, so the store issues BEGIN IMMEDIATE/COMMIT itself.
    # shared: the writer's connection is used by the event loop too, never at the same time
    # (reverie.store.sqlite_loop serialises them).
    db = sqlite3.connect(
        path, isolation_level=None, timeout=busy_ms / 1000, check_same_thread=not shared
    )
    try:
        db.row_factory = sqlite3.Row
        for pragma in (f"busy_timeout = {busy_ms}", *pragmas):
            _pragma(db, pragma)
    except BaseException:
        db.close()
        raise
    return db


def _enable_wal(db: sqlite3.Connection, busy_ms: int) -> str:
    """Switch the file to WAL and return the journal mode now in force.

    The switch needs an exclusive lock and SQLite may answer SQLITE_BUSY at once, without its
    busy handler (two processes opening a fresh file together), so retry up to the timeout.
    """
    deadline = time.monotonic() + busy_ms / 1000
    while True:
        try:
            return str(_pragma(db, "journal_mode = WAL")).lower()
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                raise
        time.sleep(0.01)  # on the writer's own thread, never the event loop's


def connect_writer(path: Path, *, synchronous: str, busy_ms: int) -> sqlite3.Connection:
    """Create the parent directory, open the writer, switch to WAL, set pragmas, migrate.

    Runs on the writer thread. On failure nothing is left open; ``sqlite3`` errors propagate
    unwrapped (the caller wraps them with :func:`db_errors`).

    Raises:
        StoreError: The directory cannot be created, the file system does not support WAL,
            or the schema is newer than this build.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create the directory of {path}: {exc}") from exc
    writer = _connect(path, busy_ms, shared=True)
    try:
        if _enable_wal(writer, busy_ms) != "wal":
            raise StoreError(f"{path}: the file system does not support WAL mode")
        _pragma(writer, f"synchronous = {synchronous}")
        _pragma(writer, "foreign_keys = ON")
        # Checkpoints run on their own thread (reverie.store.sqlite_checkpoint), never in a
        # COMMIT the event loop makes; a WAL started over is truncated (so its size is its
        # length) until the checkpointer can read the WAL's length itself and lifts the limit.
        _pragma(writer, "wal_autocheckpoint = 0")
        _pragma(writer, "journal_size_limit = 0")
        migrate(writer, label=str(path))
    except BaseException:
        writer.close()
        raise
    return writer


def connect_reader(path: Path, *, busy_ms: int) -> sqlite3.Connection:
    """Open the ``query_only`` reader (after the writer has migrated the file)."""
    return _connect(path, busy_ms, "query_only = ON")


def connect_checkpointer(path: Path, *, busy_ms: int) -> sqlite3.Connection:
    """Open the connection that runs the WAL checkpoints (after the writer migrated the file)."""
    return _connect(path, busy_ms, "wal_autocheckpoint = 0")


def page_size(db: sqlite3.Connection) -> int:
    """The database's page size, in bytes."""
    return int(_pragma(db, "page_size"))


# statement helpers --------------------------------------------------------------------------
def marks(n: int) -> str:
    """``n`` comma-separated ``?`` placeholders."""
    return ",".join("?" * n)


def rows(db: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
    """Every row of one statement."""
    found: list[sqlite3.Row] = db.execute(sql, params).fetchall()
    return found


def one(db: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> sqlite3.Row | None:
    """The first row of one statement, or ``None`` (the statement is always run to its end)."""
    found = rows(db, sql, params)
    return found[0] if found else None


def execute(db: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> int:
    """Run one statement and return the number of rows it changed."""
    return db.execute(sql, params).rowcount


def insert_sql(table: str, names: Sequence[str]) -> str:
    """``INSERT INTO table (names…) VALUES (?…)``."""
    # Table and column names come from this package's codecs, never from callers.
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({marks(len(names))})"


def insert(db: sqlite3.Connection, table: str, rows: Sequence[Columns]) -> None:
    """Insert rows (all with the same columns) with one prepared statement."""
    if rows:
        db.executemany(insert_sql(table, list(rows[0])), [tuple(row.values()) for row in rows])


# row codecs ---------------------------------------------------------------------------------


class ItemCache:
    """Decoded transcript items by ref, oldest first, at most ``size`` of them.

    Rows never change once written except for ``superseded`` (checked on every read), so the
    cache is safe even with other processes writing the file; it spares decoding the whole
    prompt window on every model call. The store adds the items it appends, so a window read
    only needs the refs of its rows (see :meth:`missing`).

    Used from the event loop, except :meth:`missing`, which the reader thread calls: it only
    tests dict membership, one atomic operation under the GIL at a time, and its answer is a
    hint the event loop checks again (:meth:`get`).
    """

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        # Ordered by insertion, oldest first. Not a dict: deleting a dict's first key leaves a
        # dummy slot at its front that every later ``next(iter(...))`` walks past, so each
        # eviction of a full cache cost the length of what was evicted before (~4 µs a row
        # at 4,096 rows, against 0.6 µs for ``popitem``).
        self._items: OrderedDict[str, TranscriptItem] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, ref: str) -> TranscriptItem | None:
        """The cached item, or ``None``."""
        return self._items.get(ref)

    def missing(self, refs: Sequence[str]) -> list[str]:
        """The refs not cached now (safe to call from another thread; see the class doc)."""
        items = self._items
        return [ref for ref in refs if ref not in items]

    def add(self, items: Sequence[TranscriptItem]) -> None:
        """Cache items just written (never superseded ones)."""
        for item in items:
            if not item.superseded:
                self._items[item.ref] = item
        while len(self._items) > self._size:
            self._items.popitem(last=False)  # the oldest entry

    def decode(self, row: sqlite3.Row) -> TranscriptItem:
        """The item of an ``items`` row, decoded once."""
        cached = self._items.get(row["ref"])
        if cached is not None and not row["superseded"]:
            return cached
        item = row_item(row)
        self.add([item])
        return item
