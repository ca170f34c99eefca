"""Hook points, phases, trust classes and the contexts handed to hooks (docs/hooks.md).

A hook is a sync or async callable that takes one context object. Which context it gets depends
on the point it is bound to:

=====================  =============================  =====================================
point                  context                        what the hook returns
=====================  =============================  =====================================
``before_prompt``      :class:`PromptHookContext`     a snippet (``Snippet``/``str``) or None
``before_capability``  :class:`CapabilityHookContext` ``Allow``/``Deny``/``Pause*`` or None
``after_model``        :class:`ModelHookContext`      nothing (observer)
``after_capability``   :class:`CapabilityResultContext`  nothing (observer)
``after_checkpoint``   :class:`CheckpointHookContext` nothing (observer)
``event``              :class:`EventHookContext`      nothing (observer, kind-filtered)
``after_turn``         :class:`AfterTurnContext`      nothing (lifecycle)
``before_input``       :class:`InputGuardContext`     ``Allow``/``Deny``/``Rewrite`` or None
``before_reply``       :class:`ReplyGuardContext`     ``Allow``/``Deny``/``Rewrite`` or None
=====================  =============================  =====================================

``before_input`` and ``before_reply`` are *guardrails*: they judge text (a user message, a
reply) before it is stored, sent to a model or streamed, and fail closed.

Contexts are frozen: a hook sees the call, it cannot edit it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Literal, Protocol, get_args

from reverie.core.scope import Scope

__all__ = [
    "FIRST_PARTY_TRUST",
    "GUARD_POINTS",
    "HOOK_POINTS",
    "OBSERVER_CONTEXTS",
    "OBSERVER_POINTS",
    "PHASES",
    "TRUST_CLASSES",
    "AfterTurnContext",
    "CapabilityHookContext",
    "CapabilityResultContext",
    "CheckpointHookContext",
    "EventHookContext",
    "EventLike",
    "GuardPoint",
    "HookPoint",
    "InputGuardContext",
    "InputKindName",
    "ModelHookContext",
    "ObserverPoint",
    "Phase",
    "PromptHookContext",
    "ReplyGuardContext",
    "TrustClass",
]

HookPoint = Literal[
    "before_prompt",
    "before_capability",
    "after_model",
    "after_capability",
    "after_checkpoint",
    "event",
    "after_turn",
    "before_input",
    "before_reply",
]
"""Where in a run a hook can be bound."""

GuardPoint = Literal["before_input", "before_reply"]
"""The guardrail points: their hooks allow, deny or rewrite a text."""

ObserverPoint = Literal["after_model", "after_capability", "after_checkpoint", "event"]
"""The points whose hooks only watch: their return value is ignored."""

Phase = Literal["validation", "authorization", "policy", "telemetry"]
"""The coarse ordering band of a hook; hooks run phase by phase, in this order."""

TrustClass = Literal["builtin", "trusted", "installed", "self_authored"]
"""Where a hook came from. Fixed by the registration path, never declared by the hook."""

HOOK_POINTS: Final[tuple[HookPoint, ...]] = get_args(HookPoint)
"""Every hook point, in the order a run meets them."""

GUARD_POINTS: Final[tuple[GuardPoint, ...]] = get_args(GuardPoint)
"""The guardrail points."""

OBSERVER_POINTS: Final[frozenset[ObserverPoint]] = frozenset(get_args(ObserverPoint))
"""The observer points accepted by :meth:`HookDispatcher.observe`."""

PHASES: Final[tuple[Phase, ...]] = get_args(Phase)
"""The phases, in dispatch order: ``validation < authorization < policy < telemetry``."""

TRUST_CLASSES: Final[tuple[TrustClass, ...]] = get_args(TrustClass)
"""Every trust class."""

FIRST_PARTY_TRUST: Final[frozenset[TrustClass]] = frozenset({"builtin", "trusted"})
"""Trust classes with full powers. The others can only deny, pause, observe, or add enveloped
snippets, and cannot bind ``after_turn``."""


def _frozen_mapping(value: Mapping[str, Any]) -> Mapping[str, Any]:
    # A shallow read-only copy: a hook cannot change the arguments the tool will receive.
    return MappingProxyType(dict(value))


@dataclass(frozen=True, slots=True, kw_only=True)
class CapabilityHookContext:
    """What a ``before_capability`` gate sees: one tool call about to run."""

    tool: str
    """The name of the tool the model called."""
    arguments: Mapping[str, Any]
    """The validated arguments, as a read-only mapping (a shallow copy of the caller's)."""
    scope: Scope
    """Who the run acts for."""
    run_id: str
    """The run making the call."""
    call_id: str
    """The stable id of the call within its wave."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "arguments", _frozen_mapping(self.arguments))


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptHookContext:
    """What a ``before_prompt`` mutator sees: a prompt about to be built."""

    scope: Scope
    """Who the run acts for."""
    run_id: str
    """The run building the prompt."""
    iteration: int
    """The loop iteration (0-based) the prompt is for."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelHookContext:
    """What an ``after_model`` observer sees: one model response, normalised."""

    scope: Scope
    """Who the run acts for."""
    run_id: str
    """The run that called the model."""
    text: str | None
    """The assistant text of the response, if any."""
    tool_names: tuple[str, ...]
    """The names of the tools the response called, in the model's order (empty for a reply)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CapabilityResultContext:
    """What an ``after_capability`` observer sees: one finished tool call."""

    scope: Scope
    """Who the run acts for."""
    run_id: str
    """The run that made the call."""
    call_id: str
    """The stable id of the call within its wave."""
    tool: str
    """The name of the tool."""
    outcome_kind: str
    """How the call ended, e.g. ``completed``, ``denied``, ``failed``, ``gated``, ``cancelled``."""
    output_preview: str
    """The start of the serialised output (already size-capped by the runtime)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointHookContext:
    """What an ``after_checkpoint`` observer sees: a checkpoint that was just committed."""

    scope: Scope
    """Who the run acts for."""
    run_id: str
    """The run that was checkpointed."""
    checkpoint_kind: str
    """``BeforeModel``, ``BeforeSideEffect``, ``BeforeBlock`` or ``Final`` (docs/durability.md)."""
    iteration: int
    """The loop iteration the checkpoint was taken in."""


InputKindName = Literal["message", "steering", "follow_up"]
"""Which user input a ``before_input`` guardrail judges."""


@dataclass(frozen=True, slots=True, kw_only=True)
class InputGuardContext:
    """What a ``before_input`` guardrail sees: a user message before it is stored or sent.

    Every user message passes here: the one that starts a run, steering and follow-ups.
    """

    scope: Scope
    """Who the run acts for."""
    run_id: str | None
    """The run the message goes to (``None``: it starts a new run)."""
    kind: InputKindName
    """``message`` (starts a run), ``steering`` or ``follow_up``."""
    text: str
    """The message's text (its text parts, for a message with images)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplyGuardContext:
    """What a ``before_reply`` guardrail sees: a model's text before anyone receives it."""

    scope: Scope
    """Who the run acts for."""
    run_id: str
    """The run that produced the text."""
    text: str
    """The text of one model response: the run's reply (also the finalizer's summary and a
    typed output's JSON), or text the model wrote alongside tool calls."""
    final: bool
    """Whether the text ends the run (a reply, not text next to tool calls)."""


class EventLike(Protocol):
    """Anything with a ``kind``: the typed run events of docs/http.md all qualify."""

    @property
    def kind(self) -> str:
        """The event kind, e.g. ``tool_started``."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class EventHookContext:
    """What an ``event`` observer sees: one run event of a kind it subscribed to."""

    scope: Scope
    """Who the run acts for."""
    run_id: str
    """The run that emitted the event."""
    event: Any
    """The run event; it has a ``kind: str`` attribute the dispatcher filters on."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AfterTurnContext:
    """What an ``after_turn`` hook sees: a run that reached a terminal status."""

    scope: Scope
    """Who the run acted for."""
    run_id: str
    """The run that ended."""
    profile: str
    """The run's profile, e.g. ``interactive``."""
    completed: bool
    """Whether the run ended ``completed`` (a reply or a graceful summary)."""
    status: str
    """The terminal status: ``completed``, ``blocked``, ``failed`` or ``cancelled``."""


OBSERVER_CONTEXTS: Final[Mapping[ObserverPoint, type]] = MappingProxyType(
    {
        "after_model": ModelHookContext,
        "after_capability": CapabilityResultContext,
        "after_checkpoint": CheckpointHookContext,
        "event": EventHookContext,
    }
)
"""The context class each observer point expects."""
