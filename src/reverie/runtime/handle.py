"""``RunHandle``: a started run you can steer, stop, cancel and wait for."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from reverie.core.content import UserContent
from reverie.core.events import RunEvent
from reverie.core.exits import HostStopReason
from reverie.runtime.events import EventBus
from reverie.runtime.result import RunResult

if TYPE_CHECKING:
    from reverie.runtime.ports import RunControl

GracefulStopReason = HostStopReason


class RunHandle:
    """A run started with :meth:`Runtime.start`. Returned at once; the run goes on."""

    def __init__(
        self,
        runtime: RunControl,
        run_id: str,
        thread_id: str,
        bus: EventBus,
        done: asyncio.Future[RunResult],
    ) -> None:
        self._runtime = runtime
        self.run_id = run_id
        """The run's id."""
        self.thread_id = thread_id
        """The conversation the run belongs to."""
        self._bus = bus
        self._done = done

    async def result(self) -> RunResult:
        """Wait for the run to complete, block, fail or be cancelled."""
        return await asyncio.shield(self._done)

    def done(self) -> bool:
        """Whether :meth:`result` would return at once."""
        return self._done.done()

    async def events(self) -> AsyncIterator[RunEvent]:
        """Typed events of the run: those so far, then live ones until it ends or blocks."""
        async for event in self._bus.subscribe():
            yield event

    async def steer(self, text: UserContent, *, input_id: str | None = None) -> str:
        """Send a message the agent sees before its next model call. Returns the input id.

        ``text`` is a string or ``reverie.Text``/``reverie.Image`` parts (docs/images.md).
        """
        return await self._runtime.send_input(self.run_id, "steering", text, input_id=input_id)

    async def follow_up(self, text: UserContent, *, input_id: str | None = None) -> str:
        """Send a message delivered when the agent would otherwise finish; the run continues."""
        return await self._runtime.send_input(self.run_id, "follow_up", text, input_id=input_id)

    async def request_graceful_stop(self, reason: GracefulStopReason = "host") -> None:
        """Ask the run to wrap up through the finalizer. One-shot: the first request wins."""
        await self._runtime.request_graceful_stop(self.run_id, reason)

    async def cancel(self, reason: str = "cancelled") -> None:
        """Cancel the run (durably recorded; in-flight tools are cancelled)."""
        await self._runtime.cancel(self.run_id, reason=reason)
