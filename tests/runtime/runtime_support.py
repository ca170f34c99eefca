"""Helpers for the runtime tests: a store wrapper that counts what the runtime asks of it."""

from __future__ import annotations

from collections import Counter
from typing import Any

_BACKGROUND = frozenset({"append_run_events", "run_events", "wait_run_events", "renew_lease"})
"""Written beside the run (the event log) or on a timer (the lease): not per step."""


class CountingStore:
    """Counts the store calls a runtime makes (the real store does the work)."""

    def __init__(self, inner: Any, *, hide: frozenset[str] = frozenset()) -> None:
        self._inner = inner
        self._hide = hide
        """Operations not offered (optional ones, such as ``start_segment``)."""
        self.counts: Counter[str] = Counter()
        self.hook: Any = None

    def __getattr__(self, name: str) -> Any:
        if name in self._hide:
            raise AttributeError(name)
        target = getattr(self._inner, name)
        if not callable(target) or name in ("open", "close") or name in _BACKGROUND:
            return target

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.counts[name] += 1
            if self.hook is not None:
                await self.hook(name, args, kwargs)
            return await target(*args, **kwargs)

        return counted
