"""The canonical executor: one tick, in the order of docs/architecture.md, until the loop exits.

The executor only *returns* a :data:`~reverie.core.exits.LoopExit`; the runtime's applier
validates it and writes the run's terminal status. It talks to the world only through the host
ports (:mod:`reverie.loop.ports`) and decides only through the family's strategies.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import NoReturn, TypeVar

from reverie.core.canonical import compiled
from reverie.core.capability import Surface
from reverie.core.content import parts_entry
from reverie.core.exits import (
    FAILURE_KINDS,
    HOST_STOP_REASONS,
    Blocked,
    Cancelled as CancelledExit,
    Completed,
    Failed,
    FailureKind,
    GracefulReason,
    LoopExit,
)
from reverie.core.fastcopy import maker, replace
from reverie.core.limits import Limits
from reverie.core.messages import ModelResponse, TokenUsage, ToolCall
from reverie.core.transcript import USER_INPUT_KINDS, InputRecord, NewItem
from reverie.core.vocabulary import OnLimit
from reverie.errors import GuardrailTripped, ModelError, ModelOutputTooLarge
from reverie.loop import trace
from reverie.loop.compaction import (
    CompactionPolicy,
    ContextMeter,
    plan_compaction,
    shrink_plan,
    summary_item,
    summary_request,
)
from reverie.loop.control import Cancelled, cancellable_sleep, race_cancellation
from reverie.loop.events import (
    emit_assistant,
    emit_gate,
    emit_input,
    emit_limit,
    emit_model_fallback,
    emit_model_request,
    emit_text,
)
from reverie.loop.fallback import model_failure_summary, model_label
from reverie.loop.family import LoopFamily
from reverie.loop.finalizer import FINALIZER_PROMPTS, failure_kind_for, reject_reason
from reverie.loop.ports import CheckpointKind, LoopHost, PromptBundle
from reverie.loop.state import BudgetLedger, Completion, LoopExecutionState
from reverie.loop.strategies import Abort, Finish, GracefulStop, NoProgress, Reprompt, Retry
from reverie.loop.wave import WaveRunner, admit_wave, replays_harmlessly, unique_call_ids

T = TypeVar("T")
_new_item = maker(NewItem)
"""Builds the step's assistant row (a class call with keywords costs more)."""
Rebuild = Callable[[LoopExecutionState], Awaitable[PromptBundle]]

# Budgets whose exhaustion still leaves room for the finalizer's one model call.
_MAX_SUMMARY_CALLS = 4
"""Summary calls one compaction may make when its rows overflow the summary model (each split
halves the rows; the run's model-call budget bounds them too)."""
_FINALIZABLE_BUDGETS: frozenset[str] = frozenset({"capability_call_limit", "wall_clock_limit"})


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopConfig:
    """Per-run settings of the executor."""

    limits: Limits = field(default_factory=Limits)
    on_limit: OnLimit = "finalize"
    max_parallel: int = 16
    """Concurrency bound of a parallel wave."""
    finalizer_timeout_s: float = 120.0
    """Deadline of the finalizer's one model call (its own: the run's budgets may be spent)."""
    finalizer_max_tokens: int = 4096
    """Output cap asked of the model for the finalizer's answer."""
    finalizer_max_chars: int = 32_000
    """A longer final answer is rejected (a model may ignore the requested output cap)."""
    compaction: CompactionPolicy | None = None
    """Context compaction (loop/compaction.py); ``None``: off."""
    trace_content: bool = False
    """Debug traces of the loop's decisions (``reverie.loop``) carry message text and tool
    arguments; off, only names, counts and kinds."""


class _Exit(Exception):
    def __init__(self, exit_: LoopExit, state: LoopExecutionState) -> None:
        super().__init__(type(exit_).__name__)
        self.exit = exit_
        self.state = state


async def run_loop(
    host: LoopHost, family: LoopFamily, state: LoopExecutionState, config: LoopConfig
) -> tuple[LoopExit, LoopExecutionState]:
    """Advance a run from ``state`` until it completes, blocks, fails or is cancelled."""
    return await _Executor(host, family, config).run(state)


class _Executor:
    def __init__(self, host: LoopHost, family: LoopFamily, config: LoopConfig) -> None:
        self.host = host
        self.family = family
        self.config = config
        self.limits = config.limits
        # A budget strategy can only narrow the run's cap, never raise it.
        self.iteration_limit = min(
            config.limits.max_iterations,
            family.budget.iteration_limit(config.limits.max_iterations),
        )
        self._segment_start = time.monotonic()
        self._acked_cursor = 0
        self._seen_cursor = 0
        """The highest input cursor polled: step commits are guarded by it."""
        self._maybe_inputs = True
        """Whether inputs may wait past what was polled (then the next boundary polls)."""
        self._cancel_requested = False
        """A step commit saw the run's durable cancel request."""
        self._polled: list[InputRecord] = []
        self._last_state = LoopExecutionState()
        """The newest state, for the checkpoint of a cancellation that interrupts a step."""
        self._settle_later = False
        """The last step commit admitted a wave that replays harmlessly, and nothing since
        needs a commit: the wave's results may ride the next step commit (the admit
        checkpoint resumes it)."""
        self._meter = None if config.compaction is None else ContextMeter(config.compaction)
        self._boundary: Callable[[], None] = host.token.check
        """A cancellation boundary (the token's check itself: several per tick)."""
        self._waves = WaveRunner(host, family, config.max_parallel, config.trace_content)
        """Runs each tick's wave (one runner per segment: the waves run one after another)."""
        self._debug = False
        """Whether the ``reverie.loop`` logger takes debug traces (read once per tick)."""

    # ------------------------------------------------------------------------------ driver
    async def run(self, state: LoopExecutionState) -> tuple[LoopExit, LoopExecutionState]:
        self._acked_cursor = self._seen_cursor = state.input_cursor
        try:
            while True:
                state = await self._tick(state)
        except _Exit as done:
            if isinstance(done.exit, Failed):
                if await self._cancel_pending(done.state):
                    # Cancellation has precedence over a failure (a limit reached meanwhile),
                    # wherever it was sent from: another process's arrives as an input.
                    return await self._cancelled(self.host.token.reason)
                # No checkpoint for a failure, but what the run said and heard is kept: the
                # staged rows and journal records are written before the status is.
                await self.host.checkpoints.commit(None, done.state)
            if trace.enabled():
                trace.stopped(self.host.run_id, done.state.iteration, done.exit)
            return done.exit, done.state
        except Cancelled as c:
            return await self._cancelled(c.reason)

    async def _cancelled(self, reason: str) -> tuple[LoopExit, LoopExecutionState]:
        # Cancellation is a clean exit: checkpoint what we have, then Cancelled. The Final
        # checkpoint says it was a cancellation, so a crash before the status write resumes
        # as Cancelled (never as a completion of whatever assistant row came last).
        ended = Completion(kind="cancelled", refs=(), reason=reason)
        final, _ = await self._commit(
            "Final", replace(self._last_state, completion=ended), guard=False
        )
        cancelled = CancelledExit(reason=reason, usage=final.budget.usage())
        if trace.enabled():
            trace.stopped(self.host.run_id, final.iteration, cancelled)
        return cancelled, final

    async def _cancel_pending(self, s: LoopExecutionState) -> bool:
        """Whether a cancel was sent, here (the token) or from anywhere (an input not yet
        polled: a wave that settles later sends no commit whose receipt would tell)."""
        if not self.host.token.cancelled:
            for rec in await self._poll(s):
                if rec.kind == "cancel":
                    self.host.token.cancel(str(rec.payload.get("reason") or "cancelled"))
                    break
        return self.host.token.cancelled

    def _active_s(self, state: LoopExecutionState) -> float:
        return state.budget.active_s + (time.monotonic() - self._segment_start)

    async def _commit(
        self,
        kind: CheckpointKind,
        state: LoopExecutionState,
        *,
        guard: bool = True,
        seal: bool = False,
    ) -> tuple[LoopExecutionState, bool]:
        """One step commit: staged rows + journal, then (guarded) the checkpoint, ack and seal.

        Returns the state and whether the checkpoint was written. Guarded (the default), it is
        written only if no input arrived past what this segment has polled — the receipt tells,
        so a boundary reads the input queue only when something is there.
        """
        self._settle_later = False
        now = time.monotonic()
        state = replace(
            state,
            budget=replace(
                state.budget, active_s=state.budget.active_s + (now - self._segment_start)
            ),
        )
        ack = state.input_cursor if state.input_cursor > self._acked_cursor else None
        receipt = await self.host.checkpoints.commit(
            kind,
            state,
            guard_cursor=None
            if not guard
            # A seal must not close over an input not yet delivered; other boundaries only
            # need to know of inputs they have not seen.
            else state.input_cursor
            if seal
            else max(self._seen_cursor, state.input_cursor),
            ack_cursor=ack,
            seal=seal,
        )
        if receipt.cancel_requested and not self.host.token.cancelled:
            self._maybe_inputs = True  # the cancel input says why; the next poll applies it
            self._cancel_requested = True
        if not receipt.written:
            self._maybe_inputs = True
            return state, False
        # Cursor-before-ack holds within the one transaction.
        self._segment_start = now
        if ack is not None:
            self._acked_cursor = ack
        self._last_state = state
        return state, True

    def _chain_length(self) -> int:
        """How many of the model port's models are the agent's chain (a separate summary
        model of compaction comes after them and is never a fallback)."""
        summary = None if self.config.compaction is None else self.config.compaction.model_index
        return len(self.host.model.names) if summary is None else summary

    def _fail(self, state: LoopExecutionState, kind: FailureKind, summary: str) -> _Exit:
        return _Exit(Failed(kind=kind, safe_summary=summary, usage=state.budget.usage()), state)

    # ------------------------------------------------------------------------------ the tick
    async def _tick(self, s: LoopExecutionState) -> LoopExecutionState:
        self._last_state = s
        self._debug = debug = trace.enabled()
        # 0. Iteration cap, checked first so a resume that sits at the limit exits at once
        # (an admitted wave still settles first: it was admitted below the cap).
        if (
            s.iteration >= self.iteration_limit
            and s.graceful_stop is None
            and s.pending_wave is None
        ):
            self._limit_reached(s, "max_iterations")
            if self.config.on_limit == "fail":
                raise self._fail(
                    s, "iteration_limit", f"iteration limit of {self.iteration_limit} reached"
                )
            s = s.request_stop("max_iterations")

        # 1. Cancellation first, then control inputs, then a pending graceful stop.
        self._boundary()
        s = await self._take_control(s)
        self._boundary()
        # A resume from BeforeSideEffect / BeforeBlock continues the admitted wave: every
        # admitted call settles before any graceful stop, budget exit or finalizer (an approved
        # call runs even if a stop was requested while the run was blocked).
        if s.pending_wave is not None:
            return await self._finish_wave(s)
        if s.graceful_stop is not None:
            await self._finalize(s)
        s = self._check_budgets(s)
        if s.graceful_stop is not None:
            await self._finalize(s)

        # 2. Drain steering.
        self._boundary()
        wanted = self.family.inputs.drain_steering(s)
        delivered = 0
        if wanted:
            s, took = await self._drain(s, follow_ups=False, records=self._polled)
            if took:
                self._settle_later = False  # delivered inputs are acked by a checkpoint
                delivered = len(took)
        if debug:
            trace.drained(self.host.run_id, s.iteration, wanted, delivered)

        # 3. Plan context.
        self._boundary()
        plan = self.family.context.plan(s)
        if debug:
            trace.planned(self.host.run_id, s.iteration, plan)

        # 4. Filter the visible capabilities (a strategy can only narrow the surface).
        self._boundary()
        full = self.host.capabilities.surface()
        surface = self.family.capabilities.filter(s, full)
        if surface is not full and not set(surface.names()) <= set(full.names()):
            raise self._fail(s, "driver_bug", "capability strategy widened the surface")
        if debug:
            trace.filtered(self.host.run_id, s.iteration, full, surface)
        if s.surface_version != surface.version:
            s = replace(s, surface_version=surface.version)
        bundle = await self.host.prompt.build(s, plan, surface)

        # 4b. Compact the context when it outgrew its budget; the next checkpoint takes the
        # summary row into the run (a crash before it: the resume compacts again). (A partial,
        # not a closure: one object per tick, where a closure makes a cell per variable.)
        rebuild: Rebuild = partial(self.host.prompt.build, plan=plan, surface=surface)
        if self._meter is not None:
            before = s
            s, bundle = await self._compact(s, bundle, rebuild, window=plan.window)
            if s is not before:
                self._settle_later = False  # a summary call was made and charged

        # 5. Checkpoint BeforeModel with the ack of what was drained (one step commit). An
        # input that arrived meanwhile: the checkpoint is not written; the tick starts over.
        # After a wave that replays harmlessly, with nothing new to make durable, there is no
        # commit: the admit checkpoint resumes the wave, its results ride the next step
        # commit, and one read of the queue stands in for this commit's receipt.
        if self._settle_later and s.input_cursor == self._acked_cursor:
            if await self._inputs_arrived():
                return s
        else:
            s, written = await self._commit("BeforeModel", s)
            if not written:
                return s

        # 6. Call the model.
        self._boundary()
        response, s = await self._call_model(
            s, bundle, tools=len(surface.descriptors), rebuild=rebuild
        )
        calls = response.tool_calls

        if not calls:
            return await self._on_reply(s, response.text)
        return await self._on_calls(s, calls, response.text, surface)

    # ------------------------------------------------------------------------------ inputs
    async def _take_control(self, s: LoopExecutionState) -> LoopExecutionState:
        """Apply every pending control input, wherever it sits in the queue.

        Control inputs (``cancel``, ``graceful_stop``, ``gate_resolved``) never wait behind
        user inputs: each boundary applies all of them (applying one twice changes nothing:
        the token is already cancelled, a graceful stop is one-shot). The cursor moves only over
        the contiguous control prefix, so user inputs keep their order and exactly-once
        delivery; the ones behind are kept for this tick's drain (one poll per tick).
        """
        if not self._maybe_inputs:
            self._polled = []
            return s
        records = await self._poll(s)
        s = self._apply_controls(s, records)
        cursor = s.input_cursor
        self._polled = records
        for index, rec in enumerate(records):
            if rec.kind in USER_INPUT_KINDS:
                self._polled = records[index:]
                break
            cursor = rec.cursor
        else:
            self._polled = []
        if self._polled:
            self._maybe_inputs = True  # user inputs seen but not yet delivered: poll again
        return replace(s, input_cursor=cursor) if cursor != s.input_cursor else s

    async def _poll(self, s: LoopExecutionState) -> list[InputRecord]:
        records = await self.host.inputs.poll(s.input_cursor)
        self._maybe_inputs = False
        if records:
            self._seen_cursor = max(self._seen_cursor, records[-1].cursor)
        if self._cancel_requested and not any(r.kind == "cancel" for r in records):
            # The durable request without its input (the requester died in between).
            self.host.token.cancel("cancelled")
        return records

    def _apply_controls(
        self, s: LoopExecutionState, records: list[InputRecord]
    ) -> LoopExecutionState:
        """Take effect of the control inputs among ``records`` (idempotent)."""
        for rec in records:
            if rec.kind == "cancel":
                self.host.token.cancel(str(rec.payload.get("reason") or "cancelled"))
            elif rec.kind == "graceful_stop":
                reason = rec.payload.get("reason", "host")
                if reason not in HOST_STOP_REASONS:
                    reason = "host"
                if s.graceful_stop is None:
                    self._limit_reached(s, reason)
                s = s.request_stop(reason)
            # gate_resolved: the capability port reads the gate itself; nothing to do here.
        return s

    async def _drain(
        self, s: LoopExecutionState, *, follow_ups: bool, records: list[InputRecord] | None = None
    ) -> tuple[LoopExecutionState, list[InputRecord]]:
        """Deliver the user-facing inputs after the cursor, in order.

        Steering only, unless ``follow_ups`` (then stops at the first follow-up). Control
        inputs in between are applied first (cancellation wins) and passed over.
        """
        if records is None:
            records = await self._poll(s)
        s = self._apply_controls(s, records)
        self._boundary()
        take: list[InputRecord] = []
        cursor = s.input_cursor
        for rec in records:
            if rec.kind not in USER_INPUT_KINDS:
                cursor = rec.cursor
                continue
            if rec.kind == "steering" or (rec.kind == "follow_up" and follow_ups):
                take.append(rec)
                cursor = rec.cursor
                continue
            break
        if not take:
            return (replace(s, input_cursor=cursor) if cursor != s.input_cursor else s), []
        items = [
            NewItem(
                role="user",
                content=str(rec.payload.get("text", "")),
                input_id=rec.input_id,
                meta={"input_kind": rec.kind, **parts_entry(rec.payload)},
            )
            for rec in take
        ]
        rows = await self.host.transcript.append(items)
        for rec in take:
            emit_input(self.host, rec)
        s = replace(s, input_cursor=cursor, transcript_seq=rows[-1].seq)
        return s, take

    async def _commit_sealed(
        self, kind: CheckpointKind, s: LoopExecutionState, *, deliver: bool
    ) -> tuple[LoopExecutionState, bool, bool]:
        """Commit ``kind`` and close the input queue for the end of the run, in one step.

        Sealing is atomic with enqueueing: an input either is waiting here (and is delivered
        into the transcript) or is refused with ``RunEndedError`` after. Returns the state,
        whether the checkpoint was written and whether user inputs were delivered. With
        ``deliver`` the caller goes on after a delivery (nothing is committed then); otherwise
        it keeps sealing until the checkpoint is written.
        """
        delivered = False
        while True:
            s, written = await self._commit(kind, s, seal=True)
            if written:
                return s, True, delivered
            before = s.input_cursor
            s, took = await self._drain(s, follow_ups=True)
            delivered = delivered or bool(took)
            if took and deliver:
                return s, False, True
            if s.input_cursor == before and not took:
                # Nothing we can take (a custom input kind): commit without sealing.
                s, _ = await self._commit(kind, s, guard=False)
                return s, True, delivered

    # ------------------------------------------------------------------------------ budgets
    def _limit_reached(self, s: LoopExecutionState, reason: str) -> None:
        emit_limit(self.host, reason, self.config.on_limit)

    def _exhausted(self, s: LoopExecutionState) -> tuple[FailureKind, str] | None:
        lim, b = self.limits, s.budget
        if lim.max_usd is not None and b.usd >= lim.max_usd:
            return "budget_usd", f"spend limit of ${lim.max_usd:.4f} reached"
        if lim.max_tokens is not None and b.input_tokens + b.output_tokens >= lim.max_tokens:
            return "token_limit", f"token limit of {lim.max_tokens} reached"
        if lim.max_model_calls is not None and b.model_calls >= lim.max_model_calls:
            return "model_call_limit", f"model call limit of {lim.max_model_calls} reached"
        if lim.max_capability_calls is not None and b.capability_calls >= lim.max_capability_calls:
            return (
                "capability_call_limit",
                f"capability call limit of {lim.max_capability_calls} reached",
            )
        if lim.wall_clock_s is not None and self._active_s(s) >= lim.wall_clock_s:
            return "wall_clock_limit", f"wall clock limit of {lim.wall_clock_s}s reached"
        return None

    def _check_budgets(self, s: LoopExecutionState) -> LoopExecutionState:
        """At a boundary: an exhausted budget ends the run (through the finalizer if it can)."""
        hit = self._exhausted(s)
        if hit is None:
            return s
        return self._on_exhausted(s, *hit)

    def _on_exhausted(
        self, s: LoopExecutionState, kind: FailureKind, summary: str
    ) -> LoopExecutionState:
        """Request the finalizer for a budget that allows it, else fail the run."""
        finalizable = kind in _FINALIZABLE_BUDGETS and self.config.on_limit == "finalize"
        emit_limit(self.host, kind, "finalize" if finalizable else "fail")
        if finalizable:
            reason: GracefulReason = (
                "capability_call_limit" if kind == "capability_call_limit" else "wall_clock_limit"
            )
            return s.request_stop(reason)
        raise self._fail(s, kind, summary)

    def _charge_model_call(
        self, s: LoopExecutionState, name: str | None = None
    ) -> LoopExecutionState:
        """Charge before sending: a call that would exceed a budget is never made.

        ``name``: the model the call goes to (default: the one the model strategy selects).
        """
        lim, b = self.limits, s.budget
        if lim.max_model_calls is not None and b.model_calls >= lim.max_model_calls:
            raise self._fail(
                s, "model_call_limit", f"model call limit of {lim.max_model_calls} reached"
            )
        if lim.max_usd is not None and b.usd >= lim.max_usd:
            raise self._fail(s, "budget_usd", f"spend limit of ${lim.max_usd:.4f} reached")
        if lim.max_tokens is not None and b.input_tokens + b.output_tokens >= lim.max_tokens:
            raise self._fail(s, "token_limit", f"token limit of {lim.max_tokens} reached")
        return replace(s, budget=b.charged(self._model_name(s) if name is None else name))

    def _model_name(self, s: LoopExecutionState) -> str:
        """The name of the model the model strategy selects."""
        return model_label(self.host.model.names, self._selected(s))

    def _selected(self, s: LoopExecutionState) -> int:
        """The model strategy's choice, checked: an index outside the agent's models is the
        strategy's bug (``Failed(driver_bug)``), never clamped to another model."""
        index = self.family.model.select(s)
        models = self._chain_length()
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < models:
            raise self._fail(
                s,
                "driver_bug",
                f"the model strategy selected model {index!r}; the agent has {models} "
                f"(0 to {models - 1})",
            )
        return index

    # ------------------------------------------------------------------------------ model
    async def _call_model(
        self,
        s: LoopExecutionState,
        bundle: PromptBundle,
        *,
        tools: int,
        rebuild: Rebuild | None = None,
        emit_text: bool = True,
        model_index: int | None = None,
        overflow_raises: bool = False,
    ) -> tuple[ModelResponse, LoopExecutionState]:
        """One model call with its budgets, deadline and retries.

        ``rebuild`` (the tick's prompt builder) lets a ``context_overflow`` compact the context
        once and retry; ``model_index`` overrides the model strategy (the summary model);
        ``overflow_raises`` hands a ``context_overflow`` back to the caller as the
        :class:`ModelError` (a summary request that the caller can make smaller).
        """
        attempt = 0
        overflowed = False
        while True:
            index = self._selected(s) if model_index is None else model_index
            name = model_label(self.host.model.names, index)
            s = self._charge_model_call(s, name)  # under the model that is asked
            self._last_state = s
            emit_model_request(self.host, s.iteration, tools, attempt, name)
            # The wall clock bounds the call in flight, not only the boundaries around it.
            wall = self.limits.wall_clock_s
            try:
                response = self._capped(
                    await self._ask(
                        bundle,
                        index,
                        deadline_s=None if wall is None else max(0.0, wall - self._active_s(s)),
                        emit_text=emit_text,
                    )
                )
            except _DeadlinePassed:
                assert wall is not None
                s = self._on_exhausted(
                    s, "wall_clock_limit", f"wall clock limit of {wall}s reached"
                )
                await self._finalize(s)
            except ModelOutputTooLarge as exc:
                raise self._fail(s, "invalid_model_output", str(exc)) from None
            except GuardrailTripped as exc:
                # A before_reply guardrail refused the text: nothing of it was stored or
                # streamed, and asking again is not a retry the guardrail agreed to.
                raise self._fail(s, "guardrail_tripped", str(exc)) from None
            except ModelError as exc:
                if exc.usage is not None:
                    # A call that failed midway (a cut stream) still consumed tokens: count
                    # them, so a budget binds a run whose calls keep failing.
                    s = self._charge_failed_usage(s, name, index, exc.usage)
                    self._last_state = s
                if exc.kind == "context_overflow" and overflow_raises:
                    raise
                if exc.kind == "context_overflow" and rebuild is not None and not overflowed:
                    # Compact once and retry; the summary row is checkpointed before the retry.
                    overflowed = True
                    if self._meter is not None:
                        s, compacted = await self._compact(
                            s, bundle, rebuild, window=None, overflow=True
                        )
                        if compacted is not bundle:
                            bundle = compacted
                            s, _ = await self._commit("BeforeModel", s, guard=False)
                            continue
                decision = self.family.recovery.on_model_error(exc.kind, attempt)
                if self._debug:
                    trace.recovered(self.host.run_id, name, exc.kind, attempt, decision)
                if isinstance(decision, Retry):
                    self._boundary()  # before each retry
                    await cancellable_sleep(decision.backoff_s, self.host.token)
                    attempt += 1
                    continue
                if model_index is not None:
                    # A model chosen for this call (compaction's summary model), not the
                    # strategy's: its failure is its own and never moves the agent's chain.
                    raise self._fail(
                        s,
                        _failure_kind(decision),
                        f"the summary model {name} failed ({exc.kind}): {exc}",
                    ) from exc
                # Recovery gave up on this model: the model strategy may select the next one
                # (recorded in its slot, so a resume stays on it), with fresh retries.
                failed = self.family.model.failed_kinds(s)
                slot = self.family.model.fall_back(s, exc.kind, self._chain_length())
                if slot is not None:
                    s = replace(s, model_state=slot)
                    emit_model_fallback(self.host, name, self._model_name(s), exc.kind)
                    self._boundary()
                    attempt = 0
                    continue
                summary = model_failure_summary(self.host.model.names, failed, exc)
                raise self._fail(s, _failure_kind(decision), summary) from exc
            self._boundary()
            usd = self.host.model.cost(response, model_index=index)
            u = response.usage
            s = replace(
                s,
                budget=s.budget.answered(
                    name,
                    input_tokens=u.input_tokens,
                    output_tokens=u.output_tokens,
                    usd=usd,
                    estimated=u.estimated,
                    cache_read_tokens=u.cache_read_tokens,
                    cache_write_tokens=u.cache_write_tokens,
                ),
            )
            self._last_state = s
            if self._meter is not None:
                self._meter.observe(bundle.request, bundle.rows, response.usage.input_tokens)
            return response, s

    def _charge_failed_usage(
        self, s: LoopExecutionState, name: str, index: int, usage: TokenUsage
    ) -> LoopExecutionState:
        """``s`` with the usage of a failed call charged to model ``name``."""
        usd = self.host.model.cost(ModelResponse(parts=(), usage=usage), model_index=index)
        return replace(
            s,
            budget=s.budget.answered(
                name,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                usd=usd,
                estimated=usage.estimated,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
            ),
        )

    async def _compact(
        self,
        s: LoopExecutionState,
        bundle: PromptBundle,
        rebuild: Rebuild,
        *,
        window: int | None,
        overflow: bool = False,
    ) -> tuple[LoopExecutionState, PromptBundle]:
        """Replace older turns by a summary row when the request is too large (or overflowed).

        The summary is one tools-free call through the model port, charged like any model call.
        Returns the state (the summary row committed to it) and the rebuilt request, or both
        unchanged when there is nothing to compact or the summary is unusable.
        """
        policy, meter = self.config.compaction, self._meter
        assert policy is not None and meter is not None
        if not overflow:
            if not meter.over(bundle.request, bundle.rows, window):
                return s, bundle
            cap = self.limits.max_model_calls
            if cap is not None and s.budget.model_calls + 2 > cap:
                return s, bundle  # the last model call is the answer's, not a summary's
        plan = plan_compaction(bundle.rows, policy.keep_last_turns)
        if plan is None:
            return s, bundle
        target, summarised = plan.to_seq, False
        for _ in range(_MAX_SUMMARY_CALLS):
            ask = PromptBundle(request=summary_request(plan, policy))
            try:
                response, s = await self._call_model(
                    s,
                    ask,
                    tools=0,
                    emit_text=False,
                    model_index=policy.model_index,
                    overflow_raises=True,
                )
            except ModelError:
                # The rows to summarise overflow the summary model itself: summarise the
                # first part now and the rest next, folding the first part's summary in.
                smaller = shrink_plan(plan)
                if smaller is None:
                    break
                plan = smaller
                continue
            if reject_reason(response.text, bool(response.tool_calls)) is not None:
                meter.paused = True  # an unusable summary: the request goes as it is
                break
            rows = await self.host.transcript.append([summary_item(plan, response.text, policy)])
            s = replace(s, transcript_seq=rows[0].seq)
            self._last_state = s
            self._boundary()
            summarised = True
            if plan.to_seq >= target:
                break
            bundle = await rebuild(s)
            next_plan = plan_compaction(bundle.rows, policy.keep_last_turns)
            if next_plan is None:
                break
            plan = next_plan
        if not summarised:
            return s, bundle
        return s, await rebuild(s)

    def _ask(
        self,
        bundle: PromptBundle,
        index: int,
        *,
        deadline_s: float | None,
        emit_text: bool = True,
    ) -> Awaitable[ModelResponse]:
        """One model call within ``deadline_s`` (``_DeadlinePassed`` past it); the caller
        awaits it, then checks the answer against the byte cap (:meth:`_capped`).

        Cancellation first: if both are ready, cancellation wins; the token is checked again
        after the await, before anything is committed. (Not a coroutine of its own: one
        fewer per model call.)
        """
        cap = self.limits.max_response_bytes
        work = self.host.model.call(bundle, model_index=index, emit_text=emit_text, max_bytes=cap)
        if deadline_s is not None:
            work = _within(work, deadline_s)
        return race_cancellation(work, self.host.token)

    def _capped(self, response: ModelResponse) -> ModelResponse:
        """``response``, unless it is past the byte cap (``ModelOutputTooLarge``)."""
        cap = self.limits.max_response_bytes
        if response_bytes(response) > cap:
            raise ModelOutputTooLarge(cap)
        return response

    # ------------------------------------------------------------------------------ reply
    async def _on_reply(self, s: LoopExecutionState, text: str) -> LoopExecutionState:
        if not text.strip():
            # Neither calls nor text: the model's fault, not a completion (a Completed with an
            # empty reply is an invalid exit, which the applier would record as a driver bug).
            raise self._fail(s, "invalid_model_output", "the model returned an empty reply")
        rows = await self.host.transcript.append([_new_item(role="assistant", content=text)])
        s = replace(s, assistant_refs=(rows[0].ref,), result_refs=(), transcript_seq=rows[0].seq)
        self._last_state = s
        emit_assistant(self.host, text, ())

        # Before the stop decision.
        self._boundary()
        decision = self.family.stop.after_reply(s)
        if self._debug:
            trace.stop_decided(
                self.host.run_id,
                s.iteration,
                "a reply",
                decision,
                text=text if self.config.trace_content else None,
            )
        if isinstance(decision, Abort):
            raise self._fail(s, _as_failure_kind(decision.failure_kind), _detail(decision))
        if isinstance(decision, Reprompt):
            # The reply is not an answer the run may end with: say so and ask again.
            rows = await self.host.transcript.append(
                [NewItem(role="user", content=decision.prompt, meta={"reprompt": True})]
            )
            s = replace(s, transcript_seq=rows[0].seq, stop_state=decision.stop_state)
            return replace(s, iteration=s.iteration + 1)

        # A follow-up (or steering that arrived during the call) continues the run instead of
        # completing it. Sealing is atomic with enqueue, so nothing slips in unseen; control
        # inputs among the waiting ones apply first (cancellation still wins; a graceful stop
        # is moot, since the reply already is the answer).
        # The Final checkpoint says what completed, so a resume after a crash here knows.
        done = Completion(kind="reply", refs=s.assistant_refs)
        if self.family.inputs.drain_follow_up(s):
            s, written, _ = await self._commit_sealed(
                "Final", replace(s, completion=done), deliver=True
            )
            if not written:
                return replace(s, completion=None, iteration=s.iteration + 1)
        else:
            s, _ = await self._commit("Final", replace(s, completion=done), guard=False)
        raise _Exit(Completed(kind="reply", reply_refs=s.assistant_refs, usage=s.budget.usage()), s)

    # ------------------------------------------------------------------------------ waves
    async def _on_calls(
        self, s: LoopExecutionState, calls: tuple[ToolCall, ...], text: str, surface: Surface
    ) -> LoopExecutionState:
        """``surface`` is the one this tick offered the model: the wave runs against it."""
        calls = unique_call_ids(calls)
        rows = await self.host.transcript.append(
            [_new_item(role="assistant", content=text, tool_calls=calls)]
        )
        s = replace(s, assistant_refs=(rows[0].ref,), result_refs=(), transcript_seq=rows[0].seq)
        self._last_state = s
        emit_assistant(self.host, text, tuple([c.name for c in calls]))
        # A stop requested while the model was answering: this is a later wave, none of it runs.
        # The step commit tells whether an input arrived; only then is the queue read and the
        # wave admitted again (the assistant row is already written by then).
        while True:
            s = await self._take_control(s)
            admitted = admit_wave(
                s,
                calls,
                surface,
                self.family,
                self.limits,
                rows[0].ref,
                stopping=s.graceful_stop is not None,
            )
            admitted, written = await self._commit("BeforeSideEffect", admitted)
            if written:
                break
            self._boundary()
        assert admitted.pending_wave is not None
        if self._debug:
            trace.admitted(
                self.host.run_id,
                s.iteration,
                admitted.pending_wave.policy,
                calls,
                len(admitted.pending_wave.rejected),
                content=self.config.trace_content,
            )
        self._settle_later = replays_harmlessly(admitted.pending_wave, calls, surface)
        return await self._finish_wave(admitted, calls, surface)

    async def _inputs_arrived(self) -> bool:
        """Whether inputs arrived past what this segment has polled (one read of the queue).

        What a guarded step commit's receipt tells, for a boundary that commits nothing; the
        next boundary then reads them.
        """
        records = await self.host.inputs.poll(self._seen_cursor)
        if records:
            self._maybe_inputs = True
        return bool(records)

    async def _finish_wave(
        self,
        s: LoopExecutionState,
        calls: tuple[ToolCall, ...] | None = None,
        surface: Surface | None = None,
    ) -> LoopExecutionState:
        """Run the pending wave: a first pass passes its calls and surface; a replay loads them."""
        result = await self._waves.run(s, calls, surface)
        s = result.state
        self._last_state = s
        if result.abort is not None:
            raise self._fail(s, _as_failure_kind(result.abort[0]), result.abort[1])
        if result.block is not None:
            call, gated, key = result.block
            s, _ = await self._commit("BeforeBlock", s, guard=False)
            ref = await self.host.capabilities.open_gate(call, gated, key=key)
            s = replace(s, last_gate=ref)
            emit_gate(self.host, ref, call.name, gated.gate_kind)
            raise _Exit(Blocked(kind=gated.gate_kind, gate_ref=ref, usage=s.budget.usage()), s)

        # Before the stop decision.
        self._boundary()
        decision = self.family.stop.after_wave(s, result.results)
        if self._debug:
            trace.stop_decided(self.host.run_id, s.iteration, "a wave", decision)
        if isinstance(decision, Finish):
            # The wave produced the run's result (e.g. a terminal tool): complete with it.
            done = Completion(kind=decision.completion_kind, refs=decision.refs)
            s, written, _ = await self._commit_sealed(
                "Final", replace(s, completion=done), deliver=True
            )
            if not written:
                # A message reached the run as it finished: the model sees it and goes on.
                return replace(s, completion=None, iteration=s.iteration + 1)
            raise _Exit(Completed(kind=done.kind, reply_refs=done.refs, usage=s.budget.usage()), s)
        if isinstance(decision, NoProgress):
            if s.graceful_stop is None:
                self._limit_reached(s, "no_progress")
                if self.config.on_limit == "fail":
                    raise self._fail(s, "no_progress_detected", decision.detail)
            s = s.request_stop("no_progress")
        elif isinstance(decision, GracefulStop):
            if s.graceful_stop is None:
                self._limit_reached(s, decision.reason)
            s = s.request_stop(decision.reason)
        elif isinstance(decision, Abort):
            raise self._fail(s, _as_failure_kind(decision.failure_kind), _detail(decision))
        elif isinstance(decision, Reprompt):
            # The wave's answer was wrong (e.g. an invalid terminal call): say so, go on.
            rows = await self.host.transcript.append(
                [NewItem(role="user", content=decision.prompt, meta={"reprompt": True})]
            )
            s = replace(s, transcript_seq=rows[0].seq, stop_state=decision.stop_state)
            self._settle_later = False
        return replace(s, iteration=s.iteration + 1)

    # ------------------------------------------------------------------------------ finalizer
    async def _finalize(self, s: LoopExecutionState) -> NoReturn:
        """Exactly one tools-free model request; its answer is the run's graceful summary.

        The answer is validated before any of it is shown: its text deltas are held back and
        released as one ``text_delta`` once it is accepted. The call has its own deadline and
        output cap, and is priced with the model that answered it.
        """
        reason = s.graceful_stop
        assert reason is not None
        kind = failure_kind_for(reason)
        cfg = self.config
        plan = self.family.context.plan(s)
        bundle = await self.host.prompt.build(
            s, plan, None, finalizer_prompt=FINALIZER_PROMPTS[reason]
        )
        settings = bundle.request.settings
        cap = min(settings.max_tokens or cfg.finalizer_max_tokens, cfg.finalizer_max_tokens)
        bundle = replace(
            bundle,
            request=replace(bundle.request, settings=replace(settings, max_tokens=cap)),
        )
        # Seal with this checkpoint: what was waiting is delivered into the transcript the final
        # answer is made from (then the prompt is built again); anything later is refused (an
        # accepted input is never dropped).
        while True:
            s, written, _ = await self._commit_sealed("BeforeModel", s, deliver=True)
            if written:
                break
            plan = self.family.context.plan(s)
            bundle = replace(
                bundle,
                request=replace(
                    (
                        await self.host.prompt.build(
                            s, plan, None, finalizer_prompt=FINALIZER_PROMPTS[reason]
                        )
                    ).request,
                    settings=replace(settings, max_tokens=cap),
                ),
            )
        self._boundary()
        deadline_s = self._finalizer_deadline(s)
        try:
            s = self._charge_model_call(s)  # budget errors pass through unchanged
            self._last_state = s
            index = self._selected(s)
            emit_model_request(self.host, s.iteration, 0, 0, self._model_name(s))
            response = self._capped(
                await self._ask(bundle, index, deadline_s=deadline_s, emit_text=False)
            )
        except ModelError as exc:
            raise self._fail(
                s, kind, f"{reason}: the final summary call failed ({exc.kind})"
            ) from exc
        except _DeadlinePassed:
            raise self._fail(
                s,
                kind,
                f"{reason}: the final summary call did not finish within {deadline_s:.3g}s",
            ) from None
        except ModelOutputTooLarge as exc:
            raise self._fail(s, kind, f"{reason}: the final summary was rejected: {exc}") from None
        except GuardrailTripped as exc:
            raise self._fail(s, "guardrail_tripped", f"{reason}: {exc}") from None
        self._boundary()
        s = replace(
            s,
            budget=s.budget.answered(
                self._model_name(s),
                input_tokens=response.usage.input_tokens,
                output_tokens=response.usage.output_tokens,
                usd=self.host.model.cost(response, model_index=index),
                estimated=response.usage.estimated,
                cache_read_tokens=response.usage.cache_read_tokens,
                cache_write_tokens=response.usage.cache_write_tokens,
            ),
        )
        rejected = reject_reason(response.text, bool(response.tool_calls))
        if rejected is None and len(response.text) > cfg.finalizer_max_chars:
            rejected = f"the final answer exceeded {cfg.finalizer_max_chars} characters"
        if rejected is not None:
            raise self._fail(s, kind, f"{reason}: {rejected}")
        rows = await self.host.transcript.append(
            [NewItem(role="assistant", content=response.text, meta={"graceful_summary": reason})]
        )
        s = replace(s, assistant_refs=(rows[0].ref,), result_refs=(), transcript_seq=rows[0].seq)
        emit_text(self.host, response.text)
        emit_assistant(self.host, response.text, ())
        s, _ = await self._commit("Final", s, guard=False)
        raise _Exit(
            Completed(
                kind="graceful_summary",
                reply_refs=s.assistant_refs,
                usage=s.budget.usage(),
                reason=reason,
            ),
            s,
        )

    def _finalizer_deadline(self, s: LoopExecutionState) -> float:
        """The finalizer call's deadline: its own, but under a wall clock no more than what is
        left of it plus the grace (DESIGN §20: the wall clock bounds the whole run; a model cut
        by the wall clock leaves exactly the grace)."""
        own = self.config.finalizer_timeout_s
        grace, wall = self.limits.finalizer_grace, self.limits.wall_clock_s
        if grace is None or wall is None:
            return own
        return min(own, grace + max(0.0, wall - self._active_s(s)))


def response_bytes(response: ModelResponse) -> int:
    """Size of a response against the byte cap: UTF-8 text plus each call's arguments as JSON."""
    size = len(response.text.encode())
    for call in response.tool_calls:
        size += len(call.name.encode()) + len((call.arguments_error or "").encode())
        size += len(_ARGUMENTS_JSON(dict(call.arguments)).encode())
    return size


_ARGUMENTS_JSON = compiled(json.JSONEncoder(ensure_ascii=False, default=str))
"""Built once (``json.dumps`` with options builds an encoder per call, and
``JSONEncoder.encode`` builds its C encoder per call)."""


class _DeadlinePassed(Exception):
    """The loop's own deadline on a model call passed (not a timeout raised by the model)."""


async def _within(work: Awaitable[T], seconds: float) -> T:
    deadline = asyncio.timeout(seconds)
    try:
        async with deadline:
            return await work
    except TimeoutError:
        if deadline.expired():
            raise _DeadlinePassed from None
        raise


def _failure_kind(decision: object) -> FailureKind:
    """A run's failure kind when recovery gave up on a model call with ``decision``."""
    if isinstance(decision, Abort):
        return _as_failure_kind(decision.failure_kind)
    return "model_error"


def _detail(decision: Abort) -> str:
    return decision.detail or "stopped by strategy"


def _as_failure_kind(kind: str) -> FailureKind:
    for known in FAILURE_KINDS:
        if kind == known:
            return known
    return "driver_bug"


__all__ = ["BudgetLedger", "LoopConfig", "OnLimit", "run_loop"]
