"""Loop-local group commit of :class:`reverie.store.sqlite.SQLiteStore`: writes without a hop.

A write handed to the writer thread (:mod:`reverie.store.sqlite_writer`) pays two thread
hops; running a short transaction on the event loop itself costs less than one
(``benchmarks/sqlite_writes.py`` measures both). A :class:`LoopWriter` shares the writer
thread's connection and runs writes on the loop when it can:

- **group commit on the loop**: a write is queued and, if none is pending, a flush is scheduled
  with ``call_soon`` (no timer: a lone write commits on the loop's next turn). The flush takes
  every write queued meanwhile (a thousand runs woken by one timer queue a thousand) and runs
  them in one ``BEGIN IMMEDIATE`` … ``COMMIT``, each isolated as on the writer thread
  (both run :func:`~reverie.store.sqlite_writer.commit_group`): a write that fails is undone
  alone and raises in its own caller only; every caller is answered after the ``COMMIT``.
  The flush scheduled in one turn runs first in the next, before any callback of that turn:
  its batch is what was queued in the turn that scheduled it. So a write queued when nothing
  else is left to run in the current turn (the loop's ready queue is empty: asyncio's
  ``BaseEventLoop``; another loop always schedules) would be its batch alone: it is flushed at
  once, in the caller's turn, and its future is resolved before the caller awaits it.
- **never blocking the loop on a lock**: the connection's ``busy_timeout`` is 0 while the
  loop uses it, so ``BEGIN IMMEDIATE`` fails at once when another process (or another store
  on the file) holds the write lock; the batch then goes to the writer thread, which waits
  for the lock with the store's ``busy_timeout``. So does a batch that finds the writer
  thread busy (it holds :attr:`LoopWriter.lock` for its whole batch), and one queued while the
  WAL is past its hard limit (:mod:`reverie.store.sqlite_checkpoint`).
- a batch the loop started but could not finish as one transaction (SQLite rolled it back on
  its own, a failed ``COMMIT``) is handed to the writer thread whole, which gives each write
  its own outcome. A write may thus run twice, the first run rolled back (as on the thread).
  A lone write's failed ``COMMIT`` is its own outcome: it is answered at once.
- ``synchronous=FULL`` and ``EXTRA`` sync the WAL in every ``COMMIT``: those stores keep
  their writes on the writer thread (``inline=False``), so the loop never waits for a disk.

Writes issued from another event loop than the one that opened the store go to the thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

from reverie.errors import StoreError
from reverie.store.sqlite_checkpoint import Checkpointer
from reverie.store.sqlite_inputs import InputWatch
from reverie.store.sqlite_schema import store_error
from reverie.store.sqlite_writer import (
    TRANSACT,
    ConnectionThread,
    Job,
    commit_group,
    forget,
    rollback,
    settle,
)

__all__ = ["LoopWriter", "NotNow"]

T = TypeVar("T")

_MAX_LOOP_BATCH = 256
"""Writes per loop transaction; the rest are flushed on the loop's next turn."""


class NotNow(Exception):
    """A read cannot run on the loop right now; the caller sends it to the reader thread."""


class LoopWriter:
    """The writes of one store: on the event loop when that is possible, else on the thread.

    Args:
        thread: The writer thread; its connection is shared (see :attr:`lock`).
        checkpointer: Told of every commit; bounds the WAL.
        watch: Settled after every commit on the loop, forgotten after the thread's batches
            (:mod:`reverie.store.sqlite_inputs`).
        busy_ms: The ``busy_timeout`` the writer thread waits with.
        inline: Whether lone and grouped writes run on the loop at all (``False``: every
            write goes to the writer thread, as for ``synchronous=FULL``).
    """

    def __init__(
        self,
        thread: ConnectionThread,
        checkpointer: Checkpointer,
        watch: InputWatch,
        *,
        busy_ms: int,
        inline: bool,
    ) -> None:
        self._thread = thread
        self._checkpointer = checkpointer
        self._watch = watch
        self._busy_ms = busy_ms
        self._inline = inline
        self.lock = threading.Lock()
        """Held by whoever uses the connection: the loop for one flush, the thread per batch."""
        self._loop = asyncio.get_running_loop()
        self._queue: list[Job] = []
        self._scheduled = False
        self._closed = False
        self.loop_batches = 0
        """Transactions committed on the event loop (for diagnostics and tests)."""
        self.handed_over = 0
        """Writes handed to the writer thread (for diagnostics and tests)."""
        self.loop_reads = 0
        """Brief reads answered on the event loop (for diagnostics and tests)."""
        self.inline_commits = 0
        """Writes committed at once, in the caller's turn of the loop (for diagnostics)."""

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """The writer thread's side, around each of its batches (see ``ConnectionThread``)."""
        with self.lock:
            conn = self._thread.connection
            if conn is None:
                yield
                return
            conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            try:
                self._checkpointer.bound(conn, self._busy_ms)
                yield
            finally:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("PRAGMA busy_timeout = 0")
                self._watch.forget()  # its commits are not settled one by one
                self._checkpointer.look()  # its batch may hold any number of writes

    def transact(self, action: str, fn: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        """Queue ``fn`` for the next group commit; the future resolves after its ``COMMIT``."""
        if self._closed:
            raise StoreError(f"SQLite store could not {action}: the connection is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        job = Job(TRANSACT, action, fn, future, loop)
        if not self._inline or loop is not self._loop:
            self._hand_over([job])
            return future
        self._queue.append(job)
        if len(self._queue) == 1 and not getattr(loop, "_ready", True):
            # Nothing else is to run in this turn of the loop, and the flush would run first in
            # the next: its batch would be this write alone. Commit it now, sparing the caller
            # the two turns (the flush, its wake-up); the future is resolved when returned.
            batches = self.loop_batches
            self._flush()
            self.inline_commits += self.loop_batches - batches  # not when it was handed over
            return future
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return future

    def read_now(self, action: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run a brief read on the loop with the writer's connection, if it is free at once.

        Between two flushes the connection is idle (each loop transaction begins and commits in
        one callback), so a read sees every committed write. Raises :class:`NotNow` when the
        writer thread holds the connection, the caller runs on another event loop, or SQLite
        answers busy (``busy_timeout`` is 0 on the loop: it never waits here).
        """
        if self._closed or not self._inline:  # FULL/EXTRA stores keep the loop off the file
            raise NotNow
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise NotNow from None
        conn = self._thread.connection
        if loop is not self._loop or conn is None or not self.lock.acquire(blocking=False):
            raise NotNow
        try:
            if conn.in_transaction:  # never read inside another's transaction
                raise NotNow
            found = fn(conn)
            self.loop_reads += 1
            return found
        except sqlite3.Error as exc:
            if exc.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                raise NotNow from None
            raise store_error(action, exc) from exc
        finally:
            self.lock.release()

    def close(self) -> None:
        """Run what is queued (on the loop or handed over) and refuse new writes."""
        self._closed = True
        while self._queue:
            self._flush()

    # the flush, on the event loop ------------------------------------------------------------
    def _flush(self) -> None:
        self._scheduled = False
        batch = [job for job in self._queue[:_MAX_LOOP_BATCH] if not job.future.cancelled()]
        del self._queue[:_MAX_LOOP_BATCH]
        if self._queue and not self._scheduled:  # more than one transaction's worth
            self._scheduled = True
            self._loop.call_soon(self._flush)
        if not batch:
            return
        conn = self._thread.connection
        if conn is None or self._checkpointer.over or not self.lock.acquire(blocking=False):
            self._hand_over(batch)
            return
        try:
            late = self._commit(conn, batch)
        except BaseException as exc:  # a bug here must not strand the callers
            rollback(conn)
            self._watch.forget()
            for job in batch:
                job.error = StoreError(f"SQLite store could not {job.action}: internal error")
                job.error.__cause__ = exc
            late = []
        finally:
            self.lock.release()
        if late:  # nothing of the batch committed: every job still waiting goes to the thread
            self._hand_over(late)
            return
        self._checkpointer.committed(len(batch))
        settle([job.outcome() for job in batch])

    def _commit(self, conn: sqlite3.Connection, batch: list[Job]) -> list[Job]:
        """Run ``batch`` in one transaction on the loop; the jobs left for the writer thread.

        Another connection holding the write lock (``busy_timeout`` is 0 here) and a
        transaction lost as a whole send the batch to the writer thread, which waits for the
        lock and gives each write its own outcome.
        """
        watch = self._watch
        before = watch.before()
        # Rows changed (the store writes no temporary table) means the COMMIT wrote frames.
        changes = conn.total_changes
        end = commit_group(conn, batch)
        if end == "committed" and all(job.error is None for job in batch):
            watch.settle(before, wrote=conn.total_changes != changes)
        else:
            watch.forget()
        if end in ("busy", "lost"):
            return forget(batch)
        if end == "committed":
            self.loop_batches += 1
        return []

    def _hand_over(self, jobs: list[Job]) -> None:
        self.handed_over += len(jobs)
        self._thread.hand_over(jobs)
