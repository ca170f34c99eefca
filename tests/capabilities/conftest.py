"""Shared fixtures for the capability tests."""

from __future__ import annotations

import pytest

from reverie.capabilities import ToolContext
from reverie.core.scope import Scope


def make_ctx(tool_name: str = "t") -> ToolContext:
    """A host context as the capability port would build it."""
    return ToolContext(
        run_id="run-1",
        call_id="call-1",
        scope=Scope(tenant="acme", user="ana"),
        tool_name=tool_name,
    )


@pytest.fixture
def ctx() -> ToolContext:
    """A host context for one call."""
    return make_ctx()
