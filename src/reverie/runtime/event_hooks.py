"""``event`` hooks see every typed run event of every run (DESIGN §11, §17).

An :class:`EventHookTap` is attached to a run segment's :class:`~reverie.runtime.events.EventBus`
for the whole segment, so whatever emits on the bus — the loop's events, ``run_started``,
``checkpoint``, ``text_delta``, ``hook_failed``, the applier's ``run_finished`` — reaches the
``event`` hooks whose kind filter matches, for interactive and unbound runs alike. Dispatches
run as tasks the tap owns (an emit never blocks the run) and are awaited when the segment ends,
after ``run_finished``; a hook that fails is poisoned for the rest of the run like at any other
observer point.
"""

from __future__ import annotations

import asyncio

from reverie.core.events import HookFailedEvent, RunEvent
from reverie.core.scope import Scope
from reverie.hooks import EventHookContext, HookDispatcher
from reverie.runtime.events import EventBus

__all__ = ["EventHookTap"]


class EventHookTap:
    """Forwards a segment's bus events to the ``event`` hooks of ``dispatcher``.

    Args:
        dispatcher: The run's hook dispatcher (the runtime's, plus the agent's own hooks).
        scope: The run's scope (the hooks' context).
        run_id: The run.
        bus: The segment's bus; hook failures are reported on it.
    """

    def __init__(
        self, dispatcher: HookDispatcher, *, scope: Scope, run_id: str, bus: EventBus
    ) -> None:
        self._dispatcher = dispatcher
        self._registry = dispatcher.registry
        self._scope = scope
        self._run_id = run_id
        self._bus = bus
        self.poisoned: set[str] = set()
        """The run's poisoned hooks; the segment's ports share this set."""
        self._tasks: set[asyncio.Task[None]] = set()

    def __call__(self, event: RunEvent) -> None:
        """Dispatch ``event`` to the matching ``event`` hooks (never blocks)."""
        if "event" not in self._registry.bound_points:
            return
        task = asyncio.get_running_loop().create_task(self._observe(event))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _observe(self, event: RunEvent) -> None:
        result = await self._dispatcher.observe(
            "event",
            EventHookContext(scope=self._scope, run_id=self._run_id, event=event),
            poisoned=self.poisoned,
        )
        self.poisoned |= set(result.newly_poisoned)
        for f in result.failures:
            self._bus.emit(
                HookFailedEvent(run_id=self._run_id, hook=f.hook, point=f.point, reason=f.reason)
            )

    async def drain(self) -> None:
        """Wait for every dispatch still running (including those they caused)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
