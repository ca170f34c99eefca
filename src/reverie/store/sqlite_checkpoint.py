"""WAL checkpoints of :class:`reverie.store.sqlite.SQLiteStore`, off the event loop.

The writer connection runs with ``wal_autocheckpoint`` off: SQLite would otherwise run a
checkpoint inside the ``COMMIT`` that crosses the threshold, and the commits the event loop
makes itself (:mod:`reverie.store.sqlite_loop`) would stop the loop for the time it takes to
copy the pages into the database file and sync it. A :class:`Checkpointer` does it instead, on
its own thread and connection:

- after each batch, the writer calls :meth:`Checkpointer.committed` with the batch's number of
  writes (every eighth write: one read of the WAL's length, so a batch of many writes is
  looked after at once). Past ``pages`` pages the checkpoint thread is woken and runs
  a ``PASSIVE`` checkpoint, which never blocks a writer or a reader.
- once a checkpoint copied every frame, the next commit starts the WAL over. It keeps the
  file (``journal_size_limit`` is the hard limit below, so a WAL that grew past it is cut
  back): a commit that overwrites frames of the file costs less than one that extends it
  (``benchmarks/sqlite_wal.py``). The WAL's length is then not the file's size: it is the
  last valid frame in the wal-index header of the ``-shm`` file (:func:`wal_frames`, the
  layout SQLite documents and every version since 3.7.0 shares, as processes of different
  versions share the file). Where that header cannot be read, the writer keeps
  ``journal_size_limit = 0``, which truncates a WAL started over, and the file's size is
  its length.
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
import functools
import os
import sqlite3
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["DEFAULT_CHECKPOINT_PAGES", "Checkpointer", "commits_of", "wal_frames", "wal_header"]

DEFAULT_CHECKPOINT_PAGES = 1000
"""WAL pages after which a checkpoint runs (SQLite's own ``wal_autocheckpoint`` default)."""

_HARD_FACTOR = 4
"""The WAL is bounded at this many times the checkpoint threshold."""

_LOOK_EVERY = 8
"""Writes between two looks at the WAL's size (so it may pass a limit by 8 writes' frames)."""

_WAL_HEADER = 32
_FRAME_HEADER = 24

_SHM_HEADER = struct.Struct("=I4xIBxxxI")
"""The start of a wal-index header (native byte order): ``iVersion``, ``iChange`` (offset 8,
one more at every commit), ``isInit`` (offset 12) and ``mxFrame`` (offset 16). The header
(48 bytes) is kept twice, at offsets 0 and 48."""
_SHM_VERSION = 3007000
_SHM_COPY = 48


def wal_header(shm: int) -> bytes | None:
    """The wal-index header of the open ``-shm`` file ``shm`` (48 bytes), as SQLite wrote it.

    ``None`` when the header is not one this module knows (no ``-shm`` in use, another
    layout) or is being written. Both copies of the header are read and must agree, as SQLite's
    own readers do (a writer updates one copy, then the other): a header being written is
    read again.
    """
    for _ in range(3):
        try:
            data = os.pread(shm, 2 * _SHM_COPY, 0)
        except OSError:
            return None
        if len(data) < 2 * _SHM_COPY:
            return None
        version, _change, ready, _frames = _SHM_HEADER.unpack_from(data)
        if version != _SHM_VERSION or not ready:
            return None
        header = data[:_SHM_COPY]
        if header == data[_SHM_COPY:]:
            return header
    return None


def commits_of(header: bytes) -> int:
    """The commit counter (``iChange``) of a wal-index header: every commit of any connection
    adds one (a checkpoint, or a WAL started over, adds none), modulo 2**32."""
    return int(_SHM_HEADER.unpack_from(header)[1])


def wal_frames(shm: int) -> int | None:
    """The WAL's length in frames, from the wal-index header of the open ``-shm`` file ``shm``.

    ``None`` when the header cannot be read (see :func:`wal_header`).
    """
    header = wal_header(shm)
    return None if header is None else int(_SHM_HEADER.unpack_from(header)[3])


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
        self._shm_path = f"{path}-shm"
        self._shm: int | None = None  # the -shm file, once attach() found its header readable
        self._connect = connect
        self._frame = frame = page_size + _FRAME_HEADER
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
        self._writes = 0  # committed since the last look at the WAL
        self._closing = False
        self._thread = threading.Thread(
            target=self._serve, name="reverie-sqlite-checkpoint", daemon=True
        )

    def start(self) -> None:
        """Start the checkpoint thread (it opens its connection there)."""
        self._thread.start()

    def attach(self, writer: sqlite3.Connection) -> None:
        """Before the first write: read the WAL's length from the ``-shm`` file if it can, and
        then let the writer keep a WAL file that starts over (see the module docstring)."""
        try:
            shm = os.open(self._shm_path, os.O_RDONLY)
        except OSError:
            return
        if wal_frames(shm) is None:
            os.close(shm)
            return
        self._shm = shm
        writer.execute(f"PRAGMA journal_size_limit = {self.hard_limit}")

    def header_reader(self) -> Callable[[], bytes | None] | None:
        """What reads the wal-index header (:func:`wal_header`) until :meth:`close`; ``None``
        when the ``-shm`` file's header could not be read at :meth:`attach`."""
        shm = self._shm
        return None if shm is None else functools.partial(wal_header, shm)

    def wal_size(self) -> int:
        """The WAL file's size in bytes (0 when there is none)."""
        try:
            return os.stat(self._wal).st_size
        except FileNotFoundError:
            return 0

    def wal_length(self) -> int:
        """The bytes of the WAL in use: its header and frames up to the last valid one (the
        file may be longer: a WAL started over writes over the frames of the one before)."""
        if self._shm is not None:
            frames = wal_frames(self._shm)
            if frames is not None:
                return _WAL_HEADER + frames * self._frame if frames else 0
        return self.wal_size()

    def committed(self, writes: int = 1) -> None:
        """After a commit of ``writes`` writes (any thread): look at the WAL every
        :data:`_LOOK_EVERY` writes (:meth:`look`).

        The WAL's size is not looked at after every commit (a read of it is not free on a
        busy machine, and the event loop calls this), but it is counted in writes, not in
        commits: one loop batch may hold hundreds of writes, and hundreds of WAL frames.
        """
        self._writes += writes
        if self._writes < _LOOK_EVERY and not self.over:
            return
        self._writes = 0
        self.look()

    def look(self) -> None:
        """Read the WAL's length now: mark it past the hard limit or not, and wake the
        checkpoint thread past the threshold.

        The checkpoint thread is woken again only once the WAL grew by another threshold's
        worth (or started over): a checkpoint that could not finish is not retried after
        every commit.
        """
        size = self.wal_length()
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
        shm, self._shm = self._shm, None
        if shm is not None:
            os.close(shm)

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
