"""The ``store`` fixture: every test in this suite runs once per backend.

A new backend adds one ``pytest.param`` to :data:`BACKENDS`, with ``marks=pytest.mark.postgres``
when it needs a server. The PostgreSQL backend runs when ``REVERIE_TEST_POSTGRES_URL`` names a
server (``.ci/run`` starts one); each test gets a new, empty schema there, dropped afterwards.
Without the variable those tests are skipped, saying so.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from conformance.support import RunCtx, make_run
from reverie.store import MemoryStore, SQLiteStore, Store

StoreFactory = Callable[[Path], AbstractAsyncContextManager[Store]]
"""Builds an unopened store for one test (it may keep files in the temporary directory)."""

POSTGRES_URL = os.environ.get("REVERIE_TEST_POSTGRES_URL", "")
"""The server the PostgreSQL tests use; empty: they are skipped."""
NEEDS_POSTGRES = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        not POSTGRES_URL, reason="set REVERIE_TEST_POSTGRES_URL; .ci/run starts a server"
    ),
]
"""Marks of a test (or parameter) that needs the PostgreSQL server."""


@asynccontextmanager
async def _memory(tmp: Path) -> AsyncIterator[Store]:
    yield MemoryStore()


@asynccontextmanager
async def _sqlite(tmp: Path) -> AsyncIterator[Store]:
    yield SQLiteStore(tmp / "conformance.db")


@asynccontextmanager
async def _sqlite_full(tmp: Path) -> AsyncIterator[Store]:
    # synchronous=FULL: every write goes through the writer thread (the default commits on
    # the event loop), so both write paths meet every rule.
    yield SQLiteStore(tmp / "conformance-full.db", synchronous="FULL")


@asynccontextmanager
async def _postgres(tmp: Path) -> AsyncIterator[Store]:
    from reverie.store.postgres import PostgresStore, temporary_schema

    async with temporary_schema(POSTGRES_URL, prefix="reverie_conformance") as url:
        yield PostgresStore(url)


BACKENDS = [
    pytest.param(_memory, id="memory"),
    pytest.param(_sqlite, id="sqlite"),
    pytest.param(_sqlite_full, id="sqlite-full"),
    pytest.param(_postgres, id="postgres", marks=NEEDS_POSTGRES),
]


@asynccontextmanager
async def opened(factory: StoreFactory, tmp_path: Path) -> AsyncIterator[Store]:
    """The store ``factory`` builds, opened, and closed on the way out."""
    async with factory(tmp_path) as backend:
        await backend.open()
        try:
            yield backend
        finally:
            await backend.close()


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """An opened store of each backend, closed after the test."""
    async with opened(request.param, tmp_path) as backend:
        yield backend


@pytest.fixture
async def run(store: Store) -> RunCtx:
    """A thread ``thr-1`` with a queued run ``run-1``, in scope ``acme/ana``."""
    return await make_run(store)
