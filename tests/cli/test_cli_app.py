"""The ``reverie`` program itself: help, version, the module entry point."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

import reverie
from cli.cli_support import run_reverie


def test_help_lists_the_commands_and_the_exit_codes(cli: Callable[..., Result]) -> None:
    result = cli("--help")

    assert result.exit_code == 0
    for command in ("run", "runs", "gates", "doctor"):
        assert command in result.stdout
    assert "130 cancelled" in result.stdout


def test_version_prints_the_package_version(cli: Callable[..., Result]) -> None:
    result = cli("--version")

    assert result.exit_code == 0
    assert result.stdout.strip() == f"reverie {reverie.__version__}"


@pytest.mark.slow
def test_python_dash_m_runs_the_same_program(tmp_path: Path) -> None:
    result = run_reverie(tmp_path / "home", "runs", "--help")

    assert result.returncode == 0, result.stderr
    assert "resume" in result.stdout
