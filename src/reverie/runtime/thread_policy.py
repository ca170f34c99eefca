"""What a run started on a busy thread does: reject, join the active run, or interrupt it.

A thread has at most one active (queued, running or blocked) run; the store refuses a second
one with :class:`~reverie.errors.ThreadBusy`, across processes. :class:`BusyThreads` applies the
caller's :data:`~reverie.core.vocabulary.ThreadPolicy` to that refusal. It is given what it needs
(the store, how to cancel a run, how to get a handle on one, the segment running here) instead
of the runtime.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from reverie.core.ids import new_id
from reverie.core.vocabulary import THREAD_POLICIES, ThreadPolicy, is_unbound_profile
from reverie.errors import NotFoundError, RunEndedError, ThreadBusy, UsageError
from reverie.runtime.user_input import input_payload, is_user_content
from reverie.store.base import TERMINAL_STATUSES, RunRecord, Store

if TYPE_CHECKING:
    from reverie.core.content import ContentPart
    from reverie.core.messages import Message
    from reverie.runtime.handle import RunHandle
    from reverie.runtime.result import RunResult

__all__ = ["BusyThreads", "checked_policy"]


def checked_policy(policy: str) -> ThreadPolicy:
    """``policy`` if it is a :data:`ThreadPolicy`; else :class:`UsageError` naming them."""
    for known in THREAD_POLICIES:
        if policy == known:
            return known
    raise UsageError(f"thread_policy must be one of {', '.join(THREAD_POLICIES)}")


class BusyThreads:
    """Applies a thread policy when the store says a thread already has an active run."""

    def __init__(
        self,
        store: Store,
        *,
        cancel: Callable[[str, str], Awaitable[RunResult | None]],
        handle_for: Callable[[RunRecord], Awaitable[RunHandle]],
        running_here: Callable[[str], asyncio.Task[None] | None],
        lease_ttl_s: float,
    ) -> None:
        """Build it.

        Args:
            store: The runtime's store.
            cancel: Cancels a run, given its id and a reason (the runtime's ``cancel``).
            handle_for: A handle on an existing run (live here, else watched in the store).
            running_here: The task of the segment advancing a run in this process, if any.
            lease_ttl_s: The lease time-to-live: an interrupted run must be terminal within
                three of them (its worker takes the cancel at its next boundary).
        """
        self._store = store
        self._cancel = cancel
        self._handle_for = handle_for
        self._running_here = running_here
        self._lease_ttl_s = lease_ttl_s

    async def on_busy(
        self,
        busy: ThreadBusy,
        policy: ThreadPolicy,
        message: str | Sequence[ContentPart | Message],
        max_image_bytes: int,
    ) -> RunHandle | None:
        """Apply ``policy``; a handle to return, or ``None`` to try creating the run again.

        Raises:
            ThreadBusy: ``"reject"``, or ``"enqueue"`` of something that cannot join the
                active run (opening messages rather than a user message, or an unbound run).
        """
        if policy == "reject":
            raise busy
        try:
            active = await self._store.get_run(busy.run_id)
        except NotFoundError:
            return None
        if active.status in TERMINAL_STATUSES:
            return None  # it ended in the meantime: try again
        if policy == "enqueue":
            if not is_user_content(message) or is_unbound_profile(active.profile):
                raise busy  # only a user message can join a conversation's run
            payload = input_payload(message, max_image_bytes=max_image_bytes)  # type: ignore[arg-type]
            try:
                await self._store.enqueue_input(
                    active.run_id, "follow_up", payload, input_id=new_id("in")
                )
            except RunEndedError:
                return None  # sealed as it ended: the thread is free now
            return await self._handle_for(active)
        # interrupt: end the active run, then start ours.
        await self._cancel(active.run_id, "interrupted by a new turn")
        await self._wait_ended(active.run_id)
        return None

    async def _wait_ended(self, run_id: str) -> None:
        """Wait until a cancelled run is terminal (its worker takes the cancel at a boundary)."""
        task = self._running_here(run_id)
        if task is not None:
            await asyncio.wait({task})
        deadline = time.monotonic() + 3 * self._lease_ttl_s
        delay = 0.02
        while (run := await self._store.get_run(run_id)).status not in TERMINAL_STATUSES:
            if time.monotonic() > deadline:
                raise ThreadBusy(run.thread_id, run_id, run.status)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
