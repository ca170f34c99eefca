"""WAL checkpoints of :class:`reverie.store.sqlite.SQLiteStore`, off the event loop.

The writer connection runs with ``wal_autocheckpoint`` off: SQLite would otherwise run a
checkpoint inside the ``COMMIT`` that crosses the threshold, and the commits the event loop
makes itself (:mod:`reverie.store.sqlite_loop`) would stop the loop for the time it takes to
copy the pages into the database file and sync it. A :class:`Checkpointer` does it instead, on
its own thread and connection:

- after each batch, the writer calls :meth:`Checkpointer.committed` (every eighth call: one
  ``stat`` of the ``-wal`` file). Past ``pages`` pages the checkpoint thread is woken and runs
  a ``PASSIVE`` checkpoint, which never blocks a writer or a reader.
- the writer sets ``journal_size_limit = 0``: once a checkpoint copied every frame, the next
  commit starts the WAL over and truncates it, so the file's size is the WAL's real length.
- a passive checkpoint can fall behind (a steady stream of commits, a reader of another process
  holding an old snapshot). Past :attr:`Checkpointer.hard_limit` bytes the WAL is **bounded**:
  the loop stops writing itself and hands its batches to the writer thread, which first runs a
  ``RESTART`` checkpoint (:meth:`Checkpointer.bound`): it waits, off the loop, for readers to
  leave the old frames, so the commit that follows starts the WAL over.
- :meth:`Checkpointer.close` runs a last checkpoint (the writer's close, the last connection
  of this process, then removes the WAL if no other process has the file open).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["DEFAULT_CHECKPOINT_PAGES", "Checkpointer"]

DEFAULT_CHECKPOINT_PAGES = 1000
"""WAL pages after which a checkpoint runs (SQLite's own ``wal_autocheckpoint`` default)."""

_HARD_FACTOR = 4
"""The WAL is bounded at this many times the checkpoint threshold."""

_LOOK_EVERY = 8
"""Commits between two looks at the WAL's size (so it may pass a limit by 8 commits)."""

_WAL_HEADER = 32
_FRAME_HEADER = 24


class Checkpointer:
    """One thread running ``PASSIVE`` checkpoints of one database file when woken.

    Args:
        path: The database file (its WAL is ``path`` + ``-wal``).
        connect: Opens the checkpoint connection; runs on the checkpoint thread.
        pages: WAL pages after which a checkpoint runs.
        page_size: The database's page size, in bytes.
    """

    def __init__(
        self,
        path: Path,
        connect: Callable[[], sqlite3.Connection],
        *,
        pages: int,
        page_size: int,
    ) -> None:
        self._wal = f"{path}-wal"
        self._connect = connect
        frame = page_size + _FRAME_HEADER
        self.soft_limit = _WAL_HEADER + max(1, pages) * frame
        """WAL bytes past which a passive checkpoint is started."""
        self.hard_limit = _WAL_HEADER + max(1, pages) * _HARD_FACTOR * frame
        """WAL bytes past which writes wait for a ``RESTART`` checkpoint, off the loop."""
        self.over = False
        """The WAL was past :attr:`hard_limit` at the last look: the loop must not write."""
        self.checkpoints = 0
        """Checkpoints run so far (passive and restart), for diagnostics."""
        self._wake = threading.Event()
        self._mark = 0  # the WAL's size when the checkpoint thread was last woken
        self._commits = 0
        self._closing = False
        self._thread = threading.Thread(
            target=self._serve, name="reverie-sqlite-checkpoint", daemon=True
        )

    def start(self) -> None:
        """Start the checkpoint thread (it opens its connection there)."""
        self._thread.start()

    def wal_size(self) -> int:
        """The WAL file's size in bytes (0 when there is none)."""
        try:
            return os.stat(self._wal).st_size
        except FileNotFoundError:
            return 0

    def committed(self) -> None:
        """After a commit (any thread): wake the checkpoint thread past the threshold.

        The WAL's size is looked at every :data:`_LOOK_EVERY` commits (a ``stat`` is not free
        on a busy machine, and the event loop calls this). The checkpoint thread is woken again
        only once the WAL grew by another threshold's worth (or started over): a checkpoint
        that could not finish is not retried after every commit.
        """
        self._commits += 1
        if self._commits % _LOOK_EVERY and not self.over:
            return
        size = self.wal_size()
        self.over = size > self.hard_limit
        if size > self.soft_limit and not self._wake.is_set():
            mark = self._mark
            if size < mark or size - mark >= self.soft_limit - _WAL_HEADER:
                self._mark = size
                self._wake.set()

    def bound(self, conn: sqlite3.Connection, busy_ms: int) -> None:
        """On the writer thread, before a batch: bring a WAL past the hard limit back.

        The caller holds the connection, so no write of this process lands meanwhile.
        ``RESTART`` waits (``conn``'s busy timeout) for readers still using old frames, so
        that the batch's commit starts the WAL over; a checkpoint already running (the
        checkpoint thread's) makes it fail at once, so it is tried again until ``busy_ms``.
        """
        if not self.over:
            return
        deadline = time.monotonic() + busy_ms / 1000
        pause = 0.001
        while True:
            try:
                busy = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()[0]
            except sqlite3.Error:
                busy = 1
            if not busy:
                self.checkpoints += 1
                self.over = False  # looked at again after this batch's commit
                return
            if time.monotonic() > deadline:
                # Still busy: the batch goes on, and ``over`` stays set, so the next commit
                # looks at the WAL again and the next batch goes to this thread to retry.
                return
            time.sleep(pause)  # on the writer thread, never the event loop's
            pause = min(pause * 2, 0.05)

    def close(self) -> None:
        """Run a last checkpoint and stop the thread (blocks until it ended)."""
        self._closing = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()

    def _serve(self) -> None:
        try:
            conn = self._connect()
        except sqlite3.Error:  # the writer's own close still checkpoints the file
            return
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                with contextlib.suppress(sqlite3.Error):  # busy: the next wake-up tries again
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.checkpoints += 1
                if self._closing:
                    return
        finally:
            conn.close()
