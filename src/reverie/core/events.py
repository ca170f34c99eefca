"""Typed run events (docs/http.md). The CLI, SSE and tests consume the same stream."""

from __future__ import annotations

import copy
import dataclasses
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from reverie.core.fastcopy import fast_frozen
from reverie.core.vocabulary import OnLimit


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStarted:
    """A run began (or resumed) on a worker."""

    kind: Literal["run_started"] = "run_started"
    run_id: str
    resumed: bool = False


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class ModelRequested:
    """A model request is about to be sent."""

    kind: Literal["model_request"] = "model_request"
    run_id: str
    iteration: int
    tools: int
    """Number of tools offered (0 for the finalizer)."""
    attempt: int = 0
    model: str = ""
    """The name of the model asked (``openai:gpt-4.1-mini``); a fallback model after a
    ``model_fallback``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelFallback:
    """The model failed and the run goes on with the next of the agent's models."""

    kind: Literal["model_fallback"] = "model_fallback"
    run_id: str
    from_model: str
    to_model: str
    error_kind: str
    """The failed model's error kind (``transient``, ``unavailable``, ``context_overflow``)."""


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class TextDeltaEvent:
    """A streamed piece of the model's text."""

    kind: Literal["text_delta"] = "text_delta"
    run_id: str
    text: str


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class AssistantMessage:
    """A committed assistant message (a reply, or progress text that came with calls)."""

    kind: Literal["assistant_message"] = "assistant_message"
    run_id: str
    text: str
    tool_calls: tuple[str, ...] = ()
    """Names of the tools called with this message."""


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class ToolStarted:
    """A tool call started."""

    kind: Literal["tool_started"] = "tool_started"
    run_id: str
    call_id: str
    tool: str
    attempt: int = 0


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class ToolFinished:
    """A tool call ended (any outcome)."""

    kind: Literal["tool_finished"] = "tool_finished"
    run_id: str
    call_id: str
    tool: str
    outcome: str
    """``completed``, ``failed``, ``denied``, ``gated``, ``cancelled`` or ``interrupted``."""
    error_kind: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GateOpened:
    """The run blocked on a gate."""

    kind: Literal["gate_opened"] = "gate_opened"
    run_id: str
    gate_ref: str
    tool: str
    gate_kind: str


@dataclass(frozen=True, slots=True, kw_only=True)
class InputDelivered:
    """A steering or follow-up input reached the transcript."""

    kind: Literal["input_delivered"] = "input_delivered"
    run_id: str
    input_id: str
    input_kind: str


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class CheckpointEvent:
    """A checkpoint was committed."""

    kind: Literal["checkpoint"] = "checkpoint"
    run_id: str
    checkpoint_kind: str
    iteration: int


@dataclass(frozen=True, slots=True, kw_only=True)
class HookFailedEvent:
    """A hook failed (timeout, exception, malformed result) and was poisoned."""

    kind: Literal["hook_failed"] = "hook_failed"
    run_id: str
    hook: str
    point: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GuardrailDecided:
    """A guardrail denied or rewrote a text (``before_input`` / ``before_reply``).

    Never carries the text, only who decided what and why.
    """

    kind: Literal["guardrail"] = "guardrail"
    run_id: str
    point: str
    """``before_input`` or ``before_reply``."""
    decision: str
    """``deny`` or ``rewrite``."""
    guardrail: str
    """The guardrail's id."""
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LimitReached:
    """A safety net or budget fired; ``reason`` says which one."""

    kind: Literal["limit_reached"] = "limit_reached"
    run_id: str
    reason: str
    """``max_iterations``, ``no_progress``, ``host``, or a budget kind."""
    action: OnLimit


@dataclass(frozen=True, slots=True, kw_only=True)
class ResumeDrifted:
    """A resume found the agent changed since the run's checkpoint (docs/durability.md)."""

    kind: Literal["resume_drift"] = "resume_drift"
    run_id: str
    action: str
    """``refuse`` (the run ends ``Failed(resume_drift)``) or ``continue`` (it goes on)."""
    instructions: bool = False
    """The instructions changed."""
    tools_added: tuple[str, ...] = ()
    tools_removed: tuple[str, ...] = ()
    tools_changed: tuple[str, ...] = ()
    family_before: str | None = None
    """``<id>@<digest>`` of the loop family the agent selected at the checkpoint, when it
    changed; ``None`` otherwise."""
    family_now: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CallsDenied:
    """Calls of one wave were denied (by a hook, a person, a policy, or because the model
    called a tool hidden from it). One per wave that had a denial; none otherwise."""

    kind: Literal["calls_denied"] = "calls_denied"
    run_id: str
    iteration: int
    calls: int
    """Calls the wave's response made."""
    denied: int
    """How many of them were denied."""
    tools: tuple[str, ...] = ()
    """The denied calls' tool names, in the model's order."""
    hidden: tuple[str, ...] = ()
    """Of those, the tools the capability strategy had hidden from the model (a security
    event: the model called a tool it was not offered)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFinished:
    """The run reached a terminal state or blocked."""

    kind: Literal["run_finished"] = "run_finished"
    run_id: str
    status: str
    exit: dict[str, Any]


RunEvent = (
    RunStarted
    | ModelRequested
    | ModelFallback
    | TextDeltaEvent
    | AssistantMessage
    | ToolStarted
    | ToolFinished
    | GateOpened
    | InputDelivered
    | CheckpointEvent
    | HookFailedEvent
    | GuardrailDecided
    | LimitReached
    | ResumeDrifted
    | CallsDenied
    | RunFinished
)
"""Every event a run emits; discriminate on ``kind``."""

_BY_KIND: dict[str, type[Any]] = {
    cls.__dataclass_fields__["kind"].default: cls for cls in get_args(RunEvent)
}


def _shallow_reader(cls: type[Any]) -> Callable[[Any], tuple[Any, ...]] | None:
    """Reads an event's field values in :func:`event_to_dict`'s order, for event classes whose
    fields are all immutable (strings, numbers, tuples); ``None`` for the others."""
    fields = dataclasses.fields(cls)
    if any(word in str(f.type) for f in fields for word in ("dict", "list", "Mapping")):
        return None
    return operator.attrgetter(*_FIELD_ORDER[cls])


_FIELD_ORDER: dict[type[Any], tuple[str, ...]] = {
    cls: ("kind", *(f.name for f in dataclasses.fields(cls) if f.name != "kind"))
    for cls in get_args(RunEvent)
}
_SHALLOW = {cls: _shallow_reader(cls) for cls in get_args(RunEvent)}
_ALL = {cls: operator.attrgetter(*_FIELD_ORDER[cls]) for cls in get_args(RunEvent)}
_AS_DICT = frozenset(
    cls
    for cls in get_args(RunEvent)
    if _SHALLOW[cls] is not None
    and "__slots__" not in cls.__dict__
    and tuple(f.name for f in dataclasses.fields(cls)) == _FIELD_ORDER[cls]
)
"""Shallow :func:`~reverie.core.fastcopy.fast_frozen` events declaring ``kind`` first: their
``__dict__`` holds exactly their fields, in that order, so its copy is the event's object."""


def event_to_dict(event: RunEvent) -> dict[str, Any]:
    """An event's fields as a JSON-ready object, ``kind`` first.

    Events are built on every step and stored as they come, so an event whose fields nobody
    can change is read off directly; one with a mutable field (``run_finished``'s exit) is
    deep-copied, as :func:`dataclasses.asdict` would copy it.
    """
    cls = type(event)
    if cls in _AS_DICT:
        return dict(event.__dict__)
    read = _SHALLOW.get(cls)
    if read is not None:
        return dict(zip(_FIELD_ORDER[cls], read(event), strict=True))
    values = _ALL[cls](event)
    return {name: _detached(v) for name, v in zip(_FIELD_ORDER[cls], values, strict=True)}


_ATOMS = (str, int, float, bool, type(None))
_ATOM_TYPES = frozenset(_ATOMS)
"""The exact atom types: a member is kept as it is without a call (subclasses go through
:func:`_detached`, which keeps them too)."""


def _detached(value: Any) -> Any:
    """``value`` copied as :func:`dataclasses.asdict` copies a field (containers rebuilt with
    their own type, dataclasses turned into dicts, anything else deep-copied), without its
    per-value overhead on the JSON-shaped values events carry (a run's exit: a few nested
    objects of atoms, each member taken as it is)."""
    kind = type(value)
    if kind in _ATOM_TYPES or isinstance(value, _ATOMS):
        return value
    atoms = _ATOM_TYPES
    if kind is dict:
        return {
            (k if type(k) in atoms else _detached(k)): (v if type(v) in atoms else _detached(v))
            for k, v in value.items()
        }
    if kind is list:
        return [v if type(v) in atoms else _detached(v) for v in value]
    if kind is tuple:
        return tuple([v if type(v) in atoms else _detached(v) for v in value])
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return copy.deepcopy(value)


def event_from_dict(data: Mapping[str, Any]) -> RunEvent | None:
    """The typed event of :func:`event_to_dict`'s object; ``None`` for a kind this build does
    not know (written by a newer reverie) or fields that do not fit it."""
    cls = _BY_KIND.get(str(data.get("kind")))
    if cls is None:
        return None
    known = {f.name for f in dataclasses.fields(cls)}
    fields = {k: v for k, v in data.items() if k in known}
    for name, value in fields.items():
        if isinstance(value, list):
            fields[name] = tuple(value)  # JSON has no tuples (every list field is one)
    try:
        event: RunEvent = cls(**fields)
    except TypeError:
        return None
    return event
