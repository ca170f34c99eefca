"""Capability descriptors, concurrency hints and call outcomes (docs/tools.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from reverie.core.exits import Usage
from reverie.core.fastcopy import fast_frozen
from reverie.core.vocabulary import GateKind
from reverie.errors import ToolErrorKind

Effect = Literal["read", "network", "write", "spawn", "use_secret", "dispatch"]
"""What a tool may do to the world."""

KNOWN_EFFECTS: frozenset[str] = frozenset(get_args(Effect))
PARALLEL_SAFE_EFFECTS: frozenset[str] = frozenset({"read", "use_secret"})

ConcurrencyHint = Literal["safe_for_parallel", "exclusive"]

ApprovalRule = bool | Callable[[Mapping[str, Any]], bool]
"""``True``/``False``, or a predicate over the call's arguments."""


def concurrency_hint(effects: frozenset[str] | None) -> ConcurrencyHint:
    """``safe_for_parallel`` iff effects were declared and are a subset of {read, use_secret}.

    A tool that declares nothing (``None``) is ``exclusive``: we cannot know it is safe.
    ``effects=set()`` declares a pure tool, which is safe.
    """
    if effects is None:
        return "exclusive"
    return "safe_for_parallel" if effects <= PARALLEL_SAFE_EFFECTS else "exclusive"


@dataclass(frozen=True, slots=True, kw_only=True)
class CapabilityDescriptor:
    """What the loop and the model know about one capability."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    """JSON Schema of the arguments object."""
    effects: frozenset[str] | None = None
    """Declared effects; ``None`` when undeclared (treated as exclusive)."""
    needs_approval: ApprovalRule = False
    idempotent: bool = False
    """Safe to run again after a crash left its outcome unknown."""
    timeout_s: float | None = 60.0
    editable: bool = True
    """Whether a person approving a gated call may change its arguments (``False``: approve
    or deny it as the model made it, e.g. a payment whose amount must not change)."""

    @property
    def concurrency(self) -> ConcurrencyHint:
        """The concurrency hint derived from the effects."""
        return concurrency_hint(self.effects)

    @property
    def repeatable(self) -> bool:
        """Running the call again after a crash is harmless: idempotent, or declared pure."""
        return self.idempotent or self.effects == frozenset()

    def requires_approval(self, arguments: Mapping[str, Any]) -> bool:
        """Whether this call needs a person's approval."""
        rule = self.needs_approval
        return bool(rule(arguments)) if callable(rule) else bool(rule)


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class CallCompleted:
    """The call ran and returned output (already serialised and size-capped)."""

    kind: Literal["completed"] = "completed"
    output: str
    usage: Usage | None = None
    """What a nested run spent for this call (a subagent's); charged to the calling run."""


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class CallFailed:
    """The call failed; ``error_kind`` drives the recovery strategy."""

    kind: Literal["failed"] = "failed"
    error_kind: ToolErrorKind
    message: str
    usage: Usage | None = None
    """What a nested run spent for this call (a subagent's); charged to the calling run."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CallDenied:
    """A policy (hook or operator) denied the call."""

    kind: Literal["denied"] = "denied"
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CallGated:
    """The call needs approval, authorisation or a resource before it may run."""

    kind: Literal["gated"] = "gated"
    gate_kind: GateKind = "approval"
    reason: str = "approval required"
    ref: str | None = None
    """An existing gate the call waits on (a subagent's): the run blocks on it, opening none."""


ENDED_BEFORE_RUNNING = "cancelled: the run ended before this call ran"
"""The result a call gets when its run ended before it started (it never reached its tool)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CallCancelled:
    """The call was in flight when the run was cancelled."""

    kind: Literal["cancelled"] = "cancelled"


@dataclass(frozen=True, slots=True, kw_only=True)
class CallInterrupted:
    """A crash left a non-idempotent call started but unfinished: outcome unknown."""

    kind: Literal["interrupted"] = "interrupted"


CallOutcome = CallCompleted | CallFailed | CallDenied | CallGated | CallCancelled | CallInterrupted


def outcome_to_dict(outcome: CallOutcome) -> dict[str, Any]:
    """JSON-able form of an outcome (for the side-effect journal)."""
    data: dict[str, Any]
    match outcome:
        case CallCompleted(output=output):
            data = {"kind": "completed", "output": output}
        case CallFailed(error_kind=ek, message=msg):
            data = {"kind": "failed", "error_kind": ek, "message": msg}
        case CallDenied(reason=reason):
            return {"kind": "denied", "reason": reason}
        case CallGated(gate_kind=gk, reason=reason, ref=ref):
            data = {"kind": "gated", "gate_kind": gk, "reason": reason}
            if ref is not None:
                data["ref"] = ref
            return data
        case CallCancelled():
            return {"kind": "cancelled"}
        case CallInterrupted():
            return {"kind": "interrupted"}
    if outcome.usage is not None:
        data["usage"] = outcome.usage.to_dict()
    return data


def outcome_from_dict(data: Mapping[str, Any]) -> CallOutcome:
    """Inverse of :func:`outcome_to_dict`."""
    kind = data.get("kind")
    raw_usage = data.get("usage")
    usage = Usage.from_dict(dict(raw_usage)) if isinstance(raw_usage, Mapping) else None
    if kind == "completed":
        return CallCompleted(output=str(data["output"]), usage=usage)
    if kind == "failed":
        return CallFailed(error_kind=data["error_kind"], message=str(data["message"]), usage=usage)
    if kind == "denied":
        return CallDenied(reason=str(data["reason"]))
    if kind == "gated":
        ref = data.get("ref")
        return CallGated(
            gate_kind=data["gate_kind"],
            reason=str(data["reason"]),
            ref=None if ref is None else str(ref),
        )
    if kind == "cancelled":
        return CallCancelled()
    if kind == "interrupted":
        return CallInterrupted()
    raise ValueError(f"unknown outcome kind {kind!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Surface:
    """The capabilities visible to the model at one tick."""

    descriptors: tuple[CapabilityDescriptor, ...] = field(default_factory=tuple)
    version: str = ""
    """Digest of the surface, so a change of tools is visible in state."""

    def get(self, name: str) -> CapabilityDescriptor | None:
        """The descriptor named ``name``, if visible."""
        for d in self.descriptors:
            if d.name == name:
                return d
        return None

    def names(self) -> tuple[str, ...]:
        """Visible tool names, in order."""
        return tuple(d.name for d in self.descriptors)
