"""What a :class:`reverie.store.sqlite.SQLiteStore` knows of its runs' input queues unread.

After a harmless wave the loop reads its run's input queue once (``poll_inputs``) where a step
commit's receipt would have told it whether inputs wait. Nearly always nothing arrived, and
the store can know so without reading the file:

- every step commit reads the run's top input cursor inside its transaction (the write lock
  held): the store notes it (:meth:`InputWatch.saw`). Every input this store enqueues is noted
  too (:meth:`InputWatch.touched`): the run's note is dropped.
- every commit of *any* connection to the file (another process, another store in this one)
  adds one to the commit counter of the WAL's wal-index header, in the ``-shm`` file
  (:func:`~reverie.store.sqlite_checkpoint.commits_of`; a checkpoint adds none). SQLite
  writes the header before the ``COMMIT`` returns, and a reader finds a commit only through
  it: a commit the header does not show yet is one a ``SELECT`` made now would not see either.
- a commit this store makes on the event loop is *ours alone* when the counter moved by
  exactly what that commit adds (one when it changed rows, none when it did not) from its
  value read just before the transaction began, with the write lock of this process's
  writer held throughout. Then the header read right after the ``COMMIT`` (``quiet``) marks a
  state in which every note is exact: the notes kept from before (if the header read before
  the transaction was the previous ``quiet``, nothing came in between) and this commit's own.
  Any other outcome (another connection committed in between, a write failed, the batch went
  to the writer thread, the header cannot be read) forgets every note.

So a poll whose run's noted top cursor is at most the poll's cursor, made while the header is
still ``quiet``, has its answer without a statement: nothing. Whatever else happens, the poll
reads the queue (:meth:`InputWatch.nothing_past` only ever answers "nothing past" or "ask").

Races, each ending in a read: a foreign commit just after ours moves the counter before we read
``quiet`` (two steps: not ours alone) or after it (``quiet`` no longer matches); a commit of
the writer thread (which shares the connection, under :attr:`LoopWriter.lock`) moves the
counter off ``quiet``; a header being written reads as two copies that differ (``None``).
Notes are taken and settled only with that lock held; the loop reads them without it (a dict
lookup and an attribute are atomic under the GIL), and the header decides.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from reverie.store.sqlite_checkpoint import commits_of

__all__ = ["InputWatch"]

_MAX_RUNS = 4096
"""Runs noted at most; past it every note is forgotten (one read each, then noted again)."""

_COUNTER = 1 << 32

_SHARED_PAGE_CACHE = sys.platform.startswith("linux") or sys.platform == "darwin"


def _unreadable() -> bytes | None:
    return None


class InputWatch:
    """The top input cursor of runs, as of the wal-index header :attr:`quiet` (module doc).

    It answers nothing until :meth:`attach` gave it a way to read the header.
    """

    def __init__(self) -> None:
        self._header: Callable[[], bytes | None] = _unreadable
        self.quiet: bytes | None = None
        """The header after this store's last commit known to be its own alone."""
        self._tops: dict[str, int] = {}
        self._notes: list[tuple[str, int | None]] = []  # this transaction's, in order

    def attach(self, header: Callable[[], bytes | None] | None) -> None:
        """Read the wal-index header with ``header`` from now on (the store opened; ``None``:
        it cannot be read, and the watch stays off).

        Off where reading the ``-shm`` file may not show what another process mapped and wrote
        there at once (Linux and macOS share one page cache between the two).
        """
        self.forget()
        if header is not None and _SHARED_PAGE_CACHE:
            self._header = header

    def detach(self) -> None:
        """Stop answering (the store closes)."""
        self._header = _unreadable
        self.forget()

    # inside a transaction of this store's writer (its lock held) ------------------------------
    def saw(self, run_id: str, top_cursor: int) -> None:
        """The run's top input cursor, read in the current write transaction."""
        self._notes.append((run_id, top_cursor))

    def touched(self, run_id: str) -> None:
        """The current write transaction may add an input to the run's queue."""
        self._notes.append((run_id, None))

    # around a transaction the event loop commits (the writer's lock held) ----------------------
    def before(self) -> bytes | None:
        """Just before ``BEGIN``: the header to settle the transaction against."""
        self._notes.clear()
        return self._header()

    def settle(self, before: bytes | None, *, wrote: bool) -> None:
        """After a ``COMMIT`` every operation of which succeeded: keep what is still exact.

        Args:
            before: What :meth:`before` returned for this transaction.
            wrote: Whether the transaction changed rows (its ``COMMIT`` then wrote the WAL).
        """
        notes, self._notes = self._notes, []
        after = self._header()
        if before is None or after is None:
            self.forget()
            return
        if commits_of(after) != (commits_of(before) + int(wrote)) % _COUNTER:
            self.forget()  # another connection committed in between
            return
        tops = self._tops
        if before != self.quiet or len(tops) > _MAX_RUNS:
            tops.clear()  # the notes kept were exact as of another header
        for run_id, top in notes:
            if top is None:
                tops.pop(run_id, None)
            else:
                tops[run_id] = top
        self.quiet = after

    def forget(self) -> None:
        """Drop every note (the writer thread committed, a batch failed or was handed over)."""
        self._notes.clear()
        self.quiet = None
        self._tops.clear()

    # on the event loop, lock-free ------------------------------------------------------------
    def nothing_past(self, run_id: str, cursor: int) -> bool:
        """Whether the run's queue certainly holds no input past ``cursor`` now (``False``:
        read it)."""
        top = self._tops.get(run_id)
        if top is None or top > cursor:
            return False
        quiet = self.quiet
        return quiet is not None and self._header() == quiet
