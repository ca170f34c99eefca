"""Resolving a gate for a caller: the one path the runs API and the console both take."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from reverie.core.scope import Scope
from reverie.core.vocabulary import GateDecision
from reverie.runtime.result import RunResult
from reverie.runtime.runtime import Runtime
from reverie.serve.context import ServeContext
from reverie.serve.errors import APIError
from reverie.store.base import GateRecord, RunRecord

__all__ = ["LAUNCH_POLL_S", "LAUNCH_WAIT_S", "resolve_gate"]

LAUNCH_POLL_S = 0.002
"""How often a gate resolution checks whether the resumed segment has started."""

LAUNCH_WAIT_S = 10.0
"""Longest a gate resolution waits for the run to resume before answering anyway."""


async def resolve_gate(
    ctx: ServeContext,
    owner: Scope,
    ref: str,
    decision: GateDecision,
    reason: str,
    *,
    arguments: dict[str, Any] | None = None,
    by: str | None = None,
) -> tuple[GateRecord, RunRecord]:
    """Resolve ``owner``'s gate once and resume its run in the background.

    ``arguments`` approves the call with edited arguments (``Runtime.approve``'s rules: same
    tool, checked against its schema, hooks asked again); ``by`` is who decided, recorded on
    the gate.

    Returns once the resolution is recorded and the run's next segment has started (or already
    settled), so a stream of the run's events opened right after follows that segment.

    Raises:
        APIError: 404 when the gate is missing or another owner's; 409 when it was resolved.
    """
    rt = ctx.rt
    gate = await ctx.owned_gate(owner, ref)
    async with ctx.resolving:
        gate = await rt.gates.get(ref)
        if gate.status != "pending":
            raise APIError(409, f"gate {ref} was already {gate.status}", code="gate_resolved")
        earlier = rt.attach(gate.run_id)
        if earlier is not None:
            # The segment that blocked may still be closing: let it finish, so the resumed
            # segment is launched anew rather than joined.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(LAUNCH_WAIT_S):
                    await earlier.result()
        work = (
            rt.approve(ref, arguments=arguments, by=by)
            if decision == "approved"
            else rt.deny(ref, reason=reason, by=by)
        )
        task = ctx.tasks.spawn(work, name=f"resolve gate {ref}")
        await _launched(rt, gate.run_id, task)
        failure = task.exception() if task.done() and not task.cancelled() else None
        if failure is not None:
            raise failure  # a typed error: the handlers map it (GateResolvedError → 409)
    return await rt.gates.get(ref), await rt.runs.get(gate.run_id)


async def _launched(rt: Runtime, run_id: str, task: asyncio.Task[RunResult]) -> None:
    """Wait until the resumed segment runs here, or the resolution task ended."""
    # The runtime offers no event for "segment launched"; its start is a few store writes away.
    deadline = time.monotonic() + LAUNCH_WAIT_S
    while not task.done() and rt.attach(run_id) is None:
        if time.monotonic() > deadline:
            return
        await asyncio.sleep(LAUNCH_POLL_S)
