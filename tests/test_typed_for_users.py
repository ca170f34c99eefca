"""Users' type checkers see reverie's types: the package ships ``py.typed`` (PEP 561)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # mypy runs in a subprocess


def test_mypy_strict_reports_a_user_file_that_misuses_the_public_api(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(
        "from reverie import Agent, Limits\n\n"
        'agent = Agent(name="a", model="openai:gpt-4.1-mini", '
        'limits=Limits(max_iterations="many"))\n',
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(app)],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # outside the repository: reverie is found as installed
        timeout=600,
    )
    assert 'Argument "max_iterations" to "Limits" has incompatible type "str"' in done.stdout
    assert "missing library stubs or py.typed marker" not in done.stdout
