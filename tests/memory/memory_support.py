"""Helpers shared by the memory tests."""

from __future__ import annotations

import sys
from pathlib import Path

from reverie.core.messages import Message, ModelRequest
from reverie.core.scope import Scope

ANA = Scope(tenant="acme", user="ana")
BOB = Scope(tenant="acme", user="bob")
EVE = Scope(tenant="globex", user="ana")
"""Same user name, another tenant."""

FAKE_SERVER = [sys.executable, str(Path(__file__).with_name("fake_memory_server.py"))]
"""The misbehaving memory server; append a mode (``honest``, ``foreign``, …)."""

MEMORY_SERVER = [sys.executable, "-m", "reverie", "mcp-memory"]
"""reverie's own memory server, as a separate process (append ``--store URL``)."""


def memory_message(request: ModelRequest) -> Message | None:
    """The memory context message of a request, if it has one."""
    return next((m for m in request.messages if m.content.startswith("[memory]")), None)


def prompt_text(request: ModelRequest) -> str:
    """Everything a model saw in one request: messages and tool results."""
    return "\n".join(m.content for m in request.messages)


def tool_results(request: ModelRequest) -> list[str]:
    """The tool-role messages of a request."""
    return [m.content for m in request.messages if m.role == "tool"]
