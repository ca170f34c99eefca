"""The example project's tools: ``send_email`` is gated (a person approves each call).

``reverie.toml`` names it as ``tools:send_email``; ``pythonpath = ["."]`` there puts this
folder on the import path.
"""

from __future__ import annotations

from reverie import tool


@tool(effects={"write"}, needs_approval=True, idempotent=False)
def send_email(to: str, subject: str, body: str) -> str:
    """Send an email. (This example only pretends: nothing leaves the machine.)"""
    return f"sent {subject!r} to {to}"
