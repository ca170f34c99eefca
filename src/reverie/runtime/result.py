"""``RunResult`` and ``Gate``: what a finished (or blocked) run reports."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reverie.core.exits import LoopExit, Usage
from reverie.core.vocabulary import ExitStatus

RunResultStatus = ExitStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class Gate:
    """A pending gate: what a person is asked to approve."""

    ref: str
    kind: str
    tool: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    """Sanitised arguments (values of secret-looking keys are redacted)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """The outcome of a run segment."""

    status: RunResultStatus
    text: str | None
    """The final reply when completed; otherwise ``None``."""
    exit: LoopExit
    run_id: str
    thread_id: str
    usage: Usage
    gate: Gate | None = None
    """Set when ``status == "blocked"``."""
    output: Any | None = None
    """The validated JSON of a structured run (``exit.kind == "structured"``); else ``None``."""

    @property
    def ok(self) -> bool:
        """``True`` when the run completed."""
        return self.status == "completed"
