"""An in-memory ``Store``: the reference implementation, and the backend for ``:memory:``.

It passes the same conformance suite as the durable backends, so tests that run on it say
something true about the others.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any

from reverie.core.fastcopy import maker, replace as fast_replace
from reverie.core.ids import new_id
from reverie.core.scope import Scope
from reverie.core.transcript import placed
from reverie.core.vocabulary import GateDecision
from reverie.errors import (
    ConflictError,
    GateResolvedError,
    LeaseLost,
    NotFoundError,
    RunBusy,
    RunEndedError,
    ThreadBusy,
    TranscriptConflict,
    UsageError,
)
from reverie.store.base import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
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
    check_segment_end,
)
from reverie.store.memory_documents import MemoryDocuments
from reverie.store.run_events import MAX_RUN_EVENTS, EventWaiters, RunEventRecord
from reverie.store.schedules import MemorySchedules

_now = time.time
# Plain functions that build what every step commit builds (a class call with keywords costs
# more).
_journal_entry = maker(JournalEntry)
_step_receipt = maker(StepReceipt)


class MemoryStore(MemorySchedules, MemoryDocuments):
    """Dict-backed store. Not shared between processes; everything is lost on exit."""

    def __init__(self) -> None:
        super().__init__()  # the memory documents (DocumentStore)
        self._threads: dict[str, ThreadRecord] = {}
        self._items: dict[str, TranscriptItem] = {}
        self._thread_items: dict[str, list[str]] = {}
        self._runs: dict[str, RunRecord] = {}
        self._thread_runs: dict[str, list[str]] = {}
        """Thread id → its runs' ids, oldest first: a start looks at its thread's runs only."""
        self._idem: dict[tuple[str, str, str], str] = {}
        """(tenant, user, idempotency key) → run id: keys are per owner."""
        # ``(kind, payload, created_at)``: the record is made when read (a step commit writes
        # one, and most are never read back).
        self._checkpoints: dict[str, tuple[CheckpointKind, bytes, float]] = {}
        self._journal: dict[tuple[str, str], JournalEntry] = {}
        self._inputs: dict[str, list[InputRecord]] = {}
        self._input_ids: dict[tuple[str, str], InputRecord] = {}
        self._gates: dict[str, GateRecord] = {}
        # ``(seq, kind, data, created_at)``; records are made when read, as for checkpoints.
        self._events: dict[str, list[tuple[int, str, dict[str, Any], float]]] = {}
        self._event_waiters = EventWaiters()
        self._sealed: set[str] = set()

    async def open(self) -> None:
        """Nothing to connect."""

    async def close(self) -> None:
        """Nothing to release."""

    # threads and transcript -------------------------------------------------------------
    async def create_thread(self, thread_id: str, scope: Scope) -> ThreadRecord:
        rec = ThreadRecord(thread_id=thread_id, scope=scope, created_at=_now())
        self._threads.setdefault(thread_id, rec)
        self._thread_items.setdefault(thread_id, [])
        return self._threads[thread_id]

    async def get_thread(self, thread_id: str) -> ThreadRecord:
        try:
            return self._threads[thread_id]
        except KeyError:
            raise NotFoundError(f"thread {thread_id} not found") from None

    def _check_fence(self, run_id: str | None, fence: int | None) -> None:
        if run_id is None or fence is None:
            return
        run = self._runs.get(run_id)
        if run is None:
            raise NotFoundError(f"run {run_id} not found")
        if run.fence != fence:
            raise LeaseLost(f"run {run_id}: fencing token {fence} is stale (now {run.fence})")

    async def append_items(
        self, thread_id: str, run_id: str | None, items: Sequence[NewItem], *, fence: int | None
    ) -> list[TranscriptItem]:
        await self.get_thread(thread_id)
        self._check_fence(run_id, fence)
        refs = self._thread_items[thread_id]
        out: list[TranscriptItem] = []
        for item in items:
            seq = len(refs) + 1
            rec = placed(item, ref=new_id("itm"), seq=seq, thread_id=thread_id, run_id=run_id)
            self._items[rec.ref] = rec
            refs.append(rec.ref)
            out.append(rec)
        return out

    async def get_items(self, refs: Sequence[str]) -> list[TranscriptItem]:
        try:
            return [self._items[r] for r in refs]
        except KeyError as exc:
            raise NotFoundError(f"transcript item {exc.args[0]} not found") from None

    async def thread_items(
        self, thread_id: str, *, upto_seq: int | None = None, last: int | None = None
    ) -> list[TranscriptItem]:
        await self.get_thread(thread_id)
        refs = self._thread_items[thread_id]
        if upto_seq is not None:
            refs = refs[:upto_seq]  # seq n is at index n-1: rows are never removed
        if last is not None and last <= 0:
            return []
        # Walk back from the end so a window costs O(window), not O(transcript).
        out: list[TranscriptItem] = []
        for ref in reversed(refs):
            row = self._items[ref]
            if row.superseded:
                continue
            out.append(row)
            if last is not None and len(out) >= last:
                break
        out.reverse()
        return out

    async def thread_head(self, thread_id: str) -> int:
        await self.get_thread(thread_id)
        return len(self._thread_items[thread_id])

    async def commit_step(self, run_id: str, step: StepWrite, *, fence: int) -> StepReceipt:
        # Every check first, then every write: no await in between, so it is one transaction.
        if step.thread_id not in self._threads:
            await self.get_thread(step.thread_id)  # raises NotFoundError
        self._check_fence(run_id, fence)
        refs = self._thread_items[step.thread_id]
        if step.items:
            if step.after_seq != len(refs):
                raise TranscriptConflict(
                    f"thread {step.thread_id} ends at seq {len(refs)}, not {step.after_seq}"
                )
            for expected, item in enumerate(step.items, start=len(refs) + 1):
                if item.seq != expected or item.thread_id != step.thread_id:
                    raise UsageError(f"step item {item.ref} must have seq {expected}")
        queue = self._inputs.get(run_id, [])
        guard = step.guard_cursor
        waiting = guard is not None and bool(queue) and any(r.cursor > guard for r in queue)
        for entry in step.journal:
            prior = self._journal.get((run_id, entry.call_id))
            if entry.state == "started" and prior is not None:
                continue  # started is idempotent; it never overwrites an outcome
            self._journal[(run_id, entry.call_id)] = _journal_entry(
                run_id=run_id,
                call_id=entry.call_id,
                tool=entry.tool or (prior.tool if prior else ""),
                state=entry.state,
                outcome=None if entry.outcome is None else dict(entry.outcome),
            )
        for item in step.items:
            # A row placed for this run with a meta dict of its own (as the segment stages
            # them) is kept as it is: rows are frozen, and get_items hands out what is kept.
            if item.run_id != run_id or type(item.meta) is not dict:
                item = fast_replace(item, run_id=run_id, meta=dict(item.meta))
            self._items[item.ref] = item
            refs.append(item.ref)
        if not waiting:
            if step.checkpoint is not None and step.checkpoint_kind is not None:
                self._checkpoints[run_id] = (step.checkpoint_kind, bytes(step.checkpoint), _now())
            if step.ack_cursor is not None:
                for i, rec in enumerate(queue):
                    if rec.cursor <= step.ack_cursor and not rec.acked:
                        queue[i] = dataclasses.replace(rec, acked=True)
            if step.seal:
                self._sealed.add(run_id)
        return _step_receipt(
            head_seq=len(refs),
            inputs_waiting=waiting,
            cancel_requested=self._runs[run_id].cancel_requested,
        )

    async def supersede_items_after(self, thread_id: str, run_id: str, seq: int) -> int:
        count = 0
        for ref in self._thread_items.get(thread_id, []):
            row = self._items[ref]
            if row.run_id == run_id and row.seq > seq and not row.superseded:
                self._items[ref] = dataclasses.replace(row, superseded=True)
                count += 1
        return count

    # runs and leases ----------------------------------------------------------------------
    async def create_run(self, run: RunRecord) -> RunRecord:
        existing = self._admit(run)
        return existing if existing is not None else self._insert_run(run)

    def _admit(self, run: RunRecord) -> RunRecord | None:
        """The run the owner's idempotency key names, or ``None`` if ``run`` may be inserted."""
        if run.idempotency_key is not None:
            key = (run.scope.tenant, run.scope.user, run.idempotency_key)
            if key in self._idem:
                return self._runs[self._idem[key]]
        if run.run_id in self._runs:
            raise ConflictError(f"run {run.run_id} already exists")
        active = self._active(run.thread_id)
        if active is not None:
            raise ThreadBusy(run.thread_id, active.run_id, active.status)
        return None

    def _insert_run(self, run: RunRecord) -> RunRecord:
        now = _now()
        rec = fast_replace(run, created_at=now, updated_at=now)
        self._runs[run.run_id] = rec
        self._thread_runs.setdefault(run.thread_id, []).append(run.run_id)
        if run.idempotency_key is not None:
            self._idem[(run.scope.tenant, run.scope.user, run.idempotency_key)] = run.run_id
        self._inputs.setdefault(run.run_id, [])
        return rec

    async def start_run(
        self, run: RunRecord, items: Sequence[NewItem], *, create_thread: bool = False
    ) -> RunRecord:
        return self._start_run(run, items, create_thread=create_thread)

    def _start_run(
        self, run: RunRecord, items: Sequence[NewItem], *, create_thread: bool
    ) -> RunRecord:
        # Every check first, then every write: no await in between, so it is one transaction.
        thread = self._threads.get(run.thread_id)
        if thread is None and not create_thread:
            raise NotFoundError(f"thread {run.thread_id} not found")
        if thread is not None and (thread.scope.tenant, thread.scope.user) != (
            run.scope.tenant,
            run.scope.user,
        ):
            raise NotFoundError(f"thread {run.thread_id} not found")  # another owner's
        existing = self._admit(run)
        if existing is not None:
            return existing
        if thread is None:
            self._threads[run.thread_id] = ThreadRecord(
                thread_id=run.thread_id, scope=run.scope, created_at=_now()
            )
        refs = self._thread_items.setdefault(run.thread_id, [])
        rec = self._insert_run(run)
        for item in items:
            row = placed(
                item,
                ref=new_id("itm"),
                seq=len(refs) + 1,
                thread_id=run.thread_id,
                run_id=run.run_id,
            )
            self._items[row.ref] = row
            refs.append(row.ref)
        return rec

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
        leased = fast_replace(
            run,
            status="running",
            lease_owner=owner,
            lease_expires_at=now + ttl_s,
            fence=run.fence + 1,
        )
        # No await: the start and the reads are one transaction.
        rec = self._start_run(leased, items, create_thread=create_thread)
        if rec.run_id != run.run_id:  # the key named another run: nothing written or leased
            return SegmentStart(fence=0, run=rec, prior_status=rec.status)
        refs = self._thread_items[run.thread_id]
        return SegmentStart(
            fence=rec.fence,
            run=rec,
            prior_status="queued",
            head_seq=len(refs),
            items=self._newest(refs, window),
        )

    def _newest(self, refs: Sequence[str], window: int) -> list[TranscriptItem]:
        """The newest ``window`` non-superseded rows of ``refs`` (a thread's), in seq order."""
        items: list[TranscriptItem] = []
        for ref in reversed(refs):
            if len(items) >= window:
                break
            row = self._items[ref]
            if not row.superseded:
                items.append(row)
        items.reverse()
        return items

    def _active(self, thread_id: str) -> RunRecord | None:
        for run_id in self._thread_runs.get(thread_id, ()):
            r = self._runs[run_id]
            if r.status in ACTIVE_STATUSES:
                return r
        return None

    async def active_run(self, thread_id: str) -> RunRecord | None:
        return self._active(thread_id)

    async def get_run(self, run_id: str) -> RunRecord:
        try:
            return self._runs[run_id]
        except KeyError:
            raise NotFoundError(f"run {run_id} not found") from None

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
        rows = [
            r
            for r in self._runs.values()
            if (scope is None or (r.scope.tenant, r.scope.user) == (scope.tenant, scope.user))
            and (tenant is None or r.scope.tenant == tenant)
            and (statuses is None or r.status in statuses)
            and (agent is None or r.agent_name == agent)
            and (thread_id is None or r.thread_id == thread_id)
            and (before is None or (r.created_at, r.run_id) < before)
        ]
        rows.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
        return rows[:limit]

    async def set_run_status(
        self,
        run_id: str,
        status: RunStatus,
        *,
        fence: int | None,
        exit: Mapping[str, Any] | None = None,
    ) -> RunRecord:
        return await self._write_status(run_id, status, fence=fence, exit=exit)

    async def _write_status(
        self,
        run_id: str,
        status: RunStatus,
        *,
        fence: int | None,
        exit: Mapping[str, Any] | None,
        **more: Any,
    ) -> RunRecord:
        """The run's status (and exit, if given) written under ``fence``, with ``more`` fields."""
        run = await self.get_run(run_id)
        self._check_fence(run_id, fence)
        rec = fast_replace(
            run,
            status=status,
            exit=dict(exit) if exit is not None else run.exit,
            updated_at=_now(),
            **more,
        )
        self._runs[run_id] = rec
        return rec

    async def request_cancel(self, run_id: str) -> RunRecord:
        run = await self.get_run(run_id)
        rec = fast_replace(run, cancel_requested=True, updated_at=_now())
        self._runs[run_id] = rec
        return rec

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
        run = await self.get_run(run_id)
        held = (
            run.lease_owner is not None
            and run.lease_owner != owner
            and run.lease_owner != take_over
            and run.lease_expires_at is not None
            and run.lease_expires_at > now
        )
        if held and not force:
            raise RunBusy(f"run {run_id} is leased by a live worker")
        fence = run.fence + 1
        self._runs[run_id] = fast_replace(
            run, lease_owner=owner, lease_expires_at=now + ttl_s, fence=fence
        )
        return fence

    async def renew_lease(self, run_id: str, fence: int, *, ttl_s: float, now: float) -> None:
        self._check_fence(run_id, fence)
        run = self._runs[run_id]
        self._runs[run_id] = fast_replace(run, lease_expires_at=now + ttl_s)

    async def release_lease(self, run_id: str, fence: int) -> None:
        run = self._runs.get(run_id)
        if run is not None and run.fence == fence:
            self._runs[run_id] = fast_replace(run, lease_owner=None, lease_expires_at=None)

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
        # No await between the lease and the reads: one transaction.
        fence = await self.acquire_lease(run_id, owner, ttl_s=ttl_s, now=now, take_over=take_over)
        run = self._runs[run_id]
        if run.status in TERMINAL_STATUSES:
            return SegmentStart(fence=fence, run=run, prior_status=run.status)
        started = fast_replace(run, status="running", updated_at=_now())
        self._runs[run_id] = started
        self._sealed.discard(run_id)
        refs = self._thread_items.get(run.thread_id, [])
        return SegmentStart(
            fence=fence,
            run=started,
            prior_status=run.status,
            checkpoint=self._checkpoint(run_id),
            head_seq=len(refs),
            items=self._newest(refs, window),
            inputs=[r for r in self._inputs.get(run_id, []) if not r.acked],
        )

    async def end_segment(
        self,
        run_id: str,
        status: RunStatus,
        *,
        fence: int,
        exit: Mapping[str, Any] | None = None,
    ) -> RunRecord:
        check_segment_end(status)
        rec = await self._write_status(
            run_id, status, fence=fence, exit=exit, lease_owner=None, lease_expires_at=None
        )
        if status in TERMINAL_STATUSES:
            self._sealed.add(run_id)
        return rec

    async def expired_leases(self, now: float) -> list[RunRecord]:
        return [
            r
            for r in self._runs.values()
            if r.status in ("running", "queued")
            and (r.lease_expires_at is None or r.lease_expires_at <= now)
        ]

    # checkpoints --------------------------------------------------------------------------
    async def save_checkpoint(
        self, run_id: str, kind: CheckpointKind, payload: bytes, *, fence: int
    ) -> None:
        self._check_fence(run_id, fence)
        self._checkpoints[run_id] = (kind, bytes(payload), _now())

    async def load_checkpoint(self, run_id: str) -> CheckpointRecord | None:
        return self._checkpoint(run_id)

    def _checkpoint(self, run_id: str) -> CheckpointRecord | None:
        saved = self._checkpoints.get(run_id)
        if saved is None:
            return None
        kind, payload, created_at = saved
        return CheckpointRecord(run_id=run_id, kind=kind, payload=payload, created_at=created_at)

    # journal ------------------------------------------------------------------------------
    async def journal_started(self, run_id: str, call_id: str, tool: str, *, fence: int) -> None:
        self._check_fence(run_id, fence)
        self._journal.setdefault(
            (run_id, call_id),
            JournalEntry(run_id=run_id, call_id=call_id, tool=tool, state="started"),
        )

    async def journal_finished(
        self, run_id: str, call_id: str, outcome: Mapping[str, Any], *, fence: int
    ) -> None:
        self._check_fence(run_id, fence)
        prior = self._journal.get((run_id, call_id))
        tool = prior.tool if prior else ""
        self._journal[(run_id, call_id)] = JournalEntry(
            run_id=run_id, call_id=call_id, tool=tool, state="finished", outcome=dict(outcome)
        )

    async def journal_get(self, run_id: str, call_ids: Sequence[str]) -> dict[str, JournalEntry]:
        return {c: self._journal[(run_id, c)] for c in call_ids if (run_id, c) in self._journal}

    # inputs -------------------------------------------------------------------------------
    async def enqueue_input(
        self, run_id: str, kind: InputKind, payload: Mapping[str, Any], *, input_id: str
    ) -> InputRecord:
        await self.get_run(run_id)
        existing = self._input_ids.get((run_id, input_id))
        if existing is not None:
            return existing
        if run_id in self._sealed:
            raise RunEndedError(f"run {run_id} has ended and accepts no more inputs")
        queue = self._inputs.setdefault(run_id, [])
        rec = InputRecord(
            run_id=run_id,
            cursor=len(queue) + 1,
            input_id=input_id,
            kind=kind,
            payload=dict(payload),
        )
        queue.append(rec)
        self._input_ids[(run_id, input_id)] = rec
        return rec

    async def poll_inputs(self, run_id: str, *, after_cursor: int) -> list[InputRecord]:
        return [r for r in self._inputs.get(run_id, []) if r.cursor > after_cursor]

    async def seal_inputs(self, run_id: str, *, after_cursor: int) -> list[InputRecord]:
        await self.get_run(run_id)
        waiting = [r for r in self._inputs.get(run_id, []) if r.cursor > after_cursor]
        if not waiting:
            self._sealed.add(run_id)
        return waiting

    async def unseal_inputs(self, run_id: str) -> None:
        self._sealed.discard(run_id)

    async def ack_inputs(self, run_id: str, upto_cursor: int, *, fence: int) -> None:
        self._check_fence(run_id, fence)
        queue = self._inputs.get(run_id, [])
        for i, rec in enumerate(queue):
            if rec.cursor <= upto_cursor and not rec.acked:
                queue[i] = dataclasses.replace(rec, acked=True)

    # gates --------------------------------------------------------------------------------
    async def create_gate(self, gate: GateRecord, *, fence: int) -> GateRecord:
        self._check_fence(gate.run_id, fence)
        existing = await self.gate_for_call(gate.run_id, gate.call_id)
        if existing is not None:
            return existing
        self._gates[gate.ref] = gate
        return gate

    async def get_gate(self, ref: str) -> GateRecord:
        try:
            return self._gates[ref]
        except KeyError:
            raise NotFoundError(f"gate {ref} not found") from None

    async def gate_for_call(self, run_id: str, call_id: str) -> GateRecord | None:
        for g in self._gates.values():
            if g.run_id == run_id and g.call_id == call_id:
                return g
        return None

    async def resolve_gate(
        self,
        ref: str,
        status: GateDecision,
        *,
        reason: str | None,
        now: float,
        resolution: GateResolution | None = None,
    ) -> GateRecord:
        gate = await self.get_gate(ref)
        if gate.status != "pending":
            raise GateResolvedError(f"gate {ref} is already {gate.status}")
        how = resolution or GateResolution()
        edited = None if how.edited_arguments is None else copy.deepcopy(how.edited_arguments)
        rec = dataclasses.replace(
            gate,
            status=status,
            reason=reason,
            resolved_at=now,
            resolved_by=how.resolved_by,
            shown_digest=how.shown_digest,
            approved_digest=how.approved_digest,
            edited_arguments=edited,
        )
        self._gates[ref] = rec
        return rec

    async def list_gates(
        self,
        *,
        scope: Scope | None = None,
        status: GateStatus | None = "pending",
        limit: int | None = None,
    ) -> list[GateRecord]:
        rows = [
            g
            for g in self._gates.values()
            if (scope is None or (g.scope.tenant, g.scope.user) == (scope.tenant, scope.user))
            and (status is None or g.status == status)
        ]
        rows.sort(key=lambda g: (g.created_at, g.ref), reverse=True)
        return rows if limit is None else rows[: max(0, limit)]

    # run events ---------------------------------------------------------------------------
    async def append_run_events(
        self, run_id: str, events: Sequence[Mapping[str, Any]], *, keep: int = MAX_RUN_EVENTS
    ) -> int:
        """Append events after the run's last one; keep the newest ``keep``; the last seq."""
        stored = self._events.setdefault(run_id, [])
        seq = stored[-1][0] if stored else 0
        now = _now()
        for data in events:
            seq += 1
            stored.append((seq, str(data["kind"]), dict(data), now))
        del stored[: max(0, len(stored) - keep)]
        self._event_waiters.wake(run_id)
        return seq

    async def run_events(
        self, run_id: str, *, after_seq: int = 0, limit: int = 1000
    ) -> list[RunEventRecord]:
        """Stored events with a seq above ``after_seq``, oldest first, at most ``limit``."""
        found = [e for e in self._events.get(run_id, ()) if e[0] > after_seq][: max(0, limit)]
        return [
            RunEventRecord(run_id=run_id, seq=seq, kind=kind, data=data, created_at=at)
            for seq, kind, data, at in found
        ]

    async def wait_run_events(self, run_id: str, *, timeout_s: float) -> None:
        """Return when events of the run were appended, or after ``timeout_s``."""
        await self._event_waiters.wait(run_id, timeout_s)
