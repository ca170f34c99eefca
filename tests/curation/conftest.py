"""The ``db_url`` fixture: a curation test that touches storage runs on SQLite and PostgreSQL.

The PostgreSQL runs need ``REVERIE_TEST_POSTGRES_URL`` (each test gets a schema of its own,
dropped afterwards); without it they are skipped, saying so.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

POSTGRES_URL = os.environ.get("REVERIE_TEST_POSTGRES_URL", "")
NEEDS_POSTGRES = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        not POSTGRES_URL, reason="set REVERIE_TEST_POSTGRES_URL; .ci/run starts a server"
    ),
]


@pytest.fixture(
    params=[pytest.param("sqlite", id="sqlite"), pytest.param("postgres", marks=NEEDS_POSTGRES)]
)
async def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A store URL of each durable backend, empty at the start of the test."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'curation.db'}"
        return
    from reverie.store.postgres import temporary_schema

    async with temporary_schema(POSTGRES_URL, prefix="reverie_curation") as url:
        yield url
