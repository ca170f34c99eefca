"""The nine strategy protocols and their defaults (docs/loop.md).

A strategy decides; the executor acts. Strategies are pure functions of the state they are given
(and their own configuration): they never perform I/O, never touch another strategy's slot, and
cannot cause a checkpoint.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from reverie.core.capability import CallGated, Surface
from reverie.core.exits import HostStopReason
from reverie.core.fastcopy import fast_frozen
from reverie.core.messages import ToolCall
from reverie.errors import ConfigError
from reverie.loop.state import RING, LoopExecutionState, WavePolicy

# ---------------------------------------------------------------------------------- decisions


@dataclass(frozen=True, slots=True, kw_only=True)
class Retry:
    """Try again after ``backoff_s`` seconds."""

    kind: Literal["retry"] = "retry"
    backoff_s: float


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class SkipResult:
    """Give up on this call; the model sees the error text and can do something else."""

    kind: Literal["skip"] = "skip"


@dataclass(frozen=True, slots=True, kw_only=True)
class Abort:
    """End the run as ``Failed(failure_kind)``."""

    kind: Literal["abort"] = "abort"
    failure_kind: str
    detail: str = ""
    """Safe summary for the failure (a generic one is used when empty)."""


RecoveryDecision = Retry | SkipResult | Abort


@dataclass(frozen=True, slots=True, kw_only=True)
class Block:
    """Block the run on the gate until a person resolves it."""

    kind: Literal["block"] = "block"


@dataclass(frozen=True, slots=True, kw_only=True)
class SkipAndContinue:
    """Answer the call with a 'not run' result and continue (invalid for approval gates)."""

    kind: Literal["skip_and_continue"] = "skip_and_continue"


GateDecision = Block | SkipAndContinue | Abort


@dataclass(frozen=True, slots=True, kw_only=True)
class Continue:
    """Keep going."""

    kind: Literal["continue"] = "continue"


_CONTINUE = Continue()
"""The one ``Continue`` the built-in stop strategies return (frozen, with nothing of its own)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GracefulStop:
    """Stop gracefully through the finalizer."""

    kind: Literal["graceful_stop"] = "graceful_stop"
    reason: HostStopReason


@dataclass(frozen=True, slots=True, kw_only=True)
class NoProgress:
    """The run is going round in circles."""

    kind: Literal["no_progress"] = "no_progress"
    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Reprompt:
    """Do not complete; add ``prompt`` as a user message and ask again (after a reply, or
    after a wave: then it follows the wave's tool results)."""

    kind: Literal["reprompt"] = "reprompt"
    prompt: str
    stop_state: Mapping[str, Any] = field(default_factory=dict)
    """The stop strategy's new slot (e.g. how many reprompts it has made)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Finish:
    """After a wave: complete now as ``Completed(completion_kind)`` with ``refs`` as its result."""

    kind: Literal["finish"] = "finish"
    completion_kind: str
    refs: tuple[str, ...]
    """Rows holding the result (e.g. the tool-result row of a terminal tool)."""


StopDecision = Continue | GracefulStop | NoProgress | Abort | Reprompt | Finish
"""``Finish`` is honoured after a wave only; ``Reprompt`` after a reply or a wave."""


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class CallResult:
    """One call of the wave just committed, as the stop strategy sees it."""

    name: str
    outcome: str
    """The outcome's kind: ``completed``, ``failed``, ``denied``, ``cancelled``, …"""
    ref: str
    """Its tool-result row."""


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class ContextPlan:
    """What the prompt carries."""

    window: int | None
    """Last N transcript items (``None`` = all)."""
    include_memory: bool = True
    """Whether the prompt carries the run's memory context (the standing document and recalled
    snippets); ``False`` leaves it out of this tick's prompt. Memory tools are unaffected."""
    window_step: int | None = None
    """Once the thread outgrows ``window``, the window's first row moves in steps of this many
    rows (its seq a multiple of the step), not one row per call, so successive prompts keep
    their prefix and the provider's prompt cache serves it; the prompt then carries between
    ``window - step + 1`` and ``window`` rows. ``None``: half the window; ``1``: slide per row."""


def window_step(plan: ContextPlan) -> int:
    """The step of ``plan``'s window (see :attr:`ContextPlan.window_step`)."""
    if plan.window_step is not None:
        return max(1, plan.window_step)
    return max(1, (plan.window or 0) // 2)


# ---------------------------------------------------------------------------------- protocols


class ContextStrategy(Protocol):
    """Which transcript window and context the prompt carries."""

    def plan(self, state: LoopExecutionState) -> ContextPlan:
        """Plan this tick's prompt."""
        ...

    def describe(self) -> Mapping[str, Any]:
        """Canonical description of the configuration (for the family digest)."""
        ...


class CapabilityStrategy(Protocol):
    """Which tools are visible. It can only narrow the surface (the executor enforces it)."""

    def filter(self, state: LoopExecutionState, surface: Surface) -> Surface:
        """Return a subset of ``surface``."""
        ...

    def describe(self) -> Mapping[str, Any]:
        """Canonical description of the configuration."""
        ...


class ModelStrategy(Protocol):
    """Primary model or a fallback index."""

    def select(self, state: LoopExecutionState) -> int:
        """Index of the model to call (0 = primary)."""
        ...

    def fall_back(
        self, state: LoopExecutionState, error_kind: str, models: int
    ) -> Mapping[str, Any] | None:
        """The selected model failed with ``error_kind`` and recovery gave up on it.

        Returns the strategy's new slot (``model_state``), which selects the model to try
        next, or ``None``: no other model is tried and the run fails. ``models`` is how many
        models the agent has.
        """
        ...

    def failed_kinds(self, state: LoopExecutionState) -> tuple[str, ...]:
        """The error kind of each model given up on so far, in order (for the failure)."""
        ...

    def describe(self) -> Mapping[str, Any]:
        """Canonical description of the configuration."""
        ...


class InputDrainStrategy(Protocol):
    """Whether to drain steering / follow-up inputs now."""

    def drain_steering(self, state: LoopExecutionState) -> bool:
        """Drain steering before this tick's model call?"""
        ...

    def drain_follow_up(self, state: LoopExecutionState) -> bool:
        """Take a waiting follow-up instead of completing?"""
        ...

    def describe(self) -> Mapping[str, Any]:
        """Canonical description of the configuration."""
        ...


class BatchPolicyStrategy(Protocol):
    """Sequential or parallel for one wave."""

    def choose(self, calls: Sequence[ToolCall], surface: Surface) -> WavePolicy:
        """Pick the wave's policy."""
        ...

    def describe(self) -> Mapping[str, Any]:
        """Canonical description of the configuration."""
        ...


class RecoveryStrategy(Protocol):
    """What to do when a tool or the model fails."""

    def on_tool_error(self, error_kind: str, attempt: int) -> RecoveryDecision:
        """``attempt`` counts retries already made for this call (0 on the first failure)."""
        ...

    def on_model_error(self, error_kind: str, attempt: int) -> RecoveryDecision:
        """``attempt`` counts retries already made for this model call."""
        ...

    def describe(self) -> Mapping[str, Any]:
        """Canonical description of the configuration."""
        ...


class GateHandlingStrategy(Protocol):
    """What to do when a call hits an approval, auth or resource gate."""

    def on_gate(self, gated: CallGated) -> GateDecision:
        """Decide for one gated call."""
        ...

    def describe(self) -> Mapping[str, Any]:
        """Canonical description of the configuration."""
        ...


class StopConditionStrategy(Protocol):
    """After a reply or a wave: continue, stop gracefully, no progress, or abort."""

    def after_reply(self, state: LoopExecutionState) -> StopDecision:
        """Decide after a reply (before completing)."""
        ...

    def after_wave(
        self, state: LoopExecutionState, results: Sequence[CallResult] = ()
    ) -> StopDecision:
        """Decide after a wave's results were committed (``results`` in the model's order)."""
        ...

    def describe(self) -> Mapping[str, Any]:
        """Canonical description of the configuration."""
        ...


class BudgetStrategy(Protocol):
    """Iteration limit and wall clock."""

    def iteration_limit(self, requested: int) -> int:
        """The cap for this family, narrowed by the run's requested limit."""
        ...

    def describe(self) -> Mapping[str, Any]:
        """Canonical description of the configuration."""
        ...


# ---------------------------------------------------------------------------------- defaults


_PLANS: dict[tuple[int | None, bool, int | None], ContextPlan] = {}
"""The plans of :class:`WindowContext`, by configuration (a handful in a process)."""


@dataclass(frozen=True, slots=True)
class WindowContext:
    """Default context: the last ``window`` items plus pinned system/context, and the run's
    memory context unless ``include_memory`` is false."""

    window: int | None = 100
    include_memory: bool = True
    step: int | None = None
    """How the window's start moves (:attr:`ContextPlan.window_step`; ``None``: half the
    window)."""

    def plan(self, state: LoopExecutionState) -> ContextPlan:
        """Same window every tick (one frozen plan for each configuration)."""
        key = (self.window, self.include_memory, self.step)
        plan = _PLANS.get(key)
        if plan is None:
            plan = _PLANS[key] = ContextPlan(
                window=self.window, include_memory=self.include_memory, window_step=self.step
            )
        return plan

    def describe(self) -> Mapping[str, Any]:
        """Configuration for the digest."""
        # The defaults are left out: the digests of existing families (and their checkpoints)
        # stay what they were.
        out: dict[str, Any] = {"window": self.window}
        if not self.include_memory:
            out["include_memory"] = False
        if self.step is not None:
            out["step"] = self.step
        return out


@dataclass(frozen=True, slots=True)
class AllCapabilities:
    """Default: every registered tool is visible."""

    def filter(self, state: LoopExecutionState, surface: Surface) -> Surface:
        """No narrowing."""
        return surface

    def describe(self) -> Mapping[str, Any]:
        """No configuration."""
        return {}


FALLBACK_KINDS: frozenset[str] = frozenset(
    {"transient", "unavailable", "authentication", "context_overflow"}
)
"""Model error kinds another model may not have (an outage, a missing key, a short window).
``content_filtered`` and ``internal`` (a request the API refuses) would fail the same way
anywhere, so they end the run."""


@dataclass(frozen=True, slots=True)
class PrimaryModel:
    """Default: the primary model, then the agent's fallback models in order.

    When recovery gives up on the selected model (``transient`` after its retries,
    ``unavailable``, ``context_overflow``), the next model is selected for the rest of the
    run: the slot records its index, so a resume continues on it.
    """

    def select(self, state: LoopExecutionState) -> int:
        """The recorded index (0, the primary, until a fallback happened)."""
        index = state.model_state.get("index", 0)
        return index if isinstance(index, int) and index >= 0 else 0

    def fall_back(
        self, state: LoopExecutionState, error_kind: str, models: int
    ) -> Mapping[str, Any] | None:
        """The next model, for a kind of :data:`FALLBACK_KINDS`, while there is one."""
        index = self.select(state)
        if error_kind not in FALLBACK_KINDS or index + 1 >= models:
            return None
        return {"index": index + 1, "failed": [*self.failed_kinds(state), error_kind]}

    def failed_kinds(self, state: LoopExecutionState) -> tuple[str, ...]:
        """From the slot."""
        return tuple(str(k) for k in state.model_state.get("failed", ()))

    def describe(self) -> Mapping[str, Any]:
        """No configuration (the models are the agent's, not the family's)."""
        return {}


@dataclass(frozen=True, slots=True)
class DrainBoth:
    """Default: drain steering every tick and follow-ups when the run would complete."""

    steering: bool = True
    follow_up: bool = True

    def drain_steering(self, state: LoopExecutionState) -> bool:
        """As configured."""
        return self.steering

    def drain_follow_up(self, state: LoopExecutionState) -> bool:
        """As configured."""
        return self.follow_up

    def describe(self) -> Mapping[str, Any]:
        """Configuration for the digest."""
        return {"steering": self.steering, "follow_up": self.follow_up}


@dataclass(frozen=True, slots=True)
class ParallelIfSafe:
    """Default: parallel iff every call is ``safe_for_parallel``; an unknown tool is exclusive."""

    def choose(self, calls: Sequence[ToolCall], surface: Surface) -> WavePolicy:
        """Parallel only when every call's tool is known and safe."""
        if len(calls) < 2:
            return "sequential"
        for call in calls:
            desc = surface.get(call.name)
            if desc is None or desc.concurrency != "safe_for_parallel":
                return "sequential"
        return "parallel"

    def describe(self) -> Mapping[str, Any]:
        """No configuration."""
        return {}


_SKIP_TOOL_KINDS = frozenset({"policy_denied", "permanent", "input_invalid"})
_RETRY_TOOL_KINDS = frozenset({"transient", "unavailable", "internal"})


@dataclass(frozen=True, slots=True)
class DefaultRecovery:
    """docs/loop.md: skip denials and input errors, retry transient ones with backoff."""

    max_tool_retries: int = 2
    max_model_retries: int = 2
    base_backoff_s: float = 0.25
    max_backoff_s: float = 5.0

    def _backoff(self, attempt: int) -> float:
        return float(min(self.base_backoff_s * (2**attempt), self.max_backoff_s))

    def on_tool_error(self, error_kind: str, attempt: int) -> RecoveryDecision:
        """Retry transient/unavailable/internal up to the budget; skip everything else."""
        if error_kind in _RETRY_TOOL_KINDS and attempt < self.max_tool_retries:
            return Retry(backoff_s=self._backoff(attempt))
        return SkipResult()

    def on_model_error(self, error_kind: str, attempt: int) -> RecoveryDecision:
        """Retry transient model errors up to the budget, then fail the run.

        A model that refuses images fails the run with ``images_unsupported`` (retrying the
        same conversation cannot help).
        """
        if error_kind == "transient" and attempt < self.max_model_retries:
            return Retry(backoff_s=self._backoff(attempt))
        if error_kind == "images_unsupported":
            return Abort(failure_kind="images_unsupported")
        return Abort(failure_kind="model_error")

    def describe(self) -> Mapping[str, Any]:
        """Configuration for the digest."""
        return {
            "max_tool_retries": self.max_tool_retries,
            "max_model_retries": self.max_model_retries,
            "base_backoff_s": self.base_backoff_s,
            "max_backoff_s": self.max_backoff_s,
        }


@dataclass(frozen=True, slots=True)
class BlockOnGates:
    """Default for interactive runs: block on every gate."""

    def on_gate(self, gated: CallGated) -> GateDecision:
        """Always block."""
        return Block()

    def describe(self) -> Mapping[str, Any]:
        """No configuration."""
        return {}


@dataclass(frozen=True, slots=True)
class AbortOnGates:
    """For unbound runs: nobody can answer a gate, so it ends the run."""

    def on_gate(self, gated: CallGated) -> GateDecision:
        """Always abort as ``gate_not_supported``."""
        return Abort(failure_kind="gate_not_supported")

    def describe(self) -> Mapping[str, Any]:
        """No configuration."""
        return {}


@dataclass(frozen=True, slots=True)
class RepetitionStop:
    """Default no-progress detection (docs/loop.md).

    No progress when the most common signature occurs at least ``repeat_threshold`` times in the
    last ``signature_window`` pushed, or the last ``failure_run`` outcome kinds are the same
    failure.
    """

    signature_window: int = 5
    repeat_threshold: int = 3
    failure_run: int = 3

    def __post_init__(self) -> None:
        # The state keeps the last RING signatures and outcome kinds: a window past it could
        # never fill, so it is refused here rather than capped without a word.
        for key, value in (
            ("signature_window", self.signature_window),
            ("repeat_threshold", self.repeat_threshold),
            ("failure_run", self.failure_run),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= RING:
                raise ConfigError(
                    f"RepetitionStop {key}={value!r}: must be a whole number from 1 to {RING} "
                    f"(the loop state keeps the last {RING} call signatures and outcome kinds)"
                )
        if self.repeat_threshold > self.signature_window:
            raise ConfigError(
                f"RepetitionStop repeat_threshold={self.repeat_threshold} can never be reached "
                f"in a signature_window of {self.signature_window}: keep it at most the window"
            )

    def after_reply(self, state: LoopExecutionState) -> StopDecision:
        """A reply is progress: complete."""
        return _CONTINUE

    def after_wave(
        self, state: LoopExecutionState, results: Sequence[CallResult] = ()
    ) -> StopDecision:
        """Check the rings."""
        window = state.recent_call_signatures[-self.signature_window :]
        # Only a window that repeats a call can reach a threshold above one (the common case
        # needs no count).
        if window and (self.repeat_threshold <= 1 or len(set(window)) < len(window)):
            signature, count = Counter(window).most_common(1)[0]
            if count >= self.repeat_threshold:
                tool = signature.split(":", 1)[0]
                return NoProgress(
                    detail=f"the same call to {tool!r} was made {count} times "
                    f"in the last {len(window)} calls"
                )
        kinds = state.recent_failure_kinds[-self.failure_run :]
        if len(kinds) == self.failure_run and len(set(kinds)) == 1 and kinds[0] != "ok":
            return NoProgress(
                detail=f"the last {self.failure_run} tool calls all failed ({kinds[0]})"
            )
        return _CONTINUE

    def describe(self) -> Mapping[str, Any]:
        """Configuration for the digest."""
        return {
            "signature_window": self.signature_window,
            "repeat_threshold": self.repeat_threshold,
            "failure_run": self.failure_run,
        }


@dataclass(frozen=True, slots=True)
class LimitsBudget:
    """Iteration cap of the family, narrowed by the run's ``Limits``."""

    max_iterations: int = 32

    def iteration_limit(self, requested: int) -> int:
        """Never wider than the family's cap."""
        return min(self.max_iterations, requested)

    def describe(self) -> Mapping[str, Any]:
        """Configuration for the digest."""
        return {"max_iterations": self.max_iterations}
