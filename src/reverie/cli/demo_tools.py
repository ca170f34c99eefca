"""Harmless tools for the built-in ``assistant`` agent of ``reverie run --model ...``.

They let a first run show a tool call without touching anything: ``add`` is pure arithmetic and
``now`` reads the clock. Config files can use them too: ``tools = ["reverie.cli.demo_tools:add"]``.
"""

from __future__ import annotations

from datetime import UTC, datetime

from reverie.capabilities import tool

__all__ = ["DEMO_TOOLS", "add", "now"]


@tool(effects=set())
def add(a: float, b: float) -> float:
    """Add two numbers."""
    total = a + b
    # 2 + 3 reads "5", not "5.0", in the transcript.
    return int(total) if float(total).is_integer() else total


@tool(effects={"read"})
def now() -> str:
    """The current date and time in UTC, in ISO 8601 format."""
    return datetime.now(UTC).isoformat(timespec="seconds")


DEMO_TOOLS = (add, now)
"""The built-in assistant's tools."""
