"""After-turn work off the caller's path (DESIGN §11): ``rt.run()`` returns first.

When a user's turn ends, the applier hands its ``after_turn`` hooks (memory recording, the
curation counter, the application's own) to :class:`AfterTurnWork` instead of running them
before the result is returned. The work runs in a background task the runtime owns:

- under an **overall deadline** derived from the hooks themselves: the sum of their own
  timeouts, capped at :attr:`AfterTurnWork.ceiling_s`
  (:meth:`~reverie.hooks.HookDispatcher.after_turn_deadline_s`). The dispatcher enforces it hook
  by hook — a hook's timeout is cut to what is left, and a hook reached after it is not called —
  so every miss is recorded as that hook's own ``timeout``. A run whose hooks reached the
  deadline is recorded too (:attr:`AfterTurnWork.missed`, and a log line at INFO naming the run
  and the hooks — never content). A last-resort bound, a little past the deadline, stops work
  that would not stop (it is recorded the same way);
- a new interactive turn of the same owner first waits for that owner's pending work (bounded
  by the same deadline), so a turn still sees what the previous one recorded;
- ``Runtime.aclose()`` waits for pending work (each piece bounded by the deadline) before it
  closes the store, so a one-shot process still records its turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

from reverie.core.scope import Scope
from reverie.errors import UsageError
from reverie.hooks import AFTER_TURN_CEILING_S

__all__ = ["AFTER_TURN_GRACE_S", "AfterTurnWork", "MissedDeadline"]

log = logging.getLogger("reverie.runtime")

AFTER_TURN_GRACE_S: Final = 1.0
"""How far past its deadline a run's after-turn work is stopped as a last resort (the
dispatcher stops each hook at the deadline; this covers what runs around the hooks)."""

_MAX_MISSED: Final = 100

Owner = tuple[str, str]


@dataclass(frozen=True, slots=True)
class MissedDeadline:
    """After-turn work of a run that reached its overall deadline."""

    run_id: str
    deadline_s: float
    hooks: tuple[str, ...] = ()
    """The hooks the deadline cut off or kept from running (empty: the last-resort bound)."""


class AfterTurnWork:
    """The after-turn tasks of one runtime.

    Args:
        ceiling_s: The most one run's after-turn hooks may take together, whatever their
            timeouts add up to.

    Raises:
        UsageError: ``ceiling_s`` is not a positive number.
    """

    def __init__(self, *, ceiling_s: float = AFTER_TURN_CEILING_S) -> None:
        if isinstance(ceiling_s, bool) or not isinstance(ceiling_s, int | float) or ceiling_s <= 0:
            raise UsageError(f"after_turn_ceiling_s must be a positive number, not {ceiling_s!r}")
        self.ceiling_s = float(ceiling_s)
        self.missed: deque[MissedDeadline] = deque(maxlen=_MAX_MISSED)
        """The latest runs whose after-turn work reached its deadline (newest last)."""
        self._pending: dict[Owner, set[asyncio.Task[None]]] = {}

    def submit(
        self,
        scope: Scope,
        run_id: str,
        work: Callable[[], Awaitable[None]],
        *,
        deadline_s: float,
    ) -> None:
        """Run ``work`` (a run's after-turn hooks, bounded by ``deadline_s``) in the
        background; it is stopped :data:`AFTER_TURN_GRACE_S` past the deadline at the latest."""
        owner = (scope.tenant, scope.user)
        task = asyncio.get_running_loop().create_task(self._run(run_id, work, deadline_s))
        tasks = self._pending.setdefault(owner, set())
        tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            tasks.discard(t)
            if not tasks and self._pending.get(owner) is tasks:
                del self._pending[owner]

        task.add_done_callback(done)

    def record_missed(self, run_id: str, deadline_s: float, hooks: Sequence[str] = ()) -> None:
        """Record that ``run_id``'s after-turn work reached its deadline, cutting ``hooks``."""
        self.missed.append(MissedDeadline(run_id=run_id, deadline_s=deadline_s, hooks=tuple(hooks)))
        log.info(
            "after_turn work of run %s reached its %g s deadline; hooks cut off: %s",
            run_id,
            deadline_s,
            ", ".join(hooks) or "(the work around them)",
        )

    async def _run(
        self, run_id: str, work: Callable[[], Awaitable[None]], deadline_s: float
    ) -> None:
        try:
            async with asyncio.timeout(deadline_s + AFTER_TURN_GRACE_S):
                await work()
        except TimeoutError:
            self.record_missed(run_id, deadline_s)
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
