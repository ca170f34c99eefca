"""The steps of one tool call, in the order ``ToolPort.invoke`` runs them.

Each step either lets the call go on (``None``) or answers it (a ``CallOutcome``) — the first
answer wins and the tool does not run. Together they keep the "no side effect twice" contract:
a call whose effect may have happened is never run again, whatever crashed, was cancelled or
was resumed in between (docs/durability.md).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from reverie.capabilities import ToolContext
from reverie.core.canonical import NotCanonicalizable, check_json_value, digest
from reverie.core.capability import (
    CallCancelled,
    CallCompleted,
    CallDenied,
    CallFailed,
    CallGated,
    CallInterrupted,
    CallOutcome,
    CapabilityDescriptor,
    outcome_from_dict,
    outcome_to_dict,
)
from reverie.core.fastcopy import fast_frozen, maker
from reverie.core.messages import ToolCall
from reverie.hooks import CapabilityHookContext, CapabilityResultContext
from reverie.runtime.gate_edits import unmask
from reverie.store.base import GateRecord, JournalWrite

if TYPE_CHECKING:
    from reverie.runtime.host import RunContext

# Plain functions that build what every call builds (a class call with keywords costs more).
_tool_context = maker(ToolContext)
_journal_write = maker(JournalWrite)


def descriptor_digest(d: CapabilityDescriptor) -> str:
    """Identity of a tool's definition as the model and the approver saw it."""
    return digest(
        {
            "name": d.name,
            "description": d.description,
            "parameters": dict(d.parameters),
            "effects": sorted(d.effects or ()),
            "idempotent": d.idempotent,
        }
    )


@fast_frozen
@dataclass(frozen=True)
class Admitted:
    """A call that passed the preflight: the tool that will run it and its descriptor."""

    tool: Any
    descriptor: CapabilityDescriptor


_admitted = maker(Admitted)


async def record(ctx: RunContext, key: str, outcome: CallOutcome) -> CallOutcome:
    """Write ``outcome`` as the call's finished journal record now, and return it."""
    await ctx.store.journal_finished(ctx.run_id, key, outcome_to_dict(outcome), fence=ctx.fence)
    return outcome


async def deny_changed(ctx: RunContext, key: str, why: str) -> CallOutcome:
    """Deny (durably) a gated call whose tool changed or went away since the gate opened."""
    return await record(
        ctx,
        key,
        CallDenied(reason=f"{why}; the call was not run. Ask again if it is still needed"),
    )


async def preflight(
    ctx: RunContext,
    tools: dict[str, Any],
    call: ToolCall,
    descriptor: CapabilityDescriptor | None,
    *,
    key: str,
    replay: bool,
) -> CallOutcome | Admitted:
    """Rule: a call runs only on a known tool with parseable, canonical JSON arguments.

    A gated call whose tool is gone since approval was asked is denied, never re-routed to
    another tool. An unknown tool or bad arguments answer the model with ``input_invalid``.
    """
    known = descriptor is not None and call.name in tools
    if replay and not known and await ctx.store.gate_for_call(ctx.run_id, key) is not None:
        return await deny_changed(ctx, key, f"the tool {call.name} is no longer available")
    if descriptor is None or not known:
        # The loop answers calls to tools it did not offer itself (naming only the visible
        # ones); this port cannot tell which are visible, so it names none.
        return CallFailed(error_kind="input_invalid", message=f"unknown tool {call.name!r}")
    if call.arguments_error is not None:
        return CallFailed(
            error_kind="input_invalid",
            message=f"the arguments of {call.name} could not be parsed: "
            f"{call.arguments_error}. Send a JSON object matching the tool's schema.",
        )
    try:
        check_json_value(dict(call.arguments))
    except NotCanonicalizable as exc:
        return CallFailed(error_kind="input_invalid", message=f"invalid arguments: {exc}")
    return _admitted(tools[call.name], descriptor)


async def replay_journal(
    ctx: RunContext, descriptor: CapabilityDescriptor, *, key: str
) -> CallOutcome | None:
    """Rule: a resumed wave never runs a finished call again, nor an unfinished one twice.

    A finished call returns its recorded outcome. A call cancelled mid-flight (a shutdown,
    not a cancel of the run) or started but never finished may have had its effect, so it is
    recorded and answered as interrupted unless its tool is repeatable; a repeatable one runs
    again.
    """
    entry = (await ctx.store.journal_get(ctx.run_id, [key])).get(key)
    if entry is None:
        return None
    if entry.state == "finished" and entry.outcome is not None:
        recorded = outcome_from_dict(entry.outcome)
        if not isinstance(recorded, CallCancelled):
            return recorded
        if not descriptor.repeatable:
            return await record(ctx, key, CallInterrupted())
    elif entry.state == "started" and not descriptor.repeatable:
        return await record(ctx, key, CallInterrupted())
    return None


async def read_gate(
    ctx: RunContext, call: ToolCall, descriptor: CapabilityDescriptor, *, key: str, replay: bool
) -> CallOutcome | GateRecord | None:
    """Rule: a person's answer to the call's gate decides it; approval binds to the definition.

    Returns the approved gate (``None`` when the call has no gate), or its answer: a denied
    gate is recorded as denied, a pending one keeps the call gated, and an approval given for
    a tool whose definition changed since is a denial (the approver saw another tool).
    """
    gate = await ctx.store.gate_for_call(ctx.run_id, key) if replay else None
    if gate is None:
        return None
    current = descriptor_digest(descriptor)
    if gate.status == "approved":
        if ctx.gated.get(key, current) != current:
            return await deny_changed(
                ctx, key, f"the tool {call.name} changed after approval was requested"
            )
        return gate
    if gate.status == "denied":
        return await record(
            ctx, key, CallDenied(reason=f"a person denied this call: {gate.reason or 'no reason'}")
        )
    if gate.status == "pending":
        return CallGated(gate_kind=gate.kind, reason="waiting for approval")
    return None


def edited_call(call: ToolCall, gate: GateRecord) -> ToolCall | CallOutcome:
    """Rule: an approval with edited arguments runs the same tool with the edited arguments.

    Only the arguments change (the gate binds the call id and the tool). A secret left as
    the mask keeps the model's value (:func:`reverie.runtime.gate_edits.unmask`).
    """
    if gate.edited_arguments is None:
        return call
    arguments = unmask(gate.edited_arguments, dict(call.arguments))
    try:
        check_json_value(arguments)
    except NotCanonicalizable as exc:
        return CallFailed(error_kind="input_invalid", message=f"invalid edited arguments: {exc}")
    return replace(call, arguments=arguments)


def with_note(outcome: CallOutcome, note: str | None) -> CallOutcome:
    """``outcome`` as the model reads it after a person edited the call: the note first."""
    if note is None:
        return outcome
    if isinstance(outcome, CallCompleted):
        return replace(outcome, output=f"{note}\n{outcome.output}")
    if isinstance(outcome, CallFailed):
        return replace(outcome, message=f"{note} {outcome.message}")
    if isinstance(outcome, CallDenied):
        return replace(outcome, reason=f"{note} {outcome.reason}")
    return outcome


async def before_hooks(
    ctx: RunContext,
    call: ToolCall,
    descriptor: CapabilityDescriptor,
    *,
    key: str,
    approved: bool,
    note: str | None = None,
) -> CallOutcome | None:
    """Rule: a ``before_capability`` hook may deny a call, or pause it until a person answers.

    A deny always wins (an approved call too, an edited one included: the hooks see the
    edited arguments); a pause (for authorisation or approval) is moot once a person
    approved the call. A pause remembers the tool's definition, so the approval binds to it.
    """
    if not ctx.hooked("before_capability"):
        return None
    verdict = await ctx.hooks.gate(
        CapabilityHookContext(
            tool=call.name,
            arguments=dict(call.arguments),
            scope=ctx.scope,
            run_id=ctx.run_id,
            call_id=key,
        ),
        poisoned=ctx.poisoned,
    )
    ctx.record_hook_failures(verdict.failures, verdict.newly_poisoned)
    if verdict.decision == "deny":
        # Journaled now: a resumed wave answers the call from the journal (a hook's denial
        # stands, it is not asked again), and the denial outlives a crash.
        denied = CallDenied(reason=verdict.reason_for_model or "denied by policy")
        return await record(ctx, key, with_note(denied, note))
    if not approved and verdict.decision == "pause_auth":
        ctx.gated[key] = descriptor_digest(descriptor)
        return CallGated(gate_kind="auth", reason=verdict.reason or "authorisation needed")
    if not approved and verdict.decision == "pause_approval":
        ctx.gated[key] = descriptor_digest(descriptor)
        return CallGated(reason=verdict.reason or "approval required")
    return None


def require_approval(
    ctx: RunContext,
    call: ToolCall,
    descriptor: CapabilityDescriptor,
    *,
    key: str,
    approved: bool,
) -> CallOutcome | None:
    """Rule: a tool that needs approval for these arguments waits for a person first.

    The gate remembers the tool's definition, so the approval binds to it.
    """
    if approved or not descriptor.requires_approval(call.arguments):
        return None
    ctx.gated[key] = descriptor_digest(descriptor)
    return CallGated(reason=f"{call.name} needs approval")


async def execute_journaled(
    ctx: RunContext, call: ToolCall, admitted: Admitted, *, key: str, note: str | None = None
) -> CallOutcome:
    """Rule: a call that must not run twice is durable before it runs and once it returns.

    A non-repeatable call gets a ``started`` record before the tool runs (a resume never runs
    it a second time), its outcome is written the moment it returns, and a cancellation is
    recorded (shielded, so the record survives it) before it propagates. A repeatable call's
    outcome is staged for the next step commit. A tool that asks for a gate itself
    remembers its definition, so the approval binds to it. A call a person edited has
    ``note`` (what changed) written into its journaled outcome: the journal records what ran.
    """
    descriptor = admitted.descriptor
    again = descriptor.repeatable
    if not again:
        await ctx.store.journal_started(ctx.run_id, key, call.name, fence=ctx.fence)
    try:
        outcome: CallOutcome = await admitted.tool.invoke(
            call.arguments,
            _tool_context(run_id=ctx.run_id, call_id=key, scope=ctx.scope, tool_name=call.name),
        )
    except asyncio.CancelledError:
        if not again:
            await asyncio.shield(record(ctx, key, CallCancelled()))
        raise
    if isinstance(outcome, CallGated):
        ctx.gated[key] = descriptor_digest(descriptor)
        return outcome
    outcome = with_note(outcome, note)
    if again:
        ctx.segment.journal.append(
            _journal_write(
                call_id=key, tool=call.name, state="finished", outcome=outcome_to_dict(outcome)
            )
        )
    else:
        # A call that must not run twice: its outcome is durable the moment it returns.
        await record(ctx, key, outcome)
    return outcome


async def after_call(ctx: RunContext, call: ToolCall, outcome: CallOutcome, *, key: str) -> None:
    """Rule: ``after_capability`` hooks observe a call's outcome; they cannot change it.

    They see the outcome's kind and at most 200 characters of a completed call's output.
    """
    if not ctx.hooked("after_capability"):
        return
    observed = await ctx.hooks.observe(
        "after_capability",
        CapabilityResultContext(
            scope=ctx.scope,
            run_id=ctx.run_id,
            call_id=key,
            tool=call.name,
            outcome_kind=outcome.kind,
            output_preview=outcome.output[:200] if isinstance(outcome, CallCompleted) else "",
        ),
        poisoned=ctx.poisoned,
    )
    ctx.record_hook_failures(observed.failures, observed.newly_poisoned)
