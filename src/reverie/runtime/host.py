"""The host-port implementations: the loop's ports over the store, models, tools and hooks.

Hooks are middleware here: a hook deny reaches the loop as ``CallDenied``, a hook pause as
``CallGated``, a snippet as prompt context. The executor has no hook-specific code.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import operator
import time
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from types import AsyncGeneratorType
from typing import TYPE_CHECKING, Any

from reverie.core.canonical import digest
from reverie.core.capability import (
    CallCompleted,
    CallGated,
    CallOutcome,
    CapabilityDescriptor,
    Surface,
)
from reverie.core.events import (
    CheckpointEvent,
    GuardrailDecided,
    HookFailedEvent,
    RunEvent,
    TextDeltaEvent,
)
from reverie.core.fastcopy import maker, replace
from reverie.core.ids import new_id
from reverie.core.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    ResponseComplete,
    TextDelta,
    ToolCall,
    ToolSpec,
    bounded_calls,
)
from reverie.core.redact import mask_secrets
from reverie.core.scope import Scope
from reverie.core.transcript import InputRecord, NewItem, TranscriptItem
from reverie.errors import ModelError, ModelOutputTooLarge, TranscriptConflict
from reverie.hooks import (
    CheckpointHookContext,
    HookDispatcher,
    HookFailure,
    HookPoint,
    HookRegistry,
    ModelHookContext,
    PromptHookContext,
)
from reverie.hooks.guardrails import withhold_injected
from reverie.loop.compaction import compacted_view
from reverie.loop.control import CancelToken
from reverie.loop.ports import CheckpointKind, CommitReceipt, PromptBundle
from reverie.loop.state import CheckpointEncoder, LoopExecutionState
from reverie.loop.strategies import ContextPlan, window_step
from reverie.models.base import Model
from reverie.runtime import tool_steps as steps
from reverie.runtime.events import EventBus
from reverie.runtime.gate_edits import edit_note
from reverie.runtime.guardrails import guard_reply
from reverie.runtime.telemetry import log_event, log_model_failure
from reverie.runtime.window import SegmentTranscript, to_message
from reverie.store.base import GateRecord, StepWrite, Store

if TYPE_CHECKING:
    from reverie.memory.service import RunMemory
    from reverie.models.pricing import PriceTable

log = logging.getLogger("reverie.runtime")

_SURFACES: OrderedDict[tuple[int, ...], Surface] = OrderedDict()
"""Surfaces by their descriptors' identities: every run of an agent has the same tools."""
_MAX_SURFACES = 256


# Plain functions that build what every step builds (a class call with keywords costs more).
_prompt_bundle = maker(PromptBundle)
_model_request = maker(ModelRequest)
_text_delta = maker(TextDeltaEvent)
_step_write = maker(StepWrite)
_checkpoint_event = maker(CheckpointEvent)


def surface_of(tools: Sequence[Any]) -> Surface:
    """The surface of a tool list, with a content digest as its version."""
    descriptors = tuple(t.descriptor for t in tools)
    key = tuple(map(id, descriptors))
    known = _SURFACES.get(key)
    # The cached surface holds its descriptors, so their ids name the same (frozen) objects.
    if known is not None and all(map(operator.is_, known.descriptors, descriptors)):
        return known
    surface = _surface(descriptors)
    if len(_SURFACES) >= _MAX_SURFACES:
        _SURFACES.popitem(last=False)  # constant time (a dict's first key leaves a dummy slot)
    _SURFACES[key] = surface
    return surface


def _surface(descriptors: tuple[CapabilityDescriptor, ...]) -> Surface:
    version = digest(
        [
            {"name": d.name, "parameters": dict(d.parameters), "effects": sorted(d.effects or ())}
            for d in descriptors
        ]
    )
    return Surface(descriptors=descriptors, version=version)


@dataclass(slots=True, kw_only=True)
class RunContext:
    """What every port of one run segment shares."""

    run_id: str
    thread_id: str
    scope: Scope
    fence: int
    store: Store
    hooks: HookDispatcher
    bus: EventBus
    token: CancelToken
    family_digest: str
    definition: Mapping[str, Any] | None = None
    """The run's definition (runtime/drift.py), written into every checkpoint."""
    poisoned: set[str] = field(default_factory=set)
    gated: dict[str, str] = field(default_factory=dict)
    """Call key → digest of the tool descriptor a gate was opened against (checkpointed)."""
    withhold_injected: bool = False
    """Withhold tool output carrying prompt-injection markers (``[guardrails]``)."""
    observers: set[asyncio.Task[None]] = field(default_factory=set)
    """In-flight ``event`` hook dispatches; awaited before the segment ends."""
    segment: SegmentTranscript = field(init=False)
    """Staged rows and journal records, and the cached prompt window."""
    registry: HookRegistry = field(init=False)
    """The hooks' registry (the dispatcher's, which never changes), read at every boundary."""

    def __post_init__(self) -> None:
        self.segment = SegmentTranscript(self.store, self.thread_id, self.run_id)
        self.registry = self.hooks.registry

    async def drain_observers(self) -> None:
        """Wait for every ``event`` hook dispatch still running."""
        while self.observers:
            await asyncio.gather(*list(self.observers), return_exceptions=True)

    def hooked(self, point: HookPoint) -> bool:
        """Whether any hook is bound to ``point`` (a dispatch with none is skipped)."""
        return point in self.registry.bound_points

    def record_hook_failures(
        self, failures: Sequence[HookFailure], newly_poisoned: frozenset[str]
    ) -> None:
        """Poison failed hooks for the rest of the run and report each failure."""
        self.poisoned |= set(newly_poisoned)
        for f in failures:
            self.bus.emit(
                HookFailedEvent(run_id=self.run_id, hook=f.hook, point=f.point, reason=f.reason)
            )


def prompt_cache_key(thread_id: str) -> str:
    """The provider prompt-cache key of a thread's requests (a digest: no id leaves the host)."""
    return "reverie-" + hashlib.sha256(thread_id.encode()).hexdigest()[:32]


def canonical(value: Any, depth: int = 0) -> Any:
    """``value`` with every mapping's keys in sorted order (a tool schema's canonical form);
    past a nesting of 64 the rest is kept as it is."""
    if depth > 64:
        return value
    if isinstance(value, Mapping):
        return {k: canonical(value[k], depth + 1) for k in sorted(value, key=str)}
    if isinstance(value, list | tuple):
        return [canonical(v, depth + 1) for v in value]
    return value


def _name(descriptor: Any) -> str:
    return str(descriptor.name)


def _seq(row: TranscriptItem) -> int:
    return row.seq


def _newest_group(rows: Sequence[TranscriptItem]) -> int:
    """Where the newest group of ``rows`` starts: the assistant message whose calls the
    trailing tool results answer (they must follow it), else the last row."""
    i = len(rows)
    if i and rows[-1].role == "tool":
        while i and rows[i - 1].role == "tool":
            i -= 1
        return i - 1 if i and rows[i - 1].role == "assistant" else i
    return max(i - 1, 0)


class StorePrompt:
    """Builds requests: a stable prefix (instructions, tools, the transcript window but its
    newest rows), then the volatile part (hook snippets, memory context), then the newest rows
    (and a finalizer's prompt).

    The prefix is byte-identical from call to call of a thread while the window's start stays
    put (it moves in steps: :attr:`ContextPlan.window_step`), so the provider's prompt cache
    serves it; what changes between calls (memory, hook context) only ever changes the end of
    the prompt (docs/prompt-caching.md).
    """

    def __init__(
        self,
        ctx: RunContext,
        instructions: str,
        memory: RunMemory | None = None,
        settings: ModelSettings | None = None,
    ) -> None:
        self.ctx = ctx
        self.instructions = instructions
        self.memory = memory
        # Built once and reused while what they are made of stays the same object: every
        # request of a segment opens with the same instructions and offers the same surface.
        self._system: Message | None = None
        self._specs: tuple[Surface, tuple[ToolSpec, ...]] | None = None
        self._settings = settings or ModelSettings()
        """The agent's settings, which every request of the segment carries (frozen: one for
        all)."""
        self._cache_key = prompt_cache_key(ctx.thread_id)

    def _system_message(self) -> Message:
        system = self._system
        if system is None or system.content is not self.instructions:
            system = self._system = Message(role="system", content=self.instructions)
        return system

    def _tool_specs(self, surface: Surface) -> tuple[ToolSpec, ...]:
        specs = self._specs
        if specs is None or specs[0] is not surface:
            # Sorted by name, each schema with its keys in canonical order: the same tools
            # are the same bytes in every request of a thread (and after a resume), whatever
            # order they were registered or discovered in.
            tools = tuple(
                ToolSpec(name=d.name, description=d.description, parameters=canonical(d.parameters))
                for d in sorted(surface.descriptors, key=_name)
            )
            specs = self._specs = (surface, tools)
        return specs[1]

    async def build(
        self,
        state: LoopExecutionState,
        plan: ContextPlan,
        surface: Surface | None,
        *,
        finalizer_prompt: str | None = None,
    ) -> PromptBundle:
        ctx = self.ctx
        messages: list[Message] = []
        if self.instructions:
            messages.append(self._system_message())
        hooked: Message | None = None
        remembered: Message | None = None
        if ctx.hooked("before_prompt"):
            result = await ctx.hooks.before_prompt(
                PromptHookContext(scope=ctx.scope, run_id=ctx.run_id, iteration=state.iteration),
                poisoned=ctx.poisoned,
            )
            ctx.record_hook_failures(result.failures, result.newly_poisoned)
            # Snippets are context, never instructions: they go in a user-role message.
            if result.snippets:
                body = "\n\n".join(s.text for s in result.snippets)
                hooked = Message(role="user", content=f"[context from hooks]\n{body}")
        # Memory is data, never instructions: enveloped blocks in a user-role message (§12).
        if self.memory is not None and plan.include_memory:
            remembered = await self.memory.message(state.transcript_seq)
        window = plan.window
        rows, made = await ctx.segment.window(state.transcript_seq, window)
        if ctx.segment.has_summary:
            # From the newest summary on (loop/compaction.py); rows it leaves as they are keep
            # the message the segment made for them once.
            by_row = {id(row): message for row, message in zip(rows, made, strict=True)}
            rows = compacted_view(rows)
            made = [by_row.get(id(row)) or to_message(row) for row in rows]
        elif window is not None and rows and len(rows) >= window:
            # A full window (compaction, when on, keeps the view shorter): its start moves in
            # steps (the first seq a multiple of the step), not a row per call, so the next
            # prompts keep this one's prefix.
            step = window_step(plan)
            first = -(-rows[0].seq // step) * step
            cut = bisect_left(rows, first, key=_seq)
            # On a turn's first row where there is one (some APIs refuse a conversation that
            # opens with an assistant message).
            turn = next((i for i in range(cut, len(rows)) if rows[i].role == "user"), cut)
            if turn:
                rows, made = rows[turn:], made[turn:]
        # A window must not open on tool results whose calls fell out of it.
        start = 0
        while start < len(rows) and rows[start].role == "tool":
            start += 1
        if start:
            rows, made = rows[start:], made[start:]
        # What changes least comes first. The run's memory context goes where the run's own
        # rows start (it is read once a run; a write changes it and the run's rows after it,
        # never the thread's earlier rows); hook context, which may change on every call, goes
        # just before the newest rows (the last message, or the last calls and their results),
        # which stay last, where the model reads them.
        ours = ctx.run_id
        anchor = next((i for i, row in enumerate(rows) if row.run_id == ours), len(rows))
        newest = max(_newest_group(rows), anchor) if hooked is not None else len(rows)
        messages.extend(made[:anchor])
        points = (len(messages),) if remembered is not None else ()
        if remembered is not None:
            messages.append(remembered)
        messages.extend(made[anchor:newest])
        stable = len(messages)
        if hooked is not None:
            messages.append(hooked)
        messages.extend(made[newest:])
        if finalizer_prompt is not None:
            messages.append(Message(role="user", content=finalizer_prompt))
        tools = None if surface is None else self._tool_specs(surface)
        return _prompt_bundle(
            request=_model_request(
                messages=tuple(messages),
                tools=tools,
                settings=self._settings,
                stable_messages=stable,
                cache_points=points,
                cache_key=self._cache_key,
            ),
            rows=tuple(rows),
        )


class StreamingModel:
    """Streams a model, forwarding text deltas to run events and the answer to observers."""

    def __init__(self, ctx: RunContext, models: Sequence[Model], prices: PriceTable | None) -> None:
        self.ctx = ctx
        self.models = models
        self.prices = prices
        self.names: tuple[str, ...] = tuple(m.name for m in models)
        """The models' names, by index: the primary, then the fallbacks (an attribute: every
        tick reads it)."""

    async def call(
        self,
        bundle: PromptBundle,
        *,
        model_index: int,
        emit_text: bool = True,
        max_bytes: int | None = None,
    ) -> ModelResponse:
        model = self.models[min(model_index, len(self.models) - 1)]
        final: ModelResponse | None = None
        streamed = 0
        # While a before_reply guardrail is registered, no delta is released before the
        # response's text was checked: denied text reaches no stream, event or span.
        guarded = self.ctx.hooked("before_reply")
        try:
            stream = model.stream(bundle.request)
            try:
                async for event in stream:
                    if isinstance(event, TextDelta):
                        # A runaway stream is cut here, not buffered to its end.
                        streamed += len(event.text.encode())
                        if max_bytes is not None and streamed > max_bytes:
                            raise ModelOutputTooLarge(max_bytes)
                        if emit_text and not guarded and not self.ctx.token.cancelled:
                            self.ctx.bus.emit(_text_delta(run_id=self.ctx.run_id, text=event.text))
                    elif isinstance(event, ResponseComplete):
                        final = event.response
            finally:
                # Close the provider's stream now (a cut stream must not stay open until GC);
                # an async generator that ran to its end is closed already.
                if type(stream) is not AsyncGeneratorType or stream.ag_frame is not None:
                    aclose = getattr(stream, "aclose", None)
                    if aclose is not None:
                        await aclose()
            if final is None:
                raise ModelError("internal", f"model {model.name} ended without a response")
            # Arguments nested too deep become an arguments error the model is told about,
            # before anything walks them (signatures, validation, the transcript).
            final = bounded_calls(final)
            if guarded:
                final = await guard_reply(self.ctx, final)
                if emit_text and final.text and not self.ctx.token.cancelled:
                    self.ctx.bus.emit(_text_delta(run_id=self.ctx.run_id, text=final.text))
            if not self.ctx.hooked("after_model"):
                return final
            result = await self.ctx.hooks.observe(
                "after_model",
                ModelHookContext(
                    scope=self.ctx.scope,
                    run_id=self.ctx.run_id,
                    text=final.text or None,
                    tool_names=tuple(c.name for c in final.tool_calls),
                ),
                poisoned=self.ctx.poisoned,
            )
        except BaseException as exc:
            log_model_failure(self.ctx.run_id, model.name, exc)
            raise
        self.ctx.record_hook_failures(result.failures, result.newly_poisoned)
        return final

    def cost(self, response: ModelResponse, *, model_index: int) -> float:
        if self.prices is None:
            return 0.0
        model = self.models[min(model_index, len(self.models) - 1)]
        value = self.prices.cost(response.model_name or model.name, response.usage)
        if value is None:
            value = self.prices.cost(model.name, response.usage)
        return value or 0.0


class ToolPort:
    """Runs single calls: unknown tools, gates, hooks, the side-effect journal, the tool."""

    def __init__(self, ctx: RunContext, tools: Sequence[Any]) -> None:
        self.ctx = ctx
        self.tools = {t.descriptor.name: t for t in tools}
        self._surface = surface_of(tools)

    def surface(self) -> Surface:
        return self._surface

    async def invoke(
        self,
        call: ToolCall,
        descriptor: CapabilityDescriptor | None,
        *,
        attempt: int,
        key: str,
        replay: bool = True,
    ) -> CallOutcome:
        """Run one call through its steps (``reverie.runtime.tool_steps``); the first answer wins.

        ``replay`` is false for a wave that never ran before (no journal or gate to read);
        the journal is read only on a call's first attempt (a retry follows a failure this
        segment saw itself).
        """
        ctx = self.ctx
        admitted = await steps.preflight(ctx, self.tools, call, descriptor, key=key, replay=replay)
        if not isinstance(admitted, steps.Admitted):
            return admitted
        descriptor = admitted.descriptor
        if attempt == 0 and replay:
            recorded = await steps.replay_journal(ctx, descriptor, key=key)
            if recorded is not None:
                return self._screened(call, recorded) if ctx.withhold_injected else recorded
        # A step that has nothing to do for this call (no gate to read on a first pass, no
        # hook bound) is not awaited at all: a coroutine per step is most of a trivial call.
        approved = False
        note: str | None = None
        if replay:
            answer = await steps.read_gate(ctx, call, descriptor, key=key, replay=replay)
            if isinstance(answer, GateRecord):
                approved = True
                edited = steps.edited_call(call, answer)
                if not isinstance(edited, ToolCall):
                    return edited
                if edited is not call:
                    # A person approved other arguments: the hooks judge, and the tool runs,
                    # the edited call; the model's own call stays in the transcript as made.
                    note = edit_note(call.arguments, edited.arguments)
                    call = edited
            elif answer is not None:
                return answer
        held = None
        if ctx.hooked("before_capability"):
            held = await steps.before_hooks(
                ctx, call, descriptor, key=key, approved=approved, note=note
            )
        if held is None:
            held = steps.require_approval(ctx, call, descriptor, key=key, approved=approved)
        if held is not None:
            return held
        outcome = await steps.execute_journaled(ctx, call, admitted, key=key, note=note)
        if ctx.withhold_injected:
            outcome = self._screened(call, outcome)
        if ctx.hooked("after_capability"):
            await steps.after_call(ctx, call, outcome, key=key)
        return outcome

    def _screened(self, call: ToolCall, outcome: CallOutcome) -> CallOutcome:
        """Rule: with the injection check on, tool output carrying prompt-injection markers
        never enters the context; the model gets a notice and the run records the decision.

        Applied to journaled outcomes too, so a replay withholds the same output."""
        if not isinstance(outcome, CallCompleted):
            return outcome
        notice = withhold_injected(call.name, outcome.output)
        if notice is None:
            return outcome
        self.ctx.bus.emit(
            GuardrailDecided(
                run_id=self.ctx.run_id,
                point="tool_output",
                decision="rewrite",
                guardrail="reverie.injection-markers",
                reason=f"output of {call.name} withheld: prompt-injection markers",
            )
        )
        return replace(outcome, output=notice)

    async def open_gate(self, call: ToolCall, gated: CallGated, *, key: str) -> str:
        if gated.ref is not None:
            return gated.ref  # the call waits on a gate of its own (a subagent's): block on it
        rec = GateRecord(
            ref=new_id("gate"),
            run_id=self.ctx.run_id,
            call_id=key,
            tool=call.name,
            # As a person approving sees them: secret-named values masked, at any depth.
            arguments=mask_secrets(dict(call.arguments)),
            kind=gated.gate_kind,
            scope=self.ctx.scope,
            created_at=time.time(),
        )
        stored = await self.ctx.store.create_gate(rec, fence=self.ctx.fence)
        return stored.ref


class StoreTranscript:
    """The transcript port: rows are staged and written by the next step commit."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx

    def append(self, items: Sequence[NewItem]) -> Coroutine[Any, Any, list[TranscriptItem]]:
        # The segment's own coroutine (no second one wrapping it): twice per tool step.
        return self.ctx.segment.stage(items)

    async def get(self, refs: Sequence[str]) -> list[TranscriptItem]:
        found = self.ctx.segment.find(refs)
        missing = [r for r in refs if r not in found]
        if missing:
            found.update((r.ref, r) for r in await self.ctx.store.get_items(missing))
        return [found[r] for r in refs]


_RECEIPTS = {
    (written, cancel): CommitReceipt(written=written, cancel_requested=cancel)
    for written in (False, True)
    for cancel in (False, True)
}
"""The four receipts a commit can return (frozen: one of each for every commit)."""


class StoreCheckpoints:
    """Step commits: staged rows + journal, then the checkpoint (canonical state + schema id +
    family digest, with poisoned hooks), the ack and the seal, in one store operation."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        # A segment's family digest and definition never change: encoded once.
        self._encoder = CheckpointEncoder(ctx.family_digest, ctx.definition)

    async def commit(
        self,
        kind: CheckpointKind | None,
        state: LoopExecutionState,
        *,
        guard_cursor: int | None = None,
        ack_cursor: int | None = None,
        seal: bool = False,
    ) -> CommitReceipt:
        ctx = self.ctx
        items, after_seq, journal = ctx.segment.take()
        payload: bytes | None = None
        if kind is not None:
            if state.host_state or ctx.poisoned or ctx.gated:
                host_state = dict(state.host_state)
                host_state["poisoned_hooks"] = sorted(ctx.poisoned)
                if ctx.gated:
                    host_state["gated_tools"] = dict(ctx.gated)
            else:
                host_state = {"poisoned_hooks": []}
            payload = self._encoder.encode(state, host_state=host_state)
        elif not items and not journal and ack_cursor is None and not seal:
            return _RECEIPTS[True, False]
        step = _step_write(
            thread_id=ctx.thread_id,
            items=items,
            after_seq=after_seq,
            journal=journal,
            checkpoint_kind=kind,
            checkpoint=payload,
            ack_cursor=ack_cursor,
            seal=seal,
            guard_cursor=guard_cursor,
        )
        try:
            receipt = await ctx.store.commit_step(ctx.run_id, step, fence=ctx.fence)
        except TranscriptConflict:
            ctx.segment.invalidate()
            raise
        except BaseException:
            # Not written (or not known to be): the next commit writes it; a crash re-makes it.
            ctx.segment.restore(items, journal)
            raise
        written = not receipt.inputs_waiting
        if written and kind is not None:
            ctx.bus.emit(
                _checkpoint_event(
                    run_id=ctx.run_id, checkpoint_kind=kind, iteration=state.iteration
                )
            )
            if "after_checkpoint" in ctx.registry.bound_points:
                result = await ctx.hooks.observe(
                    "after_checkpoint",
                    CheckpointHookContext(
                        scope=ctx.scope,
                        run_id=ctx.run_id,
                        checkpoint_kind=kind,
                        iteration=state.iteration,
                    ),
                    poisoned=ctx.poisoned,
                )
                ctx.record_hook_failures(result.failures, result.newly_poisoned)
        return _RECEIPTS[written, bool(receipt.cancel_requested)]


class StoreInputs:
    """The input port over the store's per-run queue.

    ``primed``: the run's unacked inputs as the segment's first transaction read them; the
    first poll answers from them. (Acks are written with the checkpoint whose cursor covers
    them, so every input past a checkpoint's cursor is unacked; one that arrived since is past
    every cursor seen, and the next step commit's guard reports it.)
    """

    def __init__(self, ctx: RunContext, primed: Sequence[InputRecord] | None = None) -> None:
        self.ctx = ctx
        self._primed = primed

    async def poll(self, after_cursor: int) -> list[InputRecord]:
        primed, self._primed = self._primed, None
        if primed is not None:
            return [r for r in primed if r.cursor > after_cursor]
        return await self.ctx.store.poll_inputs(self.ctx.run_id, after_cursor=after_cursor)


class BusEvents:
    """The event port: publishes to the run's bus."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx

    def emit(self, event: RunEvent) -> None:
        # ``event`` hooks see it through the segment's EventHookTap (runtime/event_hooks.py).
        self.ctx.bus.emit(event)
        log_event(event)


@dataclass(slots=True, kw_only=True)
class RunHost:
    """The ``LoopHost`` of one run segment."""

    run_id: str
    token: CancelToken
    prompt: StorePrompt
    model: StreamingModel
    capabilities: ToolPort
    transcript: StoreTranscript
    checkpoints: StoreCheckpoints
    inputs: StoreInputs
    events: BusEvents
