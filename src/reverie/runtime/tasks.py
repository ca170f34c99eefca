"""The tasks a runtime owns, and how its parts refer back to it without a reference cycle.

A runtime's parts (the segment runner, unbound turns, the busy-thread policy) call the runtime
back. Were they to hold it strongly, a closed runtime would be one reference cycle (runtime,
store, rows) that only the next full collection frees, scanning every row of a memory store on
the way. They hold a :func:`weakref.proxy` instead, and the runtime's own tasks keep it alive:
:class:`OwnedTasks` refers to its owner while a task is alive (a run in flight keeps its runtime,
as it always did) and lets go once none is, so a closed runtime is freed by reference counting
the moment its last reference goes.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Coroutine
from typing import Any

__all__ = ["OwnedTasks"]


class OwnedTasks:
    """The tasks a runtime started, awaited on close; their owner is kept while any runs."""

    def __init__(self, owner: object) -> None:
        self._owner = weakref.ref(owner)
        self._keep: object | None = None
        """The owner while a task is alive (its parts hold it weakly), else ``None``."""
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``work`` in a task of its own, owned until it ends."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        self._keep = self._owner()
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not self._tasks:
            self._keep = None

    async def stop(self) -> None:
        """Cancel every task and wait for all of them to end."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def __len__(self) -> int:
        return len(self._tasks)
