"""Waves: admitting a response's calls, running them, routing each outcome (docs/architecture.md).

Admission happens once, before the ``BeforeSideEffect`` checkpoint: fan-out and capability
budgets are charged there, and signatures are pushed there, so a resume that replays the wave
never charges or counts a call twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from reverie.core.capability import (
    CallCancelled,
    CallCompleted,
    CallDenied,
    CallFailed,
    CallGated,
    CallInterrupted,
    CallOutcome,
    Surface,
)
from reverie.core.fastcopy import fast_frozen, maker, replace
from reverie.core.limits import Limits
from reverie.core.messages import ToolCall
from reverie.core.transcript import NewItem
from reverie.loop import trace
from reverie.loop.control import cancellable_sleep, race_cancellation
from reverie.loop.events import emit_denials, emit_tool_finished, emit_tool_started
from reverie.loop.family import LoopFamily
from reverie.loop.ports import LoopHost
from reverie.loop.signatures import wave_signatures
from reverie.loop.state import LoopExecutionState, PendingWave, WavePolicy, pushed
from reverie.loop.strategies import Abort, Block, CallResult, Retry, SkipAndContinue

STOPPING_MESSAGE = "not run: the run is stopping and no new tool calls are started"


def unique_call_ids(calls: Sequence[ToolCall]) -> tuple[ToolCall, ...]:
    """The calls with ids unique within the response, as the transcript stores them.

    A provider may repeat an id (or send none); the loop never keys anything by it, but the
    transcript sent back to the provider pairs each result with its call by id, so a repeated
    id would make it ill formed. The first use of an id keeps it; a repeat becomes
    ``<id>_<index>`` (letters, digits, ``_`` and ``-`` stay valid for every provider; the id is
    shortened first so the result stays within OpenAI's 40 characters).
    """
    seen: set[str] = set()
    out: list[ToolCall] = []
    for index, call in enumerate(calls):
        call_id = call.id
        if not call_id or call_id in seen:
            call_id = f"{(call.id or 'call')[:32]}_{index}"
            while call_id in seen:
                call_id += "_"
            call = replace(call, id=call_id)
        seen.add(call_id)
        out.append(call)
    return tuple(out)


def call_key(assistant_ref: str, index: int) -> str:
    """The stable identity of a call: its position in the response (never the provider's id)."""
    return f"{assistant_ref}#{index}"


def admit_wave(
    s: LoopExecutionState,
    calls: Sequence[ToolCall],
    surface: Surface,
    family: LoopFamily,
    limits: Limits,
    assistant_ref: str,
    *,
    stopping: bool = False,
) -> LoopExecutionState:
    """Decide which calls run, charge the capability budget, push signatures.

    Calls are identified by their position in the response, so a provider that repeats one id
    for many calls cannot get more of them admitted than the budgets allow.
    """
    admitted: list[int] = []
    admitted_calls: list[ToolCall] = []
    rejected: list[tuple[int, str]] = []
    used = s.budget.capability_calls
    for index, call in enumerate(calls):
        if stopping:
            rejected.append((index, STOPPING_MESSAGE))
        elif index >= limits.max_calls_per_batch:
            rejected.append(
                (
                    index,
                    f"not run: at most {limits.max_calls_per_batch} tool calls are allowed in "
                    "one response; make fewer calls at once",
                )
            )
        elif limits.max_capability_calls is not None and used >= limits.max_capability_calls:
            rejected.append(
                (
                    index,
                    f"not run: the capability call budget of {limits.max_capability_calls} "
                    "calls for this run is used up",
                )
            )
        else:
            admitted.append(index)
            admitted_calls.append(call)
            used += 1
    policy = family.batch.choose(admitted_calls, surface)
    return replace(
        s,
        recent_call_signatures=pushed(s.recent_call_signatures, wave_signatures(calls)),
        budget=replace(s.budget, capability_calls=used),
        pending_wave=_pending_wave(
            assistant_ref=assistant_ref,
            policy=policy,
            admitted=tuple(admitted),
            rejected=tuple(rejected),
        ),
    )


def replays_harmlessly(wave: PendingWave, calls: Sequence[ToolCall], surface: Surface) -> bool:
    """Whether running the admitted wave again after a crash is harmless.

    True when each admitted call's tool is repeatable (idempotent, or declared pure:
    :attr:`~reverie.core.capability.CapabilityDescriptor.repeatable`) or unknown (answered
    without running). A resume from the wave's ``BeforeSideEffect`` checkpoint runs such a wave
    again, so its results need no step commit of their own: they ride the next one.
    """
    for index in wave.admitted:
        descriptor = surface.get(calls[index].name)
        if descriptor is not None and not descriptor.repeatable:
            return False
    return True


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class WaveResult:
    """What the executor needs after a wave."""

    state: LoopExecutionState
    block: tuple[ToolCall, CallGated, str] | None = None
    """The gated call, its gate, and the call's stable key."""
    abort: tuple[str, str] | None = None
    results: tuple[CallResult, ...] = ()
    """Each call's outcome kind and result row, in the model's order (for the stop strategy)."""


# Plain functions that build what every wave builds (a class call with keywords costs more).
_pending_wave = maker(PendingWave)
_new_item = maker(NewItem)
_call_result = maker(CallResult)
_wave_result = maker(WaveResult)


def render_outcome(outcome: CallOutcome) -> str:
    """The text the model sees for an outcome."""
    match outcome:
        case CallCompleted(output=output):
            return output
        case CallFailed(error_kind=kind, message=message):
            return f"error ({kind}): {message}"
        case CallDenied(reason=reason):
            return f"denied: {reason}. The call was not run; try a different approach."
        case CallGated(reason=reason):
            return f"not run: {reason}"
        case CallCancelled():
            return "cancelled: the run was cancelled while this call was running"
        case CallInterrupted():
            return (
                "interrupted: outcome unknown. The run stopped while this call was running and "
                "the tool is not safe to repeat; check its effect before calling it again."
            )


def unknown_tool(name: str, surface: Surface) -> CallFailed:
    """The result of a call to a tool the model was not offered; lists only the visible tools."""
    available = ", ".join(sorted(surface.names())) or "none"
    return CallFailed(
        error_kind="input_invalid",
        message=f"unknown tool {name!r}; available tools: {available}",
    )


def hidden_tool(name: str, surface: Surface) -> CallDenied:
    """The answer to a call of a tool the capability strategy hid from the model: a denial
    (and a security event: the model called a tool it was not offered). Only the visible tools
    are listed."""
    available = ", ".join(sorted(surface.names())) or "none"
    return CallDenied(
        reason=f"the tool {name!r} is not available to you; available tools: {available}"
    )


def _ring_kind(outcome: CallOutcome) -> str:
    match outcome:
        case CallCompleted():
            return "ok"
        case CallFailed(error_kind=kind):
            return kind
        case CallDenied():
            return "policy_denied"
        case _:
            return outcome.kind


class WaveRunner:
    """Runs the pending wave of a state and commits its results (one wave at a time)."""

    def __init__(
        self, host: LoopHost, family: LoopFamily, max_parallel: int, trace_content: bool = False
    ) -> None:
        self.host = host
        self.family = family
        self.max_parallel = max(1, max_parallel)
        self.trace_content = trace_content
        self._debug = False
        """Whether the ``reverie.loop`` logger takes debug traces (read once per wave)."""
        self._abort: tuple[str, str] | None = None
        self._replay = True
        self._hidden: list[str] = []
        """Tools the wave's calls named that the capability strategy hid from the model."""

    async def run(
        self,
        s: LoopExecutionState,
        calls: tuple[ToolCall, ...] | None = None,
        surface: Surface | None = None,
    ) -> WaveResult:
        """Run the pending wave; ``calls`` and ``surface`` given on a first pass, else rebuilt."""
        wave = s.pending_wave
        assert wave is not None
        self._abort = None  # a runner runs the waves of one segment, one after the other
        self._hidden = []
        self._debug = trace.enabled()
        self._replay = calls is None
        if calls is None:
            (item,) = await self.host.transcript.get([wave.assistant_ref])
            calls = item.tool_calls
        if surface is None:
            surface = self.family.capabilities.filter(s, self.host.capabilities.surface())
        # Everything below is keyed by the call's position in the response.
        rejected = wave.rejected
        outcomes: dict[int, CallOutcome] = (
            {
                index: CallFailed(error_kind="permanent", message=message)
                for index, message in rejected
            }
            if rejected
            else {}
        )
        keys = [call_key(wave.assistant_ref, i) for i in range(len(calls))]
        admitted = [(i, calls[i]) for i in wave.admitted]

        # In-flight tools are cancelled with the wave; the answer is checked after the await.
        outcomes.update(
            await race_cancellation(
                self._run_all(wave.policy, admitted, surface, keys), self.host.token
            )
        )
        if self._abort is not None:
            return WaveResult(state=s, abort=self._abort)

        # Gate decisions, in the model's order.
        for index, call in enumerate(calls):
            outcome = outcomes.get(index)
            if not isinstance(outcome, CallGated):
                continue
            self.host.token.check()  # before each gate decision
            decision = self.family.gates.on_gate(outcome)
            if self._debug:
                trace.gate_decided(self.host.run_id, call.name, outcome.gate_kind, decision)
            if isinstance(decision, Block):
                return WaveResult(state=s, block=(call, outcome, keys[index]))
            if isinstance(decision, SkipAndContinue):
                if outcome.gate_kind == "approval":
                    return WaveResult(
                        state=s,
                        abort=("driver_bug", "SkipAndContinue is not valid for approval gates"),
                    )
                outcomes[index] = CallFailed(
                    error_kind="permanent", message=f"skipped: {outcome.reason}"
                )
            elif isinstance(decision, Abort):
                return WaveResult(
                    state=s,
                    abort=(decision.failure_kind, f"{call.name}: {outcome.reason}"),
                )

        # Commit the results in the model's order; the provider's id is only echoed back.
        ordered = [outcomes.get(i) or CallCancelled() for i in range(len(calls))]
        denied = [c.name for c, o in zip(calls, ordered, strict=True) if type(o) is CallDenied]
        if denied:
            # Evidence of the wave's denials (none emitted for a wave without one).
            emit_denials(self.host, s.iteration, len(calls), denied, self._hidden)
        rows = await self.host.transcript.append(
            [
                _new_item(
                    role="tool",
                    content=render_outcome(outcome),
                    tool_call_id=call.id,
                    name=call.name,
                    meta={"outcome": outcome.kind},
                )
                for call, outcome in zip(calls, ordered, strict=True)
            ]
        )
        # Calls refused at admission (fan-out, budget, stopping) never ran: they are not tool
        # failures, so they do not feed the failure-kind ring (a wave of 8 against a budget of
        # 3 must end as a budget stop, not as "no progress").
        # Each distinct outcome kind is pushed once per wave (like signatures): a parallel wave
        # of distinct calls failing the same way is one observation, so no-progress cannot trip
        # before the model has seen those errors.
        if rejected:
            refused = {index for index, _ in rejected}
            kinds = [_ring_kind(o) for i, o in enumerate(ordered) if i not in refused]
        else:
            kinds = [_ring_kind(o) for o in ordered]
        s = replace(
            s,
            result_refs=tuple([r.ref for r in rows]),
            transcript_seq=rows[-1].seq if rows else s.transcript_seq,
            pending_wave=None,
            last_gate=None,
            recent_failure_kinds=pushed(s.recent_failure_kinds, tuple(dict.fromkeys(kinds))),
        )
        s = s.with_nested_usage([getattr(o, "usage", None) for o in ordered])
        return _wave_result(
            state=s,
            results=tuple(
                [
                    _call_result(name=c.name, outcome=o.kind, ref=r.ref)
                    for c, o, r in zip(calls, ordered, rows, strict=True)
                ]
            ),
        )

    async def _run_all(
        self,
        policy: WavePolicy,
        admitted: list[tuple[int, ToolCall]],
        surface: Surface,
        keys: list[str],
    ) -> dict[int, CallOutcome]:
        """The admitted calls' outcomes by position: one by one, or as tasks (``parallel``)."""
        results: dict[int, CallOutcome] = {}
        if policy == "parallel":
            gate = asyncio.Semaphore(self.max_parallel)

            async def one(index: int, call: ToolCall) -> None:
                async with gate:
                    results[index] = await self._run_call(call, surface, keys[index])

            async with asyncio.TaskGroup() as tg:
                for index, call in admitted:
                    tg.create_task(one(index, call))
        else:
            for index, call in admitted:
                results[index] = await self._run_call(call, surface, keys[index])
        return results

    async def _run_call(self, call: ToolCall, surface: Surface, key: str) -> CallOutcome:
        """One call with its retry budget (retries never re-count signatures or kinds)."""
        descriptor = surface.get(call.name)
        attempt = 0
        while True:
            emit_tool_started(self.host, call.id, call.name, attempt)
            if descriptor is None:
                # Unknown, or hidden by the capability strategy: the model is told which tools
                # it can use, which are only the visible ones. A call to a hidden tool is a
                # denial (the strategy's policy), never a plain input error.
                outcome: CallOutcome
                if self.host.capabilities.surface().get(call.name) is not None:
                    outcome = hidden_tool(call.name, surface)
                    if attempt == 0:
                        self._hidden.append(call.name)
                else:
                    outcome = unknown_tool(call.name, surface)
                if self._replay and attempt == 0:
                    # A gated call whose tool has gone since: the port answers with a denial.
                    gone = await self.host.capabilities.invoke(
                        call, None, attempt=attempt, key=key, replay=True
                    )
                    if isinstance(gone, CallDenied):
                        outcome = gone
            else:
                outcome = await self.host.capabilities.invoke(
                    call, descriptor, attempt=attempt, key=key, replay=self._replay
                )
            emit_tool_finished(self.host, call.id, call.name, outcome)
            if isinstance(outcome, CallFailed):
                error_kind = outcome.error_kind
            elif isinstance(outcome, CallDenied):
                error_kind = "policy_denied"
            else:
                return outcome
            decision = self.family.recovery.on_tool_error(error_kind, attempt)
            if self._debug:
                trace.recovered(self.host.run_id, call.name, error_kind, attempt, decision)
            if isinstance(decision, Retry) and isinstance(outcome, CallDenied):
                # A denial is final: running the call again would ask the policy until it
                # gives way, so a retry of a denied call ends the run (docs/loop.md).
                self._abort = (
                    "policy_denied",
                    f"{call.name} was denied and the recovery strategy asked to retry it; "
                    "a denied call is never run again",
                )
                return outcome
            if isinstance(decision, Retry):
                self.host.token.check()  # before each retry
                await cancellable_sleep(decision.backoff_s, self.host.token)
                attempt += 1
                continue
            if isinstance(decision, Abort):
                self._abort = (decision.failure_kind, f"{call.name} failed ({error_kind})")
            return outcome
