"""Schemas and tools the unbound-turn tests share."""

from __future__ import annotations

from typing import Any

from reverie import tool

REPORT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "changed": {"type": "boolean"},
        "summary": {"type": "string", "maxLength": 500},
        "entries_merged": {"type": "integer", "minimum": 0},
    },
    "required": ["changed", "summary"],
    "additionalProperties": False,
}
"""The shape of a curation report (DESIGN §13)."""


def make_step(log: list[int]) -> Any:
    """A pure tool that records each call's ``n``."""

    @tool(effects=set())
    def step(n: int) -> str:
        """Take step n."""
        log.append(n)
        return f"step {n} done"

    return step
