"""The ``Store`` protocol and the records it holds (docs/durability.md, docs/scaling.md).

Every backend (in-memory, SQLite, PostgreSQL) implements this protocol and passes the
conformance suite in ``tests/conformance``. The protocol is deliberately narrow: rows are
appended or updated whole, and every write a run worker makes carries the run's fencing token
(``fence``) so a worker that lost its lease cannot write (:class:`reverie.errors.LeaseLost`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from reverie.core.fastcopy import fast_frozen
from reverie.core.scope import Scope
from reverie.core.transcript import (
    USER_INPUT_KINDS,
    InputKind,
    InputRecord,
    NewItem,
    TranscriptItem,
)
from reverie.core.vocabulary import (
    ACTIVE_STATUSES,
    CHECKPOINT_KINDS,
    TERMINAL_STATUSES,
    CheckpointKind,
    GateDecision,
    GateKind,
    GateStatus,
    RunStatus,
)
from reverie.errors import UsageError

__all__ = [
    "ACTIVE_STATUSES",
    "CHECKPOINT_KINDS",
    "TERMINAL_STATUSES",
    "USER_INPUT_KINDS",
    "CheckpointKind",
    "CheckpointRecord",
    "GateRecord",
    "GateStatus",
    "InputKind",
    "InputRecord",
    "JournalEntry",
    "JournalWrite",
    "NewItem",
    "RunCursor",
    "RunRecord",
    "RunStatus",
    "SegmentStart",
    "SegmentStarts",
    "StepReceipt",
    "StepWrite",
    "Store",
    "ThreadRecord",
    "TranscriptItem",
]


RunCursor = tuple[float, str]
"""A position in the runs' newest-first order: a run's ``(created_at, run_id)``."""

JournalState = Literal["started", "finished"]
"""A journal record's state: the call began (its effect may have happened), or it returned."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadRecord:
    """A conversation owned by a scope."""

    thread_id: str
    scope: Scope
    created_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    """A run row."""

    run_id: str
    thread_id: str
    scope: Scope
    agent_name: str
    profile: str = "interactive"
    family_id: str = "default"
    status: RunStatus = "queued"
    exit: Mapping[str, Any] | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    lease_owner: str | None = None
    lease_expires_at: float | None = None
    fence: int = 0
    cancel_requested: bool = False
    idempotency_key: str | None = None
    has_actor: bool = True
    """False for runs no human started (they never fire ``after_turn``)."""
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointRecord:
    """The latest checkpoint of a run."""

    run_id: str
    kind: CheckpointKind
    payload: bytes
    created_at: float


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class JournalEntry:
    """Side-effect journal row for one tool call."""

    run_id: str
    call_id: str
    tool: str
    state: JournalState
    outcome: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GateRecord:
    """A gate: pending until approved or denied, exactly once."""

    ref: str
    run_id: str
    call_id: str
    tool: str
    arguments: Mapping[str, Any]
    """Sanitised arguments (secrets redacted) for the person deciding."""
    kind: GateKind = "approval"
    status: GateStatus = "pending"
    reason: str | None = None
    scope: Scope
    created_at: float
    resolved_at: float | None = None
    resolved_by: str | None = None
    """Who approved or denied it (an HTTP token's owner, the CLI's ``--as`` or OS user)."""
    shown_digest: str | None = None
    """Digest of :attr:`arguments` as the person deciding saw them (set on resolution)."""
    approved_digest: str | None = None
    """Digest of the arguments the person approved: the edited ones, else those shown."""
    edited_arguments: Mapping[str, Any] | None = None
    """The arguments a person approved in place of the model's (``None``: not edited). As
    sanitised as :attr:`arguments`: a value left as the mask stands for the original secret,
    which the run restores from the model's call when it runs it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GateResolution:
    """Who resolved a gate, and what they approved (:meth:`Store.resolve_gate`)."""

    resolved_by: str | None = None
    shown_digest: str | None = None
    approved_digest: str | None = None
    edited_arguments: Mapping[str, Any] | None = None


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class JournalWrite:
    """One side-effect journal record carried by a step commit."""

    call_id: str
    tool: str
    state: JournalState
    outcome: Mapping[str, Any] | None = None
    """The call's outcome (``finished`` only)."""


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class StepWrite:
    """What one loop boundary makes durable, as one transaction (:meth:`Store.commit_step`).

    ``items`` carry refs and seqs the writer drew: their seqs follow ``after_seq`` without a gap,
    and the store refuses the whole step (:class:`reverie.errors.TranscriptConflict`, nothing
    written) when the thread's head is no longer ``after_seq`` (a foreign append). Journal
    records, then items, are always written; the *guarded* parts — the checkpoint, the input
    ack and the seal — only when no input of the run has a cursor past ``guard_cursor``
    (``None``: unguarded). The receipt says which happened.
    """

    thread_id: str
    items: Sequence[TranscriptItem] = ()
    after_seq: int | None = None
    """The thread's head seq (superseded rows count) the items follow; required with items."""
    journal: Sequence[JournalWrite] = ()
    checkpoint_kind: CheckpointKind | None = None
    checkpoint: bytes | None = None
    """Replaces the run's latest checkpoint (with ``checkpoint_kind``)."""
    ack_cursor: int | None = None
    """Mark the run's inputs up to this cursor delivered."""
    seal: bool = False
    """Close the run's input queue (as :meth:`Store.seal_inputs` does when nothing waits)."""
    guard_cursor: int | None = None
    """The highest input cursor the writer has seen; see the class docstring."""


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class StepReceipt:
    """What a step commit learned, inside the same transaction."""

    head_seq: int
    """The thread's head seq after the step."""
    inputs_waiting: bool
    """An input past ``guard_cursor`` exists: the guarded parts were not written."""
    cancel_requested: bool
    """The run's durable cancel request (set by another process, perhaps)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentStart:
    """What :meth:`Store.begin_segment` took and read, in the transaction that leased the run."""

    fence: int
    """The new fencing token of the lease."""
    run: RunRecord
    """The run after the transaction: ``running``, or as it was when it had already ended."""
    prior_status: RunStatus
    """The status before (``running``: the worker that advanced it died mid-segment)."""
    checkpoint: CheckpointRecord | None = None
    """The run's latest checkpoint (``None``: never checkpointed, or the run had ended)."""
    head_seq: int = 0
    """The thread's highest seq, superseded rows included."""
    items: Sequence[TranscriptItem] = ()
    """The thread's newest non-superseded rows (at most ``window`` of them), in seq order."""
    inputs: Sequence[InputRecord] = ()
    """The run's inputs not yet acked, in cursor order."""

    @property
    def started(self) -> bool:
        """Whether the segment began (the run had not ended: it was marked running)."""
        return self.prior_status not in TERMINAL_STATUSES


def check_segment_end(status: RunStatus) -> None:
    """:class:`UsageError` unless a segment may end with ``status`` (blocked or terminal)."""
    if status != "blocked" and status not in TERMINAL_STATUSES:
        raise UsageError(f"a segment ends blocked or terminal, not {status!r}")


class Store(Protocol):
    """Durable state of runs. All methods are async and never block the event loop."""

    async def open(self) -> None:
        """Connect and migrate the schema."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...

    # threads and transcript
    async def create_thread(self, thread_id: str, scope: Scope) -> ThreadRecord:
        """Create a thread owned by ``scope``."""
        ...

    async def get_thread(self, thread_id: str) -> ThreadRecord:
        """The thread, or :class:`NotFoundError`."""
        ...

    async def append_items(
        self, thread_id: str, run_id: str | None, items: Sequence[NewItem], *, fence: int | None
    ) -> list[TranscriptItem]:
        """Append rows (with fence checked against ``run_id`` when given)."""
        ...

    async def get_items(self, refs: Sequence[str]) -> list[TranscriptItem]:
        """Rows by ref, in the order asked."""
        ...

    async def thread_items(
        self, thread_id: str, *, upto_seq: int | None = None, last: int | None = None
    ) -> list[TranscriptItem]:
        """Non-superseded rows of a thread in ``seq`` order, optionally up to a seq / last N."""
        ...

    async def thread_head(self, thread_id: str) -> int:
        """The thread's highest seq, superseded rows included (0 for an empty thread)."""
        ...

    async def commit_step(self, run_id: str, step: StepWrite, *, fence: int) -> StepReceipt:
        """Write a loop boundary atomically: all of it or nothing, with the fence checked once.

        :class:`LeaseLost` for a stale fence, :class:`NotFoundError` for a missing thread or run,
        :class:`reverie.errors.TranscriptConflict` when the thread moved past ``after_seq`` —
        in each case nothing is written.
        """
        ...

    async def supersede_items_after(self, thread_id: str, run_id: str, seq: int) -> int:
        """Mark rows of ``run_id`` with ``seq`` greater than the given one superseded."""
        ...

    # runs and leases
    async def create_run(self, run: RunRecord) -> RunRecord:
        """Insert a run; if its idempotency key exists, return that run instead.

        Raises :class:`reverie.errors.ThreadBusy` when the thread already has an active run
        (:data:`ACTIVE_STATUSES`): checked atomically with the insert, so two processes
        starting runs on one thread never both succeed.
        """
        ...

    async def start_run(
        self, run: RunRecord, items: Sequence[NewItem], *, create_thread: bool = False
    ) -> RunRecord:
        """Create the run and append its opening rows (unfenced) in one transaction.

        The thread must exist and belong to the run's owner (tenant and user), else
        :class:`NotFoundError`; with ``create_thread`` a missing thread is created for the
        run's scope first. The rules of :meth:`create_run` hold: a run of the owner with the
        same idempotency key is returned instead (and nothing is written), and
        :class:`reverie.errors.ThreadBusy` is raised when the thread has an active run. Every
        refusal writes nothing (not even the thread).
        """
        ...

    async def active_run(self, thread_id: str) -> RunRecord | None:
        """The thread's active (queued, running or blocked) run, if any."""
        ...

    async def get_run(self, run_id: str) -> RunRecord:
        """The run, or :class:`NotFoundError`."""
        ...

    async def list_runs(
        self,
        *,
        scope: Scope | None = None,
        statuses: Sequence[str] | None = None,
        limit: int = 100,
        tenant: str | None = None,
        agent: str | None = None,
        thread_id: str | None = None,
        before: RunCursor | None = None,
    ) -> list[RunRecord]:
        """Newest first; ``scope`` narrows to its tenant and user, ``tenant`` to one tenant,
        ``agent`` to one agent name, ``thread_id`` to one thread; ``before`` (a keyset cursor:
        the ``(created_at, run_id)`` of the last run of the previous page) to the runs after it
        in that order."""
        ...

    async def set_run_status(
        self,
        run_id: str,
        status: RunStatus,
        *,
        fence: int | None,
        exit: Mapping[str, Any] | None = None,
    ) -> RunRecord:
        """Set the status (and exit payload); checked against the fence when given."""
        ...

    async def request_cancel(self, run_id: str) -> RunRecord:
        """Record a durable cancel request."""
        ...

    async def acquire_lease(
        self,
        run_id: str,
        owner: str,
        *,
        ttl_s: float,
        now: float,
        force: bool = False,
        take_over: str | None = None,
    ) -> int:
        """Take the run's lease and return a new fencing token.

        Raises :class:`RunBusy` when another owner holds an unexpired lease and not ``force``.
        ``take_over`` names an owner seen dead: its unexpired lease may be taken, but only if
        that owner still holds it at the moment of the (atomic) write.
        """
        ...

    async def renew_lease(self, run_id: str, fence: int, *, ttl_s: float, now: float) -> None:
        """Extend the lease; :class:`LeaseLost` if ``fence`` is stale."""
        ...

    async def release_lease(self, run_id: str, fence: int) -> None:
        """Drop the lease if ``fence`` is still current (no error otherwise)."""
        ...

    async def begin_segment(
        self,
        run_id: str,
        owner: str,
        *,
        ttl_s: float,
        now: float,
        take_over: str | None = None,
        window: int = 0,
    ) -> SegmentStart:
        """Begin a segment in one transaction: lease the run, mark it running, read its state.

        The lease is taken as :meth:`acquire_lease` takes it (:class:`RunBusy` when a live
        owner holds it, :class:`NotFoundError` for a missing run: nothing written). Unless
        the run had ended, it is set ``running``, its input queue unsealed, and its latest
        checkpoint, its thread's head and newest ``window`` rows and its unacked inputs are
        read. A run that had ended is only leased (the caller releases the lease).
        """
        ...

    async def end_segment(
        self,
        run_id: str,
        status: RunStatus,
        *,
        fence: int,
        exit: Mapping[str, Any] | None = None,
    ) -> RunRecord:
        """End a segment in one transaction: the status it ends with, its exit, the lease.

        ``status`` is ``blocked`` or terminal (else :class:`reverie.errors.UsageError`). A
        terminal status also closes the input queue (as :meth:`seal_inputs` with nothing
        waiting). The lease is released. :class:`LeaseLost` for a stale fence and
        :class:`NotFoundError` for a missing run, nothing written in either case.
        """
        ...

    async def expired_leases(self, now: float) -> list[RunRecord]:
        """Runs in ``running`` or ``queued`` whose lease has expired or was never taken."""
        ...

    # checkpoints
    async def save_checkpoint(
        self, run_id: str, kind: CheckpointKind, payload: bytes, *, fence: int
    ) -> None:
        """Replace the run's latest checkpoint."""
        ...

    async def load_checkpoint(self, run_id: str) -> CheckpointRecord | None:
        """The latest checkpoint, or ``None``."""
        ...

    # side-effect journal
    async def journal_started(self, run_id: str, call_id: str, tool: str, *, fence: int) -> None:
        """Record that a call started (idempotent)."""
        ...

    async def journal_finished(
        self, run_id: str, call_id: str, outcome: Mapping[str, Any], *, fence: int
    ) -> None:
        """Record a call's outcome."""
        ...

    async def journal_get(self, run_id: str, call_ids: Sequence[str]) -> dict[str, JournalEntry]:
        """Journal rows for the given calls."""
        ...

    # inputs
    async def enqueue_input(
        self, run_id: str, kind: InputKind, payload: Mapping[str, Any], *, input_id: str
    ) -> InputRecord:
        """Append an input; the same ``input_id`` returns the existing row (dedupe)."""
        ...

    async def poll_inputs(self, run_id: str, *, after_cursor: int) -> list[InputRecord]:
        """Inputs with cursor greater than ``after_cursor``, in order."""
        ...

    async def seal_inputs(self, run_id: str, *, after_cursor: int) -> list[InputRecord]:
        """Close the queue unless inputs past the cursor are waiting (then return them, unsealed).

        Atomic with :meth:`enqueue_input`: an input is either returned here (and delivered) or
        refused with :class:`reverie.errors.RunEndedError` once the queue is sealed. Re-opened by
        :meth:`unseal_inputs` when a blocked run resumes or a new turn starts.
        """
        ...

    async def unseal_inputs(self, run_id: str) -> None:
        """Accept inputs again."""
        ...

    async def ack_inputs(self, run_id: str, upto_cursor: int, *, fence: int) -> None:
        """Mark inputs up to the cursor delivered."""
        ...

    # gates
    async def create_gate(self, gate: GateRecord, *, fence: int) -> GateRecord:
        """Insert a pending gate (same run + call returns the existing one)."""
        ...

    async def get_gate(self, ref: str) -> GateRecord:
        """The gate, or :class:`NotFoundError`."""
        ...

    async def gate_for_call(self, run_id: str, call_id: str) -> GateRecord | None:
        """The gate opened for a call, if any."""
        ...

    async def resolve_gate(
        self,
        ref: str,
        status: GateDecision,
        *,
        reason: str | None,
        now: float,
        resolution: GateResolution | None = None,
    ) -> GateRecord:
        """Resolve a pending gate once; :class:`GateResolvedError` on a second resolution.

        ``resolution`` (who, the digests, edited arguments) is stored with the status, in the
        same write: an approval with edited arguments is never half recorded.
        """
        ...

    async def list_gates(
        self,
        *,
        scope: Scope | None = None,
        status: GateStatus | None = "pending",
        limit: int | None = None,
    ) -> list[GateRecord]:
        """Gates, newest first (the newest ``limit`` when given)."""
        ...


@runtime_checkable
class SegmentStarts(Protocol):
    """A store that starts a run and begins its first segment in one transaction.

    Optional (the runtime falls back to :meth:`Store.start_run` then
    :meth:`Store.begin_segment`); every backend of reverie implements it.
    """

    async def start_segment(
        self,
        run: RunRecord,
        items: Sequence[NewItem],
        *,
        owner: str,
        ttl_s: float,
        now: float,
        create_thread: bool = False,
        window: int = 0,
    ) -> SegmentStart:
        """:meth:`Store.start_run`, then :meth:`Store.begin_segment` of the new run: one
        transaction.

        The rules and refusals of :meth:`Store.start_run` hold (every refusal writes
        nothing). The run is inserted ``running``, leased by ``owner`` until ``now + ttl_s``
        with its first fence, its input queue open; the answer is what ``begin_segment``
        would read: ``prior_status`` ``queued``, no checkpoint, no input, the thread's head
        and newest ``window`` rows (the opening rows last). When the owner's idempotency key
        names a run already, that run is the answer's ``run`` (its own ``run_id``) and
        nothing is written or leased.
        """
        ...
