"""The closed sets of names that cross layers: run and gate statuses, gate and checkpoint kinds,
the unbound profiles, thread policies and what a limit does.

Each concept is one ``Literal`` defined here and nowhere else; a runtime check uses the tuple
derived from it with ``typing.get_args``, so the type and the check cannot drift apart. The
exit vocabularies (failure kinds, graceful-stop reasons) live with the exits, in
:mod:`reverie.core.exits`. ``tests/core/test_vocabulary.py`` fails when one is spelt out again.
"""

from __future__ import annotations

from typing import Final, Literal, TypeGuard, get_args

__all__ = [
    "ACTIVE_STATUSES",
    "CHECKPOINT_KINDS",
    "DISPATCH_MODES",
    "EXIT_STATUSES",
    "GATE_DECISIONS",
    "GATE_KINDS",
    "GATE_STATUSES",
    "ON_LIMITS",
    "RUN_STATUSES",
    "SCHEDULE_MISSED",
    "SCHEDULE_OVERLAPS",
    "SCHEDULE_THREADS",
    "TERMINAL_STATUSES",
    "THREAD_POLICIES",
    "UNBOUND_PROFILES",
    "ActiveStatus",
    "CheckpointKind",
    "DispatchMode",
    "ExitStatus",
    "GateDecision",
    "GateKind",
    "GateStatus",
    "OnLimit",
    "RunStatus",
    "ScheduleMissed",
    "ScheduleOverlap",
    "ScheduleThread",
    "TerminalStatus",
    "ThreadPolicy",
    "UnboundProfile",
    "as_gate_kind",
    "is_unbound_profile",
]

ExitStatus = Literal["completed", "blocked", "failed", "cancelled"]
"""How a run segment ended (``LoopExit.status``, ``RunResult.status``)."""
EXIT_STATUSES: Final[tuple[ExitStatus, ...]] = get_args(ExitStatus)

RunStatus = Literal["queued", "running", ExitStatus]
"""A run row's status: waiting for a worker, running, or how its last segment ended."""
RUN_STATUSES: Final[tuple[RunStatus, ...]] = get_args(RunStatus)

TerminalStatus = Literal["completed", "failed", "cancelled"]
"""Statuses a run never leaves."""
TERMINAL_STATUSES: Final[frozenset[TerminalStatus]] = frozenset(get_args(TerminalStatus))

ActiveStatus = Literal["queued", "running", "blocked"]
"""Statuses of a thread's active run: a thread holds at most one run in these at a time."""
ACTIVE_STATUSES: Final[tuple[ActiveStatus, ...]] = get_args(ActiveStatus)

GateDecision = Literal["approved", "denied"]
"""A person's answer to a gate."""
GATE_DECISIONS: Final[tuple[GateDecision, ...]] = get_args(GateDecision)

GateStatus = Literal["pending", GateDecision]
"""A gate row's status: waiting for a person, or their answer."""
GATE_STATUSES: Final[tuple[GateStatus, ...]] = get_args(GateStatus)

GateKind = Literal["approval", "auth", "resource"]
"""What a gated call waits for: a person's approval, an authorisation, or a resource."""
GATE_KINDS: Final[tuple[GateKind, ...]] = get_args(GateKind)

ScheduleMissed = Literal["skip", "latest", "all"]
"""Occurrences a schedule missed while nothing ticked: none run, the latest runs once, or all
run (bounded; docs/schedules.md)."""
SCHEDULE_MISSED: Final[tuple[ScheduleMissed, ...]] = get_args(ScheduleMissed)

ScheduleOverlap = Literal["skip", "queue", "alongside"]
"""An occurrence while the schedule's previous run is active: skip it, start it once the
previous ends, or start it at once."""
SCHEDULE_OVERLAPS: Final[tuple[ScheduleOverlap, ...]] = get_args(ScheduleOverlap)

ScheduleThread = Literal["new", "shared"]
"""Each scheduled run on a new thread, or all on one thread that accumulates."""
SCHEDULE_THREADS: Final[tuple[ScheduleThread, ...]] = get_args(ScheduleThread)

CheckpointKind = Literal["BeforeModel", "BeforeSideEffect", "BeforeBlock", "Final"]
"""Where in the tick a checkpoint was taken (docs/durability.md)."""
CHECKPOINT_KINDS: Final[tuple[CheckpointKind, ...]] = get_args(CheckpointKind)

UnboundProfile = Literal["unbound", "unbound_structured"]
"""The profiles (loop families) of unbound turns: no agent, no tools, no memory."""
UNBOUND_PROFILES: Final[tuple[UnboundProfile, ...]] = get_args(UnboundProfile)

ThreadPolicy = Literal["reject", "enqueue", "interrupt"]
"""What starting a run on a thread with an active run does: refuse it (``ThreadBusy``), become
its follow-up, or cancel it first."""
THREAD_POLICIES: Final[tuple[ThreadPolicy, ...]] = get_args(ThreadPolicy)

DispatchMode = Literal["local", "queue"]
"""Where a runtime advances its runs: in this process, or as jobs for ``reverie worker``s."""
DISPATCH_MODES: Final[tuple[DispatchMode, ...]] = get_args(DispatchMode)

OnLimit = Literal["finalize", "fail"]
"""What a run does when a limit or safety net fires: a graceful summary, or a failure."""
ON_LIMITS: Final[tuple[OnLimit, ...]] = get_args(OnLimit)

DriftAction = Literal["refuse", "continue"]
"""What a resume does when the agent's instructions, tools or loop family changed since the
run's checkpoint: end the run ``Failed(resume_drift)``, or go on and record the change."""
DRIFT_ACTIONS: Final[tuple[DriftAction, ...]] = get_args(DriftAction)


def is_unbound_profile(profile: str) -> TypeGuard[UnboundProfile]:
    """Whether a run of ``profile`` is an unbound turn (not a run of a named agent)."""
    return profile in UNBOUND_PROFILES


def as_gate_kind(kind: str) -> GateKind:
    """``kind`` as a gate kind; anything else asks for approval (the safe default)."""
    for known in GATE_KINDS:
        if kind == known:
            return known
    return "approval"
