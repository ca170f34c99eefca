"""After-turn work off the caller's path (DESIGN §11): ``rt.run()`` returns first.

When a user's turn ends, the applier hands its ``after_turn`` hooks (memory recording, the
curation counter, the application's own) to :class:`AfterTurnWork` instead of running them
before the result is returned. The work runs in a background task the runtime owns:

- under an **overall deadline** (:data:`AFTER_TURN_DEADLINE_S`, on top of each hook's own
  timeout); work that misses it is cut off and recorded (:attr:`AfterTurnWork.missed`, and a
  log line at INFO naming the run — never its content);
- a new interactive turn of the same owner first waits for that owner's pending work (bounded
  by the same deadline), so a turn still sees what the previous one recorded;
- ``Runtime.aclose()`` waits for pending work (each piece bounded by the deadline) before it
  closes the store, so a one-shot process still records its turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from reverie.core.scope import Scope

__all__ = ["AFTER_TURN_DEADLINE_S", "AfterTurnWork", "MissedDeadline"]

log = logging.getLogger("reverie.runtime")

AFTER_TURN_DEADLINE_S: Final = 15.0
"""The overall bound on one run's after-turn work (each hook also has its own, 5 s)."""

_MAX_MISSED: Final = 100

Owner = tuple[str, str]


@dataclass(frozen=True, slots=True)
class MissedDeadline:
    """After-turn work of a run that was cut off at the overall deadline."""

    run_id: str
    deadline_s: float


class AfterTurnWork:
    """The after-turn tasks of one runtime.

    Args:
        deadline_s: The overall bound on one run's after-turn work.
    """

    def __init__(self, *, deadline_s: float = AFTER_TURN_DEADLINE_S) -> None:
        self.deadline_s = deadline_s
        self.missed: deque[MissedDeadline] = deque(maxlen=_MAX_MISSED)
        """The latest runs whose after-turn work missed the deadline (newest last)."""
        self._pending: dict[Owner, set[asyncio.Task[None]]] = {}

    def submit(self, scope: Scope, run_id: str, work: Callable[[], Awaitable[None]]) -> None:
        """Run ``work`` (a run's after-turn hooks) in the background, under the deadline."""
        owner = (scope.tenant, scope.user)
        task = asyncio.get_running_loop().create_task(self._run(run_id, work))
        tasks = self._pending.setdefault(owner, set())
        tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            tasks.discard(t)
            if not tasks and self._pending.get(owner) is tasks:
                del self._pending[owner]

        task.add_done_callback(done)

    async def _run(self, run_id: str, work: Callable[[], Awaitable[None]]) -> None:
        try:
            async with asyncio.timeout(self.deadline_s):
                await work()
        except TimeoutError:
            self.missed.append(MissedDeadline(run_id=run_id, deadline_s=self.deadline_s))
            log.info(
                "after_turn work of run %s missed its %g s deadline and was stopped",
                run_id,
                self.deadline_s,
            )
        except Exception as exc:  # the dispatcher isolates hooks; this is a last resort
            log.debug("after_turn work of run %s failed (%s)", run_id, type(exc).__name__)

    def _others(self, tasks: set[asyncio.Task[None]]) -> set[asyncio.Task[None]]:
        # Never wait for the task we are in (a hook starting a turn of its own owner).
        return tasks - {t for t in (asyncio.current_task(),) if t is not None}

    async def settle(self, scope: Scope) -> None:
        """Wait for the pending after-turn work of ``scope``'s owner (each piece bounded)."""
        tasks = self._others(self._pending.get((scope.tenant, scope.user), set()))
        if tasks:
            await asyncio.wait(tasks)

    async def drain(self) -> None:
        """Wait for every pending piece of after-turn work (including work it caused)."""
        while True:
            tasks = self._others({t for ts in self._pending.values() for t in ts})
            if not tasks:
                return
            await asyncio.wait(tasks)
