"""Tools the browser tests' ``reverie serve`` child loads from its reverie.toml."""

from __future__ import annotations

from reverie import tool


@tool(effects={"write"}, needs_approval=True, idempotent=False)
async def send_email(to: str) -> str:
    """Send an email (records nothing: the gate is what the tests look at)."""
    return f"sent to {to}"
