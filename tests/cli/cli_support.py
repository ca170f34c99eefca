"""Helpers the CLI tests import: paths, a gated mail script, a subprocess runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
"""This directory: it holds ``cli_fixture_tools.py``, which test configs import."""
REPO = HERE.parent.parent
EXAMPLE_SCRIPT = REPO / "examples" / "scripted_hello.json"

MAIL_SCRIPT: list[dict[str, Any]] = [
    {"call": "send_email", "arguments": {"to": "ana@example.com", "body": "hello"}},
    {"reply": "Done: the email is handled."},
]
"""A turn that calls the gated ``send_email`` tool, then replies."""


def _child_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["REVERIE_HOME"] = str(home)
    env["USER"] = "tester"
    env["COLUMNS"] = "200"
    return env


def run_reverie(home: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``python -m reverie.cli.app ARGS...`` in a child process with ``REVERIE_HOME=home``."""
    return subprocess.run(
        [sys.executable, "-m", "reverie.cli.app", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_child_env(home),
        check=False,
    )


def start_reverie(home: Path, *args: str) -> subprocess.Popen[str]:
    """Start ``python -m reverie.cli.app ARGS...`` without waiting (stdout/stderr piped)."""
    return subprocess.Popen(
        [sys.executable, "-m", "reverie.cli.app", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_child_env(home),
    )


def gate_ref(stdout: str) -> str:
    """The gate ref a blocked ``reverie run --json`` printed."""
    payload = json.loads(stdout)
    assert payload["status"] == "blocked", payload
    return str(payload["gate"]["ref"])
