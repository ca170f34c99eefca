"""Loop families: named, immutable compositions of the nine strategies (docs/loop.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reverie.core.canonical import digest
from reverie.errors import UnknownFamilyError, UsageError
from reverie.loop.finish import FinishOnTool
from reverie.loop.state import STATE_SCHEMA_ID
from reverie.loop.strategies import (
    AbortOnGates,
    AllCapabilities,
    BatchPolicyStrategy,
    BlockOnGates,
    BudgetStrategy,
    CapabilityStrategy,
    ContextStrategy,
    DefaultRecovery,
    DrainBoth,
    GateHandlingStrategy,
    InputDrainStrategy,
    LimitsBudget,
    ModelStrategy,
    ParallelIfSafe,
    PrimaryModel,
    RecoveryStrategy,
    RepetitionStop,
    StopConditionStrategy,
    WindowContext,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ComponentIdentity:
    """A family's id and the digest of its composition."""

    id: str
    digest: str


def _describe(strategy: Any) -> Mapping[str, Any]:
    cls = type(strategy)
    return {"class": f"{cls.__module__}.{cls.__qualname__}", "config": dict(strategy.describe())}


_PROTOCOLS: dict[str, tuple[str, ...]] = {
    "context": ("plan",),
    "capabilities": ("filter",),
    "model": ("select", "fall_back", "failed_kinds"),
    "inputs": ("drain_steering", "drain_follow_up"),
    "batch": ("choose",),
    "recovery": ("on_tool_error", "on_model_error"),
    "gates": ("on_gate",),
    "stop": ("after_reply", "after_wave"),
    "budget": ("iteration_limit",),
}
"""Each slot of a family and the methods its strategy protocol calls (``describe`` besides)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopFamily:
    """The nine strategies a profile runs with."""

    id: str
    context: ContextStrategy = field(default_factory=WindowContext)
    capabilities: CapabilityStrategy = field(default_factory=AllCapabilities)
    model: ModelStrategy = field(default_factory=PrimaryModel)
    inputs: InputDrainStrategy = field(default_factory=DrainBoth)
    batch: BatchPolicyStrategy = field(default_factory=ParallelIfSafe)
    recovery: RecoveryStrategy = field(default_factory=DefaultRecovery)
    gates: GateHandlingStrategy = field(default_factory=BlockOnGates)
    stop: StopConditionStrategy = field(default_factory=RepetitionStop)
    budget: BudgetStrategy = field(default_factory=LimitsBudget)
    _identity: ComponentIdentity | None = field(default=None, init=False, repr=False, compare=False)
    """The digest, computed when the family is built (a family and its strategies are
    immutable)."""

    def __post_init__(self) -> None:
        # Checked when the family is built, not at a run's first tick: each slot holds a
        # strategy with its protocol's methods, and the composition has a digest.
        if not isinstance(self.id, str) or not self.id.strip():
            raise UsageError(f"a loop family needs a non-empty id, not {self.id!r}")
        for slot, methods in _PROTOCOLS.items():
            strategy = getattr(self, slot)
            wanted = (*methods, "describe")
            missing = [m for m in wanted if not callable(getattr(strategy, m, None))]
            if missing:
                raise UsageError(
                    f"loop family {self.id!r}: its {slot} strategy {type(strategy).__name__} "
                    f"lacks {', '.join(missing)} (a {slot} strategy implements "
                    f"{', '.join(wanted)})"
                )
        try:
            self.identity  # noqa: B018 - computed now: a describe() that cannot be hashed fails here
        except Exception as exc:
            raise UsageError(
                f"loop family {self.id!r}: its strategies' describe() must return JSON-able "
                f"configuration ({type(exc).__name__})"
            ) from exc

    def description(self) -> dict[str, Any]:
        """The canonical description the digest is computed over."""
        return {
            "id": self.id,
            "checkpoint_schema": STATE_SCHEMA_ID,
            "strategies": {
                "context": _describe(self.context),
                "capabilities": _describe(self.capabilities),
                "model": _describe(self.model),
                "inputs": _describe(self.inputs),
                "batch": _describe(self.batch),
                "recovery": _describe(self.recovery),
                "gates": _describe(self.gates),
                "stop": _describe(self.stop),
                "budget": _describe(self.budget),
            },
        }

    @property
    def identity(self) -> ComponentIdentity:
        """Content-addressed identity: change any strategy or its config, the digest changes."""
        cached = self._identity
        if cached is None:
            cached = ComponentIdentity(id=self.id, digest=digest(self.description()))
            object.__setattr__(self, "_identity", cached)  # frozen: set once, never changed
        return cached


def default_families() -> tuple[LoopFamily, ...]:
    """The families every runtime registers."""
    return (
        # The family's cap is a ceiling; the run's Limits (default 32) narrow it.
        LoopFamily(id="default", budget=LimitsBudget(max_iterations=1000)),
        # Typed interactive runs (docs/output.md): gates block, inputs reach the run; the run
        # ends on a valid structured_result, and any wrong answer gets one repair in total.
        LoopFamily(
            id="default_structured",
            stop=FinishOnTool(repair_invalid_calls=True),
            budget=LimitsBudget(max_iterations=1000),
        ),
        LoopFamily(
            id="unbound",
            gates=AbortOnGates(),
            budget=LimitsBudget(max_iterations=1000),
            inputs=DrainBoth(steering=False, follow_up=False),
        ),
        LoopFamily(
            id="unbound_structured",
            gates=AbortOnGates(),
            stop=FinishOnTool(),  # ends on a valid structured_result; text gets one repair
            budget=LimitsBudget(max_iterations=1000),
            inputs=DrainBoth(steering=False, follow_up=False),
        ),
    )


class LoopFamilyRegistry:
    """Families by id, built once at start-up."""

    def __init__(self, families: Iterable[LoopFamily] = ()) -> None:
        self._families: dict[str, LoopFamily] = {}
        for family in families:
            self.add(family)

    def add(self, family: LoopFamily) -> None:
        """Register a family; a duplicate id, or anything but a :class:`LoopFamily`, is
        rejected."""
        if not isinstance(family, LoopFamily):
            raise UsageError(
                f"loop families are LoopFamily values (got {type(family).__name__}); compose "
                "one with LoopFamily(id=..., context=..., stop=..., ...)"
            )
        if family.id in self._families:
            raise UsageError(f"loop family {family.id!r} is already registered")
        self._families[family.id] = family

    def get(self, family_id: str) -> LoopFamily:
        """The family, or :class:`UnknownFamilyError`."""
        try:
            return self._families[family_id]
        except KeyError:
            known = ", ".join(sorted(self._families)) or "none"
            raise UnknownFamilyError(
                f"unknown loop family {family_id!r} (registered: {known})"
            ) from None

    def ids(self) -> tuple[str, ...]:
        """Registered ids."""
        return tuple(self._families)
