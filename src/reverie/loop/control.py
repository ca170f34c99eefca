"""Run control: the in-process cancellation token and the cancellation-first race (docs/loop.md)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


class Cancelled(Exception):
    """Raised inside the executor at a cancellation boundary."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CancelToken:
    """Fired by ``RunHandle.cancel()``; checked at every boundary."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.reason = "cancelled"

    @property
    def cancelled(self) -> bool:
        """Whether cancellation was requested."""
        return self._event.is_set()

    def cancel(self, reason: str = "cancelled") -> None:
        """Request cancellation (idempotent: the first reason is kept)."""
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    async def wait(self) -> None:
        """Until cancelled."""
        await self._event.wait()

    def check(self) -> None:
        """A cancellation boundary: raise :class:`Cancelled` if requested."""
        if self._event.is_set():
            raise Cancelled(self.reason)


async def race_cancellation(work: Awaitable[T], token: CancelToken) -> T:
    """Await ``work`` unless the token fires first. Cancellation wins a tie.

    After ``work`` finishes the token is checked again, so an answer that arrived after (or
    together with) cancellation is never returned to be committed.
    """
    token.check()
    task: asyncio.Future[T] = asyncio.ensure_future(work)
    waiter: asyncio.Future[None] = asyncio.ensure_future(token.wait())
    pending: set[asyncio.Future[Any]] = {task, waiter}
    try:
        await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        waiter.cancel()
        raise
    finally:
        waiter.cancel()
    if token.cancelled:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        elif not task.cancelled():
            task.exception()  # mark retrieved; the answer is discarded
        raise Cancelled(token.reason)
    return task.result()


async def cancellable_sleep(seconds: float, token: CancelToken) -> None:
    """Sleep, but wake (and raise :class:`Cancelled`) as soon as the token fires."""
    if seconds <= 0:
        token.check()
        return
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await token.wait()
    token.check()
