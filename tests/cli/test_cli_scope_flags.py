"""Scope flags build a Scope by its rules; ``runs list --tenant`` narrows as documented."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from typer.testing import Result

from cli.cli_support import EXAMPLE_SCRIPT

SCRIPTED = f"scripted:{EXAMPLE_SCRIPT}"


def _run_as(cli: Callable[..., Result], tenant: str, user: str) -> str:
    result = cli("run", "--json", "--model", SCRIPTED, "--tenant", tenant, "--user", user, "hi")
    assert result.exit_code == 0, result.output
    return str(json.loads(result.stdout)["run_id"])


@pytest.mark.parametrize(
    "args",
    [
        ("run", "--model", SCRIPTED, "--tenant", "", "hi"),
        ("run", "--model", SCRIPTED, "--user", "", "hi"),
        ("runs", "list", "--tenant", ""),
        ("runs", "list", "--user", ""),
    ],
    ids=["run-tenant", "run-user", "runs-list-tenant", "runs-list-user"],
)
def test_an_empty_scope_flag_is_a_usage_error_not_the_default_owner(
    cli: Callable[..., Result], args: tuple[str, ...]
) -> None:
    result = cli(*args)

    assert result.exit_code == 2
    assert "non-empty" in result.stderr
    assert "Traceback" not in result.output


def test_runs_list_with_tenant_and_no_user_lists_the_whole_tenant(
    cli: Callable[..., Result],
) -> None:
    ana = _run_as(cli, "acme", "ana")
    bob = _run_as(cli, "acme", "bob")
    other = _run_as(cli, "globex", "ana")

    tenant = json.loads(cli("runs", "list", "--json", "--tenant", "acme").stdout)
    owner = json.loads(cli("runs", "list", "--json", "--tenant", "acme", "--user", "bob").stdout)

    assert {r["run_id"] for r in tenant} == {ana, bob}
    assert other not in {r["run_id"] for r in tenant}
    assert [r["run_id"] for r in owner] == [bob]


def test_runs_list_with_user_and_no_tenant_narrows_to_the_local_tenant(
    cli: Callable[..., Result],
) -> None:
    local = _run_as(cli, "local", "ana")
    _run_as(cli, "acme", "ana")

    listed = json.loads(cli("runs", "list", "--json", "--user", "ana").stdout)

    assert [r["run_id"] for r in listed] == [local]
