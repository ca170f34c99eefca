"""The per-run event bus behind ``RunHandle.events()``."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable

from reverie.core.events import RunEvent

MAX_BUFFERED_EVENTS = 10_000
"""Events kept for late subscribers; the oldest are dropped past this."""


class EventQueue:
    """One listener's queue of events (``None`` ends it): a deque and a waiter.

    ``asyncio.Queue`` costs a dozen calls per event for bounds, task accounting and getter
    lists a single reader never uses; every event of every run goes through one of these.
    """

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: deque[RunEvent | None] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: RunEvent | None) -> None:
        """Append ``item`` and wake the reader."""
        self._items.append(item)
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def empty(self) -> bool:
        """Whether nothing is waiting to be read."""
        return not self._items

    def qsize(self) -> int:
        """How many items are waiting to be read."""
        return len(self._items)

    def get_nowait(self) -> RunEvent | None:
        """The oldest item; ``asyncio.QueueEmpty`` if there is none."""
        if not self._items:
            raise asyncio.QueueEmpty
        return self._items.popleft()

    async def get(self) -> RunEvent | None:
        """The oldest item, waiting for one if needed.

        Raises:
            RuntimeError: Another reader is waiting already (a queue has one reader: a second
                one would overwrite its wake-up and leave it waiting for good).
        """
        while not self._items:
            if self._waiter is not None:
                raise RuntimeError("an EventQueue has one reader; another one is waiting")
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiter = waiter
            try:
                await waiter
            finally:
                if self._waiter is waiter:
                    self._waiter = None
        return self._items.popleft()


class EventBus:
    """Fan-out of one run's events. Late subscribers replay the buffer, then follow live."""

    def __init__(self) -> None:
        self._buffer: deque[RunEvent] = deque(maxlen=MAX_BUFFERED_EVENTS)
        self._queues: list[EventQueue] = []
        # A tuple, replaced on (un)tap: emit iterates it as it stands, with no copy per event.
        self._taps: tuple[Callable[[RunEvent], None], ...] = ()
        self._closed = False
        self._closing: asyncio.Event | None = None

    def tap(self, listener: Callable[[RunEvent], None]) -> None:
        """Call ``listener`` with every event published from now on (it must not block)."""
        self._taps = (*self._taps, listener)

    def untap(self, listener: Callable[[RunEvent], None]) -> None:
        """Stop calling ``listener``."""
        if listener in self._taps:
            taps = list(self._taps)
            taps.remove(listener)
            self._taps = tuple(taps)

    def emit(self, event: RunEvent) -> None:
        """Publish an event (never blocks)."""
        if self._closed:
            return
        self._buffer.append(event)
        for q in self._queues:
            # EventQueue.put_nowait, inlined: every event of every step passes here.
            q._items.append(event)
            waiter = q._waiter
            if waiter is not None:
                q._waiter = None
                if not waiter.done():
                    waiter.set_result(None)
        for listener in self._taps:
            listener(event)

    def close(self) -> None:
        """End every subscription after the events already published."""
        if self._closed:
            return
        self._closed = True
        for q in self._queues:
            q.put_nowait(None)
        if self._closing is not None:
            self._closing.set()

    @property
    def closed(self) -> bool:
        """Whether the run segment is over."""
        return self._closed

    async def wait_closed(self) -> None:
        """Until :meth:`close`."""
        if self._closed:
            return
        if self._closing is None:
            self._closing = asyncio.Event()
        await self._closing.wait()

    def listen(self) -> EventQueue:
        """A queue of every event so far, then live ones, then ``None`` when the bus closes.

        The caller must read it to the ``None`` (or :meth:`forget` it).
        """
        queue = EventQueue()
        for event in self._buffer:
            queue.put_nowait(event)
        if self._closed:
            queue.put_nowait(None)
        else:
            self._queues.append(queue)
        return queue

    def forget(self, queue: EventQueue) -> None:
        """Stop feeding a queue of :meth:`listen`."""
        if queue in self._queues:
            self._queues.remove(queue)

    async def subscribe(self) -> AsyncIterator[RunEvent]:
        """Every event of the run so far, then live ones until the bus closes."""
        queue = self.listen()
        try:
            while True:
                item = await queue.get()
                if item is None:
                    return
                yield item
        finally:
            self.forget(queue)
