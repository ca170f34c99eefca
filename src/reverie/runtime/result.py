"""``RunResult`` and ``Gate``: what a finished (or blocked) run reports."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reverie.core.exits import LoopExit, Usage
from reverie.core.vocabulary import ExitStatus
from reverie.runtime.drift import ResumeDrift

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
    drift: tuple[ResumeDrift, ...] = ()
    """What the run's resumes found changed in its agent since a checkpoint, oldest first:
    each says what changed and whether the resume went on (``continue``) or ended the run
    (``refuse``, then ``exit.kind == "resume_drift"``). Empty when nothing changed."""

    @property
    def ok(self) -> bool:
        """``True`` when the run completed."""
        return self.status == "completed"
