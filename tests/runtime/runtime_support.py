"""Helpers for the runtime tests: a store wrapper that counts what the runtime asks of it, a
pure tool whose calls wait until the test lets them go, and the databases a test may run on."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from reverie import tool

STARTUP_S = 60
"""How long a held call may take to show up (start-up only, never a timing assertion)."""

POSTGRES_URL = os.environ.get("REVERIE_TEST_POSTGRES_URL", "")

NEEDS_POSTGRES = [
    pytest.mark.postgres,
    pytest.mark.skipif(not POSTGRES_URL, reason="set REVERIE_TEST_POSTGRES_URL"),
]
"""The marks of a parameter that runs on :func:`postgres_database`."""


@contextlib.asynccontextmanager
async def memory_database(tmp: Path) -> AsyncIterator[str]:
    """The in-memory store's URL (one store per runtime: nothing is shared)."""
    yield ":memory:"


@contextlib.asynccontextmanager
async def sqlite_database(tmp: Path) -> AsyncIterator[str]:
    """A SQLite file in ``tmp``, for every runtime or store the test opens on it."""
    yield f"sqlite:///{tmp / 'shared.db'}"


@contextlib.asynccontextmanager
async def postgres_database(tmp: Path) -> AsyncIterator[str]:
    """A fresh schema on the test server, dropped afterwards (needs :data:`NEEDS_POSTGRES`)."""
    from reverie.store.postgres import temporary_schema

    async with temporary_schema(POSTGRES_URL, prefix="reverie_runtime_test") as url:
        yield url


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


class Held:
    """A pure tool (``look``) whose every call waits until released; counts its calls.

    ``await held.wait_running()`` returns once a call is waiting; ``held.release.set()`` lets
    that call return (the next call waits again).
    """

    def __init__(self) -> None:
        self.running = asyncio.Event()
        self.release = asyncio.Event()
        self.runs = 0

        @tool(effects=set())
        async def look(n: int) -> str:
            """Look at n."""
            self.runs += 1
            self.running.set()
            await self.release.wait()
            self.release.clear()
            return f"saw {n}"

        self.tool = look

    async def wait_running(self) -> None:
        """Until a call waits to be released."""
        await asyncio.wait_for(self.running.wait(), STARTUP_S)
        self.running.clear()
