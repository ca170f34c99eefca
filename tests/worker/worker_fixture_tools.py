"""Tools the worker tests' ``reverie.toml`` imports: each execution appends a line to a file.

The file is ``$REVERIE_TEST_TOOL_LOG``; a line is ``<tool> <run id> <pid>``, so a test counts
how often each run executed each tool, and in which process.
"""

from __future__ import annotations

import os

from reverie import tool
from reverie.capabilities.context import ToolContext


def _log(name: str, ctx: ToolContext) -> None:
    with open(os.environ["REVERIE_TEST_TOOL_LOG"], "a", encoding="utf-8") as out:
        out.write(f"{name} {ctx.run_id} {os.getpid()}\n")


@tool(effects={"write"})
def record(note: str, ctx: ToolContext) -> str:
    """Record a note (appends one line to the test's log)."""
    _log("record", ctx)
    return f"recorded {note}"


@tool(effects={"write"}, needs_approval=True)
def send(to: str, ctx: ToolContext) -> str:
    """Send a message (gated; appends one line to the test's log)."""
    _log("send", ctx)
    return f"sent to {to}"
