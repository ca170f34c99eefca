"""Shared fixtures for the loop contract tests: a runtime whose retries back off in 1 ms."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest

from reverie import Runtime, Scope
from reverie.loop.family import default_families
from reverie.loop.strategies import DefaultRecovery

FAST_DEFAULT = dataclasses.replace(
    default_families()[0], recovery=DefaultRecovery(base_backoff_s=0.001)
)
"""The default family with the §4.2 retry budget but millisecond backoffs."""


@pytest.fixture
def scope() -> Scope:
    return Scope(tenant="acme", user="ana")


@pytest.fixture
async def rt() -> AsyncIterator[Runtime]:
    async with Runtime.open(":memory:", families=[FAST_DEFAULT]) as runtime:
        yield runtime
