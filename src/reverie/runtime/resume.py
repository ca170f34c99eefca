"""Loading a run's state on resume: checkpoint checks, superseding, finished segments."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from reverie.core.exits import Cancelled, Completed, Failed, LoopExit, Usage
from reverie.core.fastcopy import replace
from reverie.core.limits import Limits
from reverie.errors import CorruptCheckpointError
from reverie.loop.family import LoopFamily
from reverie.loop.state import (
    DEFINITION_KEY,
    STATE_SCHEMA_ID,
    LoopExecutionState,
    state_from_dict,
)
from reverie.runtime.drift import RunDefinition
from reverie.store.base import CheckpointRecord, RunRecord, Store


@dataclass(frozen=True, slots=True, kw_only=True)
class Loaded:
    """What a segment continues from: the state (or the exit it ends with at once) and the
    definition its checkpoint recorded (``None``: a new run, or a checkpoint from before
    definitions were recorded)."""

    state: LoopExecutionState | LoopExit
    definition: RunDefinition | None = None


async def load_state(
    store: Store,
    run: RunRecord,
    family: LoopFamily,
    *,
    checkpoint: CheckpointRecord | None,
    head_seq: int,
) -> Loaded:
    """The state to continue from, or the exit a resume must end with.

    ``checkpoint`` and ``head_seq`` are what :meth:`Store.begin_segment` read.
    """

    cp = checkpoint
    if cp is None:
        # Never checkpointed: the thread ends with the run's opening rows (a segment writes
        # its first rows with its first checkpoint, and a thread has one active run), so the
        # head is where the run starts, whatever the thread's length.
        return Loaded(state=LoopExecutionState(transcript_seq=head_seq))
    try:
        payload = json.loads(cp.payload)
        schema_id = payload["schema_id"]
        digest = payload["family_digest"]
        raw_state = payload["state"]
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptCheckpointError(run.run_id, type(exc).__name__) from exc
    return Loaded(
        state=await _continue_from(store, run, family, cp, schema_id, digest, raw_state, head_seq),
        definition=RunDefinition.from_dict(payload.get(DEFINITION_KEY)),
    )


async def _continue_from(
    store: Store,
    run: RunRecord,
    family: LoopFamily,
    cp: CheckpointRecord,
    schema_id: object,
    digest: object,
    raw_state: Any,
    head_seq: int,
) -> LoopExecutionState | LoopExit:
    if schema_id != STATE_SCHEMA_ID:
        return Failed(
            kind="checkpoint_unavailable",
            safe_summary=f"checkpoint schema {schema_id!r} is not supported by this version",
        )
    if digest != family.identity.digest:
        return Failed(
            kind="checkpoint_unavailable",
            safe_summary=f"loop family {family.id!r} changed since the checkpoint was taken",
        )
    try:
        state = state_from_dict(raw_state)
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptCheckpointError(run.run_id, type(exc).__name__) from exc
    if head_seq > state.transcript_seq:
        # Rows a crashed segment wrote past its last checkpoint are not replayed. Only then
        # can the thread reach past it (a step commit writes its rows with the checkpoint
        # that covers them), so a gate's resume makes no write here.
        await store.supersede_items_after(run.thread_id, run.run_id, state.transcript_seq)
    if cp.kind == "Final":
        if state.completion is not None and state.completion.kind == "cancelled":
            return Cancelled(
                reason=state.completion.reason or "cancelled", usage=state.budget.usage()
            )
        if state.completion is not None:  # a strategy finished the run (e.g. structured)
            return Completed(
                kind=state.completion.kind,
                reply_refs=state.completion.refs,
                usage=state.budget.usage(),
            )
        if state.assistant_refs:
            return Completed(
                kind="graceful_summary" if state.graceful_stop else "reply",
                reply_refs=state.assistant_refs,
                usage=state.budget.usage(),
                reason=state.graceful_stop,
            )
        return Cancelled(usage=state.budget.usage())
    return state


def crash_resume(state: LoopExecutionState, limits: Limits) -> LoopExecutionState | Failed:
    """Charge a crash resume: one iteration, and one of ``limits.max_resumes``.

    A run whose worker dies on every attempt (a tool that kills the process, say) would
    otherwise be resumed forever; the count lives in the checkpoint's host slot.
    """
    count = int(state.host_state.get("crash_resumes", 0)) + 1
    if count > limits.max_resumes:
        return Failed(
            kind="resume_limit",
            safe_summary=f"the run's worker stopped {count} times; resumed at most "
            f"{limits.max_resumes} times (Limits.max_resumes)",
            usage=state.budget.usage(),
        )
    return replace(
        state,
        iteration=state.iteration + 1,
        host_state={**state.host_state, "crash_resumes": count},
    )


async def usage_so_far(store: Store, run: RunRecord) -> Usage:
    """What a run has consumed, for an exit written outside the loop (a cancel of a blocked,
    queued or orphaned run): the usage its last exit recorded, else its last checkpoint's."""
    recorded = dict(run.exit).get("usage") if run.exit is not None else None
    if isinstance(recorded, dict):
        return Usage.from_dict(recorded)
    cp = await store.load_checkpoint(run.run_id)
    if cp is None:
        return Usage()
    try:
        return state_from_dict(json.loads(cp.payload)["state"]).budget.usage()
    except (ValueError, KeyError, TypeError):
        return Usage()  # an unreadable checkpoint costs the figures, not the cancel
