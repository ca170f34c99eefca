"""The ``store`` fixture: every test in this suite runs once per backend.

A new backend (PostgreSQL) adds one ``pytest.param`` to :data:`BACKENDS`, with
``marks=pytest.mark.postgres`` when it needs a server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from conformance.support import RunCtx, make_run
from reverie.store import MemoryStore, SQLiteStore, Store

StoreFactory = Callable[[Path], Store]
"""Builds an unopened store; it may keep its files in the given temporary directory."""

BACKENDS = [
    pytest.param(lambda tmp: MemoryStore(), id="memory"),
    pytest.param(lambda tmp: SQLiteStore(tmp / "conformance.db"), id="sqlite"),
]


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """An opened store of each backend, closed after the test."""
    factory: StoreFactory = request.param
    backend = factory(tmp_path)
    await backend.open()
    try:
        yield backend
    finally:
        await backend.close()


@pytest.fixture
async def run(store: Store) -> RunCtx:
    """A thread ``thr-1`` with a queued run ``run-1``, in scope ``acme/ana``."""
    return await make_run(store)
