"""The graceful finalizer's prompts and answer validation (docs/loop.md)."""

from __future__ import annotations

import json
import re

from reverie.core.exits import FailureKind, GracefulReason

FINALIZER_PROMPTS: dict[GracefulReason, str] = {
    "max_iterations": (
        "You have reached the maximum number of steps for this task. Do not call any tools. "
        "Using only the evidence already gathered above, give your best final answer now, and "
        "say briefly what remains unfinished."
    ),
    "no_progress": (
        "You appear to be repeating the same actions without making progress. Do not call any "
        "tools. Using only the evidence already gathered above, give your best final answer now, "
        "and say what blocked you."
    ),
    "host": (
        "The operator asked you to wrap up. Do not call any tools. Using only the evidence "
        "already gathered above, give your best final answer now."
    ),
    "capability_call_limit": (
        "The tool-call budget for this task is used up. Do not call any tools. Using only the "
        "evidence already gathered above, give your best final answer now."
    ),
    "wall_clock_limit": (
        "The time budget for this task is used up. Do not call any tools. Using only the "
        "evidence already gathered above, give your best final answer now."
    ),
}
"""Host-authored wording, specific to each reason."""

REASON_FAILURE_KIND: dict[GracefulReason, FailureKind] = {
    "max_iterations": "iteration_limit",
    "no_progress": "no_progress_detected",
    "host": "host_stop",
    "capability_call_limit": "capability_call_limit",
    "wall_clock_limit": "wall_clock_limit",
}
"""The failure kind a rejected summary keeps: the original reason, never a generic one."""


def failure_kind_for(reason: GracefulReason) -> FailureKind:
    """Failure kind that preserves ``reason``."""
    return REASON_FAILURE_KIND[reason]


_TAG = re.compile(r"<\s*/?\s*(tool_call|function_call|tool_use|function_calls|invoke)\b", re.I)
_FENCE = re.compile(r"```\s*(tool|tool_call|tool_code|json|function)\b(.*?)```", re.S | re.I)
_CALL_KEYS = frozenset({"tool_calls", "function_call", "tool_call", "tool_use"})


def _is_call_object(value: object) -> bool:
    if isinstance(value, list):
        return any(_is_call_object(v) for v in value)
    if not isinstance(value, dict):
        return False
    if _CALL_KEYS & value.keys():
        return True
    return "name" in value and ("arguments" in value or "parameters" in value)


def protocol_shaped(text: str) -> str | None:
    """Why ``text`` looks like a tool call rather than an answer, or ``None`` if it does not."""
    if _TAG.search(text):
        return "it contains a tool-call tag"
    stripped = text.strip()
    if stripped.startswith(("{", "[")):
        try:
            if _is_call_object(json.loads(stripped)):
                return "it is a JSON tool call"
        except ValueError:
            pass
    for match in _FENCE.finditer(text):
        label, body = match.group(1).lower(), match.group(2).strip()
        if label in ("tool", "tool_call", "tool_code", "function"):
            return f"it contains a fenced {label} block"
        try:
            if _is_call_object(json.loads(body)):
                return "it contains a fenced JSON tool call"
        except ValueError:
            continue
    return None


def reject_reason(text: str, has_tool_calls: bool) -> str | None:
    """Why a finalizer answer is rejected, or ``None`` when it is acceptable."""
    if has_tool_calls:
        return "the final answer contained tool calls"
    if not text.strip():
        return "the final answer was empty"
    shaped = protocol_shaped(text)
    if shaped is not None:
        return f"the final answer was rejected because {shaped}"
    return None
