"""Settling a run's open tool calls when it ends: the transcript stays well formed.

Providers reject a conversation in which an assistant tool call has no tool result (OpenAI and
Anthropic answer HTTP 400 on every later turn). A run can end with such calls: cancelled while
tools ran, failed mid-wave, cancelled while blocked on a gate, or left by a crash and then ended
on resume. Before its terminal status is written, every call of the run's last assistant row
that has no result gets a durable one, taken from what really happened:

- the call finished (its journal row has an outcome): that real result, so a finished call of a
  half-done parallel wave keeps it;
- the call started and never finished: ``interrupted: outcome unknown``;
- the call waited on a gate: the gate is closed and the call is ``denied``;
- the call never started: ``cancelled``.

The rows are written before the status, under the run's fence. A crash between the two leaves
rows past the last checkpoint, which the resume supersedes and this step writes again: never
twice in the window, never missing.
"""

from __future__ import annotations

import contextlib
import time

from reverie.core.capability import (
    ENDED_BEFORE_RUNNING,
    CallCancelled,
    CallDenied,
    CallInterrupted,
    CallOutcome,
    outcome_from_dict,
)
from reverie.core.transcript import NewItem, TranscriptItem
from reverie.errors import GateResolvedError
from reverie.loop.wave import render_outcome
from reverie.store.base import RunRecord, Store

TAIL = 256
"""Rows read from the end of the thread: a wave's results follow its assistant row at once."""


def open_calls(rows: list[TranscriptItem], run_id: str) -> tuple[TranscriptItem, int] | None:
    """The run's last assistant row and how many of its calls have results, if any lack one."""
    for index in range(len(rows) - 1, -1, -1):
        row = rows[index]
        if row.run_id != run_id or row.role != "assistant":
            continue
        if not row.tool_calls:
            return None
        answered = 0
        for later in rows[index + 1 :]:
            if later.role != "tool" or later.run_id != run_id:
                break
            answered += 1
        return (row, answered) if answered < len(row.tool_calls) else None
    return None


async def settle_open_calls(store: Store, run: RunRecord, *, fence: int | None, status: str) -> int:
    """Give every unanswered call of the run's last wave a durable result; how many were added."""
    rows = await store.thread_items(run.thread_id, last=TAIL)
    found = open_calls(rows, run.run_id)
    if found is None:
        return 0
    assistant, answered = found
    keys = [f"{assistant.ref}#{i}" for i in range(len(assistant.tool_calls))]
    journal = await store.journal_get(run.run_id, keys[answered:])
    items: list[NewItem] = []
    for index in range(answered, len(assistant.tool_calls)):
        call, key = assistant.tool_calls[index], keys[index]
        outcome: CallOutcome | None = None
        entry = journal.get(key)
        if entry is not None and entry.state == "finished" and entry.outcome is not None:
            outcome = outcome_from_dict(entry.outcome)
        elif entry is not None:
            outcome = CallInterrupted()
        else:
            gate = await store.gate_for_call(run.run_id, key)
            if gate is not None and gate.status == "pending":
                with contextlib.suppress(GateResolvedError):
                    gate = await store.resolve_gate(
                        gate.ref,
                        "denied",
                        reason=f"the run ended ({status})",
                        now=time.time(),
                    )
            if gate is not None and gate.status == "denied":
                outcome = CallDenied(reason=f"the call was not approved: {gate.reason or 'denied'}")
        content = ENDED_BEFORE_RUNNING if outcome is None else render_outcome(outcome)
        kind = CallCancelled().kind if outcome is None else outcome.kind
        items.append(
            NewItem(
                role="tool",
                content=content,
                tool_call_id=call.id,
                name=call.name,
                meta={"outcome": kind, "settled": True},
            )
        )
    await store.append_items(run.thread_id, run.run_id, items, fence=fence)
    return len(items)


__all__ = ["ENDED_BEFORE_RUNNING", "open_calls", "settle_open_calls"]
