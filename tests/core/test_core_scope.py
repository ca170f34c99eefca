"""Scope: an empty string is refused, never read as "unset" (one rule on every backend)."""

from __future__ import annotations

import pytest

from reverie.core.scope import Scope
from reverie.errors import InvalidScopeError, UsageError


@pytest.mark.parametrize("field", ["tenant", "user"])
def test_scope_rejects_an_empty_tenant_or_user_with_a_usage_error(field: str) -> None:
    fields = {"tenant": "acme", "user": "ana", field: ""}

    with pytest.raises(UsageError, match=field):
        Scope(**fields)


@pytest.mark.parametrize("field", ["agent", "project"])
def test_scope_rejects_an_empty_agent_or_project_instead_of_aliasing_unset(field: str) -> None:
    with pytest.raises(UsageError, match=field):
        Scope(tenant="acme", user="ana", **{field: ""})


def test_scope_rejects_fields_that_are_not_strings() -> None:
    with pytest.raises(UsageError):
        Scope(tenant="acme", user=7)  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        Scope(tenant="acme", user="ana", agent=b"x")  # type: ignore[arg-type]


def test_scope_keeps_unset_and_set_agent_apart() -> None:
    unset = Scope(tenant="acme", user="ana")
    helper = Scope(tenant="acme", user="ana", agent="helper")

    assert unset.agent is None
    assert unset.key() != helper.key()


def test_scope_from_dict_reads_a_legacy_empty_field_as_unset_and_refuses_no_owner() -> None:
    legacy = {"tenant": "acme", "user": "ana", "agent": "", "project": None}

    assert Scope.from_dict(legacy) == Scope(tenant="acme", user="ana")
    with pytest.raises(UsageError):
        Scope.from_dict({"tenant": "acme", "user": ""})


def test_an_invalid_scope_is_both_a_usage_error_and_the_value_error_it_used_to_be() -> None:
    with pytest.raises(InvalidScopeError) as info:
        Scope(tenant="acme", user="ana", project="")

    assert isinstance(info.value, UsageError)
    assert isinstance(info.value, ValueError)
