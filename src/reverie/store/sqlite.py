"""The embedded SQLite backend (docs/scaling.md): one file, WAL, writes from one connection.

Layout of a :class:`SQLiteStore`:

- one **writer** connection, shared by the event loop and a writer thread (never used by
  both at once), with **group commit** (:mod:`reverie.store.sqlite_loop`,
  :mod:`reverie.store.sqlite_writer`). Every write method hands over one synchronous
  operation; whatever is queued when the writer is free runs in one ``BEGIN IMMEDIATE`` …
  ``COMMIT`` transaction (an operation that fails is undone alone and raises to its own caller
  only), and every caller is answered after the ``COMMIT``. The batch commits on the event
  loop itself (no thread hop), with ``busy_timeout`` 0: when another process holds the write
  lock, the batch goes to the writer thread, which waits for it up to ``busy_timeout``.
  ``BEGIN IMMEDIATE`` takes SQLite's write lock up front, so what an operation reads cannot
  change before it commits. Fenced writes are compare-and-sets on
  ``runs.fence`` inside that transaction: the fence is read first (or the statement itself
  carries the test and, when it changed nothing, the fence is read right after it to tell a
  stale fence, :class:`LeaseLost`, from a write with nothing to change). Two processes racing
  on one file cannot both win.
- WAL checkpoints run on a **checkpoint** thread with its own connection
  (:mod:`reverie.store.sqlite_checkpoint`), never in a ``COMMIT`` on the loop; the WAL is
  bounded.
- a **reader** connection (``query_only``) on a second thread. Under WAL it reads the last
  committed state while a write is in progress. Each read method is one hop; each statement
  runs on its own, so a read never holds a snapshot open.

The SQL of every method is shared with PostgreSQL (:mod:`reverie.store.sql_ops`, run through
:class:`~reverie.store.sql_store.SQLStore`); here are only the transcript reads, which go
through the decoded-item cache.

Operations hold the write lock while they run: they are kept to statements, and the step
commit, the hot path, has its columns and JSON built before the operation is queued. Transcript
refs (``new_id``) are drawn there on purpose: ``os.urandom`` releases the GIL, and a busy event
loop that releases the GIL waits behind these threads to get it back.

A write whose caller is cancelled while it waits may or may not be applied (it is never
applied in part). Every ``sqlite3`` error is re-raised as :class:`StoreError` (or
:class:`ConflictError` for a constraint violation) with the original kept in ``__cause__``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from sqlite3 import Row
from typing import Any

from reverie.errors import NotFoundError
from reverie.store import sql_ops as ops, sqlite_schema as schema
from reverie.store.base import (
    InputKind,
    InputRecord,
    NewItem,
    StepReceipt,
    StepWrite,
    TranscriptItem,
)
from reverie.store.sql_core import Op
from reverie.store.sql_schedules import SQLSchedules
from reverie.store.sql_store import SQLStore
from reverie.store.sqlite_connections import SQLiteConnections
from reverie.store.sqlite_documents import SQLiteDocuments
from reverie.store.sqlite_schema import SYNCHRONOUS_MODES

__all__ = ["SYNCHRONOUS_MODES", "SQLiteStore"]


class SQLiteStore(SQLiteConnections, SQLiteDocuments, SQLSchedules, SQLStore):
    """A durable :class:`~reverie.store.base.Store` in one SQLite file.

    Use it as ``async with SQLiteStore(path) as store: ...`` or call :meth:`open` and
    :meth:`close` yourself. Several instances (in one process or many) may share a file; the
    fencing token and ``BEGIN IMMEDIATE`` keep their writes consistent.

    Args:
        path: The database file. Its parent directory is created on :meth:`open`.
        synchronous: ``PRAGMA synchronous`` of the writer: ``NORMAL`` (default; under WAL a
            power loss may drop the last commits but never corrupts the file), ``FULL``,
            ``EXTRA`` or ``OFF``.
        busy_timeout_s: How long a write waits for another process's write lock before it
            fails with :class:`StoreError` (on the writer thread: the event loop never waits).
        checkpoint_pages: WAL pages after which a ``PASSIVE`` checkpoint runs on the
            checkpoint thread; past four times as many, writes wait (off the loop) for a
            ``RESTART`` checkpoint, so the WAL stays bounded.
        loop_writes: Whether writes commit on the event loop (``None``: yes for ``NORMAL`` and
            ``OFF``; no for ``FULL`` and ``EXTRA``, whose every ``COMMIT`` syncs the disk).

    Raises:
        ConfigError: ``path`` is ``":memory:"`` (use :class:`~reverie.store.MemoryStore`) or
            ``synchronous`` is not one of the accepted values, or ``checkpoint_pages`` < 1.
    """

    # Every Store method is SQLStore's (the shared SQL of reverie.store.sql_ops) but the
    # transcript reads, which go through the decoded-item cache, and the writes that fill it.

    # threads and transcript -------------------------------------------------------------
    async def append_items(
        self, thread_id: str, run_id: str | None, items: Sequence[NewItem], *, fence: int | None
    ) -> list[TranscriptItem]:
        """Append rows; ``seq`` is assigned inside the transaction, so it is gap-free."""
        out = await super().append_items(thread_id, run_id, items, fence=fence)
        self._items.add(out)
        return out

    async def commit_step(self, run_id: str, step: StepWrite, *, fence: int) -> StepReceipt:
        """Write a loop boundary as one operation of the writer's group commit.

        See :meth:`Store.commit_step`; the written items join the item cache.
        """
        receipt = await super().commit_step(run_id, step, fence=fence)
        if step.items:
            self._items.add(ops.step_items(run_id, step))
        return receipt

    # inputs -------------------------------------------------------------------------------
    async def enqueue_input(
        self, run_id: str, kind: InputKind, payload: Mapping[str, Any], *, input_id: str
    ) -> InputRecord:
        """Append an input; the same ``input_id`` returns the existing row (dedupe).

        The input watch forgets what it knew of the run's queue, in the same transaction.

        Raises:
            RunEndedError: The queue is sealed (:meth:`seal_inputs`) and the input is new.
        """
        watch = self._watch

        def make() -> Op[InputRecord]:
            watch.touched(run_id)  # built inside the transaction, with the writer's lock
            return ops.enqueue_input(self.dialect, run_id, kind, payload, input_id=input_id)

        return await self._write_op("enqueue an input", make)

    async def poll_inputs(self, run_id: str, *, after_cursor: int) -> list[InputRecord]:
        """Inputs with cursor greater than ``after_cursor``, in order.

        Answered without a statement when the input watch knows the queue holds none past the
        cursor (:mod:`reverie.store.sqlite_inputs`): the run's last step commit read its top,
        nothing of this store touched it since, and no connection committed since.
        """
        if self._watch.nothing_past(run_id, after_cursor):
            return []
        return await super().poll_inputs(run_id, after_cursor=after_cursor)

    def _decode_item(self, row: Row) -> TranscriptItem:
        # The rows a segment begins with (begin_segment, start_segment) join the item cache.
        return self._items.decode(row)

    async def get_items(self, refs: Sequence[str]) -> list[TranscriptItem]:
        """Rows by ref, in the order asked; :class:`NotFoundError` names the first missing."""
        sql = "SELECT ref, * FROM items WHERE ref IN ({marks})"
        found = await self._select_in("read transcript items", self._items.decode, sql, (), refs)
        for ref in refs:
            if ref not in found:
                raise NotFoundError(f"transcript item {ref} not found")
        return [found[ref] for ref in refs]

    async def thread_items(
        self, thread_id: str, *, upto_seq: int | None = None, last: int | None = None
    ) -> list[TranscriptItem]:
        """Non-superseded rows of a thread in ``seq`` order, optionally up to a seq / last N."""
        where = "thread_id = ? AND superseded = 0"
        params: list[Any] = [thread_id]
        if upto_seq is not None:
            where += " AND seq <= ?"
            params.append(upto_seq)
        rows: list[TranscriptItem] = []
        if last is None:
            sql = f"SELECT * FROM items WHERE {where} ORDER BY seq"
            rows = await self._select("read a thread", self._items.decode, sql, params)
        elif last > 0:
            # Newest first through the (thread_id, seq) index: a window costs O(window).
            rows = await self._window(f"{where} ORDER BY seq DESC LIMIT ?", [*params, last])
            rows.reverse()
        if not rows:
            await self.get_thread(thread_id)  # an empty thread, or NotFoundError
        return rows

    async def _window(self, tail: str, params: Sequence[Any]) -> list[TranscriptItem]:
        """``SELECT … FROM items WHERE {tail}``, reading only the refs when all are cached.

        The prompt window is read on every model call and its rows are almost always cached
        (appended by this store, or read before): then only their refs cross from SQLite to
        Python, in one statement. Otherwise the full rows are read, also in one statement,
        so the answer is always one snapshot.
        """
        cache = self._items
        narrow = f"SELECT ref FROM items WHERE {tail}"
        full = f"SELECT * FROM items WHERE {tail}"

        def read(db: sqlite3.Connection) -> tuple[list[str], list[Row] | None]:
            refs = [row[0] for row in schema.rows(db, narrow, params)]
            return refs, (schema.rows(db, full, params) if cache.missing(refs) else None)

        refs, rows = await self._read("read a thread", read)
        if rows is None:
            items: list[TranscriptItem] = []
            for ref in refs:
                item = cache.get(ref)
                if item is None:  # evicted since the reader looked (a full cache): read rows
                    rows = await self._read(
                        "read a thread", lambda db: schema.rows(db, full, params)
                    )
                    break
                items.append(item)
            else:
                return items
        return [cache.decode(row) for row in rows]

    # run events ---------------------------------------------------------------------------
    async def wait_run_events(self, run_id: str, *, timeout_s: float) -> None:
        """Return when this process appended events of the run, or after ``timeout_s`` (other
        processes' appends are seen by polling: SQLite has no notifications)."""
        await self._event_waiters.wait(run_id, timeout_s)
