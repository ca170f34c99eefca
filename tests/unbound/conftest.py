"""Shared fixtures for the unbound-turn tests: an in-memory runtime and an owner."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from curation.conftest import db_url as db_url  # SQLite and PostgreSQL store URLs
from reverie import Runtime, Scope


@pytest.fixture
def scope() -> Scope:
    return Scope(tenant="acme", user="ana")


@pytest.fixture
async def rt() -> AsyncIterator[Runtime]:
    async with Runtime.open(":memory:") as runtime:
        yield runtime
