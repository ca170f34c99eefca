"""Decoded transcript rows per thread, kept in process and checked against the database on reads.

A runtime reads the newest rows of a thread at the start of every run segment (the prompt
window, the memory service's recent rows, a settle's tail): on a long conversation each turn
would read and decode the same few hundred rows again. :class:`ItemCache` keeps them per thread,
as a **range** of seqs ``[low, high]`` whose every row that was not superseded is held.

Never stale, whoever writes: a read still asks the database, in one statement, for the seqs of
the rows it returns (so rows superseded since, or appended by another worker, are seen), and for
the full columns of only those rows outside the cached range (see
:meth:`reverie.store.postgres.PostgresStore.thread_items`). This holds because rows never change
once written except for ``superseded``, which only ever turns on, and because seqs are drawn
under the thread's lock in commit order (when row ``s`` is visible so is every row below it): a
row the database returns inside the range was not superseded when it was cached, so the cache
holds it. Rows this store appends join the range when they follow it directly; rows it
supersedes leave it.

Memory is bounded, least recently used thread first: at most ``max_threads`` threads and about
``max_bytes`` of rows (an estimate: text lengths plus a fixed cost per row); a single thread
larger than the budget keeps its newest rows. Used from the event loop only.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from reverie.store.base import TranscriptItem

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MAX_THREADS", "ItemCache", "ThreadRows"]

DEFAULT_MAX_THREADS = 1024
"""Threads kept at most, by default."""
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
"""Estimated bytes of rows kept at most, by default (64 MiB)."""

_ROW_COST = 256
"""Estimated bytes of a decoded row beyond its text (the record, its dicts and tuples)."""

EMPTY = (1, 0)
"""The range of a thread with nothing cached (no seq is in it)."""


def row_size(item: TranscriptItem) -> int:
    """The estimated bytes a cached row holds."""
    size = _ROW_COST + len(item.content)
    for call in item.tool_calls:
        size += _ROW_COST + len(call.name) + len(str(call.arguments))
    if item.meta:
        size += len(str(item.meta))
    return size


@dataclass(slots=True)
class ThreadRows:
    """The cached rows of one thread: every non-superseded row with ``low <= seq <= high``."""

    low: int
    high: int
    rows: dict[int, TranscriptItem] = field(default_factory=dict)
    size: int = 0

    @property
    def span(self) -> tuple[int, int]:
        """``(low, high)``."""
        return self.low, self.high

    def add(self, items: Iterable[TranscriptItem]) -> None:
        for item in items:
            old = self.rows.get(item.seq)
            if old is not None:
                self.size -= row_size(old)
            self.rows[item.seq] = item
            self.size += row_size(item)

    def drop(self, seqs: Iterable[int]) -> None:
        for seq in seqs:
            old = self.rows.pop(seq, None)
            if old is not None:
                self.size -= row_size(old)


class ItemCache:
    """Decoded transcript rows by thread (see the module doc).

    Args:
        max_threads: Threads kept at most (least recently used dropped first).
        max_bytes: Estimated bytes of rows kept at most.
    """

    def __init__(
        self, *, max_threads: int = DEFAULT_MAX_THREADS, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        self.max_threads = max(0, max_threads)
        self.max_bytes = max(0, max_bytes)
        self._threads: OrderedDict[str, ThreadRows] = OrderedDict()
        self._bytes = 0

    @property
    def threads(self) -> int:
        """Threads with rows cached now."""
        return len(self._threads)

    @property
    def bytes(self) -> int:
        """Estimated bytes of the rows cached now."""
        return self._bytes

    def entry(self, thread_id: str) -> ThreadRows | None:
        """The thread's cached rows (marked recently used), or ``None``.

        A read keeps the entry it was given for the whole read: if it is evicted or replaced
        meanwhile, the rows it holds are still right for the range it had.
        """
        found = self._threads.get(thread_id)
        if found is not None:
            self._threads.move_to_end(thread_id)
        return found

    def read(self, thread_id: str, items: Sequence[TranscriptItem]) -> None:
        """A read returned ``items``: every non-superseded row between its first and last seq."""
        if not items or not self.max_threads:
            return
        low, high = items[0].seq, items[-1].seq
        entry = self._threads.get(thread_id)
        if entry is not None and low <= entry.high + 1 and high + 1 >= entry.low:
            before = entry.size
            # Rows of the range the read did not return were superseded since.
            returned = {item.seq for item in items}
            entry.drop([s for s in entry.rows if low <= s <= high and s not in returned])
            entry.add(items)
            entry.low, entry.high = min(low, entry.low), max(high, entry.high)
            self._bytes += entry.size - before
            self._threads.move_to_end(thread_id)
        else:
            self._forget(thread_id)
            entry = ThreadRows(low=low, high=high)
            entry.add(items)
            self._threads[thread_id] = entry
            self._bytes += entry.size
        self._trim(thread_id)

    def appended(self, thread_id: str, items: Sequence[TranscriptItem]) -> None:
        """This store committed ``items`` (consecutive seqs) at the thread's head."""
        entry = self._threads.get(thread_id)
        if entry is None or not items or items[0].seq != entry.high + 1:
            return  # not next to the range (another writer's rows between): a read fetches them
        before = entry.size
        entry.add(item for item in items if not item.superseded)
        entry.high = items[-1].seq
        self._bytes += entry.size - before
        self._threads.move_to_end(thread_id)
        self._trim(thread_id)

    def superseded(self, thread_id: str, run_id: str, seq: int) -> None:
        """This store marked the run's rows past ``seq`` superseded."""
        entry = self._threads.get(thread_id)
        if entry is None:
            return
        before = entry.size
        entry.drop([s for s, item in entry.rows.items() if s > seq and item.run_id == run_id])
        self._bytes += entry.size - before

    def _forget(self, thread_id: str) -> None:
        entry = self._threads.pop(thread_id, None)
        if entry is not None:
            self._bytes -= entry.size

    def _trim(self, keep: str) -> None:
        """Drop least recently used threads, then the oldest rows of ``keep``, to the bounds."""
        while self._threads and (
            len(self._threads) > self.max_threads or self._bytes > self.max_bytes
        ):
            oldest = next(iter(self._threads))
            if oldest == keep:
                break
            self._forget(oldest)
        entry = self._threads.get(keep)
        if entry is None or self._bytes <= self.max_bytes:
            return
        before = entry.size
        seqs = sorted(entry.rows)
        dropped = 0
        while dropped < len(seqs) and self._bytes - (before - entry.size) > self.max_bytes:
            entry.drop([seqs[dropped]])
            dropped += 1
        self._bytes += entry.size - before
        if dropped == len(seqs):
            self._forget(keep)
        else:
            entry.low = seqs[dropped]
