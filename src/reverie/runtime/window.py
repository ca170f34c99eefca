"""The running segment's view of its thread: staged rows and the prompt window (docs/durability.md).

A segment reads its thread once (the head seq, and the newest rows for the first prompt); after
that every row it appends is added here as it is staged, so building a prompt reads nothing and
turns each row into a :class:`~reverie.core.messages.Message` once. Staged rows and journal
records wait here for the next step commit, which writes them in one transaction with the
checkpoint; a foreign append in between makes the store refuse the step
(:class:`reverie.errors.TranscriptConflict`), and the resume reads the thread again.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Collection, Sequence

from reverie.core.content import PARTS_META_KEY, parts_from_meta
from reverie.core.fastcopy import from_fields
from reverie.core.ids import new_id
from reverie.core.messages import Message
from reverie.core.transcript import NewItem, TranscriptItem, placed
from reverie.loop.compaction import SUMMARY_META, is_summary
from reverie.store.base import JournalWrite, Store

MIN_CAPACITY = 256
"""Rows kept at least (a window asks for ``ContextPlan.window`` of them; 100 by default)."""


def to_message(row: TranscriptItem) -> Message:
    """The model-facing message of a transcript row."""
    meta = row.meta
    # Every field (the dict is the message's own): one message per row a segment stages.
    return from_fields(
        Message,
        {
            "role": row.role,
            "content": row.content,
            "tool_calls": row.tool_calls,
            "tool_call_id": row.tool_call_id,
            "name": row.name,
            "parts": parts_from_meta(meta) if PARTS_META_KEY in meta else (),
        },
    )


class SegmentTranscript:
    """Staged writes and the cached newest rows of one thread, for one run segment."""

    def __init__(self, store: Store, thread_id: str, run_id: str) -> None:
        self._store = store
        self._thread_id = thread_id
        self._run_id = run_id
        self._head: int | None = None
        # The cached rows and their messages, in seq order (two lists, so a window is two
        # slices); ``_summaries`` counts the compaction summaries among them.
        self._rows: list[TranscriptItem] = []
        self._messages: list[Message] = []
        self._summaries = 0
        self._capacity = 0
        self._loaded = False
        self._complete = False
        """The cache holds every non-superseded row of the thread (up to the head)."""
        self.items: list[TranscriptItem] = []
        """Rows staged for the next step commit."""
        self.journal: list[JournalWrite] = []
        """Journal records staged for the next step commit."""

    async def stage(self, items: Sequence[NewItem]) -> list[TranscriptItem]:
        """Give the rows refs and seqs (after the head) and keep them for the next commit."""
        if self._head is None:
            self._head = await self._store.thread_head(self._thread_id)
        first = self._head + 1
        rows = [
            placed(item, ref=new_id("itm"), seq=seq, thread_id=self._thread_id, run_id=self._run_id)
            for seq, item in enumerate(items, start=first)
        ]
        self._head = first + len(rows) - 1
        self.items.extend(rows)
        if self._loaded:
            self._cache(rows)
        return rows

    def _cache(self, rows: Sequence[TranscriptItem]) -> None:
        self._rows.extend(rows)
        messages = self._messages
        for row in rows:
            messages.append(to_message(row))
            if SUMMARY_META in row.meta and is_summary(row):
                self._summaries += 1
        if len(self._rows) > 2 * self._capacity:
            # Trimmed in bulk (amortised): the newest ``_capacity`` rows stay.
            del self._rows[: -self._capacity], self._messages[: -self._capacity]
            self._summaries = sum(1 for row in self._rows if is_summary(row))
            self._complete = False

    def prime(self, head: int, rows: Sequence[TranscriptItem], *, complete: bool) -> None:
        """Start from what the segment's first transaction read (``Store.begin_segment``):
        the thread's head and its newest rows (``complete``: the thread has no older ones)."""
        self._head = head
        self._capacity = max(MIN_CAPACITY, len(rows))
        self._rows, self._messages, self._summaries = [], [], 0
        self._cache(rows)
        self._complete = complete
        self._loaded = True

    def take(self) -> tuple[list[TranscriptItem], int | None, list[JournalWrite]]:
        """What the next step commit writes: staged rows, the seq they follow, journal records."""
        items, journal = self.items, self.journal
        self.items, self.journal = [], []
        after = None if not items else items[0].seq - 1
        return items, after, journal

    def restore(self, items: list[TranscriptItem], journal: list[JournalWrite]) -> None:
        """Put back what a commit that raised may not have written.

        The segment ends on that error (docs/durability.md); a caller that went on would have
        its next commit write them, or refused (``TranscriptConflict``) if they had landed.
        """
        self.items[:0] = items
        self.journal[:0] = journal

    def staged_journal(self, call_ids: Collection[str]) -> dict[str, JournalWrite]:
        """The staged (not yet written) journal records of ``call_ids``, by call id."""
        wanted = set(call_ids)
        return {w.call_id: w for w in self.journal if w.call_id in wanted}

    def invalidate(self) -> None:
        """Forget the cached rows and head (the thread moved under us)."""
        self._head = None
        self._rows, self._messages, self._summaries = [], [], 0
        self._loaded = self._complete = False

    def find(self, refs: Sequence[str]) -> dict[str, TranscriptItem]:
        """Rows by ref among the staged and cached ones."""
        wanted = set(refs)
        found = {r.ref: r for r in self.items if r.ref in wanted}
        for row in self._rows:
            if row.ref in wanted:
                found[row.ref] = row
        return found

    def committed(self, refs: Sequence[str]) -> dict[str, TranscriptItem]:
        """Rows by ref among the cached ones that are written (not waiting to be staged)."""
        wanted = set(refs) - {r.ref for r in self.items}
        return {row.ref: row for row in self._rows if row.ref in wanted}

    @property
    def has_summary(self) -> bool:
        """Whether a compaction summary is among the cached rows (a window may need a view)."""
        return self._summaries > 0

    async def window(
        self, upto_seq: int, last: int | None
    ) -> tuple[list[TranscriptItem], list[Message]]:
        """The newest ``last`` rows (all: ``None``) with ``seq <= upto_seq``, oldest first, and
        their messages."""
        if last is not None and last <= 0:
            return [], []
        if not self._loaded or (not self._complete and (last is None or last > len(self._rows))):
            await self._load(last)
        rows = self._rows
        end = len(rows)
        if end and rows[-1].seq > upto_seq:
            end = bisect_right(rows, upto_seq, key=lambda r: r.seq)
        begin = 0 if last is None else max(0, end - last)
        return rows[begin:end], self._messages[begin:end]

    async def _load(self, last: int | None) -> None:
        # Committed rows from the store; staged ones (not there yet) are added after them.
        staged = {r.ref for r in self.items}
        if last is None:
            rows = await self._store.thread_items(self._thread_id)
            self._capacity = max(MIN_CAPACITY, 2 * len(rows) + len(self.items))
        else:
            self._capacity = max(MIN_CAPACITY, 2 * last, self._capacity)
            rows = await self._store.thread_items(self._thread_id, last=self._capacity)
        rows = [r for r in rows if r.ref not in staged] + list(self.items)
        self._complete = last is None or len(rows) < self._capacity
        self._rows, self._messages, self._summaries = [], [], 0
        self._cache(rows[-self._capacity :])
        self._loaded = True


__all__ = ["MIN_CAPACITY", "SegmentTranscript", "to_message"]
