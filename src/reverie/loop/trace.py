"""Debug traces of the loop's decisions on the ``reverie.loop`` logger (docs/observability.md).

Each function logs one decision a strategy made (the context planned, the tools filtered, the
batch policy, a recovery, a gate, a stop decision) or why the loop stopped. They carry names,
counts and kinds only — message text and tool arguments only when the runtime was opened
with ``trace_content=True``. The executor calls them only after :func:`enabled` said the
logger takes debug records (checked once per tick), so a disabled logger costs one check.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from reverie.core.capability import Surface
from reverie.core.exits import Blocked, Cancelled, Completed, Failed, LoopExit
from reverie.core.messages import ToolCall
from reverie.loop.strategies import ContextPlan

log = logging.getLogger("reverie.loop")

_MAX_TEXT = 500
"""Characters of content a trace carries (with ``trace_content``)."""


def enabled() -> bool:
    """Whether debug traces are wanted (the caller skips building them otherwise)."""
    return log.isEnabledFor(logging.DEBUG)


def _short(text: str) -> str:
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + "…"


def drained(run_id: str, iteration: int, wanted: bool, took: int) -> None:
    """The input strategy's decision on steering, and what was delivered."""
    if wanted:
        log.debug("run %s it%d: steering drained (%d delivered)", run_id, iteration, took)
    else:
        log.debug("run %s it%d: the input strategy holds steering back", run_id, iteration)


def planned(run_id: str, iteration: int, plan: ContextPlan) -> None:
    """The context strategy's plan."""
    log.debug(
        "run %s it%d: context planned: window=%s, memory=%s",
        run_id,
        iteration,
        "all" if plan.window is None else plan.window,
        "on" if plan.include_memory else "off",
    )


def filtered(run_id: str, iteration: int, full: Surface, offered: Surface) -> None:
    """The capability strategy's filter: the tools offered and the ones it hid."""
    shown = set(offered.names())
    hidden = [n for n in full.names() if n not in shown]
    log.debug(
        "run %s it%d: tools offered: %d of %d%s",
        run_id,
        iteration,
        len(shown),
        len(full.descriptors),
        f" (hidden: {', '.join(hidden)})" if hidden else "",
    )


def admitted(
    run_id: str,
    iteration: int,
    policy: str,
    calls: Sequence[ToolCall],
    rejected: int,
    *,
    content: bool,
) -> None:
    """A wave's batch policy and its calls (their arguments only with ``content``)."""
    named = (
        [f"{c.name}({_short(json.dumps(dict(c.arguments), default=str))})" for c in calls]
        if content
        else [c.name for c in calls]
    )
    log.debug(
        "run %s it%d: wave of %d call(s), %s, %d refused at admission: %s",
        run_id,
        iteration,
        len(calls),
        policy,
        rejected,
        ", ".join(named),
    )


def recovered(run_id: str, tool: str, error_kind: str, attempt: int, decision: Any) -> None:
    """The recovery strategy's decision on a failed or denied call."""
    log.debug(
        "run %s: recovery for %s (%s, attempt %d): %s",
        run_id,
        tool,
        error_kind,
        attempt,
        decision.kind,
    )


def gate_decided(run_id: str, tool: str, gate_kind: str, decision: Any) -> None:
    """The gate strategy's decision on a gated call."""
    log.debug("run %s: gate (%s) on %s: %s", run_id, gate_kind, tool, decision.kind)


def stop_decided(
    run_id: str, iteration: int, after: str, decision: Any, *, text: str | None = None
) -> None:
    """The stop strategy's decision after a reply or a wave (``text``: the reply, only with
    ``trace_content``)."""
    detail = getattr(decision, "detail", "") or getattr(decision, "reason", "") or ""
    log.debug(
        "run %s it%d: stop strategy after %s: %s%s%s",
        run_id,
        iteration,
        after,
        decision.kind,
        f" ({detail})" if detail else "",
        f"; reply: {_short(text)!r}" if text is not None else "",
    )


def stopped(run_id: str, iteration: int, exit_: LoopExit) -> None:
    """Why the loop stopped (the exit's kind and safe summary, never content)."""
    match exit_:
        case Completed():
            why = f"completed ({exit_.kind}{', ' + exit_.reason if exit_.reason else ''})"
        case Blocked():
            why = f"blocked on a {exit_.kind} gate"
        case Cancelled():
            why = f"cancelled ({exit_.reason})"
        case Failed():
            why = f"failed ({exit_.kind}): {exit_.safe_summary}"
    log.debug("run %s it%d: loop stopped: %s", run_id, iteration, why)
