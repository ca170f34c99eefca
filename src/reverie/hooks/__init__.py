"""Hooks: middleware around the loop's host ports (docs/hooks.md).

A hook is a sync or async function bound to a *point* of a run. Its *trust class* comes from
where it was registered, never from the hook, and decides its powers::

    from reverie.hooks import Deny

    async def no_deletes(ctx):                      # ctx: CapabilityHookContext
        return Deny("deletes are off") if ctx.tool.startswith("delete") else None

    rt.hooks.register("before_capability", no_deletes, name="no-deletes")   # trusted

:class:`HookRegistry` holds the hooks; :class:`HookDispatcher` runs them with the ordering,
composition, timeout and poisoning rules; :mod:`reverie.hooks.manifest` loads them from TOML.
See ``docs/hooks.md`` for a guide with one example per point.
"""

from __future__ import annotations

from reverie.hooks.decisions import (
    AfterTurnResult,
    Allow,
    Deny,
    GateDecision,
    GateOutcome,
    GateResult,
    GuardOutcome,
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
from reverie.hooks.dispatcher import (
    AFTER_TURN_CEILING_S,
    DEFAULT_AFTER_TURN_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    HookDispatcher,
)
from reverie.hooks.manifest import (
    HookSpec,
    load_hook_manifest,
    read_hook_specs,
    register_config_hooks,
    register_manifest_hooks,
)
from reverie.hooks.points import (
    FIRST_PARTY_TRUST,
    GUARD_POINTS,
    HOOK_POINTS,
    OBSERVER_POINTS,
    PHASES,
    TRUST_CLASSES,
    AfterTurnContext,
    CapabilityHookContext,
    CapabilityResultContext,
    CheckpointHookContext,
    EventHookContext,
    EventLike,
    GuardPoint,
    HookPoint,
    InputGuardContext,
    ModelHookContext,
    ObserverPoint,
    Phase,
    PromptHookContext,
    ReplyGuardContext,
    TrustClass,
)
from reverie.hooks.registry import (
    MAX_RESTRICTED_TIMEOUT_S,
    AgentHook,
    HookFn,
    HookRegistration,
    HookRegistrationError,
    HookRegistry,
)

__all__ = [
    "AFTER_TURN_CEILING_S",
    "DEFAULT_AFTER_TURN_TIMEOUT_S",
    "DEFAULT_TIMEOUT_S",
    "FIRST_PARTY_TRUST",
    "GUARD_POINTS",
    "HOOK_POINTS",
    "MAX_RESTRICTED_TIMEOUT_S",
    "OBSERVER_POINTS",
    "PHASES",
    "TRUST_CLASSES",
    "AfterTurnContext",
    "AfterTurnResult",
    "AgentHook",
    "Allow",
    "CapabilityHookContext",
    "CapabilityResultContext",
    "CheckpointHookContext",
    "Deny",
    "EventHookContext",
    "EventLike",
    "GateDecision",
    "GateOutcome",
    "GateResult",
    "GuardOutcome",
    "GuardPoint",
    "GuardResult",
    "HookDispatcher",
    "HookFailure",
    "HookFailureReason",
    "HookFn",
    "HookPoint",
    "HookRegistration",
    "HookRegistrationError",
    "HookRegistry",
    "HookSpec",
    "InputGuardContext",
    "ModelHookContext",
    "ObserveResult",
    "ObserverPoint",
    "PauseApproval",
    "PauseAuth",
    "Phase",
    "PromptHookContext",
    "PromptResult",
    "PromptSnippet",
    "ReplyGuardContext",
    "Rewrite",
    "Snippet",
    "TrustClass",
    "load_hook_manifest",
    "read_hook_specs",
    "register_config_hooks",
    "register_manifest_hooks",
]
