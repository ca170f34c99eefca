"""Suite-wide pytest hooks: each test gets its own ``REVERIE_HOME``; the run's end says why
tests were skipped and how to run them."""

from __future__ import annotations

from collections import Counter

import pytest

_HOW_TO_RUN = {
    "REVERIE_TEST_POSTGRES_URL": (
        "PostgreSQL tests: start a server whose role may create schemas and set "
        "REVERIE_TEST_POSTGRES_URL=postgresql://postgres@127.0.0.1:5432/postgres "
        "(.ci/run starts a throwaway one)"
    ),
    "MCP server": (
        "MCP server tests: npm install the official servers as .ci/run does (into .ci/npm, or "
        "set REVERIE_TEST_MCP_NODE_DIR)"
    ),
    "no real model server": (
        "real-model tests: build llama-cpp-python's server and take SmolLM2 as .ci/run does, "
        "then set REVERIE_TEST_LLAMA_PYTHON and REVERIE_TEST_LLAMA_MODEL"
    ),
}
"""A skip reason's key phrase, and what makes those tests run (docs/testing.md)."""


@pytest.fixture(autouse=True)
def _own_reverie_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No test touches the person's own ``~/.reverie``: ``REVERIE_HOME`` is a fresh folder for
    each test (a test that needs another sets its own)."""
    monkeypatch.setenv("REVERIE_HOME", str(tmp_path_factory.mktemp("home")))


def _reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """After the results: how many tests skipped for each reason, and how to run them."""
    skipped = [
        r for r in terminalreporter.stats.get("skipped", []) if isinstance(r, pytest.TestReport)
    ]
    if not skipped:
        return
    reasons = Counter(_reason(report) for report in skipped)
    terminalreporter.section("why tests were skipped")
    for reason, count in reasons.most_common():
        terminalreporter.write_line(f"{count:>5}  {reason}")
    hints = [hint for key, hint in _HOW_TO_RUN.items() if any(key in r for r in reasons)]
    for hint in hints:
        terminalreporter.write_line(f"to run the {hint}")
    if hints:
        terminalreporter.write_line("(see 'Running reverie's own tests' in docs/testing.md)")
