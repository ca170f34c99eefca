"""A test run ends by saying why tests were skipped and how to run them (tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent

pytestmark = pytest.mark.slow  # starts pytest in a subprocess


def test_a_test_run_says_why_tests_skipped_and_how_to_run_them() -> None:
    env = {k: v for k, v in os.environ.items() if k != "REVERIE_TEST_POSTGRES_URL"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "tests/docs/test_doc_snippets.py",
            "-k",
            "postgres",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    summary = result.stdout.split("why tests were skipped", 1)[1]
    assert "set REVERIE_TEST_POSTGRES_URL to run the PostgreSQL snippets" in summary
    assert "to run the PostgreSQL tests: " in summary
    assert "docs/testing.md" in summary
