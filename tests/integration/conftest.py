"""Fixtures of the crash tests: a harness per test, and the child module loaded in process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from integration.crash_support import Crash, load_child


@pytest.fixture
def crash(tmp_path: Path) -> Iterator[Crash]:
    harness = Crash(tmp_path)
    try:
        yield harness
    finally:
        harness.cleanup()


@pytest.fixture
def child() -> ModuleType:
    return load_child()
