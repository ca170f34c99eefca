"""Run control: the in-process cancellation token and the cancellation-first race (docs/loop.md)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable
from types import CoroutineType
from typing import Any, TypeVar

from reverie.core.stepping import Resumed

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
        self._fired = False
        """Set with the event: a boundary reads a flag, not the event (several per step)."""
        self._interrupts: list[_Interrupt] = []
        self.reason = "cancelled"

    @property
    def cancelled(self) -> bool:
        """Whether cancellation was requested."""
        return self._fired

    def cancel(self, reason: str = "cancelled") -> None:
        """Request cancellation (idempotent: the first reason is kept).

        Work awaited through :func:`race_cancellation` is interrupted.
        """
        if self._fired:
            return
        self.reason = reason
        self._fired = True
        self._event.set()
        interrupts, self._interrupts = self._interrupts, []
        for interrupt in interrupts:
            interrupt.fire()

    async def wait(self) -> None:
        """Until cancelled."""
        await self._event.wait()

    def check(self) -> None:
        """A cancellation boundary: raise :class:`Cancelled` if requested."""
        if self._fired:
            raise Cancelled(self.reason)


class _Interrupt:
    """Cancels the task racing a token when the token fires (while the race lasts)."""

    __slots__ = ("active", "fired", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.active = True
        self.fired = False

    def fire(self) -> None:
        if not self.active:
            return
        loop = self.task.get_loop()
        if asyncio.current_task(loop) is self.task:
            # The racing task cancelled its own token (from inside the work): cancelling a
            # running task would only take effect at its next await, possibly after the race,
            # so interrupt it once it is suspended instead.
            loop.call_soon(self._cancel)
        else:
            self._cancel()

    def _cancel(self) -> None:
        if self.active and not self.fired:
            self.fired = True
            self.task.cancel()


async def race_cancellation(work: Awaitable[T], token: CancelToken) -> T:
    """Await ``work`` unless the token fires first. Cancellation wins a tie.

    ``work`` runs in the calling task (no task is created): the token, when it fires, cancels
    the caller's task, and that cancellation is turned into :class:`Cancelled` with the
    token's reason. A cancellation of the task from elsewhere propagates unchanged, and so does
    the work's own exception. After ``work`` finishes the token is checked again, so an answer
    that arrived after (or together with) cancellation is never returned to be committed.
    A token that fired before the race closes ``work`` unstarted (a coroutine is never left
    unawaited).
    """
    if token._fired:
        if inspect.iscoroutine(work):
            work.close()
        raise Cancelled(token.reason)
    if type(work) is CoroutineType:
        # The work's first step runs before the race is armed: until it waits, no other code
        # runs, so only the work itself can fire the token. A call that never waits (an
        # instant model, a wave of pure tools) needs no interrupt at all.
        try:
            first = work.send(None)
        except StopIteration as done:
            if token._fired:
                raise Cancelled(token.reason) from None
            result: T = done.value
            return result
        except Exception:
            if not token._fired:
                raise
            raise Cancelled(token.reason) from None  # the failure is discarded with the work
        work = Resumed(work, first)
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("race_cancellation must be awaited inside an asyncio task")
    interrupt = _Interrupt(task)
    cancelling = task.cancelling()
    token._interrupts.append(interrupt)
    if token._fired:
        interrupt.fire()  # fired by the work's first step: interrupted once it is suspended
    try:
        result = await work
    except asyncio.CancelledError:
        if interrupt.fired and task.uncancel() <= cancelling:
            raise Cancelled(token.reason) from None
        raise
    except Exception:
        if not token.cancelled:
            raise
        if interrupt.fired:
            task.uncancel()  # the work turned the interruption into its own error
        raise Cancelled(token.reason) from None  # the failure is discarded with the work
    finally:
        interrupt.active = False
        if interrupt in token._interrupts:
            token._interrupts.remove(interrupt)
    if interrupt.fired:
        task.uncancel()  # the work swallowed the interruption: drop the request it left
    if token._fired:
        raise Cancelled(token.reason)
    return result


async def cancellable_sleep(seconds: float, token: CancelToken) -> None:
    """Sleep, but wake (and raise :class:`Cancelled`) as soon as the token fires."""
    if seconds <= 0:
        token.check()
        return
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await token.wait()
    token.check()
