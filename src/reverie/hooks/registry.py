"""The hook registry: which hooks exist, where they bind, and what they may do (docs/hooks.md).

The trust class of a hook is fixed by the method that registers it, never by the hook:

- :meth:`HookRegistry.register` → ``trusted``: the application (``rt.hooks.register``) and the
  operator's ``reverie.toml``.
- :meth:`HookRegistry.register_builtin` → ``builtin``: reverie itself (e.g. memory curation).
- :meth:`HookRegistry.register_installed` → ``installed``: extension manifests.
- :meth:`HookRegistry.register_self_authored` → ``self_authored``: hooks an agent creates at
  run time.

The rules checked here (registration) are checked again where it matters at dispatch: the
registry refuses to bind a restricted hook to ``after_turn``, and the dispatcher ignores a
restricted hook's ``Allow``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Final, TypeAlias, cast

from reverie.errors import UsageError
from reverie.hooks.points import (
    FIRST_PARTY_TRUST,
    HOOK_POINTS,
    PHASES,
    HookPoint,
    Phase,
    TrustClass,
)

__all__ = [
    "MAX_RESTRICTED_TIMEOUT_S",
    "HookFn",
    "HookRegistration",
    "HookRegistrationError",
    "HookRegistry",
]

HookFn: TypeAlias = Callable[[Any], object]
"""A hook: a sync or async callable taking the point's context (see :mod:`.points`)."""

MAX_RESTRICTED_TIMEOUT_S: Final = 1.0
"""The longest timeout an ``installed`` or ``self_authored`` hook may ask for. Their hooks run
inside the loop, so an untrusted extension must not be able to stall every step."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/@+\-]{0,127}")
_PHASE_RANK: Final[dict[Phase, int]] = {phase: rank for rank, phase in enumerate(PHASES)}


class HookRegistrationError(UsageError):
    """A hook was registered (or unregistered) in a way the rules of docs/hooks.md forbid.

    The message reads ``hook 'NAME': PROBLEM. Fix: FIX``; the parts are kept as attributes so a
    manifest loader can name the matching TOML key and phrase the fix for TOML.

    Args:
        problem: What is wrong, safely worded.
        fix: How to fix the call.
        field: The registration parameter at fault (``name``, ``point``, ``fn``, ``phase``,
            ``priority``, ``event_kinds`` or ``timeout_s``).
        hook: The hook name, when it is known.
    """

    def __init__(self, problem: str, *, fix: str, field: str, hook: str | None = None) -> None:
        prefix = f"hook {hook!r}: " if hook else ""
        super().__init__(f"{prefix}{problem}. Fix: {fix}")
        self.problem = problem
        self.fix = fix
        self.field = field
        self.hook = hook


@dataclass(frozen=True, slots=True, kw_only=True)
class HookRegistration:
    """One registered hook. Its ``name`` is its id: unique, stable, used to poison it."""

    name: str
    """The hook id."""
    point: HookPoint
    """The point it is bound to."""
    fn: HookFn
    """The callable; sync or async, taking the point's context."""
    trust: TrustClass
    """Where it came from; decides its powers."""
    phase: Phase = "policy"
    """Its ordering band: ``validation < authorization < policy < telemetry``."""
    priority: int = 0
    """Its order within the phase; lower runs first, ties broken by ``name``."""
    event_kinds: frozenset[str] | None = None
    """For the ``event`` point: the event kinds it receives. ``None`` for every other point."""
    timeout_s: float | None = None
    """Its own timeout; ``None`` uses the dispatcher's default for the point."""
    promoted: bool = False
    """An ``installed`` hook the operator promoted (:meth:`HookRegistry.promote`): its text
    reaches the model verbatim (still enveloped) instead of as a summary."""

    @property
    def summary_only(self) -> bool:
        """Whether text this hook writes reaches the model only as a bounded summary or a
        reference (an ``installed`` hook the operator has not promoted)."""
        return self.trust == "installed" and not self.promoted

    @property
    def order_key(self) -> tuple[int, int, str]:
        """The dispatch order: (phase, priority, id)."""
        return (_PHASE_RANK[self.phase], self.priority, self.name)

    @property
    def restricted(self) -> bool:
        """Whether this is an ``installed`` or ``self_authored`` hook with restricted powers."""
        return self.trust not in FIRST_PARTY_TRUST


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentHook:
    """A hook declared on an ``Agent`` (trusted: it comes from the application's code).

    Example::

        Agent(..., hooks=[AgentHook(point="before_capability", fn=no_deletes, name="no-deletes")])
    """

    point: HookPoint
    fn: Callable[..., Any]
    name: str
    phase: Phase = "policy"
    priority: int = 0
    event_kinds: Iterable[str] | None = None
    timeout_s: float | None = None


class HookRegistry:
    """Every hook of a runtime, by point, in dispatch order.

    ``Runtime.hooks`` is one of these. Registration is not thread-safe: register hooks from the
    event loop's thread. A dispatch reads a snapshot, so registering or unregistering while a run
    is between steps affects only the steps that follow.

    Example:
        >>> async def no_deletes(ctx):
        ...     return Deny("deletes are off") if ctx.tool.startswith("delete") else None
        >>> rt.hooks.register("before_capability", no_deletes, name="no-deletes")
    """

    def __init__(self) -> None:
        """Create an empty registry."""
        self._by_name: dict[str, HookRegistration] = {}
        self._by_point: dict[HookPoint, tuple[HookRegistration, ...]] = {}
        self.bound_points: frozenset[HookPoint] = frozenset()
        """The points at least one hook is bound to. Replaced (never changed in place) when
        hooks are added or removed, so a hot path tells "no hook here" without a call."""

    # -- registration ---------------------------------------------------------------------------

    def register(
        self,
        point: HookPoint,
        fn: HookFn,
        *,
        name: str,
        phase: Phase = "policy",
        priority: int = 0,
        event_kinds: Iterable[str] | None = None,
        timeout_s: float | None = None,
    ) -> HookRegistration:
        """Register an application hook, with trust class ``trusted``.

        Args:
            point: The hook point, e.g. ``"before_capability"``.
            fn: A sync or async callable taking the point's context.
            name: The hook id; unique in the registry. Letters, digits and ``_.:/@+-``.
            phase: ``validation``, ``authorization``, ``policy`` (default) or ``telemetry``.
            priority: Order within the phase; lower runs first, ties broken by name.
            event_kinds: Required for ``event`` (e.g. ``{"tool_started"}``); refused elsewhere.
            timeout_s: This hook's timeout in seconds; default 0.05 in the loop, 5 for
                ``after_turn``.

        Returns:
            The registration.

        Raises:
            HookRegistrationError: The point is unknown, the name is taken or malformed,
                ``event`` has no kind filter, or a parameter has the wrong type.
        """
        return self._add(point, fn, "trusted", name, phase, priority, event_kinds, timeout_s)

    def register_builtin(
        self,
        point: HookPoint,
        fn: HookFn,
        *,
        name: str,
        phase: Phase = "policy",
        priority: int = 0,
        event_kinds: Iterable[str] | None = None,
        timeout_s: float | None = None,
    ) -> HookRegistration:
        """Register a hook that ships with reverie, with trust class ``builtin``.

        Takes the same arguments as :meth:`register`.
        """
        return self._add(point, fn, "builtin", name, phase, priority, event_kinds, timeout_s)

    def register_installed(
        self,
        point: HookPoint,
        fn: HookFn,
        *,
        name: str,
        phase: Phase = "policy",
        priority: int = 0,
        event_kinds: Iterable[str] | None = None,
        timeout_s: float | None = None,
    ) -> HookRegistration:
        """Register a hook from an extension manifest, with trust class ``installed``.

        Takes the same arguments as :meth:`register`. Installed hooks cannot bind
        ``after_turn``, cannot ask for a timeout above 1 s, and have restricted powers at
        dispatch (their ``Allow`` is no opinion; their snippets are enveloped).
        """
        return self._add(point, fn, "installed", name, phase, priority, event_kinds, timeout_s)

    def register_self_authored(
        self,
        point: HookPoint,
        fn: HookFn,
        *,
        name: str,
        phase: Phase = "policy",
        priority: int = 0,
        event_kinds: Iterable[str] | None = None,
        timeout_s: float | None = None,
    ) -> HookRegistration:
        """Register a hook an agent created at run time, with trust class ``self_authored``.

        Takes the same arguments as :meth:`register`, with the restrictions of
        :meth:`register_installed`.
        """
        return self._add(point, fn, "self_authored", name, phase, priority, event_kinds, timeout_s)

    def promote(self, name: str) -> HookRegistration:
        """Let an ``installed`` hook's text reach the model verbatim (the operator's choice).

        By default an installed extension is summary-only: its prompt snippets reach the model
        as their bounded summary (or a reference) and its deny and pause reasons flattened and
        cut to 200 characters. A promoted hook's text goes as written — still inside the
        untrusted envelope, and still with no power to allow a call.

        Args:
            name: The id of a registered ``installed`` hook.

        Returns:
            The promoted registration.

        Raises:
            HookRegistrationError: No hook has that id, or it is not ``installed``.
        """
        registration = self._by_name.get(name)
        if registration is None or registration.trust != "installed":
            problem = (
                f"no hook named {name!r} is registered"
                if registration is None
                else f"only installed hooks are promoted; {name!r} is {registration.trust}"
            )
            raise HookRegistrationError(
                problem,
                fix="pass the id of a hook from an extension manifest (register_installed)",
                field="name",
                hook=name,
            )
        promoted = replace(registration, promoted=True)
        self._by_name[name] = promoted
        self._rebuild(promoted.point)
        return promoted

    def unregister(self, name: str) -> HookRegistration:
        """Remove a hook by id.

        Args:
            name: The hook id given at registration.

        Returns:
            The registration that was removed.

        Raises:
            HookRegistrationError: No hook has that id.
        """
        registration = self._by_name.pop(name, None)
        if registration is None:
            raise HookRegistrationError(
                f"no hook named {name!r} is registered",
                fix="pass an id from HookRegistry.names()",
                field="name",
            )
        self._rebuild(registration.point)
        return registration

    # -- queries --------------------------------------------------------------------------------

    def hooks(self, point: HookPoint) -> tuple[HookRegistration, ...]:
        """The hooks bound to ``point``, in dispatch order (phase, priority, id)."""
        return self._by_point.get(point, ())

    def get(self, name: str) -> HookRegistration | None:
        """The registration with id ``name``, or ``None``."""
        return self._by_name.get(name)

    def names(self) -> frozenset[str]:
        """Every registered hook id."""
        return frozenset(self._by_name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[HookRegistration]:
        for point in HOOK_POINTS:
            yield from self.hooks(point)

    def __len__(self) -> int:
        return len(self._by_name)

    def extended(self, hooks: Iterable[AgentHook]) -> HookRegistry:
        """A new registry with every hook of this one plus ``hooks`` registered as trusted.

        Used for hooks declared on an ``Agent``: they apply to that agent's runs only, and the
        runtime's own registry is left untouched.
        """
        child = HookRegistry()
        child._by_name = dict(self._by_name)
        child._by_point = dict(self._by_point)
        child.bound_points = self.bound_points
        for h in hooks:
            child.register(
                h.point,
                h.fn,
                name=h.name,
                phase=h.phase,
                priority=h.priority,
                event_kinds=h.event_kinds,
                timeout_s=h.timeout_s,
            )
        return child

    # -- internals ------------------------------------------------------------------------------

    def _add(
        self,
        point: object,
        fn: object,
        trust: TrustClass,
        name: object,
        phase: object,
        priority: object,
        event_kinds: Iterable[str] | None,
        timeout_s: object,
    ) -> HookRegistration:
        registration = _validated(point, fn, trust, name, phase, priority, event_kinds, timeout_s)
        if registration.name in self._by_name:
            raise HookRegistrationError(
                "a hook with this name is already registered (hook names are unique ids)",
                fix="pick another name, or unregister the old hook first",
                field="name",
                hook=registration.name,
            )
        self._by_name[registration.name] = registration
        self._rebuild(registration.point)
        return registration

    def _rebuild(self, point: HookPoint) -> None:
        # Kept sorted at registration so a dispatch is a plain tuple walk.
        bound = [r for r in self._by_name.values() if r.point == point]
        self._by_point[point] = tuple(sorted(bound, key=lambda r: r.order_key))
        self.bound_points = frozenset(p for p, hooks in self._by_point.items() if hooks)


def _validated(
    point: object,
    fn: object,
    trust: TrustClass,
    name: object,
    phase: object,
    priority: object,
    event_kinds: Iterable[str] | None,
    timeout_s: object,
) -> HookRegistration:
    """Check every registration rule and build the registration, or raise."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise HookRegistrationError(
            f"hook name {name!r} is not a valid id",
            fix="use 1-128 letters, digits and '_.:/@+-', starting with a letter or digit",
            field="name",
        )
    if point not in HOOK_POINTS:
        raise HookRegistrationError(
            f"unknown hook point {point!r}",
            fix=f"use one of {', '.join(HOOK_POINTS)}",
            field="point",
            hook=name,
        )
    if not callable(fn):
        raise HookRegistrationError(
            "the hook is not callable",
            fix="pass a sync or async function taking one context",
            field="fn",
            hook=name,
        )
    if phase not in PHASES:
        raise HookRegistrationError(
            f"unknown phase {phase!r}",
            fix=f"use one of {', '.join(PHASES)}",
            field="phase",
            hook=name,
        )
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise HookRegistrationError(
            "priority is not an int",
            fix="pass an int; lower runs first",
            field="priority",
            hook=name,
        )
    if trust not in FIRST_PARTY_TRUST and point == "after_turn":
        raise HookRegistrationError(
            f"{trust} hooks cannot bind after_turn",
            fix="bind an observer point such as event instead; only the application (in code "
            "or reverie.toml) and reverie itself can bind after_turn",
            field="point",
            hook=name,
        )
    kinds = _validated_kinds(name, point, event_kinds)
    timeout = _validated_timeout(name, trust, timeout_s)
    return HookRegistration(
        name=name,
        point=point,
        fn=cast(HookFn, fn),
        trust=trust,
        phase=phase,
        priority=priority,
        event_kinds=kinds,
        timeout_s=timeout,
    )


def _validated_kinds(
    name: str, point: HookPoint, event_kinds: Iterable[str] | None
) -> frozenset[str] | None:
    if point != "event":
        if event_kinds is not None:
            raise HookRegistrationError(
                f"event_kinds only applies to the event point, not {point}",
                fix="drop event_kinds, or bind the hook to the event point",
                field="event_kinds",
                hook=name,
            )
        return None
    if event_kinds is None or isinstance(event_kinds, str | bytes):
        raise HookRegistrationError(
            "the event point needs an event-kind filter",
            fix="pass event_kinds={'tool_started', ...} (a set of kinds, not a single string)",
            field="event_kinds",
            hook=name,
        )
    try:
        kinds = frozenset(event_kinds)
    except TypeError:
        kinds = frozenset()
    if not kinds or not all(isinstance(k, str) and k for k in kinds):
        raise HookRegistrationError(
            "event_kinds is empty or holds something other than kind names",
            fix="pass a non-empty set of event kinds, e.g. {'tool_started', 'run_finished'}",
            field="event_kinds",
            hook=name,
        )
    return kinds


def _validated_timeout(name: str, trust: TrustClass, timeout_s: object) -> float | None:
    if timeout_s is None:
        return None
    if (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, int | float)
        or not math.isfinite(timeout_s)
        or timeout_s <= 0
    ):
        raise HookRegistrationError(
            "timeout_s is not a positive number of seconds",
            fix="pass a positive number, or None for the point's default",
            field="timeout_s",
            hook=name,
        )
    if trust not in FIRST_PARTY_TRUST and timeout_s > MAX_RESTRICTED_TIMEOUT_S:
        raise HookRegistrationError(
            f"{trust} hooks may not ask for a timeout above {MAX_RESTRICTED_TIMEOUT_S:g} s",
            fix=f"lower timeout_s to at most {MAX_RESTRICTED_TIMEOUT_S:g}",
            field="timeout_s",
            hook=name,
        )
    return float(timeout_s)
