"""The ``Store`` methods both SQL backends share: each runs one op of :mod:`.sql_ops`.

:class:`SQLStore` is a mixin: a backend's connection class provides the two ways an op runs
(``_write_op``, in one write transaction; ``_read_op``, outside one; see
:class:`~reverie.store.sql_core.OpRunner`) and its :class:`~reverie.store.sql_core.Dialect`. It
comes after the connection class in the backend's bases. A backend overrides a method only
where it does more than the op (SQLite's item cache, PostgreSQL's ``LISTEN``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from reverie.core.fastcopy import replace as fast_replace
from reverie.core.scope import Scope
from reverie.core.vocabulary import GateDecision
from reverie.store import rows as codec, sql_ops as ops
from reverie.store.base import (
    CheckpointKind,
    CheckpointRecord,
    GateRecord,
    GateResolution,
    GateStatus,
    InputKind,
    InputRecord,
    JournalEntry,
    NewItem,
    RunCursor,
    RunRecord,
    RunStatus,
    SegmentStart,
    StepReceipt,
    StepWrite,
    ThreadRecord,
    TranscriptItem,
)
from reverie.store.run_events import MAX_RUN_EVENTS, EventWaiters, RunEventRecord
from reverie.store.sql_core import OpRunner

__all__ = ["SQLStore"]

T = TypeVar("T")


class SQLStore(OpRunner):
    """The shared methods of ``SQLiteStore`` and ``PostgresStore`` (see the module doc)."""

    _event_waiters: EventWaiters
    _inputs_seen: Callable[[str, int], None] | None = None
    """Told each step commit's run and the top input cursor it read (SQLite's input watch)."""

    # threads and transcript -------------------------------------------------------------
    async def create_thread(self, thread_id: str, scope: Scope) -> ThreadRecord:
        """Create a thread owned by ``scope``; an existing thread is returned as it is."""
        rec = ThreadRecord(thread_id=thread_id, scope=scope, created_at=time.time())
        return await self._write_op("create a thread", lambda: ops.create_thread(self.dialect, rec))

    async def get_thread(self, thread_id: str) -> ThreadRecord:
        """The thread, or :class:`NotFoundError`."""
        return await self._read_op(
            f"read thread {thread_id}", lambda: ops.get_thread(self.dialect, thread_id)
        )

    async def append_items(
        self, thread_id: str, run_id: str | None, items: Sequence[NewItem], *, fence: int | None
    ) -> list[TranscriptItem]:
        """Append rows; ``seq`` is drawn inside the transaction, so it is gap-free."""
        now = time.time()
        return await self._write_op(
            "append transcript items",
            lambda: ops.append_items(
                self.dialect, thread_id, run_id, items, fence=fence, created_at=now
            ),
        )

    async def thread_head(self, thread_id: str) -> int:
        """The thread's highest seq, superseded rows included (0 for an empty thread)."""
        return await self._read_op(
            "read a thread's head", lambda: ops.thread_head(self.dialect, thread_id)
        )

    async def commit_step(self, run_id: str, step: StepWrite, *, fence: int) -> StepReceipt:
        """Write a loop boundary in one transaction (see :meth:`Store.commit_step`).

        The thread and run rows are read first (on PostgreSQL locked ``FOR NO KEY UPDATE``:
        appends to the thread, enqueues to the run and lease takeovers wait), then the heads,
        then everything is written: on PostgreSQL in one round trip, the writes behind a guard
        (:func:`reverie.store.sql_ops.commit_step`).
        """
        prepared = ops.prepare_step(self.dialect, run_id, step, fence=fence)  # no lock held
        seen = self._inputs_seen
        return await self._write_op(
            "commit a step",
            lambda: ops.commit_step(
                self.dialect, run_id, step, fence=fence, prepared=prepared, seen=seen
            ),
        )

    async def supersede_items_after(self, thread_id: str, run_id: str, seq: int) -> int:
        """Mark rows of ``run_id`` with ``seq`` greater than the given one superseded."""
        return await self._write_op(
            "supersede transcript items",
            lambda: ops.supersede_items_after(self.dialect, thread_id, run_id, seq),
        )

    # runs and leases ----------------------------------------------------------------------
    async def create_run(self, run: RunRecord) -> RunRecord:
        """Insert a run; if its owner's idempotency key exists, return that run instead.

        Raises:
            ThreadBusy: The thread has an active run (checked atomically with the insert).
            ConflictError: A run with the same id (and no matching idempotency key) exists.
        """
        return await self._write_op("create a run", lambda: ops.create_run(self.dialect, run))

    async def start_run(
        self, run: RunRecord, items: Sequence[NewItem], *, create_thread: bool = False
    ) -> RunRecord:
        """Create the run (and the thread, if asked) with its opening rows in one transaction.

        See :meth:`Store.start_run`. The thread row is locked first (PostgreSQL), so two
        processes starting runs on one thread are serialised: one run, and the other sees it.
        """
        return await self._write_op(
            "start a run",
            lambda: ops.start_run(self.dialect, run, items, create_thread=create_thread),
        )

    async def active_run(self, thread_id: str) -> RunRecord | None:
        """The thread's active (queued, running or blocked) run, if any."""
        return await self._read_op(
            "find a thread's active run", lambda: ops.active_run(self.dialect, thread_id)
        )

    async def get_run(self, run_id: str) -> RunRecord:
        """The run, or :class:`NotFoundError`."""
        return await self._read_op(f"read run {run_id}", lambda: ops.get_run(self.dialect, run_id))

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
        """Runs of a scope (tenant and user) or a tenant, and/or in some statuses, newest first."""
        return await self._read_op(
            "list runs",
            lambda: ops.list_runs(
                self.dialect,
                scope=scope,
                statuses=statuses,
                limit=limit,
                tenant=tenant,
                agent=agent,
                thread_id=thread_id,
                before=before,
            ),
        )

    async def set_run_status(
        self,
        run_id: str,
        status: RunStatus,
        *,
        fence: int | None,
        exit: Mapping[str, Any] | None = None,
    ) -> RunRecord:
        """Set the status (and exit payload); checked against the fence when given."""
        return await self._write_op(
            "set a run's status",
            lambda: ops.set_run_status(self.dialect, run_id, status, fence=fence, exit=exit),
        )

    async def request_cancel(self, run_id: str) -> RunRecord:
        """Record a durable cancel request (not fenced: anyone may ask)."""
        return await self._write_op(
            "request a cancel", lambda: ops.request_cancel(self.dialect, run_id)
        )

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

        ``take_over`` names an owner seen dead: its lease may be taken before expiry, but only
        if that owner still holds it. The test and the write are one ``UPDATE``: of two
        processes racing for a run exactly one wins.

        Raises:
            RunBusy: Another owner holds an unexpired lease and ``force`` is false.
            NotFoundError: There is no such run.
        """
        return await self._write_op(
            "acquire a lease",
            lambda: ops.acquire_lease(
                self.dialect, run_id, owner, ttl_s=ttl_s, now=now, force=force, take_over=take_over
            ),
        )

    async def renew_lease(self, run_id: str, fence: int, *, ttl_s: float, now: float) -> None:
        """Extend the lease; :class:`LeaseLost` if ``fence`` is stale."""
        await self._write_op(
            "renew a lease",
            lambda: ops.renew_lease(self.dialect, run_id, fence, ttl_s=ttl_s, now=now),
        )

    async def release_lease(self, run_id: str, fence: int) -> None:
        """Drop the lease if ``fence`` is still current (no error otherwise)."""
        await self._write_op(
            "release a lease", lambda: ops.release_lease(self.dialect, run_id, fence)
        )

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
        """Lease the run, mark it running and read what its segment loads: one transaction.

        See :meth:`Store.begin_segment`. The window's rows are decoded after it.
        """
        start, rows = await self._write_op(
            "begin a segment",
            lambda: ops.begin_segment(
                self.dialect,
                run_id,
                owner,
                ttl_s=ttl_s,
                now=now,
                take_over=take_over,
                window=window,
            ),
        )
        return self._with_window(start, rows)

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
        """Start the run and begin its first segment: one transaction (see
        :meth:`reverie.store.base.SegmentStarts.start_segment`)."""
        start, rows = await self._write_op(
            "start a run",
            lambda: ops.start_segment(
                self.dialect,
                run,
                items,
                owner=owner,
                ttl_s=ttl_s,
                now=now,
                create_thread=create_thread,
                window=window,
            ),
        )
        return self._with_window(start, rows)

    def _with_window(self, start: SegmentStart, rows: Sequence[Any]) -> SegmentStart:
        """``start`` with the window's ``rows`` decoded as its items."""
        if not rows:
            return start
        return fast_replace(start, items=[self._decode_item(row) for row in rows])

    def _decode_item(self, row: Any) -> TranscriptItem:
        """An ``items`` row as a record (a backend with an item cache reads it there)."""
        return codec.row_item(row)

    async def end_segment(
        self,
        run_id: str,
        status: RunStatus,
        *,
        fence: int,
        exit: Mapping[str, Any] | None = None,
    ) -> RunRecord:
        """The status a segment ends with, its exit, the seal and the lease release: one
        fenced ``UPDATE`` (see :meth:`Store.end_segment`)."""
        return await self._write_op(
            "end a segment",
            lambda: ops.end_segment(self.dialect, run_id, status, fence=fence, exit=exit),
        )

    async def expired_leases(self, now: float) -> list[RunRecord]:
        """Runs in ``running`` or ``queued`` whose lease has expired or was never taken."""
        return await self._read_op(
            "list expired leases", lambda: ops.expired_leases(self.dialect, now)
        )

    # checkpoints --------------------------------------------------------------------------
    async def save_checkpoint(
        self, run_id: str, kind: CheckpointKind, payload: bytes, *, fence: int
    ) -> None:
        """Replace the run's latest checkpoint (the payload is stored as opaque bytes)."""
        await self._write_op(
            "save a checkpoint",
            lambda: ops.save_checkpoint(self.dialect, run_id, kind, payload, fence=fence),
        )

    async def load_checkpoint(self, run_id: str) -> CheckpointRecord | None:
        """The latest checkpoint, or ``None``."""
        found: CheckpointRecord | None = await self._read_op(
            "load a checkpoint", lambda: ops.load_checkpoint(self.dialect, run_id)
        )
        return found

    # side-effect journal ------------------------------------------------------------------
    async def journal_started(self, run_id: str, call_id: str, tool: str, *, fence: int) -> None:
        """Record that a call started (idempotent: never downgrades a finished row)."""
        await self._write_op(
            "journal a started call",
            lambda: ops.journal_started(self.dialect, run_id, call_id, tool, fence=fence),
        )

    async def journal_finished(
        self, run_id: str, call_id: str, outcome: Mapping[str, Any], *, fence: int
    ) -> None:
        """Record a call's outcome (keeping the tool name from its ``started`` row)."""
        await self._write_op(
            "journal a finished call",
            lambda: ops.journal_finished(self.dialect, run_id, call_id, outcome, fence=fence),
        )

    async def journal_get(self, run_id: str, call_ids: Sequence[str]) -> dict[str, JournalEntry]:
        """Journal rows for the given calls (calls with no row are left out)."""
        return await self._read_op(
            "read the journal", lambda: ops.journal_get(self.dialect, run_id, call_ids)
        )

    # inputs -------------------------------------------------------------------------------
    async def enqueue_input(
        self, run_id: str, kind: InputKind, payload: Mapping[str, Any], *, input_id: str
    ) -> InputRecord:
        """Append an input; the same ``input_id`` returns the existing row (dedupe).

        Raises:
            RunEndedError: The queue is sealed (:meth:`seal_inputs`) and the input is new.
        """
        return await self._write_op(
            "enqueue an input",
            lambda: ops.enqueue_input(self.dialect, run_id, kind, payload, input_id=input_id),
        )

    async def poll_inputs(self, run_id: str, *, after_cursor: int) -> list[InputRecord]:
        """Inputs with cursor greater than ``after_cursor``, in order."""
        return await self._brief_read_op(
            "poll inputs",
            lambda: ops.poll_inputs(self.dialect, run_id, after_cursor=after_cursor),
        )

    async def seal_inputs(self, run_id: str, *, after_cursor: int) -> list[InputRecord]:
        """Close the queue unless inputs past the cursor are waiting (then return them).

        Serialised with :meth:`enqueue_input` (the writer's lock on SQLite, the run row's on
        PostgreSQL), so an input is either returned here or refused with
        :class:`RunEndedError`, never lost in between.
        """
        return await self._write_op(
            "seal inputs",
            lambda: ops.seal_inputs(self.dialect, run_id, after_cursor=after_cursor),
        )

    async def unseal_inputs(self, run_id: str) -> None:
        """Accept inputs again."""
        await self._write_op("unseal inputs", lambda: ops.unseal_inputs(self.dialect, run_id))

    async def ack_inputs(self, run_id: str, upto_cursor: int, *, fence: int) -> None:
        """Mark inputs up to the cursor delivered."""
        await self._write_op(
            "ack inputs", lambda: ops.ack_inputs(self.dialect, run_id, upto_cursor, fence=fence)
        )

    # gates --------------------------------------------------------------------------------
    async def create_gate(self, gate: GateRecord, *, fence: int) -> GateRecord:
        """Insert a pending gate (same run + call returns the existing one)."""
        return await self._write_op(
            "create a gate", lambda: ops.create_gate(self.dialect, gate, fence=fence)
        )

    async def get_gate(self, ref: str) -> GateRecord:
        """The gate, or :class:`NotFoundError`."""
        return await self._read_op(f"read gate {ref}", lambda: ops.get_gate(self.dialect, ref))

    async def gate_for_call(self, run_id: str, call_id: str) -> GateRecord | None:
        """The gate opened for a call, if any."""
        return await self._read_op(
            "read a gate", lambda: ops.gate_for_call(self.dialect, run_id, call_id)
        )

    async def resolve_gate(
        self,
        ref: str,
        status: GateDecision,
        *,
        reason: str | None,
        now: float,
        resolution: GateResolution | None = None,
    ) -> GateRecord:
        """Resolve a pending gate once; :class:`GateResolvedError` on a second resolution."""
        how = resolution or GateResolution()
        return await self._write_op(
            "resolve a gate",
            lambda: ops.resolve_gate(self.dialect, ref, status, reason=reason, now=now, how=how),
        )

    async def list_gates(
        self,
        *,
        scope: Scope | None = None,
        status: GateStatus | None = "pending",
        limit: int | None = None,
    ) -> list[GateRecord]:
        """Gates of a scope (tenant and user) and/or in a status, newest first."""
        return await self._read_op(
            "list gates",
            lambda: ops.list_gates(self.dialect, scope=scope, status=status, limit=limit),
        )

    # run events ---------------------------------------------------------------------------
    async def append_run_events(
        self, run_id: str, events: Sequence[Mapping[str, Any]], *, keep: int = MAX_RUN_EVENTS
    ) -> int:
        """Append events after the run's last one; keep the newest ``keep``; the last seq.

        Followers in this process are woken when the append commits (on PostgreSQL, those of
        every process: ``NOTIFY``).
        """
        now = time.time()
        last = await self._write_op(
            "append run events",
            lambda: ops.append_run_events(self.dialect, run_id, events, keep=keep, now=now),
        )
        self._event_waiters.wake(run_id)
        return last

    async def append_event_batches(
        self, batches: Mapping[str, Sequence[Mapping[str, Any]]], *, keep: int = MAX_RUN_EVENTS
    ) -> dict[str, int]:
        """Append each run's events after its last one, in one transaction; the last seqs.

        As :meth:`append_run_events` for every run of ``batches`` (``run_id`` → its events).
        """
        now = time.time()
        last = await self._write_op(
            "append run events",
            lambda: ops.append_event_batches(self.dialect, batches, keep=keep, now=now),
        )
        for run_id in last:
            self._event_waiters.wake(run_id)
        return last

    async def run_events(
        self, run_id: str, *, after_seq: int = 0, limit: int = 1000
    ) -> list[RunEventRecord]:
        """Stored events with a seq above ``after_seq``, oldest first, at most ``limit``."""
        return await self._read_op(
            "read run events",
            lambda: ops.run_events(self.dialect, run_id, after_seq=after_seq, limit=limit),
        )
