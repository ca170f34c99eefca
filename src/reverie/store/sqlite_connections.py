"""The connections of :class:`reverie.store.sqlite.SQLiteStore`: lifecycle and statement helpers.

:class:`SQLiteConnections` owns the two :class:`~reverie.store.sqlite_writer.ConnectionThread`
of a store, the writer (group commit) and the ``query_only`` reader, the
:class:`~reverie.store.sqlite_loop.LoopWriter` that commits writes on the event loop with the
writer's connection, and the :class:`~reverie.store.sqlite_checkpoint.Checkpointer`. It gives
the store methods their two ways in: :meth:`~SQLiteConnections._transact` (an operation of
the next group commit) and :meth:`~SQLiteConnections._read` (one hop to the reader), the ways
the shared ops of :mod:`reverie.store.sql_ops` run (``_write_op``, ``_read_op``) and the read
shorthands (``_select``, ``_select_in``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from sqlite3 import Row
from typing import Any, ClassVar, Self, TypeVar

from reverie.errors import ConfigError, StoreError
from reverie.store import sqlite_schema as schema
from reverie.store.run_events import EventWaiters
from reverie.store.sql_core import SQLITE, Dialect, Op, drive
from reverie.store.sqlite_checkpoint import DEFAULT_CHECKPOINT_PAGES, Checkpointer
from reverie.store.sqlite_inputs import InputWatch
from reverie.store.sqlite_loop import LoopWriter, NotNow
from reverie.store.sqlite_schema import SYNCHRONOUS_MODES, db_errors
from reverie.store.sqlite_writer import ConnectionThread

__all__ = ["SQLiteConnections"]

T = TypeVar("T")

_CHUNK = 500
"""Keys per ``IN (...)`` query, well under SQLite's bound-parameter limit."""


class SQLiteConnections:
    """Opening, closing and using the store's connections (arguments: see ``SQLiteStore``)."""

    dialect: ClassVar[Dialect] = SQLITE
    """How the shared SQL (:mod:`reverie.store.sql_ops`) is spelt here."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "NORMAL",
        busy_timeout_s: float = 5.0,
        checkpoint_pages: int = DEFAULT_CHECKPOINT_PAGES,
        loop_writes: bool | None = None,
    ) -> None:
        if str(path) in ("", ":memory:"):
            raise ConfigError("SQLiteStore needs a file path; use MemoryStore for ':memory:'")
        mode = synchronous.upper()
        if mode not in SYNCHRONOUS_MODES:
            accepted = ", ".join(sorted(SYNCHRONOUS_MODES))
            raise ConfigError(f"synchronous={synchronous!r} is not one of {accepted}")
        self.path = Path(path).expanduser()
        """The database file."""
        self.synchronous = mode
        """The ``PRAGMA synchronous`` applied to the writer."""
        if checkpoint_pages < 1:
            raise ConfigError(f"checkpoint_pages must be at least 1, not {checkpoint_pages}")
        self.checkpoint_pages = checkpoint_pages
        """WAL pages after which a checkpoint runs off the loop."""
        self.loop_writes = mode in ("OFF", "NORMAL") if loop_writes is None else loop_writes
        """Whether writes commit on the event loop (else every write goes to the thread)."""
        self._busy_ms = max(0, int(busy_timeout_s * 1000))
        self._writer: ConnectionThread | None = None
        self._loop_writer: LoopWriter | None = None
        self._checkpointer: Checkpointer | None = None
        self._reader: ConnectionThread | None = None
        self._lifecycle = asyncio.Lock()
        self._items = schema.ItemCache()  # decoded transcript rows, shared by all reads
        self._watch = InputWatch()  # what is known of the runs' input queues unread
        self._inputs_seen: Callable[[str, int], None] | None = self._watch.saw
        self._event_waiters = EventWaiters()  # this process's followers of run events

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # lifecycle ----------------------------------------------------------------------------
    async def open(self) -> None:
        """Create the file if needed, set WAL and the pragmas, and migrate the schema.

        Raises:
            StoreError: The file is not a SQLite database (garbage, truncated), its schema is
                newer than this build, or it cannot be opened. Nothing is left open.
        """
        async with self._lifecycle:  # two concurrent open() calls connect once
            if self._writer is not None:
                return
            writer = ConnectionThread(
                "reverie-sqlite-writer",
                functools.partial(
                    schema.connect_writer,
                    self.path,
                    synchronous=self.synchronous,
                    busy_ms=self._busy_ms,
                ),
                hold=self._hold_writer,
            )
            reader: ConnectionThread | None = None
            checkpointer: Checkpointer | None = None
            try:
                with db_errors(f"open {self.path}"):
                    await writer.start()
                    # Opened after the writer migrated the file.
                    reader = ConnectionThread(
                        "reverie-sqlite-reader",
                        functools.partial(schema.connect_reader, self.path, busy_ms=self._busy_ms),
                    )
                    await reader.start()
                    conn = writer.connection
                    assert conn is not None  # start() raised otherwise
                    # The writer thread is idle until the first write: the loop may use it.
                    checkpointer = Checkpointer(
                        self.path,
                        functools.partial(
                            schema.connect_checkpointer, self.path, busy_ms=self._busy_ms
                        ),
                        pages=self.checkpoint_pages,
                        page_size=schema.page_size(conn),
                    )
                    conn.execute("PRAGMA busy_timeout = 0")  # the loop's; the thread sets its own
                    checkpointer.attach(conn)
                    checkpointer.start()
            except BaseException:
                await _close_all(reader, writer)
                if checkpointer is not None:
                    await asyncio.to_thread(checkpointer.close)
                raise
            self._watch.attach(checkpointer.header_reader())
            self._loop_writer = LoopWriter(
                writer, checkpointer, self._watch, busy_ms=self._busy_ms, inline=self.loop_writes
            )
            self._writer, self._reader, self._checkpointer = writer, reader, checkpointer

    async def close(self) -> None:
        """Finish the queued reads and writes, close both connections, join their threads.

        Safe to call twice.
        """
        async with self._lifecycle:
            reader, writer, checkpointer = self._reader, self._writer, self._checkpointer
            if self._loop_writer is not None:
                self._loop_writer.close()  # runs or hands over what is queued
            self._watch.detach()
            self._reader = self._writer = self._loop_writer = self._checkpointer = None
            try:
                try:
                    await _close_all(reader)
                finally:
                    if checkpointer is not None:  # its last checkpoint, off the loop
                        await asyncio.to_thread(checkpointer.close)
            finally:
                # Last: closing the last connection to the file checkpoints it whole.
                await _close_all(writer)

    def _hold_writer(self) -> AbstractContextManager[object]:
        """What the writer thread enters around a batch (it shares the loop's connection)."""
        if self._loop_writer is None:
            return contextlib.nullcontext()
        return self._loop_writer.hold()

    async def connection_settings(self) -> dict[str, Any]:
        """The pragmas in force on the writer connection (for diagnostics and tests)."""
        names = (
            "journal_mode",
            "synchronous",
            "foreign_keys",
            "busy_timeout",
            "wal_autocheckpoint",
        )

        def read(db: sqlite3.Connection) -> dict[str, Any]:
            return {name: schema.rows(db, f"PRAGMA {name}")[0][0] for name in names}

        return await self._require(self._writer).call("read pragmas", read)

    def write_stats(self) -> dict[str, int]:
        """Counters of the write paths, for diagnostics, benchmarks and tests.

        ``loop_transactions``: transactions committed on the event loop (``inline_commits`` of
        them at once, in the writer's own turn of the loop: nothing else was to run in it);
        ``handed_over``:
        writes run by the writer thread instead (the lock was taken, the WAL past its bound,
        another event loop, or ``loop_writes`` off); ``loop_reads``: brief reads (a run's
        input queue at a boundary) answered on the event loop; ``checkpoints``: WAL
        checkpoints run; ``wal_bytes``: the ``-wal`` file's size now; ``wal_in_use``: the bytes
        of it the WAL uses (less after the WAL started over in the same file). All 0 when the
        store is not open.
        """
        loop_writer, checkpointer = self._loop_writer, self._checkpointer
        if loop_writer is None or checkpointer is None:
            return dict.fromkeys(
                (
                    "loop_transactions",
                    "inline_commits",
                    "handed_over",
                    "loop_reads",
                    "checkpoints",
                    "wal_bytes",
                    "wal_in_use",
                ),
                0,
            )
        return {
            "loop_transactions": loop_writer.loop_batches,
            "inline_commits": loop_writer.inline_commits,
            "handed_over": loop_writer.handed_over,
            "loop_reads": loop_writer.loop_reads,
            "checkpoints": checkpointer.checkpoints,
            "wal_bytes": checkpointer.wal_size(),
            "wal_in_use": checkpointer.wal_length(),
        }

    def _require(self, conn: ConnectionThread | None) -> ConnectionThread:
        if conn is None:
            raise StoreError(f"SQLiteStore({self.path}) is not open; call open() first")
        return conn

    async def _transact(self, action: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the writer inside the next group commit; returns after ``COMMIT``.

        ``fn`` runs on the event loop or the writer thread with the write lock held: it must
        only touch the connection it is given and values it closes over. Whatever it raises
        undoes what it wrote (and nothing else) and is raised here.
        """
        self._require(self._writer)
        assert self._loop_writer is not None  # set with the writer
        return await self._loop_writer.transact(action, fn)

    async def _write_op(self, action: str, make: Callable[[], Op[T]]) -> T:
        """Run an op (:mod:`reverie.store.sql_ops`) as one operation of the next group commit.

        The op is built where the batch runs (the loop or the writer thread), each time it runs
        (a batch may be run twice, the first run rolled back).
        """
        self._require(self._writer)
        assert self._loop_writer is not None  # set with the writer
        return await self._loop_writer.transact(action, lambda db: drive(db, make()))

    async def _read_op(self, action: str, make: Callable[[], Op[T]]) -> T:
        """Run a read-only op on the reader thread, in one hop."""
        return await self._read(action, lambda db: drive(db, make()))

    async def _brief_read_op(self, action: str, make: Callable[[], Op[T]]) -> T:
        """Run a brief read on the event loop when the writer's connection is free at once.

        Otherwise (the writer thread holds it, another event loop asks, a lock is in the way)
        it goes to the reader thread as every read does.
        """
        loop_writer = self._loop_writer
        if loop_writer is not None:
            try:
                return loop_writer.read_now(action, lambda db: drive(db, make()))
            except NotNow:
                pass
        return await self._read_op(action, make)

    async def _read(self, action: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the reader thread (autocommit: each statement its own snapshot)."""
        return await self._require(self._reader).call(action, fn)

    async def _select(
        self, action: str, decode: Callable[[Row], T], sql: str, params: Sequence[Any] = ()
    ) -> list[T]:
        """One read statement on the reader connection, decoded row by row."""
        found = await self._read(action, lambda db: schema.rows(db, sql, params))
        return [decode(row) for row in found]

    async def _select_in(
        self,
        action: str,
        decode: Callable[[Row], T],
        sql: str,
        params: Sequence[Any],
        keys: Sequence[str],
    ) -> dict[str, T]:
        """``sql`` with ``{marks}`` filled for the distinct keys, in chunks; by the first column.

        Every chunk is its own statement, but all of them go to the reader in one hop.
        """
        unique = list(dict.fromkeys(keys))

        def query(db: sqlite3.Connection) -> list[Row]:
            found: list[Row] = []
            for start in range(0, len(unique), _CHUNK):
                chunk = unique[start : start + _CHUNK]
                found += schema.rows(
                    db, sql.format(marks=schema.marks(len(chunk))), (*params, *chunk)
                )
            return found

        rows = await self._read(action, query)
        return {row[0]: decode(row) for row in rows}


async def _close_all(*threads: ConnectionThread | None) -> None:
    """Close every connection thread given (``None`` entries are skipped), even if one fails."""
    errors: list[BaseException] = []
    for thread in threads:
        if thread is not None:
            try:
                await thread.close()
            except BaseException as exc:
                errors.append(exc)
    if errors:
        raise errors[0]
