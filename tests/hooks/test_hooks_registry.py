"""Registration rules of HookRegistry (DESIGN §11)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from reverie.errors import UsageError
from reverie.hooks import (
    MAX_RESTRICTED_TIMEOUT_S,
    HookRegistrationError,
    HookRegistry,
    TrustClass,
)


def noop(ctx: object) -> None:
    return None


def test_hooks_are_ordered_by_phase_then_priority_then_id(registry: HookRegistry) -> None:
    registry.register("before_capability", noop, name="telemetry-a", phase="telemetry")
    registry.register("before_capability", noop, name="policy-b", priority=0)
    registry.register("before_capability", noop, name="policy-a", priority=0)
    registry.register("before_capability", noop, name="policy-early", priority=-5)
    registry.register("before_capability", noop, name="auth", phase="authorization", priority=9)
    registry.register("before_capability", noop, name="valid", phase="validation", priority=99)

    names = [h.name for h in registry.hooks("before_capability")]

    assert names == ["valid", "auth", "policy-early", "policy-a", "policy-b", "telemetry-a"]


def test_trust_class_is_fixed_by_the_registration_method(registry: HookRegistry) -> None:
    registry.register("after_model", noop, name="app")
    registry.register_builtin("after_model", noop, name="core")
    registry.register_installed("after_model", noop, name="ext")
    registry.register_self_authored("after_model", noop, name="agent")

    trust = {h.name: h.trust for h in registry.hooks("after_model")}

    assert trust == {
        "app": "trusted",
        "core": "builtin",
        "ext": "installed",
        "agent": "self_authored",
    }


def test_duplicate_hook_name_is_rejected(registry: HookRegistry) -> None:
    registry.register("before_capability", noop, name="no-deletes")

    with pytest.raises(HookRegistrationError, match="already registered"):
        registry.register_installed("after_model", noop, name="no-deletes")


def test_unknown_hook_point_is_rejected(registry: HookRegistry) -> None:
    bad_point: Any = "before_everything"
    with pytest.raises(HookRegistrationError, match="unknown hook point") as info:
        registry.register(bad_point, noop, name="x")
    assert info.value.field == "point"


def test_unknown_phase_is_rejected(registry: HookRegistry) -> None:
    bad_phase: Any = "whenever"
    with pytest.raises(HookRegistrationError, match="unknown phase"):
        registry.register("before_capability", noop, name="x", phase=bad_phase)


@pytest.mark.parametrize("name", ["", " spaced", "has space", "x" * 129, "-leading"])
def test_malformed_hook_name_is_rejected(registry: HookRegistry, name: str) -> None:
    with pytest.raises(HookRegistrationError, match="not a valid id"):
        registry.register("before_capability", noop, name=name)


@pytest.mark.parametrize("method", ["register_installed", "register_self_authored"])
def test_installed_and_self_authored_hooks_cannot_register_after_turn(
    registry: HookRegistry, method: str
) -> None:
    register: Callable[..., object] = getattr(registry, method)

    with pytest.raises(HookRegistrationError, match="cannot bind after_turn"):
        register("after_turn", noop, name="sneaky")
    assert "sneaky" not in registry


def test_trusted_and_builtin_hooks_can_register_after_turn(registry: HookRegistry) -> None:
    registry.register("after_turn", noop, name="audit")
    registry.register_builtin("after_turn", noop, name="curation")

    assert [h.name for h in registry.hooks("after_turn")] == ["audit", "curation"]


@pytest.mark.parametrize("kinds", [None, set(), "tool_started", [""]])
def test_event_hook_without_a_kind_filter_is_rejected(registry: HookRegistry, kinds: Any) -> None:
    with pytest.raises(HookRegistrationError, match="event") as info:
        registry.register("event", noop, name="watch", event_kinds=kinds)
    assert info.value.field == "event_kinds"


def test_event_kinds_on_a_non_event_point_is_rejected(registry: HookRegistry) -> None:
    with pytest.raises(HookRegistrationError, match="only applies to the event point"):
        registry.register("after_model", noop, name="x", event_kinds={"tool_started"})


def test_restricted_hook_cannot_ask_for_a_timeout_above_the_cap(registry: HookRegistry) -> None:
    with pytest.raises(HookRegistrationError, match="timeout") as info:
        registry.register_installed(
            "after_model", noop, name="slow", timeout_s=MAX_RESTRICTED_TIMEOUT_S + 1
        )
    assert info.value.field == "timeout_s"
    registry.register("after_model", noop, name="slow-but-trusted", timeout_s=30)


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), True])
def test_timeout_must_be_a_positive_number(registry: HookRegistry, timeout: Any) -> None:
    with pytest.raises(HookRegistrationError, match="timeout_s"):
        registry.register("after_model", noop, name="x", timeout_s=timeout)


def test_non_callable_hook_is_rejected(registry: HookRegistry) -> None:
    not_callable: Any = "no_deletes"
    with pytest.raises(HookRegistrationError, match="callable"):
        registry.register("before_capability", not_callable, name="x")


def test_unregister_removes_the_hook_and_unknown_name_is_rejected(
    registry: HookRegistry,
) -> None:
    registry.register("before_capability", noop, name="no-deletes")

    removed = registry.unregister("no-deletes")

    assert removed.name == "no-deletes"
    assert registry.hooks("before_capability") == ()
    assert len(registry) == 0
    with pytest.raises(HookRegistrationError, match="no hook named"):
        registry.unregister("no-deletes")


def test_registration_errors_are_usage_errors() -> None:
    assert issubclass(HookRegistrationError, UsageError)


def test_restricted_flag_follows_trust_class(registry: HookRegistry) -> None:
    trusts: dict[str, TrustClass] = {}
    for registration in (
        registry.register("after_model", noop, name="a"),
        registry.register_builtin("after_model", noop, name="b"),
        registry.register_installed("after_model", noop, name="c"),
        registry.register_self_authored("after_model", noop, name="d"),
    ):
        trusts[registration.name] = registration.trust
        assert registration.restricted == (registration.trust in ("installed", "self_authored"))
    assert set(trusts.values()) == {"trusted", "builtin", "installed", "self_authored"}


def test_bound_points_follow_registration_and_removal(registry: HookRegistry) -> None:
    assert registry.bound_points == frozenset()
    registry.register("after_model", noop, name="a")
    registry.register("after_model", noop, name="b")
    registry.register("before_prompt", noop, name="c")
    assert registry.bound_points == {"after_model", "before_prompt"}
    child = registry.extended([])
    registry.unregister("a")
    assert registry.bound_points == {"after_model", "before_prompt"}
    registry.unregister("b")
    assert registry.bound_points == {"before_prompt"}
    assert child.bound_points == {"after_model", "before_prompt"}  # a copy, not a view
