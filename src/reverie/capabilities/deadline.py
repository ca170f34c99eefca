"""A tool call's deadline, armed only once the call waits (docs/tools.md).

``asyncio.timeout`` costs a timer (made, pushed on the loop's heap, cancelled) per call, more
than a call that never waits costs in all: a pure async tool, or a cheap inline one. Until a
coroutine suspends, no timer can fire anyway (the loop is not running), so the call's first step
runs first, and the deadline, counted from the call's start, is armed only if the call then
waits. A call that finishes without waiting has the outcome it has under ``asyncio.timeout``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from reverie.core.stepping import Resumed

T = TypeVar("T")


class DeadlinePassed(Exception):
    """The call's own deadline passed (a ``TimeoutError`` the call raised itself is not this)."""


async def within(work: Coroutine[Any, Any, T], seconds: float) -> T:
    """Await ``work`` within ``seconds`` of now; :class:`DeadlinePassed` past them.

    ``work`` runs in the calling task; the deadline is armed (``asyncio.timeout_at``) only if
    ``work`` suspends, at the deadline counted from this call. Exceptions of ``work`` (and a
    cancellation of the task) propagate unchanged.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    try:
        first = work.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    except BaseException:
        work.close()
        raise
    timeout = asyncio.timeout_at(deadline)
    try:
        async with timeout:
            result = await Resumed(work, first)
            return result
    except TimeoutError:
        if timeout.expired():
            raise DeadlinePassed from None
        raise
