"""Helpers for the loop tests: read what the model was shown, collect a run's events."""

from __future__ import annotations

from reverie import RunHandle
from reverie.core.events import RunEvent
from reverie.core.messages import Message, ModelRequest


def tool_messages(request: ModelRequest) -> list[Message]:
    """The tool-result messages of a request, in prompt order."""
    return [m for m in request.messages if m.role == "tool"]


def last_tool_text(request: ModelRequest) -> str:
    """Content of the last tool-result message of a request."""
    return tool_messages(request)[-1].content


async def collect_events(handle: RunHandle) -> list[RunEvent]:
    """Every event of the run (replayed, then live until the run ends or blocks)."""
    return [event async for event in handle.events()]
