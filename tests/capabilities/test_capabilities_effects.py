"""DESIGN §9.2: declared effects map to concurrency hints; undeclared means exclusive."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

import pytest

from reverie.capabilities import tool
from reverie.errors import UsageError


def noop() -> None:
    """Does nothing."""


@pytest.mark.parametrize(
    ("effects", "hint"),
    [
        (None, "exclusive"),
        (set(), "safe_for_parallel"),
        ({"read"}, "safe_for_parallel"),
        ({"use_secret"}, "safe_for_parallel"),
        ({"read", "use_secret"}, "safe_for_parallel"),
        ({"write"}, "exclusive"),
        ({"read", "network"}, "exclusive"),
        ({"spawn"}, "exclusive"),
        ({"dispatch"}, "exclusive"),
    ],
)
def test_effects_map_to_concurrency_hints(effects: AbstractSet[str] | None, hint: str) -> None:
    t = tool(effects=effects)(noop)
    assert t.descriptor.concurrency == hint


def test_undeclared_effects_stay_none() -> None:
    assert tool(noop).descriptor.effects is None


def test_pure_tool_declares_an_empty_frozenset() -> None:
    assert tool(effects=set())(noop).descriptor.effects == frozenset()


def test_unknown_effect_is_a_usage_error_at_decoration() -> None:
    with pytest.raises(UsageError, match="teleport"):
        tool(effects={"read", "teleport"})(noop)


def test_effects_given_as_a_string_is_a_usage_error() -> None:
    as_string: Any = "read"
    with pytest.raises(UsageError, match="set of strings"):
        tool(effects=as_string)(noop)


def test_descriptor_carries_approval_idempotency_and_timeout() -> None:
    t = tool(needs_approval=True, idempotent=True, timeout_s=5.0)(noop)
    assert t.descriptor.needs_approval is True
    assert t.descriptor.idempotent is True
    assert t.descriptor.timeout_s == 5.0


def test_approval_predicate_is_kept_on_the_descriptor() -> None:
    t = tool(needs_approval=lambda args: args.get("amount", 0) > 100)(noop)
    assert t.descriptor.requires_approval({"amount": 500})
    assert not t.descriptor.requires_approval({"amount": 5})


@pytest.mark.parametrize("timeout_s", [0.0, -1.0])
def test_non_positive_timeout_is_a_usage_error(timeout_s: float) -> None:
    with pytest.raises(UsageError, match="timeout_s"):
        tool(timeout_s=timeout_s)(noop)
