"""Transcript rows and queued inputs: the data the loop refers to by ``ref`` and cursor."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from reverie.core.fastcopy import fast_frozen, from_fields
from reverie.core.messages import Role, ToolCall

InputKind = Literal["steering", "follow_up", "cancel", "gate_resolved", "graceful_stop"]
"""User-facing inputs (``steering``, ``follow_up``) and control inputs (the rest)."""
USER_INPUT_KINDS: frozenset[str] = frozenset({"steering", "follow_up"})


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class NewItem:
    """A transcript item to append (the store assigns ``ref`` and ``seq``)."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    input_id: str | None = None
    """For user items that came from the input queue: dedupe key."""
    meta: Mapping[str, Any] = field(default_factory=dict)


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class TranscriptItem:
    """One append-only transcript row."""

    ref: str
    seq: int
    """Monotonic per thread."""
    thread_id: str
    run_id: str | None
    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    input_id: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    superseded: bool = False
    """Set when a crash left this row past the run's last checkpoint (it is not replayed)."""


def placed(
    item: NewItem,
    *,
    ref: str,
    seq: int,
    thread_id: str,
    run_id: str | None,
    content: str | None = None,
) -> TranscriptItem:
    """``item`` as the row it becomes at ``seq`` of a thread.

    ``content`` replaces the item's text when the store holds it otherwise.
    """
    # Every field, in declaration order (the dict is the row's own): built for every row a
    # step writes, so without the keyword matching of __init__.
    return from_fields(
        TranscriptItem,
        {
            "ref": ref,
            "seq": seq,
            "thread_id": thread_id,
            "run_id": run_id,
            "role": item.role,
            "content": item.content if content is None else content,
            "tool_calls": item.tool_calls,
            "tool_call_id": item.tool_call_id,
            "name": item.name,
            "input_id": item.input_id,
            "meta": dict(item.meta),
            "superseded": False,
        },
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class InputRecord:
    """One queued input."""

    run_id: str
    cursor: int
    input_id: str
    kind: InputKind
    payload: Mapping[str, Any] = field(default_factory=dict)
    acked: bool = False
