"""The public face of reverie.hooks."""

from __future__ import annotations

import reverie.hooks

EXPECTED = {
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
    "AgentHook",
    "AfterTurnResult",
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
}


def test_all_is_exactly_the_public_names() -> None:
    assert set(reverie.hooks.__all__) == EXPECTED
    assert len(reverie.hooks.__all__) == len(EXPECTED)
    for name in reverie.hooks.__all__:
        assert hasattr(reverie.hooks, name), name


def test_public_names_of_design_section_2_are_exported() -> None:
    from reverie.hooks import Allow, Deny, PauseApproval

    assert Deny("deletes are off").reason == "deletes are off"
    assert Allow().kind == "allow"
    assert PauseApproval("ask").kind == "pause_approval"
