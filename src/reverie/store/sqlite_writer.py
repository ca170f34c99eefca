"""The threads of :class:`reverie.store.sqlite.SQLiteStore`: one connection each, group commit.

A :class:`ConnectionThread` owns one stdlib :mod:`sqlite3` connection, opened, used and closed
on its own thread, so SQLite never blocks the event loop. Callers hand it plain synchronous
functions ``(connection) -> result`` and await an asyncio future; the thread resolves the
futures of everything it served in one go with
:meth:`~asyncio.AbstractEventLoop.call_soon_threadsafe`. One call costs one thread hop each way,
however many statements the function runs.

The writer's connection is shared with the event loop, which commits most writes itself
(:mod:`reverie.store.sqlite_loop`); the writer thread takes the batches the loop cannot run
without waiting (:meth:`ConnectionThread.hand_over`), and enters ``hold`` (the shared lock, its
own ``busy_timeout``) around each batch.

**Group commit** (:meth:`ConnectionThread.transact`, used on the writer). The thread takes
everything queued when it wakes and runs the transactional operations among it, in the order
they were queued, in ONE ``BEGIN IMMEDIATE`` … ``COMMIT`` transaction:

- one operation's failure (a stale fence, a gate resolved twice, a constraint violation) is
  that caller's exception and undoes that operation's writes only; the others still commit.
  Each operation sees the writes of those before it, exactly as if each had committed alone.
  Most failures happen before the operation wrote anything, so the batch runs without
  savepoints; if a failed operation did change rows, the batch is undone and run again with a
  ``SAVEPOINT`` around each operation (see :func:`commit_group`, which the loop uses too).
- futures are resolved only after ``COMMIT`` returned, so a write that answered is durable as
  far as ``PRAGMA synchronous`` promises. A failed ``COMMIT`` (or an error after which SQLite
  rolled the whole transaction back, e.g. a full disk) blames no one at random: each operation
  is run again in a transaction of its own and gets its own outcome.
- operations must have no effect outside the connection (they may be run twice, the first run
  rolled back) and must use SQLite's default ``ABORT`` conflict resolution.

A caller cancelled while it waits may or may not see its operation applied: one the thread has
not reached yet is skipped, one it has started runs and commits with its batch. A cancel never
tears an operation or a batch.

:meth:`ConnectionThread.call` runs a function outside any transaction (the reader's queries,
pragmas). The connection itself is opened by the ``connect`` function on the thread (the
writer's migrates the schema there, in its own transaction).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Final, Literal, TypeVar

from reverie.errors import StoreError
from reverie.store.sqlite_schema import store_error

__all__ = [
    "TRANSACT",
    "ConnectionThread",
    "GroupEnd",
    "Job",
    "TransactionLost",
    "Undo",
    "commit_group",
    "forget",
    "rollback",
    "run_group",
    "run_wrapped",
    "settle",
]

T = TypeVar("T")

Operation = Callable[[sqlite3.Connection], Any]
"""What a connection thread runs: a synchronous function of its connection."""

_CALL: Final = 0
TRANSACT: Final = 1
_STOP: Final = 2

_MAX_BATCH = 512
"""Operations taken off the queue per wake-up; more wait for the next transaction."""

_FLUSH_AFTER_S = 0.001
"""Within a batch, answer the callers served so far once this much time has passed."""

Outcome = tuple[asyncio.Future[Any], Any, BaseException | None]
"""A future and what to resolve it with: a result, or an exception when not ``None``."""


class Job:
    """One queued operation and, once it ran, its outcome."""

    __slots__ = ("action", "error", "fn", "future", "kind", "loop", "result")

    def __init__(
        self,
        kind: int,
        action: str,
        fn: Operation,
        future: asyncio.Future[Any],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.kind = kind
        self.action = action
        self.fn = fn
        self.future = future
        self.loop = loop
        self.result: Any = None
        self.error: BaseException | None = None

    def outcome(self) -> Outcome:
        return (self.future, self.result, self.error)


def settle(outcomes: list[Outcome]) -> None:
    """On the event loop: resolve every future not cancelled meanwhile."""
    for future, result, error in outcomes:
        if future.done():
            continue
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)


def run_wrapped(op: Job, conn: sqlite3.Connection) -> None:
    """Run ``op.fn``, keeping its result or its (store-wrapped) exception on ``op``."""
    try:
        op.result = op.fn(conn)
    except BaseException as exc:  # delivered to the caller, never lost in the thread
        op.error = store_error(op.action, exc)


def rollback(conn: sqlite3.Connection) -> None:
    """End an open transaction; an error here leaves nothing more to undo."""
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


class ConnectionThread:
    """One SQLite connection on one owned thread; see the module docstring.

    Args:
        name: The thread's name (shows in debuggers and thread dumps).
        connect: Opens the connection; runs on the thread itself, which then owns it.
        hold: Entered around every batch the thread runs once the connection is open (the
            loop-local writer, :mod:`reverie.store.sqlite_loop`, shares the connection: it
            takes the connection's lock there and sets the thread's busy timeout).
    """

    def __init__(
        self,
        name: str,
        connect: Callable[[], sqlite3.Connection],
        *,
        hold: Callable[[], AbstractContextManager[object]] | None = None,
    ) -> None:
        self._name = name
        self._connect = connect
        self._hold = hold or contextlib.nullcontext
        self._queue: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._conn: sqlite3.Connection | None = None
        self._connect_error: BaseException | None = None
        self._stopped: asyncio.Future[Any] | None = None

    # event-loop side ------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the thread and open the connection on it.

        Raises:
            BaseException: Whatever ``connect`` raised (unwrapped). The thread then keeps
                answering with that error until :meth:`close`, which must still be called.
        """
        if self._thread is not None:
            raise StoreError(f"{self._name} was already started")
        loop = asyncio.get_running_loop()
        opened: asyncio.Future[Any] = loop.create_future()
        # A daemon thread: a store never closed must not keep the interpreter from exiting
        # (SQLite then recovers the file as after a crash).
        self._thread = threading.Thread(
            target=self._serve, args=(opened, loop), name=self._name, daemon=True
        )
        self._thread.start()
        await opened

    async def call(self, action: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the thread, outside any transaction; one hop.

        ``sqlite3`` errors come back as :class:`StoreError` / :class:`ConflictError` naming
        ``action``; anything else ``fn`` raises comes back as it is.
        """
        result: T = await self._submit(_CALL, action, fn)
        return result

    async def transact(self, action: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` inside the next group-commit transaction; answers after ``COMMIT``.

        Whatever ``fn`` raises rolls back what ``fn`` wrote, and only that.
        """
        result: T = await self._submit(TRANSACT, action, fn)
        return result

    async def close(self) -> None:
        """Run what is queued, close the connection and join the thread. Safe to call twice."""
        if self._thread is None:
            return
        if self._stopped is None:
            loop = asyncio.get_running_loop()
            self._stopped = loop.create_future()
            self._queue.put(Job(_STOP, "close", lambda conn: None, self._stopped, loop))
        await asyncio.shield(self._stopped)
        # The thread resolved the future as its last act; the join is immediate.
        self._thread.join()

    @property
    def connection(self) -> sqlite3.Connection | None:
        """The open connection (``None`` before :meth:`start` or when it failed).

        Only for a caller that serialises its use with the thread's (see ``hold``).
        """
        return self._conn

    def hand_over(self, jobs: list[Job]) -> None:
        """Queue transactional jobs another writer could not run; they join the next batch."""
        if self._thread is None or self._stopped is not None:
            for job in jobs:
                job.error = StoreError(f"SQLite store could not {job.action}: it was closed")
            self._send(jobs)
            return
        for job in jobs:
            self._queue.put(job)

    def _submit(self, kind: int, action: str, fn: Operation) -> asyncio.Future[Any]:
        if self._thread is None or self._stopped is not None:
            raise StoreError(f"SQLite store could not {action}: the connection is closed")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.put(Job(kind, action, fn, future, loop))
        return future

    # thread side ----------------------------------------------------------------------------
    def _serve(self, opened: asyncio.Future[Any], loop: asyncio.AbstractEventLoop) -> None:
        start = Job(_CALL, "open", lambda conn: None, opened, loop)
        try:
            self._conn = self._connect()
        except BaseException as exc:  # answered to start(); the thread serves on until close
            start.error = self._connect_error = exc
        self._send([start])
        while True:
            batch = self._take()
            stop = next((i for i, op in enumerate(batch) if op.kind == _STOP), len(batch))
            try:
                if self._conn is None:
                    self._send(self._run(batch[:stop]))
                else:
                    with self._hold():
                        done = self._run(batch[:stop])
                    self._send(done)
            except BaseException as exc:  # a bug here must not strand the callers
                if self._conn is not None:
                    rollback(self._conn)
                for op in batch[:stop]:
                    op.error = StoreError(f"SQLite store could not {op.action}: internal error")
                    op.error.__cause__ = exc
                self._send(batch[:stop])  # a future answered already keeps its first outcome
            if stop < len(batch):
                self._finish(batch[stop], batch[stop + 1 :])
                return

    def _take(self) -> list[Job]:
        """Block for one operation, then take whatever else is queued (up to the cap)."""
        batch = [self._queue.get()]
        while len(batch) < _MAX_BATCH:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return batch

    def _run(self, batch: list[Job]) -> list[Job]:
        """Run a batch in order: each run of transactional operations is one transaction.

        Returns the jobs not answered yet: the caller answers them once it let go of the
        connection (``hold``), so a caller woken by its answer finds the connection free.
        """
        done: list[Job] = []
        since = time.perf_counter()
        index = 0
        while index < len(batch):
            end = index + 1
            if batch[index].kind == TRANSACT:
                while end < len(batch) and batch[end].kind == TRANSACT:
                    end += 1
            group = [op for op in batch[index:end] if not op.future.cancelled()]
            index = end
            if not group:
                continue
            if self._conn is None:
                for op in group:
                    op.error = StoreError(f"SQLite store could not {op.action}: not open")
                    op.error.__cause__ = self._connect_error
            elif group[0].kind == _CALL:
                run_wrapped(group[0], self._conn)
            else:
                self._commit(self._conn, group)
            done += group
            if index < len(batch) and time.perf_counter() - since > _FLUSH_AFTER_S:
                self._send(done)
                done, since = [], time.perf_counter()
        return done

    @staticmethod
    def _commit(conn: sqlite3.Connection, group: list[Job]) -> None:
        """Run ``group`` in one transaction (:func:`commit_group`); each job gets its outcome.

        When the transaction is lost (a failed ``COMMIT``, or SQLite rolled the whole batch
        back), nothing of the batch is on disk: each operation is run again in a transaction
        of its own, so an error is answered to the operation that causes it and to no other.
        """
        if commit_group(conn, group) == "lost":
            for op in forget(group):
                commit_group(conn, [op])  # alone: never lost, its COMMIT's error is its own

    def _finish(self, stop: Job, late: list[Job]) -> None:
        """Close the connection, refuse what was queued after the stop, answer the closer."""
        for op in late:  # only a caller on another thread could have slipped these in
            op.error = StoreError(f"SQLite store could not {op.action}: the store was closed")
        if self._conn is not None:
            try:
                self._conn.close()
            except sqlite3.Error as exc:
                stop.error = StoreError(f"SQLite store could not close: {exc}")
                stop.error.__cause__ = exc
            self._conn = None
        self._send([*late, stop])

    @staticmethod
    def _send(ops: list[Job]) -> None:
        """Hand the outcomes to their event loops, one wake-up per loop."""
        by_loop: dict[asyncio.AbstractEventLoop, list[Outcome]] = {}
        for op in ops:
            by_loop.setdefault(op.loop, []).append(op.outcome())
        for loop, outcomes in by_loop.items():
            # A closed loop raises RuntimeError: nobody is waiting there any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, outcomes)


GroupEnd = Literal["committed", "answered", "busy", "lost"]
"""How :func:`commit_group` ended (see there)."""


def commit_group(conn: sqlite3.Connection, group: list[Job]) -> GroupEnd:
    """Run ``group`` in one ``BEGIN IMMEDIATE`` … ``COMMIT``; each job keeps its outcome.

    One operation's failure is that job's error and undoes that operation's writes only; the
    others still commit. Most failures happen before the operation wrote anything, so the
    group runs without savepoints (each would cost two more statements per operation, and
    under load every statement is a wait for the GIL); when a failed operation did change rows
    (:class:`Undo`), the group is undone to a ``SAVEPOINT`` taken after ``BEGIN`` — the write
    lock is kept — and run again with a ``SAVEPOINT`` around every operation. A lone operation
    needs none: when it fails, its transaction is rolled back.

    Returns:
        ``"committed"``: the ``COMMIT`` ran; every job holds its outcome. ``"answered"``:
        nothing was committed and every job holds its error (a lone operation failed, its
        ``COMMIT`` too, or ``BEGIN`` failed for another reason than the lock). ``"busy"``:
        ``BEGIN IMMEDIATE`` found the write lock taken (past the connection's
        ``busy_timeout``); nothing ran and every job holds that error. ``"lost"``: the group
        ran but its transaction ended without committing (a failed ``COMMIT``, or SQLite
        rolled it back on its own): nothing of it is on disk; the caller runs it again
        (:func:`forget` clears the outcomes).
    """
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        for op in group:
            op.error = store_error(op.action, exc)
        code = getattr(exc, "sqlite_errorcode", None)
        return "busy" if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) else "answered"
    if len(group) == 1:
        [op] = group
        run_wrapped(op, conn)
        try:
            if op.error is None:
                conn.execute("COMMIT")
                return "committed"
        except sqlite3.Error as exc:
            op.result, op.error = None, store_error(op.action, exc)
        rollback(conn)  # a lone failed operation: nothing to keep
        return "answered"
    try:
        conn.execute("SAVEPOINT batch")
        try:
            run_group(conn, group, savepoints=False)
        except Undo:
            conn.execute("ROLLBACK TO batch")
            run_group(conn, forget(group), savepoints=True)
        conn.execute("COMMIT")
    except (sqlite3.Error, TransactionLost):
        rollback(conn)
        return "lost"
    return "committed"


def run_group(conn: sqlite3.Connection, group: list[Job], *, savepoints: bool) -> None:
    """Inside an open transaction, run ``group`` in order; each outcome is kept on its job.

    Without ``savepoints`` an operation that fails is undone by SQLite only as far as its
    failed statement; when it had changed rows before (``total_changes`` moved),
    :class:`Undo` is raised and the caller must undo the group and run it again with them.

    Raises:
        Undo: A failed operation had written rows (only without ``savepoints``).
        TransactionLost: SQLite rolled the whole transaction back after a failure.
        sqlite3.Error: A ``SAVEPOINT`` statement itself failed.
    """
    for op in group:
        if savepoints:
            conn.execute("SAVEPOINT op")
        changes = conn.total_changes
        run_wrapped(op, conn)
        if op.error is not None:
            if not conn.in_transaction:  # SQLite rolled back everything (disk full…)
                raise TransactionLost
            if savepoints:
                conn.execute("ROLLBACK TO op")
            elif conn.total_changes != changes:
                raise Undo
        if savepoints:
            conn.execute("RELEASE op")


class TransactionLost(Exception):
    """SQLite ended the batch's transaction on its own after an operation failed."""


class Undo(Exception):
    """An operation failed after it wrote: the batch must be run again with savepoints."""


def forget(group: list[Job]) -> list[Job]:
    """Clear the outcomes of a rolled-back batch; the operations still worth running again."""
    for op in group:
        op.result = op.error = None
    return [op for op in group if not op.future.cancelled()]
