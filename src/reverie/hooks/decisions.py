"""What hooks return, and what the dispatcher hands back to the runtime (docs/hooks.md).

Hooks return the public decision values: a gate returns :class:`Allow`, :class:`Deny`,
:class:`PauseApproval`, :class:`PauseAuth` or ``None`` (no opinion); a mutator returns a
:class:`Snippet`, a plain ``str`` or ``None``. Anything else is *malformed* and counts as a hook
failure.

The dispatcher returns one result per dispatch (:class:`GateResult`, :class:`PromptResult`,
:class:`ObserveResult`, :class:`AfterTurnResult`). Each carries the :class:`HookFailure` records
of that dispatch, and all but ``after_turn`` carry ``newly_poisoned``: the hook ids the runtime
must add to the run's poisoned set and persist with its checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias

from reverie.core.envelope import wrap_untrusted
from reverie.hooks.points import HookPoint, TrustClass

__all__ = [
    "MAX_REASON_CHARS",
    "AfterTurnResult",
    "Allow",
    "Deny",
    "GateDecision",
    "GateOutcome",
    "GateResult",
    "GuardOutcome",
    "GuardResult",
    "HookFailure",
    "HookFailureReason",
    "ObserveResult",
    "PauseApproval",
    "PauseAuth",
    "PromptResult",
    "PromptSnippet",
    "Rewrite",
    "Snippet",
]

MAX_REASON_CHARS: Final = 500
"""Longer decision reasons are cut to this many characters (with a marker)."""


def _checked_reason(reason: object, cls: str) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise TypeError(f"{cls} needs a non-empty reason string")
    if len(reason) > MAX_REASON_CHARS:
        return reason[: MAX_REASON_CHARS - 1] + "…"
    return reason


@dataclass(frozen=True, slots=True)
class Allow:
    """A gate lets the call run.

    Only ``builtin`` and ``trusted`` hooks can allow: from an ``installed`` or ``self_authored``
    hook, ``Allow()`` counts as no opinion.
    """

    kind: Literal["allow"] = field(default="allow", init=False)
    """Discriminator."""


@dataclass(frozen=True, slots=True)
class Deny:
    """A gate refuses the call; the model is told ``reason`` and may try something else."""

    reason: str
    """Why the call is refused. Shown to the model and to operators: keep secrets out of it."""
    kind: Literal["deny"] = field(default="deny", init=False)
    """Discriminator."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", _checked_reason(self.reason, "Deny"))


@dataclass(frozen=True, slots=True)
class PauseApproval:
    """A gate holds the call until a person approves it (docs/tools.md)."""

    reason: str
    """Why approval is needed. Shown to the approver."""
    kind: Literal["pause_approval"] = field(default="pause_approval", init=False)
    """Discriminator."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", _checked_reason(self.reason, "PauseApproval"))


@dataclass(frozen=True, slots=True)
class PauseAuth:
    """A gate holds the call until the owner authenticates (e.g. grants an OAuth scope)."""

    reason: str
    """What authentication is missing."""
    kind: Literal["pause_auth"] = field(default="pause_auth", init=False)
    """Discriminator."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", _checked_reason(self.reason, "PauseAuth"))


GateDecision: TypeAlias = Allow | Deny | PauseApproval | PauseAuth
"""A gate hook's opinion. ``None`` (no opinion) is also a valid return."""


@dataclass(frozen=True, slots=True)
class Snippet:
    """Text a ``before_prompt`` mutator adds to the prompt (a plain ``str`` works too)."""

    text: str
    """The text. Empty text adds nothing."""
    summary: str | None = None
    """A short summary of ``text``: what the model sees of an ``installed`` hook's snippet
    (summary-only trust, docs/hooks.md) unless the operator promoted the hook. Flattened to one
    line and cut to 200 characters; without one the model sees only a reference."""

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise TypeError("Snippet needs text as str")
        if self.summary is not None and not isinstance(self.summary, str):
            raise TypeError("Snippet needs summary as str or None")


@dataclass(frozen=True, slots=True)
class Rewrite:
    """A guardrail (``before_input``/``before_reply``) replaces the text, e.g. to redact it.

    Only ``builtin`` and ``trusted`` guardrails can rewrite: from an ``installed`` or
    ``self_authored`` one a rewrite counts as no opinion (they can deny).
    """

    text: str
    """The text to use instead."""
    reason: str = "rewritten"
    """What was changed, for the event log (never the text itself)."""
    kind: Literal["rewrite"] = field(default="rewrite", init=False)
    """Discriminator."""

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise TypeError("Rewrite needs the new text as a string")
        object.__setattr__(self, "reason", _checked_reason(self.reason, "Rewrite"))


HookFailureReason: TypeAlias = Literal["timeout", "exception", "malformed"]
"""How a hook failed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HookFailure:
    """One hook that failed during a dispatch. The hook is poisoned for the rest of the run."""

    hook: str
    """The hook id (its registered name)."""
    point: HookPoint
    """The point it was dispatched at."""
    reason: HookFailureReason
    """``timeout``, ``exception`` or ``malformed``."""
    detail: str
    """A safe one-liner: the exception type, the timeout, or the type that was returned.
    Never the exception message or the call's arguments (those go to the debug log only)."""


GateOutcome: TypeAlias = Literal["allow", "deny", "pause_approval", "pause_auth", "pass"]
"""The composed gate decision; ``pass`` when no hook had an opinion."""


GuardOutcome: TypeAlias = Literal["allow", "deny", "rewrite"]
"""What the guardrails of one point decided about a text."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GuardResult:
    """The composed outcome of the guardrails of one point for one text."""

    decision: GuardOutcome
    """``allow`` (unchanged), ``rewrite`` (use :attr:`text`) or ``deny``."""
    text: str
    """The text to use: the original, or the last rewrite (empty when denied)."""
    guardrail: str | None = None
    """The guardrail that denied, or the last that rewrote."""
    reason: str | None = None
    """Its reason (a denial's, or what a rewrite changed)."""
    rewrites: tuple[tuple[str, str], ...] = ()
    """``(guardrail, reason)`` of each rewrite applied, in order."""
    failures: tuple[HookFailure, ...] = ()
    """Guardrails that failed (each failure denies)."""
    newly_poisoned: frozenset[str] = frozenset()
    """Hook ids poisoned by this dispatch."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GateResult:
    """The composed outcome of every ``before_capability`` hook for one call."""

    decision: GateOutcome
    """``allow``, ``deny``, ``pause_approval``, ``pause_auth``, or ``pass`` (no opinion)."""
    reason: str | None = None
    """The deciding hook's reason (``None`` for ``allow`` and ``pass``)."""
    hook: str | None = None
    """The id of the deciding hook (``None`` for ``pass``)."""
    trust: TrustClass | None = None
    """The trust class of the deciding hook (``None`` for ``pass``)."""
    untrusted_reason: bool = False
    """Whether ``reason`` was written by an ``installed`` or ``self_authored`` hook (rather than
    by a first-party hook or by the dispatcher), so it must be shown as data."""
    failures: tuple[HookFailure, ...] = ()
    """The hooks that failed in this dispatch (each failure also denied the call)."""
    newly_poisoned: frozenset[str] = frozenset()
    """Hook ids poisoned by this dispatch; add them to the run's persisted poisoned set."""

    @property
    def runs(self) -> bool:
        """Whether the call may run (``allow`` or ``pass``)."""
        return self.decision in ("allow", "pass")

    @property
    def reason_for_model(self) -> str | None:
        """The reason as it may be shown to the model.

        A reason written by an ``installed`` or ``self_authored`` hook is wrapped in the
        untrusted envelope, so it reads as data and not as instructions.
        """
        if self.reason is None or not self.untrusted_reason:
            return self.reason
        return wrap_untrusted(self.reason, source=f"hook:{self.hook}")


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptSnippet:
    """One snippet a ``before_prompt`` hook added, ready to place in the prompt.

    The runtime places every snippet outside the system role, whatever its trust class.
    """

    text: str
    """The snippet; already enveloped when ``trust`` is ``installed`` or ``self_authored``."""
    hook: str
    """The id of the hook that produced it."""
    trust: TrustClass
    """The trust class of that hook."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptResult:
    """The snippets of every ``before_prompt`` hook, in dispatch order."""

    snippets: tuple[PromptSnippet, ...] = ()
    """The snippets to add, in hook order. A failed hook contributes nothing."""
    failures: tuple[HookFailure, ...] = ()
    """The hooks that failed in this dispatch."""
    newly_poisoned: frozenset[str] = frozenset()
    """Hook ids poisoned by this dispatch; add them to the run's persisted poisoned set."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ObserveResult:
    """The outcome of one observer dispatch."""

    ran: tuple[str, ...] = ()
    """The ids of the hooks that ran to completion, in dispatch order."""
    failures: tuple[HookFailure, ...] = ()
    """The hooks that failed; the others were not affected."""
    newly_poisoned: frozenset[str] = frozenset()
    """Hook ids poisoned by this dispatch; add them to the run's persisted poisoned set."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AfterTurnResult:
    """The outcome of the ``after_turn`` dispatch for one terminal run."""

    ran: tuple[str, ...] = ()
    """The ids of the hooks that ran to completion, in order."""
    failures: tuple[HookFailure, ...] = ()
    """The hooks that raised or timed out. A failure never affects the run."""
    cut_off: tuple[str, ...] = ()
    """The hooks the overall deadline stopped before their own timeout, or kept from being
    called (each is also in ``failures`` as a ``timeout``)."""
