"""The exit applier: the only code that writes a run's terminal status (docs/loop.md).

Every terminal path goes through :meth:`ExitApplier.apply` — the executor's exits, failures
raised outside the executor, cancellation of a blocked run, checkpoint problems on resume. It
validates the exit first: an exit that fails validation becomes ``Failed(driver_bug)`` and is
never written as success. ``after_turn`` hooks fire from here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from reverie.core.events import HookFailedEvent, RunFinished
from reverie.core.exits import (
    COMPLETION_KINDS_WITHOUT_REPLY,
    Blocked,
    Completed,
    Failed,
    LoopExit,
    exit_from_dict,
    exit_to_dict,
)
from reverie.errors import NotFoundError
from reverie.hooks import AfterTurnContext, HookDispatcher
from reverie.runtime.after_turn import AfterTurnWork
from reverie.runtime.drift import DRIFTS_KEY, ResumeDrift
from reverie.runtime.events import EventBus
from reverie.runtime.result import Gate, RunResult
from reverie.runtime.settle import settle_open_calls
from reverie.runtime.subagents import gate_of_descendant
from reverie.store.base import TERMINAL_STATUSES, RunRecord, RunStatus, Store, TranscriptItem

log = logging.getLogger("reverie.runtime")

KnownRows = Callable[[Sequence[str]], Mapping[str, TranscriptItem]]
"""Written transcript rows by ref that a caller already holds (those it has of the asked)."""

INTERACTIVE_PROFILES: frozenset[str] = frozenset({"interactive"})
"""Profiles whose terminal runs are user turns (and fire ``after_turn``)."""


class ExitApplier:
    """Validates exits and writes terminal status."""

    def __init__(
        self,
        store: Store,
        hooks: HookDispatcher,
        *,
        before_terminal: Callable[[RunRecord, LoopExit], Awaitable[None]] | None = None,
        after_turn: AfterTurnWork | None = None,
        output_of: Callable[[RunRecord, Any], Any] | None = None,
        after_terminal: Callable[[RunRecord], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        self.output_of = output_of
        """Turns a structured run's stored JSON into its declared type (docs/output.md)."""
        self.hooks = hooks
        self.after_turn_work = after_turn
        """Where ``after_turn`` hooks run off the caller's path (``None``: inline)."""
        self._replies: dict[str, list[TranscriptItem]] = {}
        """Reply rows ``validate`` read, kept for the ``result_of`` of the same apply."""
        self.before_terminal = before_terminal
        """Called with a run about to end and its (validated) exit, before the status is
        written: a background run's record is kept even if the process dies right after."""
        self.after_terminal = after_terminal
        """Called with a run whose terminal status was just written, before its result is
        returned: its live subagent runs end with it (DESIGN §20)."""

    async def validate(
        self, run: RunRecord, exit_: LoopExit, *, known: KnownRows | None = None
    ) -> LoopExit:
        """The exit itself if valid, else ``Failed(driver_bug)`` saying why.

        ``known``: written rows the caller holds (the segment's), read instead of the store.
        """
        problem = await self._problem(run, exit_, known)
        if problem is None:
            return exit_
        log.error("run %s produced an invalid exit: %s", run.run_id, problem)
        usage = getattr(exit_, "usage", None)
        return Failed(
            kind="driver_bug",
            safe_summary=f"the loop returned an invalid exit: {problem}",
            **({"usage": usage} if usage is not None else {}),
        )

    async def _problem(
        self, run: RunRecord, exit_: LoopExit, known: KnownRows | None
    ) -> str | None:
        if isinstance(exit_, Completed):
            refs = exit_.reply_refs
            if len(set(refs)) != len(refs):
                return "reply refs are not unique"
            if exit_.kind in COMPLETION_KINDS_WITHOUT_REPLY:
                return None
            if not refs:
                return "a completed exit has no reply"
            try:
                items = await self._rows(refs, known)
            except NotFoundError:
                return "a reply ref does not exist"
            self._replies[run.run_id] = items
            if any(i.role != "assistant" or i.run_id != run.run_id for i in items):
                return "a reply ref is not an assistant message of this run"
            if any(i.tool_calls for i in items):
                return "a reply ref is an assistant message with tool calls, not a reply"
            if not "".join(i.content for i in items).strip():
                return "the reply is empty"
            return None
        if isinstance(exit_, Blocked):
            try:
                gate = await self.store.get_gate(exit_.gate_ref)
            except NotFoundError:
                return f"blocked on gate {exit_.gate_ref} which does not exist"
            if gate.run_id != run.run_id:
                # A subagent's gate: the parent blocks on it (it may be resolved already; the
                # resume then continues the child inside the parent's call).
                if await gate_of_descendant(self.store, run, gate.run_id):
                    return None
                return f"blocked on gate {exit_.gate_ref} which is not pending for this run"
            if gate.status != "pending":
                return f"blocked on gate {exit_.gate_ref} which is not pending for this run"
            return None
        return None

    async def _rows(self, refs: Sequence[str], known: KnownRows | None) -> list[TranscriptItem]:
        found = dict(known(refs)) if known is not None else {}
        missing = [r for r in refs if r not in found]
        if missing:
            found.update((i.ref, i) for i in await self.store.get_items(missing))
        return [found[r] for r in refs]

    async def apply(
        self,
        run: RunRecord,
        exit_: LoopExit,
        *,
        fence: int | None,
        bus: EventBus | None = None,
        hooks: HookDispatcher | None = None,
        known: KnownRows | None = None,
        drifts: Sequence[Mapping[str, Any]] = (),
    ) -> RunResult:
        """Validate, write the status, announce it, fire ``after_turn``; return the result.

        With a ``fence`` the status, the seal of a terminal run's inputs and the release of
        the lease are one store operation (``Store.end_segment``): the caller's lease is
        given up once this returns. ``known``: see :meth:`validate`. ``drifts``: what the
        run's resumes found changed in its agent (runtime/drift.py), recorded with the exit.
        """
        exit_ = await self.validate(run, exit_, known=known)
        status: RunStatus = exit_.status
        if status in ("failed", "cancelled"):
            # Transcript well-formedness: no call of this run is left without a result. (A
            # completed run answered all of its calls before its final answer.)
            await settle_open_calls(self.store, run, fence=fence, status=status)
        if status in TERMINAL_STATUSES and self.before_terminal is not None:
            await self.before_terminal(run, exit_)
        # No input may arrive after the end (those that raced us are refused, not lost).
        recorded = exit_to_dict(exit_)
        if drifts:
            recorded[DRIFTS_KEY] = [dict(d) for d in drifts]
        if fence is not None:
            record = await self.store.end_segment(run.run_id, status, fence=fence, exit=recorded)
        else:
            record = await self.store.set_run_status(run.run_id, status, fence=None, exit=recorded)
            if status in TERMINAL_STATUSES:
                await self.store.seal_inputs(run.run_id, after_cursor=1 << 62)
        if status in TERMINAL_STATUSES and self.after_terminal is not None:
            try:
                await self.after_terminal(record)
            except Exception:  # the end stands; recover() and the child's next step finish it
                log.exception("run %s: could not end its subagent runs", run.run_id)
        try:
            replies = self._replies.pop(run.run_id, None)
            result = await self.result_of(record, replies=replies, exit_=exit_)
        finally:
            self._replies.pop(run.run_id, None)
        if bus is not None:
            bus.emit(RunFinished(run_id=run.run_id, status=status, exit=recorded))
        if status in TERMINAL_STATUSES:
            dispatcher = hooks or self.hooks
            work = self.after_turn_work
            if work is None:
                await self._after_turn(record, status, bus, dispatcher)
            elif self._wants_after_turn(record, dispatcher):
                # The caller gets its result first; the hooks run in an owned task, under a
                # deadline derived from their own timeouts (fixed now: the hooks registered
                # at the end of the turn are the ones that run).
                deadline = dispatcher.after_turn_deadline_s(work.ceiling_s)
                work.submit(
                    record.scope,
                    record.run_id,
                    lambda: self._after_turn(record, status, bus, dispatcher, deadline),
                    deadline_s=deadline,
                )
        return result

    def _wants_after_turn(self, run: RunRecord, hooks: HookDispatcher) -> bool:
        # Only user turns: never unbound, scheduled-trigger or actorless runs.
        return (
            run.profile in INTERACTIVE_PROFILES
            and run.has_actor
            and bool(hooks.registry.hooks("after_turn"))
        )

    async def _after_turn(
        self,
        run: RunRecord,
        status: str,
        bus: EventBus | None,
        hooks: HookDispatcher,
        deadline_s: float | None = None,
    ) -> None:
        if not self._wants_after_turn(run, hooks):
            return
        if deadline_s is None:
            deadline_s = hooks.after_turn_deadline_s()
        outcome = await hooks.after_turn(
            AfterTurnContext(
                scope=run.scope,
                run_id=run.run_id,
                profile=run.profile,
                completed=status == "completed",
                status=status,
            ),
            deadline_s=deadline_s,
        )
        if outcome.cut_off and self.after_turn_work is not None:
            self.after_turn_work.record_missed(run.run_id, deadline_s, outcome.cut_off)
        builtin = {h.name for h in hooks.registry.hooks("after_turn") if h.trust == "builtin"}
        for failure in outcome.failures:
            # reverie's own upkeep (recording, curation) never shouts; the application's does.
            log.log(
                logging.DEBUG if failure.hook in builtin else logging.WARNING,
                "after_turn hook %s failed (%s) for run %s",
                failure.hook,
                failure.reason,
                run.run_id,
            )
            if bus is not None:
                bus.emit(
                    HookFailedEvent(
                        run_id=run.run_id,
                        hook=failure.hook,
                        point=failure.point,
                        reason=failure.reason,
                    )
                )

    async def result_of(
        self,
        run: RunRecord,
        *,
        replies: list[TranscriptItem] | None = None,
        exit_: LoopExit | None = None,
    ) -> RunResult:
        """Rebuild the public result of a run from its stored exit.

        ``replies``: the reply rows, when the caller has just read them. ``exit_``: the exit
        the caller has just stored as ``run.exit`` (not decoded again).
        """
        if run.exit is None:
            raise NotFoundError(f"run {run.run_id} has no result yet (status {run.status})")
        if exit_ is None:
            exit_ = exit_from_dict(dict(run.exit))
        text: str | None = None
        gate: Gate | None = None
        output: Any | None = None
        if isinstance(exit_, Completed) and exit_.reply_refs:
            fresh = replies is not None and [i.ref for i in replies] == list(exit_.reply_refs)
            items = replies if fresh and replies else await self.store.get_items(exit_.reply_refs)
            text = "".join(i.content for i in items)
            if exit_.kind == "structured":
                # Its result row holds the validated structured_result arguments as JSON.
                output = json.loads(text)
                if self.output_of is not None:
                    output = self.output_of(run, output)
        if isinstance(exit_, Blocked):
            g = await self.store.get_gate(exit_.gate_ref)
            gate = Gate(ref=g.ref, kind=g.kind, tool=g.tool, arguments=dict(g.arguments))
        usage = exit_.usage
        recorded_drifts = dict(run.exit).get(DRIFTS_KEY)
        return RunResult(
            drift=tuple(ResumeDrift.from_dict(d) for d in recorded_drifts if isinstance(d, Mapping))
            if isinstance(recorded_drifts, list)
            else (),
            status=exit_.status,
            text=text,
            exit=exit_,
            run_id=run.run_id,
            thread_id=run.thread_id,
            usage=usage,
            gate=gate,
            output=output,
        )


def unique(values: Sequence[str]) -> bool:
    """Whether all values differ."""
    return len(set(values)) == len(values)
