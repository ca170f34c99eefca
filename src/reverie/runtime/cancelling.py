"""Ending a run with a cancel when no segment advances it (blocked, queued, or orphaned).

A cancel that finds a segment advancing the run fires its token and leaves the ending to it
(docs/durability.md). A run nobody advances is ended here, under a lease of its own: its
pending gates are denied (they can no longer be approved), and the usage it spent before it
stopped is kept on its ``Cancelled`` exit.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping

from reverie.core.exits import Cancelled
from reverie.core.ids import new_id
from reverie.errors import GateResolvedError, RunBusy, RunEndedError
from reverie.runtime.applier import ExitApplier
from reverie.runtime.drift import DRIFTS_KEY
from reverie.runtime.leases import Leases
from reverie.runtime.result import RunResult
from reverie.runtime.resume import usage_so_far
from reverie.store.base import TERMINAL_STATUSES, RunRecord, Store

__all__ = ["end_cancelled"]


async def end_cancelled(
    store: Store, leases: Leases, applier: ExitApplier, run: RunRecord, reason: str
) -> RunResult | None:
    """End ``run`` ``Cancelled(reason)`` under its lease; ``None`` if it ended or a worker took it.

    A worker that took the lease in the meantime finds the cancel in the run's input queue; a
    run that ended since the caller read it keeps its end.
    """
    try:
        fence = await leases.take(run)
    except RunBusy:
        with contextlib.suppress(RunEndedError):
            await store.enqueue_input(
                run.run_id, "cancel", {"reason": reason}, input_id=new_id("cancel")
            )
        return None
    try:
        # The run the caller read may have ended since (its segment finished here, or a
        # worker elsewhere): its end stands. Under the lease nobody else can end it now.
        run = await store.get_run(run.run_id)
        if run.status in TERMINAL_STATUSES:
            await leases.release(run.run_id, fence)
            return None
        for gate in await store.list_gates(scope=run.scope, status="pending"):
            if gate.run_id == run.run_id:
                with contextlib.suppress(GateResolvedError):
                    await store.resolve_gate(
                        gate.ref, "denied", reason="run cancelled", now=time.time()
                    )
        usage = await usage_so_far(store, run)  # what it spent before it stopped
        # The drifts its resumes went on with stay on its record (runtime/drift.py).
        drifts = dict(run.exit or {}).get(DRIFTS_KEY)
        # The applier's end_segment releases the lease with the status.
        return await applier.apply(
            run,
            Cancelled(reason=reason, usage=usage),
            fence=fence,
            drifts=[d for d in drifts if isinstance(d, Mapping)]
            if isinstance(drifts, list)
            else (),
        )
    except BaseException:
        await leases.release(run.run_id, fence)  # the status was not written
        raise
