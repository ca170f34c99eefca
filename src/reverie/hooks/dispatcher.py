"""The hook dispatcher: runs the hooks of one point and composes their results (docs/hooks.md).

The runtime's host ports (docs/loop.md) call the dispatcher as middleware: the capability port
calls :meth:`HookDispatcher.gate` before each call, the prompt port :meth:`~HookDispatcher.
before_prompt`, the other ports :meth:`~HookDispatcher.observe`, and the exit applier
:meth:`~HookDispatcher.after_turn`. The loop cannot tell a hook's deny from a policy deny.

Failure handling, per point:

- gates fail **closed**: a hook that raises, times out or returns something malformed denies the
  call, and the deny names it;
- mutators apply nothing: the failed hook adds no snippet and the prompt is built without it;
- observers are isolated: the other observers still run;
- ``after_turn`` hooks are recorded and the next one still runs; the run is never affected.

Every failed hook (except at ``after_turn``, where the run is already over) is returned in
``newly_poisoned``; the runtime persists the run's poisoned set in its checkpoint and passes it
back on every dispatch, so a resume does not re-enable a failed hook. A poisoned observer or
mutator is skipped. A poisoned *gate* is not called either, but it keeps failing closed: it
denies every call it would have judged, so making a policy hook crash once cannot switch the
policy off for the rest of the run.

Timeouts: 50 ms per in-loop hook and 5 s per ``after_turn`` hook, unless the hook set its own;
one run's ``after_turn`` hooks together get the sum of their timeouts, capped at
:data:`AFTER_TURN_CEILING_S`, and a hook cut off by that overall bound is recorded as its own
``timeout``.
Async hooks are cancelled at their deadline. Sync hooks at in-loop points run inline on the
event loop (they are meant to be quick checks; a thread hop would cost more than the check), so
they cannot be interrupted: one that overruns its deadline still fails as ``timeout`` and its
answer is discarded. Sync ``after_turn`` hooks run in a worker thread, so the dispatcher can stop
waiting for them at the deadline.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import time
from collections.abc import Sequence, Set
from dataclasses import dataclass, replace
from typing import Final

from reverie.core.envelope import bounded_summary, wrap_untrusted
from reverie.errors import UsageError
from reverie.hooks.decisions import (
    AfterTurnResult,
    Allow,
    Deny,
    GateOutcome,
    GateResult,
    GuardResult,
    HookFailure,
    HookFailureReason,
    ObserveResult,
    PauseApproval,
    PauseAuth,
    PromptResult,
    PromptSnippet,
    Rewrite,
    Snippet,
)
from reverie.hooks.points import (
    OBSERVER_CONTEXTS,
    OBSERVER_POINTS,
    AfterTurnContext,
    CapabilityHookContext,
    GuardPoint,
    InputGuardContext,
    ObserverPoint,
    PromptHookContext,
    ReplyGuardContext,
)
from reverie.hooks.registry import HookRegistration, HookRegistry

__all__ = [
    "AFTER_TURN_CEILING_S",
    "DEFAULT_AFTER_TURN_TIMEOUT_S",
    "DEFAULT_TIMEOUT_S",
    "HookDispatcher",
]

logger = logging.getLogger("reverie.hooks")

DEFAULT_TIMEOUT_S: Final = 0.05
"""Default timeout of a hook at an in-loop point (every point but ``after_turn``)."""

DEFAULT_AFTER_TURN_TIMEOUT_S: Final = 5.0
"""Default timeout of each ``after_turn`` hook."""

AFTER_TURN_CEILING_S: Final = 60.0
"""The most one run's ``after_turn`` hooks may take together, whatever their own timeouts
add up to (``Runtime.open(..., after_turn_ceiling_s=...)``)."""

_SEVERITY: Final[dict[GateOutcome, int]] = {
    "pass": 0,
    "allow": 1,
    "pause_approval": 2,
    "pause_auth": 3,
    "deny": 4,
}
"""Composition order: deny > pause_auth > pause_approval > allow > pass."""

_PASS: Final = GateResult(decision="pass")


@dataclass(frozen=True, slots=True)
class _Returned:
    """A hook that returned in time; ``value`` is not yet checked for shape."""

    value: object


@dataclass(frozen=True, slots=True)
class _Vote:
    """One hook's opinion on a gate, as it takes part in composition."""

    decision: GateOutcome
    reason: str | None
    hook: HookRegistration
    untrusted_reason: bool


class HookDispatcher:
    """Runs the hooks of a :class:`HookRegistry` at each point, with the §11 rules.

    Args:
        registry: Where the hooks come from. Each dispatch reads a snapshot of it.
        default_timeout_s: Timeout of an in-loop hook that did not set its own.
        after_turn_timeout_s: Timeout of an ``after_turn`` hook that did not set its own.

    Raises:
        UsageError: A default timeout is not a positive number.
    """

    def __init__(
        self,
        registry: HookRegistry,
        *,
        default_timeout_s: float = DEFAULT_TIMEOUT_S,
        after_turn_timeout_s: float = DEFAULT_AFTER_TURN_TIMEOUT_S,
    ) -> None:
        for label, value in (
            ("default_timeout_s", default_timeout_s),
            ("after_turn_timeout_s", after_turn_timeout_s),
        ):
            if not math.isfinite(value) or value <= 0:
                raise UsageError(f"HookDispatcher {label} must be a positive number of seconds")
        self._registry = registry
        self._default_timeout_s = float(default_timeout_s)
        self._after_turn_timeout_s = float(after_turn_timeout_s)

    @property
    def registry(self) -> HookRegistry:
        """The registry this dispatcher reads."""
        return self._registry

    # -- before_capability ----------------------------------------------------------------------

    async def gate(self, ctx: CapabilityHookContext, *, poisoned: Set[str]) -> GateResult:
        """Run the ``before_capability`` hooks for one call and compose their decisions.

        Hooks run one after another in (phase, priority, id) order. The first non-allow decision
        (deny or a pause) short-circuits every remaining hook except those in the ``telemetry``
        phase, which still run and still take part in composition. Composition: deny >
        pause_auth > pause_approval > allow; among equals the earlier hook decides.

        Args:
            ctx: The call about to run.
            poisoned: The run's poisoned hook ids. A poisoned gate is not called; it denies.

        Returns:
            The composed decision, the deciding hook, the failures, and the newly poisoned ids.
            ``pass`` means no hook had an opinion.
        """
        _expect(ctx, CapabilityHookContext, "gate")
        hooks = self._registry.hooks("before_capability")
        if not hooks:
            return _PASS
        best: _Vote | None = None
        first_allow: HookRegistration | None = None
        failures: list[HookFailure] = []
        for hook in hooks:
            # ``best`` only ever holds a non-allow vote: once set, only telemetry still runs.
            if best is not None and hook.phase != "telemetry":
                continue
            vote = await self._gate_vote(hook, ctx, poisoned, failures)
            if vote is None:
                continue
            if vote.decision == "allow":
                first_allow = first_allow or hook
                continue
            if best is None or _SEVERITY[vote.decision] > _SEVERITY[best.decision]:
                best = vote
        if best is None and first_allow is not None:
            best = _Vote("allow", None, first_allow, untrusted_reason=False)
        newly_poisoned = _newly_poisoned(failures, poisoned)
        if best is None:
            return GateResult(
                decision="pass", failures=tuple(failures), newly_poisoned=newly_poisoned
            )
        if best.decision != "allow":
            # The tool name is safe to log; the arguments are not.
            logger.debug(
                "gate %s for tool %s decided by hook %s", best.decision, ctx.tool, best.hook.name
            )
        return GateResult(
            decision=best.decision,
            reason=best.reason,
            hook=best.hook.name,
            trust=best.hook.trust,
            untrusted_reason=best.untrusted_reason,
            failures=tuple(failures),
            newly_poisoned=newly_poisoned,
        )

    async def _gate_vote(
        self,
        hook: HookRegistration,
        ctx: CapabilityHookContext,
        poisoned: Set[str],
        failures: list[HookFailure],
    ) -> _Vote | None:
        """Call one gate hook and turn what it did into a vote (``None`` = no opinion)."""
        if hook.name in poisoned:
            reason = f"hook {hook.name!r} failed earlier in this run, so it keeps denying calls"
            return _Vote("deny", reason, hook, untrusted_reason=False)
        outcome = await self._call(hook, ctx, self._timeout(hook))
        if isinstance(outcome, _Returned):
            value = outcome.value
            if value is None:
                return None
            if isinstance(value, Allow):
                # A restricted hook can deny or pause, never allow past anyone: no opinion.
                return None if hook.restricted else _Vote("allow", None, hook, False)
            if isinstance(value, Deny | PauseApproval | PauseAuth):
                reason = value.reason
                if hook.summary_only and reason is not None:
                    reason = bounded_summary(reason)  # summary-only: never verbatim, bounded
                return _Vote(value.kind, reason, hook, untrusted_reason=hook.restricted)
            outcome = self._failure(
                hook,
                "malformed",
                f"returned {type(value).__name__}; expected Allow, Deny, PauseApproval, "
                "PauseAuth or None",
            )
        failures.append(outcome)
        reason = f"hook {hook.name!r} failed ({outcome.reason}), so the call is denied"
        return _Vote("deny", reason, hook, untrusted_reason=False)

    # -- before_input / before_reply (guardrails) -----------------------------------------------

    async def guard(
        self,
        point: GuardPoint,
        ctx: InputGuardContext | ReplyGuardContext,
        *,
        poisoned: Set[str],
    ) -> GuardResult:
        """Run the guardrails of ``point`` over one text, in (phase, priority, id) order.

        A deny stops the chain (the text is refused, whoever allowed it before); a rewrite
        hands its text to the next guardrail; a guardrail that raises, times out or returns
        something malformed denies (fail closed), and so does one poisoned earlier in the run.
        A restricted (``installed``/``self_authored``) guardrail can deny only: its rewrite
        counts as no opinion.
        """
        _expect(ctx, InputGuardContext if point == "before_input" else ReplyGuardContext, point)
        hooks = self._registry.hooks(point)
        text = ctx.text
        rewrites: list[tuple[str, str]] = []
        failures: list[HookFailure] = []
        for hook in hooks:
            if hook.name in poisoned:
                return self._guard_denied(
                    hook, f"guardrail {hook.name!r} failed earlier in this run", failures, poisoned
                )
            current = replace(ctx, text=text)
            outcome = await self._call(hook, current, self._timeout(hook))
            if isinstance(outcome, _Returned):
                value = outcome.value
                if value is None or isinstance(value, Allow):
                    continue
                if isinstance(value, Deny):
                    return self._guard_denied(hook, value.reason, failures, poisoned)
                if isinstance(value, Rewrite):
                    if not hook.restricted:
                        text = value.text
                        rewrites.append((hook.name, value.reason))
                    continue
                outcome = self._failure(
                    hook,
                    "malformed",
                    f"returned {type(value).__name__}; expected Allow, Deny, Rewrite or None",
                )
            failures.append(outcome)
            return self._guard_denied(
                hook,
                f"guardrail {hook.name!r} failed ({outcome.reason}), so the text is refused",
                failures,
                poisoned,
            )
        newly = _newly_poisoned(failures, poisoned)
        if not rewrites:
            return GuardResult(decision="allow", text=text, newly_poisoned=newly)
        last, reason = rewrites[-1]
        return GuardResult(
            decision="rewrite",
            text=text,
            guardrail=last,
            reason=reason,
            rewrites=tuple(rewrites),
            newly_poisoned=newly,
        )

    def _guard_denied(
        self,
        hook: HookRegistration,
        reason: str,
        failures: list[HookFailure],
        poisoned: Set[str],
    ) -> GuardResult:
        return GuardResult(
            decision="deny",
            text="",
            guardrail=hook.name,
            reason=reason,
            failures=tuple(failures),
            newly_poisoned=_newly_poisoned(failures, poisoned),
        )

    # -- before_prompt --------------------------------------------------------------------------

    async def before_prompt(self, ctx: PromptHookContext, *, poisoned: Set[str]) -> PromptResult:
        """Collect the snippets of the ``before_prompt`` hooks for one prompt.

        Hooks run concurrently; their snippets are returned in (phase, priority, id) order.
        Snippets of ``installed`` and ``self_authored`` hooks are always wrapped in the untrusted
        envelope; ``builtin`` and ``trusted`` snippets are passed as they are. An ``installed``
        hook the operator has not promoted is summary-only: the model gets its snippet's
        ``summary`` (flattened, at most 200 characters) or, without one, a reference saying how
        much it supplied — never the text. A hook that fails,
        times out or returns something other than a ``Snippet``, ``str`` or ``None`` adds
        nothing, and the prompt is built without it.

        Args:
            ctx: The prompt about to be built.
            poisoned: The run's poisoned hook ids; those hooks are skipped.

        Returns:
            The snippets, the failures, and the newly poisoned ids.
        """
        _expect(ctx, PromptHookContext, "before_prompt")
        hooks = [h for h in self._registry.hooks("before_prompt") if h.name not in poisoned]
        if not hooks:
            return PromptResult()
        snippets: list[PromptSnippet] = []
        failures: list[HookFailure] = []
        for hook, outcome in zip(hooks, await self._call_all(hooks, ctx), strict=True):
            if isinstance(outcome, _Returned):
                value = outcome.value
                summary: str | None = None
                if isinstance(value, Snippet):
                    summary = value.summary
                    value = value.text
                if value is None or (isinstance(value, str) and not value.strip()):
                    continue
                if isinstance(value, str):
                    if hook.summary_only:
                        value = _summary_only(value, summary, hook.name)
                    if hook.restricted:
                        value = wrap_untrusted(value, source=f"hook:{hook.name}")
                    snippets.append(PromptSnippet(text=value, hook=hook.name, trust=hook.trust))
                    continue
                outcome = self._failure(
                    hook,
                    "malformed",
                    f"returned {type(value).__name__}; expected Snippet, str or None",
                )
            failures.append(outcome)
        return PromptResult(
            snippets=tuple(snippets),
            failures=tuple(failures),
            newly_poisoned=_newly_poisoned(failures, poisoned),
        )

    # -- observers ------------------------------------------------------------------------------

    async def observe(
        self, point: ObserverPoint, ctx: object, *, poisoned: Set[str]
    ) -> ObserveResult:
        """Run the observers of ``point`` for one occurrence.

        Observers run concurrently and their return values are ignored. At the ``event`` point
        only hooks whose ``event_kinds`` hold ``ctx.event.kind`` run. A failing observer is
        recorded and poisoned; the others are not affected.

        Args:
            point: ``after_model``, ``after_capability``, ``after_checkpoint`` or ``event``.
            ctx: The point's context (e.g. :class:`EventHookContext` for ``event``).
            poisoned: The run's poisoned hook ids; those hooks are skipped.

        Returns:
            The hooks that ran, the failures, and the newly poisoned ids.

        Raises:
            UsageError: ``point`` is not an observer point, or ``ctx`` is not its context type.
        """
        if point not in OBSERVER_POINTS:
            raise UsageError(
                f"observe() takes an observer point ({', '.join(sorted(OBSERVER_POINTS))}), "
                f"not {point!r}; use gate(), before_prompt() or after_turn() for the others"
            )
        _expect(ctx, OBSERVER_CONTEXTS[point], f"observe({point!r})")
        hooks: Sequence[HookRegistration] = self._registry.hooks(point)
        if point == "event":
            kind = getattr(getattr(ctx, "event", None), "kind", None)
            if not isinstance(kind, str):
                raise UsageError("observe('event') needs ctx.event to have a str 'kind'")
            hooks = [h for h in hooks if h.event_kinds is not None and kind in h.event_kinds]
        hooks = [h for h in hooks if h.name not in poisoned]
        if not hooks:
            return ObserveResult()
        ran: list[str] = []
        failures: list[HookFailure] = []
        for hook, outcome in zip(hooks, await self._call_all(hooks, ctx), strict=True):
            if isinstance(outcome, HookFailure):
                failures.append(outcome)
            else:
                ran.append(hook.name)
        return ObserveResult(
            ran=tuple(ran),
            failures=tuple(failures),
            newly_poisoned=_newly_poisoned(failures, poisoned),
        )

    # -- after_turn -----------------------------------------------------------------------------

    def after_turn_deadline_s(self, ceiling_s: float = AFTER_TURN_CEILING_S) -> float:
        """The overall bound on one run's ``after_turn`` hooks: the sum of their own timeouts
        (a hook without one counts the default), capped at ``ceiling_s``.

        Derived from the hooks registered now, so each hook gets its whole timeout however
        many there are, up to the ceiling; 0 when none is registered.
        """
        return min(self._after_turn_total_s(), ceiling_s)

    def _after_turn_total_s(self) -> float:
        hooks = [h for h in self._registry.hooks("after_turn") if not h.restricted]
        return sum(h.timeout_s or self._after_turn_timeout_s for h in hooks)

    async def after_turn(
        self, ctx: AfterTurnContext, *, deadline_s: float | None = None
    ) -> AfterTurnResult:
        """Run every ``after_turn`` hook once, in order, each under its own timeout.

        Hooks run one after another; one that raises or times out is recorded and the next one
        still runs. Sync hooks run in a worker thread so their deadline holds. Only ``builtin``
        and ``trusted`` hooks can be bound here; any other is skipped.

        With an overall ``deadline_s`` (:meth:`after_turn_deadline_s`), each hook's timeout is
        also cut to what is left of it, and a hook reached after it has passed is not called:
        either way the miss is recorded as that hook's own ``timeout`` failure, so a slow hook
        can never hide a later one's miss behind an outer deadline.

        A hook never makes this raise. Cancellation of the caller still propagates.

        Args:
            ctx: The run that reached a terminal status.
            deadline_s: The overall bound on all the hooks (``None``: each its own timeout).

        Returns:
            The hooks that ran to completion and the failures.
        """
        _expect(ctx, AfterTurnContext, "after_turn")
        ran: list[str] = []
        failures: list[HookFailure] = []
        cut: list[str] = []
        clock = asyncio.get_running_loop().time
        # A deadline that covers every hook's whole timeout needs no enforcing here: each
        # hook's own timeout comes first. Only a capped one cuts hooks short.
        capped = deadline_s is not None and deadline_s < self._after_turn_total_s()
        end = clock() + deadline_s if deadline_s is not None and capped else None
        for hook in self._registry.hooks("after_turn"):
            if hook.restricted:  # the registry refuses these; checked again where it matters
                logger.warning("skipping %s hook %s bound to after_turn", hook.trust, hook.name)
                continue
            timeout = hook.timeout_s or self._after_turn_timeout_s
            shortened = False
            if end is not None:
                left = end - clock()
                if left <= 0:
                    cut.append(hook.name)
                    failures.append(
                        self._failure(
                            hook,
                            "timeout",
                            f"not called: the after_turn deadline of {deadline_s:g} s had passed",
                        )
                    )
                    continue
                shortened = left < timeout
                timeout = min(timeout, left)
            outcome = await self._call(hook, ctx, timeout, offload_sync=True)
            if isinstance(outcome, HookFailure):
                failures.append(outcome)
                if shortened and outcome.reason == "timeout":
                    cut.append(hook.name)
            else:
                ran.append(hook.name)
        return AfterTurnResult(ran=tuple(ran), failures=tuple(failures), cut_off=tuple(cut))

    # -- calling one hook -----------------------------------------------------------------------

    def _timeout(self, hook: HookRegistration) -> float:
        return hook.timeout_s or self._default_timeout_s

    async def _call_all(
        self, hooks: Sequence[HookRegistration], ctx: object
    ) -> list[_Returned | HookFailure]:
        """Call ``hooks`` concurrently; outcomes come back in the order of ``hooks``."""
        if len(hooks) == 1:
            return [await self._call(hooks[0], ctx, self._timeout(hooks[0]))]
        # _call never raises for a hook's sake, so one failure cannot cancel its siblings.
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(self._call(h, ctx, self._timeout(h))) for h in hooks]
        return [task.result() for task in tasks]

    async def _call(
        self,
        hook: HookRegistration,
        ctx: object,
        timeout_s: float,
        *,
        offload_sync: bool = False,
    ) -> _Returned | HookFailure:
        """Call one hook under its deadline; never raises except for the caller's cancellation."""
        started = time.perf_counter()
        deadline = asyncio.timeout(timeout_s)
        try:
            async with deadline:
                if offload_sync and not inspect.iscoroutinefunction(hook.fn):
                    value = await asyncio.to_thread(hook.fn, ctx)
                else:
                    value = hook.fn(ctx)
                if inspect.isawaitable(value):
                    value = await value
        except TimeoutError as exc:
            if deadline.expired():
                return self._failure(hook, "timeout", f"no result within {timeout_s:g} s")
            return self._failure(hook, "exception", "TimeoutError", exc)
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise  # the caller is being cancelled: that is not the hook's failure
            return self._failure(hook, "exception", "CancelledError", exc)
        except Exception as exc:
            return self._failure(hook, "exception", type(exc).__name__, exc)
        if time.perf_counter() - started > timeout_s:
            # A sync hook (or an async one that never yielded) cannot be interrupted; its answer
            # arrived after the deadline and is discarded, as if it had been cut off.
            return self._failure(hook, "timeout", f"no result within {timeout_s:g} s")
        return _Returned(value)

    def _failure(
        self,
        hook: HookRegistration,
        reason: HookFailureReason,
        detail: str,
        exc: BaseException | None = None,
    ) -> HookFailure:
        # Only safe fields above debug: exception messages may quote the call's arguments.
        # reverie's own after-turn upkeep (recording, curation) is never a warning: it would
        # reach a chat user's terminal for something their turn does not depend on.
        quiet = hook.trust == "builtin" and hook.point == "after_turn"
        logger.log(
            logging.DEBUG if quiet else logging.WARNING,
            "hook %s (%s) failed at %s: %s (%s)",
            hook.name,
            hook.trust,
            hook.point,
            reason,
            detail,
        )
        if exc is not None:
            logger.debug("hook %s raised", hook.name, exc_info=exc)
        return HookFailure(hook=hook.name, point=hook.point, reason=reason, detail=detail)


def _summary_only(text: str, summary: str | None, hook: str) -> str:
    """What the model sees of an unpromoted ``installed`` hook's snippet: its own summary,
    bounded, or else a reference — never the text itself."""
    if summary is not None and summary.strip():
        return (
            f"A summary of context from the installed extension hook {hook!r} (summary-only "
            f"trust: the text itself is not shown): {bounded_summary(summary)}"
        )
    return (
        f"The installed extension hook {hook!r} supplied {len(text)} characters of context. "
        "Summary-only trust: the text itself is not shown, and the hook gave no summary."
    )


def _expect(ctx: object, cls: type, where: str) -> None:
    if not isinstance(ctx, cls):
        raise UsageError(f"{where} needs a {cls.__name__}, got {type(ctx).__name__}")


def _newly_poisoned(failures: Sequence[HookFailure], poisoned: Set[str]) -> frozenset[str]:
    return frozenset(f.hook for f in failures if f.hook not in poisoned)
