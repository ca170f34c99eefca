"""The ``Store`` protocol's operations for the SQL backends, written once (see :mod:`.sql_core`).

Each function is an op of one store method: the statements it runs, in the dialect it is
given, and every decision it takes on their results. :class:`reverie.store.sql_store.SQLStore`
turns them into the methods; each backend only drives them. Under SQLite the writer's
``BEGIN IMMEDIATE`` transaction holds the database lock, so the row locks of the dialect are
empty there; under PostgreSQL (READ COMMITTED) a decision rests on rows locked first
(``{lock}``: ``FOR NO KEY UPDATE`` on rows the op updates or serialises on; ``{share}``:
``FOR SHARE`` on the run row of a fenced write, which a lease takeover's ``UPDATE`` waits for),
and what it reads after the lock is read by a later statement, whose snapshot is taken once the
lock is held.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from reverie.core.fastcopy import replace as fast_replace
from reverie.core.ids import new_id
from reverie.core.scope import Scope
from reverie.core.transcript import placed
from reverie.core.vocabulary import GateDecision
from reverie.errors import (
    ConflictError,
    GateResolvedError,
    NotFoundError,
    RunBusy,
    RunEndedError,
    ThreadBusy,
    TranscriptConflict,
    UsageError,
)
from reverie.store import rows as codec
from reverie.store.base import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    CheckpointKind,
    GateRecord,
    GateResolution,
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
from reverie.store.run_events import RunEventRecord
from reverie.store.sql_core import (
    Dialect,
    Guard,
    Op,
    Statement,
    json_records,
    raise_if_stale,
)

# transcript ---------------------------------------------------------------------------------
ITEM_COLUMNS = (
    "ref",
    "thread_id",
    "seq",
    "run_id",
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "name",
    "input_id",
    "meta",
    "superseded",
    "created_at",
)
"""The columns of an ``items`` row, in the order of :func:`item_row`."""


def item_row(d: Dialect, rec: TranscriptItem, *, created_at: float) -> tuple[Any, ...]:
    """The values of an ``items`` row, in the order of :data:`ITEM_COLUMNS`."""
    return (
        rec.ref,
        rec.thread_id,
        rec.seq,
        rec.run_id,
        rec.role,
        d.text(rec.content),
        codec.dumps([c.to_dict() for c in rec.tool_calls]) if rec.tool_calls else "[]",
        rec.tool_call_id,
        rec.name,
        rec.input_id,
        codec.dumps(dict(rec.meta)) if rec.meta else "{}",
        d.flag(rec.superseded),
        created_at,
    )


def new_item(
    d: Dialect, ref: str, seq: int, thread_id: str, run_id: str | None, item: NewItem
) -> TranscriptItem:
    """The record of an appended row, as :func:`reverie.store.rows.row_item` reads it back."""
    return placed(
        item, ref=ref, seq=seq, thread_id=thread_id, run_id=run_id, content=d.text(item.content)
    )


def create_thread(d: Dialect, rec: ThreadRecord) -> Op[ThreadRecord]:
    """Insert the thread unless it exists; the thread as stored."""
    [inserted] = yield [d.insert("threads", codec.thread_columns(rec), " ON CONFLICT DO NOTHING")]
    if inserted:
        return rec
    [found] = yield [d.query("SELECT * FROM threads WHERE thread_id = ?", rec.thread_id)]
    return codec.row_thread(found[0])


def get_thread(d: Dialect, thread_id: str) -> Op[ThreadRecord]:
    """The thread, or :class:`NotFoundError`."""
    [found] = yield [d.query("SELECT * FROM threads WHERE thread_id = ?", thread_id)]
    if not found:
        raise NotFoundError(f"thread {thread_id} not found")
    return codec.row_thread(found[0])


_LOCK_THREAD = "SELECT 1 AS found FROM threads WHERE thread_id = ?{lock}"
_SHARE_FENCE = "SELECT fence FROM runs WHERE run_id = ?{share}"
_MAX_SEQ = "SELECT COALESCE(MAX(seq), 0) AS head FROM items WHERE thread_id = ?"


def append_items(
    d: Dialect,
    thread_id: str,
    run_id: str | None,
    items: Sequence[NewItem],
    *,
    fence: int | None,
    created_at: float,
) -> Op[list[TranscriptItem]]:
    """Append rows after the thread's head (seq drawn under the thread's lock: gap-free)."""
    fenced = run_id is not None and fence is not None
    reads = [d.query(_LOCK_THREAD, thread_id)]
    if fenced:
        reads.append(d.query(_SHARE_FENCE, run_id))
    reads.append(d.query(_MAX_SEQ, thread_id))
    found = yield reads
    if not found[0]:
        raise NotFoundError(f"thread {thread_id} not found")
    if fenced:
        assert run_id is not None and fence is not None
        raise_if_stale(run_id, fence, int(found[1][0]["fence"]) if found[1] else None)
    first = int(found[-1][0]["head"]) + 1
    # new_id reads os.urandom, which lets go of the GIL: on SQLite's writer thread that only
    # delays this batch, on the event loop it would wait for the GIL behind these threads.
    out = [
        new_item(d, new_id("itm"), seq, thread_id, run_id, item)
        for seq, item in enumerate(items, start=first)
    ]
    if out:
        rows = [item_row(d, rec, created_at=created_at) for rec in out]
        yield [d.insert_rows("items", ITEM_COLUMNS, rows)]
    return out


_HEAD = (
    "SELECT EXISTS (SELECT 1 FROM threads WHERE thread_id = ?) AS found,"
    " (SELECT COALESCE(MAX(seq), 0) FROM items WHERE thread_id = ?) AS head"
)


def thread_head(d: Dialect, thread_id: str) -> Op[int]:
    """The thread's highest seq, superseded rows included; :class:`NotFoundError` if missing."""
    [[row]] = yield [d.query(_HEAD, thread_id, thread_id)]
    if not row["found"]:
        raise NotFoundError(f"thread {thread_id} not found")
    return int(row["head"])


def supersede_items_after(d: Dialect, thread_id: str, run_id: str, seq: int) -> Op[int]:
    """Mark rows of the run past ``seq`` superseded; how many."""
    [count] = yield [
        d.count(
            "UPDATE items SET superseded = TRUE"
            " WHERE thread_id = ? AND run_id = ? AND seq > ? AND NOT superseded",
            thread_id,
            run_id,
            seq,
        )
    ]
    return int(count)


# the step commit ----------------------------------------------------------------------------
_LOCK_RUN = "SELECT fence, cancel_requested FROM runs WHERE run_id = ?{lock}"
_STEP_TOPS = (
    "SELECT (SELECT COALESCE(MAX(seq), 0) FROM items WHERE thread_id = ?) AS head,"
    " (SELECT COALESCE(MAX(cursor), 0) FROM inputs WHERE run_id = ?) AS top_cursor"
)
_STEP_CHECKS = (
    "SELECT EXISTS (SELECT 1 FROM threads WHERE thread_id = ?) AS found,"
    " (SELECT fence FROM runs WHERE run_id = ?) AS fence,"
    " (SELECT cancel_requested FROM runs WHERE run_id = ?) AS cancel_requested,"
    " (SELECT COALESCE(MAX(seq), 0) FROM items WHERE thread_id = ?) AS head,"
    " (SELECT COALESCE(MAX(cursor), 0) FROM inputs WHERE run_id = ?) AS top_cursor"
)
"""Everything a step commit checks, in one statement: for a dialect whose transaction already
holds the database's write lock (SQLite), where the row locks are no-ops (an empty ``lock``)."""
_JOURNAL_STARTED = (
    "INSERT INTO journal (run_id, call_id, tool, state, outcome, updated_at)"
    " VALUES (?, ?, ?, 'started', ?, ?) ON CONFLICT (run_id, call_id) DO NOTHING"
)
_JOURNAL_FINISHED = (
    "INSERT INTO journal (run_id, call_id, tool, state, outcome, updated_at)"
    " VALUES (?, ?, ?, 'finished', ?, ?) ON CONFLICT (run_id, call_id) DO UPDATE"
    " SET state = 'finished', outcome = excluded.outcome, updated_at = excluded.updated_at,"
    " tool = CASE WHEN excluded.tool = '' THEN journal.tool ELSE excluded.tool END"
)
_SAVE_CHECKPOINT = (
    "INSERT INTO checkpoints (run_id, kind, payload, created_at) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (run_id) DO UPDATE SET kind = excluded.kind, payload = excluded.payload,"
    " created_at = excluded.created_at"
)
_ACK = "UPDATE inputs SET acked = TRUE WHERE run_id = ? AND cursor <= ? AND NOT acked"
_SEAL = "UPDATE runs SET inputs_sealed = TRUE WHERE run_id = ?"


def _check_items(step: StepWrite, head: int) -> None:
    if step.after_seq != head:
        raise TranscriptConflict(
            f"thread {step.thread_id} ends at seq {head}, not {step.after_seq}"
        )
    for expected, item in enumerate(step.items, start=head + 1):
        if item.seq != expected or item.thread_id != step.thread_id:
            raise UsageError(f"step item {item.ref} must have seq {expected}")


def step_items(run_id: str, step: StepWrite) -> list[TranscriptItem]:
    """The items a step writes, as they read back (their ``run_id`` is the run's)."""
    return [
        item if item.run_id == run_id else dataclasses.replace(item, run_id=run_id)
        for item in step.items
    ]


@dataclasses.dataclass(frozen=True, slots=True)
class PreparedStep:
    """The statements of a step commit, built before its transaction (no lock held yet)."""

    always: list[Statement]
    """The journal records, then the items: written whenever the checks pass."""
    guarded: list[Statement]
    """The checkpoint, the ack and the seal: written only when no input waits."""
    call: Guard | None = None
    """The whole step commit as one statement (a dialect with a ``step_call``)."""


def _as_dict(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """``value`` as the JSON encoder takes it (a dict; any other mapping is copied into one)."""
    return value if type(value) is dict else dict(value)


def prepare_step(d: Dialect, run_id: str, step: StepWrite, *, fence: int) -> PreparedStep:
    """Encode a step's rows (JSON, bytes) into its statements."""
    now = time.time()
    always: list[Statement] = []
    outcomes = [
        None if e.outcome is None else codec.dumps(_as_dict(e.outcome)) for e in step.journal
    ]
    for entry, outcome in zip(step.journal, outcomes, strict=True):
        sql = _JOURNAL_STARTED if entry.state == "started" else _JOURNAL_FINISHED
        always.append(d.exec(sql, run_id, entry.call_id, entry.tool, outcome, now))
    rows = [item_row(d, item, created_at=now) for item in step_items(run_id, step)]
    if rows:
        always.append(d.insert_rows("items", ITEM_COLUMNS, rows))
    guarded: list[Statement] = []
    payload = None
    if step.checkpoint is not None and step.checkpoint_kind is not None:
        payload = bytes(step.checkpoint)
        guarded.append(d.exec(_SAVE_CHECKPOINT, run_id, step.checkpoint_kind, payload, now))
    if step.ack_cursor is not None:
        guarded.append(d.exec(_ACK, run_id, step.ack_cursor))
    if step.seal:
        guarded.append(d.exec(_SEAL, run_id))
    call = None
    if d.step_call is not None:
        call = _step_call(d, run_id, step, fence, rows, outcomes, payload, now)
    return PreparedStep(always=always, guarded=guarded, call=call)


def _step_call(
    d: Dialect,
    run_id: str,
    step: StepWrite,
    fence: int,
    rows: list[tuple[Any, ...]],
    outcomes: list[str | None],
    payload: bytes | None,
    now: float,
) -> Guard:
    """The step commit as one statement: :attr:`Dialect.step_call` and its parameters.

    The items travel as one JSON array of rows keyed by column (their thread, run and time are
    the step's), the journal records as another; the function refuses the step unless the
    items follow the thread's head, each in its place and on the step's thread.
    """
    after = step.after_seq
    placed_right = after is not None and all(
        item.seq == after + n and item.thread_id == step.thread_id
        for n, item in enumerate(step.items, start=1)
    )
    items = codec.dumps([dict(zip(ITEM_COLUMNS, row, strict=True)) for row in rows])
    journal = [
        {"call_id": e.call_id, "tool": e.tool, "state": e.state, "outcome": outcome}
        for e, outcome in zip(step.journal, outcomes, strict=True)
    ]
    assert d.step_call is not None
    return Guard(
        d.sql(d.step_call),
        (
            run_id,
            step.thread_id,
            fence,
            after,
            placed_right,
            items if rows else None,
            codec.dumps(journal) if journal else None,
            step.checkpoint_kind if payload is not None else None,
            payload,
            step.ack_cursor,
            step.seal,
            step.guard_cursor,
            now,
        ),
    )


def commit_step(
    d: Dialect,
    run_id: str,
    step: StepWrite,
    *,
    fence: int,
    prepared: PreparedStep,
    seen: Callable[[str, int], None] | None = None,
) -> Op[StepReceipt]:
    """:meth:`reverie.store.base.Store.commit_step`: every check, then every write.

    With a :attr:`~reverie.store.sql_core.Dialect.step_call` the locks, the checks and the
    writes are one statement, sent as a :class:`~reverie.store.sql_core.Guard`: one round
    trip. When it refuses, nothing was written and the checks run again in a new transaction,
    two batches as on SQLite, to raise the error they find (or, if the rows changed since, to
    write the step after all). ``seen`` is told the run's top input cursor the checks read,
    once every write is done (SQLite's :class:`~reverie.store.sqlite_inputs.InputWatch`).
    """
    if prepared.call is not None:
        [found] = yield [prepared.call]
        if found is not None:
            return _receipt(step, found[0], found[0])
    if d.lock:
        # The thread, then the run (the order every op locks them in); the tops after both.
        locks = [d.query(_LOCK_THREAD, step.thread_id), d.query(_LOCK_RUN, run_id)]
        thread, run, [tops] = yield [*locks, d.query(_STEP_TOPS, step.thread_id, run_id)]
        found = bool(thread)
        current = int(run[0]["fence"]) if run else None
        flags = run[0] if run else tops
    else:
        [[tops]] = yield [
            d.query(_STEP_CHECKS, step.thread_id, run_id, run_id, step.thread_id, run_id)
        ]
        found, flags = bool(tops["found"]), tops
        current = None if tops["fence"] is None else int(tops["fence"])
    if not found:
        raise NotFoundError(f"thread {step.thread_id} not found")
    raise_if_stale(run_id, fence, current)
    if step.items:
        _check_items(step, int(tops["head"]))
    receipt = _receipt(step, tops, flags)
    writes = prepared.always if receipt.inputs_waiting else [*prepared.always, *prepared.guarded]
    if writes:
        yield writes
    if seen is not None:
        seen(run_id, int(tops["top_cursor"]))
    return receipt


def _receipt(step: StepWrite, tops: Mapping[str, Any], run: Mapping[str, Any]) -> StepReceipt:
    waiting = step.guard_cursor is not None and int(tops["top_cursor"]) > step.guard_cursor
    return StepReceipt(
        head_seq=int(tops["head"]) + len(step.items),
        inputs_waiting=waiting,
        cancel_requested=bool(run["cancel_requested"]),
    )


# runs and leases ----------------------------------------------------------------------------
_ACTIVE_RUN = (
    "SELECT * FROM runs WHERE thread_id = ? AND status IN (?, ?, ?) ORDER BY created_at LIMIT 1"
)
_RUN = "SELECT * FROM runs WHERE run_id = ?"
_RUN_BY_KEY = "SELECT * FROM runs WHERE idempotency_key = ?"


def where(
    d: Dialect, scope: Scope | None, statuses: Sequence[str] | None, *, tenant: str | None = None
) -> tuple[str, list[Any]]:
    """The WHERE clause of the list queries: scope means tenant and user, as in MemoryStore."""
    clauses: list[str] = []
    params: list[Any] = []
    if tenant is not None:
        clauses.append("scope_tenant = ?")
        params.append(tenant)
    if scope is not None:
        clauses.append("scope_tenant = ? AND scope_user = ?")
        params += [scope.tenant, scope.user]
    if statuses is not None:
        clause, values = d.any_of("status", statuses)
        clauses.append(clause)
        params += values
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def create_run(d: Dialect, run: RunRecord) -> Op[RunRecord]:
    """Insert a run, or return the run its owner's idempotency key names already."""
    now = time.time()
    rec = fast_replace(run, created_at=now, updated_at=now)
    columns = codec.run_columns(rec, d.flag)
    key = columns["idempotency_key"]  # qualified by the owner
    if key is not None:
        [row] = yield [d.query(_RUN_BY_KEY, key)]
        if row:
            return codec.row_run(row[0])
    [row] = yield [d.query("SELECT 1 AS found FROM runs WHERE run_id = ?", run.run_id)]
    if row:
        raise ConflictError(f"run {run.run_id} already exists")
    # One active run per thread: the check and the insert are atomic (the writer's lock on
    # SQLite, the thread row's on PostgreSQL), so two processes never both start one.
    _, busy = yield [
        d.query(_LOCK_THREAD, run.thread_id),
        d.query(_ACTIVE_RUN, run.thread_id, *ACTIVE_STATUSES),
    ]
    if busy:
        raise ThreadBusy(run.thread_id, busy[0]["run_id"], busy[0]["status"])
    # A concurrent create with the same key that committed first wins: keep its run (a
    # duplicate run_id is still a unique violation, hence ConflictError).
    suffix = " ON CONFLICT (idempotency_key) DO NOTHING"
    [inserted] = yield [d.insert("runs", columns, suffix)]
    if inserted:
        return rec
    [row] = yield [d.query(_RUN_BY_KEY, key)]
    if not row:
        raise NotFoundError(f"run with idempotency key of {run.run_id} not found")
    return codec.row_run(row[0])


_LOCK_OWNER = "SELECT scope_tenant, scope_user FROM threads WHERE thread_id = ?{lock}"


def start_run(
    d: Dialect, run: RunRecord, items: Sequence[NewItem], *, create_thread: bool
) -> Op[RunRecord]:
    """Create the thread (if asked and missing), the run and its opening rows: one transaction.

    The thread row is locked first (as every op locks it), so the owner check, the key and
    busy checks, the head and the inserts all rest on it: two processes starting runs on one
    thread are serialised, and the second sees the first's run.
    """
    started = yield from _start_run(d, run, items, create_thread=create_thread, window=0)
    return started.run


@dataclasses.dataclass(frozen=True, slots=True)
class _Started:
    run: RunRecord
    """The run inserted, or the one the owner's idempotency key named (nothing written)."""
    head: int = 0
    """The thread's head before the opening rows."""
    created: bool = False
    """Whether the transaction created the thread."""
    rows: Sequence[TranscriptItem] = ()
    """The opening rows, as written."""
    newest: list[Any] | None = None
    """The thread's newest ``window`` rows as read after the writes, newest first (``None``:
    not read, the opening rows are the window)."""


def _new_thread_start(
    d: Dialect, thread: ThreadRecord, run: codec.Columns, rows: Sequence[tuple[Any, ...]]
) -> Guard:
    """A new thread, its first run and the run's opening rows in one statement, which writes
    all of them if the thread is new and none of them if it exists (then it returns no row).

    For a dialect with :attr:`~reverie.store.sql_core.Dialect.guards`: the statement is its
    own transaction, so a run started on a new thread costs one statement and no ``BEGIN``
    or ``COMMIT``. Each row travels as JSON populated into the table's own row type, which
    gives every value its column's type.
    """
    thread_columns = codec.thread_columns(thread)
    names = {
        "threads": ", ".join(thread_columns),
        "runs": ", ".join(run),
        "items": ", ".join(ITEM_COLUMNS),
    }
    sql = (
        f"WITH t AS (INSERT INTO threads ({names['threads']}) SELECT {names['threads']}"
        " FROM json_populate_recordset(NULL::threads, ?::json) ON CONFLICT DO NOTHING"
        " RETURNING thread_id),"
        f" r AS (INSERT INTO runs ({names['runs']}) SELECT {names['runs']}"
        " FROM json_populate_recordset(NULL::runs, ?::json) WHERE EXISTS (SELECT 1 FROM t)),"
        f" i AS (INSERT INTO items ({names['items']}) SELECT {names['items']}"
        " FROM json_populate_recordset(NULL::items, ?::json) WHERE EXISTS (SELECT 1 FROM t))"
        " SELECT thread_id FROM t"
    )
    return Guard(
        d.sql(sql),
        (
            json_records(list(thread_columns), [list(thread_columns.values())]),
            json_records(list(run), [list(run.values())]),
            json_records(ITEM_COLUMNS, rows),
        ),
    )


def _start_run(
    d: Dialect, run: RunRecord, items: Sequence[NewItem], *, create_thread: bool, window: int
) -> Op[_Started]:
    now = time.time()
    rec = fast_replace(run, created_at=now, updated_at=now)
    columns = codec.run_columns(rec, d.flag)
    key = columns["idempotency_key"]  # qualified by the owner
    if d.guards and create_thread and key is None:
        # The common start, a run on a thread of its own: one statement, written only if the
        # thread is new. An existing thread makes it write nothing, and the checks below run.
        thread = ThreadRecord(thread_id=run.thread_id, scope=run.scope, created_at=now)
        records = [
            new_item(d, new_id("itm"), seq, run.thread_id, run.run_id, item)
            for seq, item in enumerate(items, start=1)
        ]
        rows = [item_row(d, r, created_at=now) for r in records]
        [written] = yield [_new_thread_start(d, thread, columns, rows)]
        if written:
            return _Started(rec, created=True, rows=records)
    if create_thread and key is not None:
        # A repeated keyed start writes nothing (not even the thread it would name).
        [found] = yield [d.query(_RUN_BY_KEY, key)]
        if found:
            return _Started(codec.row_run(found[0]))
    created = 0
    if create_thread:
        thread = ThreadRecord(thread_id=run.thread_id, scope=run.scope, created_at=now)
        [created] = yield [
            d.insert("threads", codec.thread_columns(thread), " ON CONFLICT DO NOTHING")
        ]
    head = 0
    if not created:
        # An existing thread: its owner, the key, a busy thread and the head are read under
        # its lock. A thread this transaction just created is the run's owner's, locked by
        # the insert, and holds no run and no row yet: nothing to read.
        [owner] = yield [d.query(_LOCK_OWNER, run.thread_id)]
        if not owner or (owner[0]["scope_tenant"], owner[0]["scope_user"]) != (
            run.scope.tenant,
            run.scope.user,
        ):
            raise NotFoundError(f"thread {run.thread_id} not found")  # or another owner's
        reads = [
            d.query(_ACTIVE_RUN, run.thread_id, *ACTIVE_STATUSES),
            d.query(_MAX_SEQ, run.thread_id),
        ]
        if key is not None:
            reads.append(d.query(_RUN_BY_KEY, key))
        busy, [top], *by_key = yield reads
        if by_key and by_key[0]:
            return _Started(codec.row_run(by_key[0][0]))
        if busy:
            raise ThreadBusy(run.thread_id, busy[0]["run_id"], busy[0]["status"])
        head = int(top["head"])
    records = [
        new_item(d, new_id("itm"), seq, run.thread_id, run.run_id, item)
        for seq, item in enumerate(items, start=head + 1)
    ]
    rows = [item_row(d, r, created_at=now) for r in records]
    writes: list[Statement] = []
    if key is None:
        # A run id that exists already fails the insert (a unique violation: ConflictError),
        # which undoes the whole operation, the thread it created included.
        writes.append(d.insert("runs", columns))
    else:
        # A concurrent start with the same key on another thread that committed first wins:
        # return its run, and write none of this one's rows.
        [inserted] = yield [d.insert("runs", columns, " ON CONFLICT (idempotency_key) DO NOTHING")]
        if not inserted:
            [found] = yield [d.query(_RUN_BY_KEY, key)]
            if not found:
                raise NotFoundError(f"run with idempotency key of {run.run_id} not found")
            return _Started(codec.row_run(found[0]))
    if rows:
        writes.append(d.insert_rows("items", ITEM_COLUMNS, rows))
    # A window reaching past the opening rows into the thread's older ones: read with the
    # writes (one round trip on PostgreSQL), after them.
    read_window = head > 0 and window > len(records)
    if read_window:
        writes.append(d.query(_NEWEST_ITEMS, run.thread_id, window))
    answers = (yield writes) if writes else []
    newest = answers[-1] if read_window else None
    return _Started(rec, head=head, created=bool(created), rows=records, newest=newest)


def start_segment(
    d: Dialect,
    run: RunRecord,
    items: Sequence[NewItem],
    *,
    owner: str,
    ttl_s: float,
    now: float,
    create_thread: bool,
    window: int,
) -> Op[tuple[SegmentStart, list[Any]]]:
    """:func:`start_run` with the run inserted running and leased (``begin_segment``'s work
    for a run nobody else can have seen yet): one transaction.

    A new run has no checkpoint and no input; its window is its opening rows, unless the
    thread had rows before and the window reaches past them (then they are read: the rows are
    returned as read, oldest first, for the store to decode after the transaction).
    """
    leased = fast_replace(
        run, status="running", lease_owner=owner, lease_expires_at=now + ttl_s, fence=run.fence + 1
    )
    started = yield from _start_run(d, leased, items, create_thread=create_thread, window=window)
    rec = started.run
    if rec.run_id != run.run_id:  # the key named another run: nothing written or leased
        return SegmentStart(fence=0, run=rec, prior_status=rec.status), []
    head = started.head + len(started.rows)
    start = SegmentStart(fence=rec.fence, run=rec, prior_status="queued", head_seq=head)
    if started.newest is not None:
        return start, list(reversed(started.newest))
    if window <= 0:
        return start, []
    return fast_replace(start, items=started.rows[-window:]), []


def active_run(d: Dialect, thread_id: str) -> Op[RunRecord | None]:
    """The thread's active (queued, running or blocked) run, if any."""
    [found] = yield [d.query(_ACTIVE_RUN, thread_id, *ACTIVE_STATUSES)]
    return codec.row_run(found[0]) if found else None


def get_run(d: Dialect, run_id: str) -> Op[RunRecord]:
    """The run, or :class:`NotFoundError`."""
    [found] = yield [d.query(_RUN, run_id)]
    if not found:
        raise NotFoundError(f"run {run_id} not found")
    return codec.row_run(found[0])


def list_runs(
    d: Dialect,
    *,
    scope: Scope | None,
    statuses: Sequence[str] | None,
    limit: int,
    tenant: str | None,
    agent: str | None = None,
    thread_id: str | None = None,
    before: RunCursor | None = None,
) -> Op[list[RunRecord]]:
    """Runs of a scope or tenant and/or in some statuses, newest first (after ``before``)."""
    if statuses is not None and not statuses:
        return []
    clause, params = where(d, scope, statuses, tenant=tenant)
    extra: list[str] = []
    if agent is not None:
        extra.append("agent_name = ?")
        params.append(agent)
    if thread_id is not None:
        extra.append("thread_id = ?")
        params.append(thread_id)
    if before is not None:
        # A keyset page: the index on (scope, created_at, run_id) seeks to it, so page 500 of a
        # long history costs what page 1 does.
        extra.append("(created_at < ? OR (created_at = ? AND run_id < ?))")
        params += [before[0], before[0], before[1]]
    if extra:
        clause += (" AND " if clause else " WHERE ") + " AND ".join(extra)
    sql = f"SELECT * FROM runs{clause} ORDER BY created_at DESC, run_id DESC LIMIT ?"
    [found] = yield [d.query(sql, *params, max(0, limit))]
    return [codec.row_run(row) for row in found]


def _read_fence(d: Dialect, run_id: str, fence: int) -> Op[None]:
    """After a fenced write changed nothing: why (a stale fence, a missing run, or nothing)."""
    [row] = yield [d.query("SELECT fence FROM runs WHERE run_id = ?", run_id)]
    raise_if_stale(run_id, fence, int(row[0]["fence"]) if row else None)


def set_run_status(
    d: Dialect,
    run_id: str,
    status: RunStatus,
    *,
    fence: int | None,
    exit: Mapping[str, Any] | None,
) -> Op[RunRecord]:
    """Set the status (and exit); one UPDATE carries the fence test."""
    [row] = yield [
        d.query(
            "UPDATE runs SET status = ?, exit = COALESCE(?, exit), updated_at = ?"
            " WHERE run_id = ? AND (CAST(? AS BIGINT) IS NULL OR fence = ?) RETURNING *",
            status,
            codec.exit_column(exit),
            time.time(),
            run_id,
            fence,
            fence,
        )
    ]
    if not row:
        if fence is not None:
            yield from _read_fence(d, run_id, fence)
        raise NotFoundError(f"run {run_id} not found")
    return codec.row_run(row[0])


def request_cancel(d: Dialect, run_id: str) -> Op[RunRecord]:
    """Record a durable cancel request (not fenced: anyone may ask)."""
    [row] = yield [
        d.query(
            "UPDATE runs SET cancel_requested = TRUE, updated_at = ? WHERE run_id = ? RETURNING *",
            time.time(),
            run_id,
        )
    ]
    if not row:
        raise NotFoundError(f"run {run_id} not found")
    return codec.row_run(row[0])


_TAKE_LEASE = (
    "UPDATE runs SET lease_owner = ?, lease_expires_at = ?, fence = fence + 1"
    " WHERE run_id = ? AND (? OR lease_owner IS NULL OR lease_owner = ?"
    " OR lease_owner = ? OR lease_expires_at IS NULL OR lease_expires_at <= ?)"
)
"""Takes the lease unless a live owner (neither this one nor ``take_over``) holds it."""


def acquire_lease(
    d: Dialect,
    run_id: str,
    owner: str,
    *,
    ttl_s: float,
    now: float,
    force: bool,
    take_over: str | None,
) -> Op[int]:
    """Take the lease: the test of the current one and the write are one UPDATE."""
    [row] = yield [
        d.query(
            _TAKE_LEASE + " RETURNING fence",
            owner,
            now + ttl_s,
            run_id,
            force,
            owner,
            take_over,
            now,
        )
    ]
    if row:
        return int(row[0]["fence"])
    yield from get_run(d, run_id)  # NotFoundError, or else the lease is held
    raise RunBusy(f"run {run_id} is leased by a live worker")


_NEWEST_ITEMS = (
    "SELECT * FROM items WHERE thread_id = ? AND NOT superseded ORDER BY seq DESC LIMIT ?"
)


def begin_segment(
    d: Dialect,
    run_id: str,
    owner: str,
    *,
    ttl_s: float,
    now: float,
    take_over: str | None,
    window: int,
) -> Op[tuple[SegmentStart, list[Any]]]:
    """Take the lease (the test and the write are one UPDATE), then start the run and read it.

    The UPDATE returns the run as it was but for its lease: its status tells whether it had
    ended (then nothing more is written) and whether its last worker died mid-segment. The
    window's rows are returned as read, oldest first, for the store to decode once the
    transaction is over (SQLite: through its item cache, on the event loop).
    """
    [row] = yield [
        d.query(
            _TAKE_LEASE + " RETURNING *", owner, now + ttl_s, run_id, False, owner, take_over, now
        )
    ]
    if not row:
        yield from get_run(d, run_id)  # NotFoundError, or else the lease is held
        raise RunBusy(f"run {run_id} is leased by a live worker")
    run = codec.row_run(row[0])
    if run.status in TERMINAL_STATUSES:
        return SegmentStart(fence=run.fence, run=run, prior_status=run.status), []
    updated = time.time()
    reads: list[Statement] = [
        d.exec(
            "UPDATE runs SET status = 'running', inputs_sealed = FALSE, updated_at = ?"
            " WHERE run_id = ?",
            updated,
            run_id,
        ),
        d.query("SELECT * FROM checkpoints WHERE run_id = ?", run_id),
        d.query(_MAX_SEQ, run.thread_id),
        d.query("SELECT * FROM inputs WHERE run_id = ? AND NOT acked ORDER BY cursor", run_id),
    ]
    if window > 0:
        reads.append(d.query(_NEWEST_ITEMS, run.thread_id, window))
    _, checkpoint, [top], inputs, *newest = yield reads
    start = SegmentStart(
        fence=run.fence,
        run=fast_replace(run, status="running", updated_at=updated),
        prior_status=run.status,
        checkpoint=codec.row_checkpoint(checkpoint[0]) if checkpoint else None,
        head_seq=int(top["head"]),
        inputs=[codec.row_input(r) for r in inputs],
    )
    return start, list(reversed(newest[0])) if newest else []


def end_segment(
    d: Dialect,
    run_id: str,
    status: RunStatus,
    *,
    fence: int,
    exit: Mapping[str, Any] | None,
) -> Op[RunRecord]:
    """The status and exit, the seal (terminal) and the lease release: one fenced UPDATE."""
    check_segment_end(status)
    # One statement, which writes only under the caller's fence: on PostgreSQL it is its own
    # transaction (a run's end costs no BEGIN and COMMIT).
    [row] = yield [
        d.alone(
            "UPDATE runs SET status = ?, exit = COALESCE(?, exit), updated_at = ?,"
            " inputs_sealed = (inputs_sealed OR ?), lease_owner = NULL, lease_expires_at = NULL"
            " WHERE run_id = ? AND fence = ? RETURNING *",
            status,
            codec.exit_column(exit),
            time.time(),
            d.flag(status in TERMINAL_STATUSES),
            run_id,
            fence,
        )
    ]
    if not row:
        yield from _read_fence(d, run_id, fence)
        raise NotFoundError(f"run {run_id} not found")
    return codec.row_run(row[0])


def renew_lease(d: Dialect, run_id: str, fence: int, *, ttl_s: float, now: float) -> Op[None]:
    """Extend the lease; :class:`LeaseLost` if ``fence`` is stale."""
    [count] = yield [
        d.count(
            "UPDATE runs SET lease_expires_at = ? WHERE run_id = ? AND fence = ?",
            now + ttl_s,
            run_id,
            fence,
        )
    ]
    if not count:
        yield from _read_fence(d, run_id, fence)


def release_lease(d: Dialect, run_id: str, fence: int) -> Op[None]:
    """Drop the lease if ``fence`` is still current (no error otherwise)."""
    yield [
        d.exec(
            "UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL"
            " WHERE run_id = ? AND fence = ?",
            run_id,
            fence,
        )
    ]


def expired_leases(d: Dialect, now: float) -> Op[list[RunRecord]]:
    """Runs in ``running`` or ``queued`` whose lease has expired or was never taken."""
    [found] = yield [
        d.query(
            "SELECT * FROM runs WHERE status IN ('running', 'queued')"
            " AND (lease_expires_at IS NULL OR lease_expires_at <= ?)"
            " ORDER BY created_at, run_id",
            now,
        )
    ]
    return [codec.row_run(row) for row in found]


# fenced writes ------------------------------------------------------------------------------
def fenced(d: Dialect, run_id: str, fence: int, *writes: Statement) -> Op[None]:
    """``writes`` behind the fence: the run row is read (and on PostgreSQL share-locked) first.

    The lock conflicts with a takeover's ``UPDATE``: a write with an old fence commits before
    the new lease is handed out or sees the new fence (:class:`LeaseLost`), never after it.
    """
    [row] = yield [d.query(_SHARE_FENCE, run_id)]
    raise_if_stale(run_id, fence, int(row[0]["fence"]) if row else None)
    yield writes


def save_checkpoint(
    d: Dialect, run_id: str, kind: CheckpointKind, payload: bytes, *, fence: int
) -> Op[None]:
    """Replace the run's latest checkpoint."""
    write = d.exec(_SAVE_CHECKPOINT, run_id, kind, bytes(payload), time.time())
    return fenced(d, run_id, fence, write)


def load_checkpoint(d: Dialect, run_id: str) -> Op[Any]:
    """The latest checkpoint, or ``None``."""
    [found] = yield [d.query("SELECT * FROM checkpoints WHERE run_id = ?", run_id)]
    return codec.row_checkpoint(found[0]) if found else None


def journal_started(d: Dialect, run_id: str, call_id: str, tool: str, *, fence: int) -> Op[None]:
    """Record that a call started (never downgrades a finished row)."""
    write = d.exec(_JOURNAL_STARTED, run_id, call_id, tool, None, time.time())
    return fenced(d, run_id, fence, write)


def journal_finished(
    d: Dialect, run_id: str, call_id: str, outcome: Mapping[str, Any], *, fence: int
) -> Op[None]:
    """Record a call's outcome (keeping the tool name from its ``started`` row)."""
    write = d.exec(_JOURNAL_FINISHED, run_id, call_id, "", codec.dumps(dict(outcome)), time.time())
    return fenced(d, run_id, fence, write)


def journal_get(d: Dialect, run_id: str, call_ids: Sequence[str]) -> Op[dict[str, JournalEntry]]:
    """Journal rows for the given calls (calls with no row are left out)."""
    found = yield [
        d.query(f"SELECT * FROM journal WHERE run_id = ? AND {clause}", run_id, *values)
        for clause, values in d.any_of_chunks("call_id", list(dict.fromkeys(call_ids)))
    ]
    entries = {row["call_id"]: codec.row_journal(row) for chunk in found for row in chunk}
    return {c: entries[c] for c in call_ids if c in entries}


# inputs -------------------------------------------------------------------------------------
_WAITING = "SELECT * FROM inputs WHERE run_id = ? AND cursor > ? ORDER BY cursor"


def _lock_run(d: Dialect, run_id: str) -> Op[bool]:
    """Lock the run row for an update of its input queue; whether the queue is sealed."""
    [row] = yield [d.query("SELECT inputs_sealed FROM runs WHERE run_id = ?{lock}", run_id)]
    if not row:
        raise NotFoundError(f"run {run_id} not found")
    return bool(row[0]["inputs_sealed"])


def enqueue_input(
    d: Dialect, run_id: str, kind: InputKind, payload: Mapping[str, Any], *, input_id: str
) -> Op[InputRecord]:
    """Append an input after the run's last cursor (dedupe by ``input_id``), unless sealed."""
    sealed = yield from _lock_run(d, run_id)
    existing, [top] = yield [
        d.query("SELECT * FROM inputs WHERE run_id = ? AND input_id = ?", run_id, input_id),
        d.query("SELECT COALESCE(MAX(cursor), 0) AS top FROM inputs WHERE run_id = ?", run_id),
    ]
    if existing:
        return codec.row_input(existing[0])
    if sealed:
        raise RunEndedError(f"run {run_id} has ended and accepts no more inputs")
    rec = InputRecord(
        run_id=run_id,
        cursor=int(top["top"]) + 1,
        input_id=input_id,
        kind=kind,
        payload=dict(payload),
    )
    columns = codec.input_columns(rec, created_at=time.time())
    yield [d.insert("inputs", columns)]
    return rec


def poll_inputs(d: Dialect, run_id: str, *, after_cursor: int) -> Op[list[InputRecord]]:
    """Inputs with cursor greater than ``after_cursor``, in order."""
    [found] = yield [d.query(_WAITING, run_id, after_cursor)]
    return [codec.row_input(row) for row in found]


def seal_inputs(d: Dialect, run_id: str, *, after_cursor: int) -> Op[list[InputRecord]]:
    """Close the queue unless inputs past the cursor wait (then return them, unsealed)."""
    yield from _lock_run(d, run_id)
    [waiting] = yield [d.query(_WAITING, run_id, after_cursor)]
    if not waiting:
        yield [d.exec(_SEAL, run_id)]
    return [codec.row_input(row) for row in waiting]


def unseal_inputs(d: Dialect, run_id: str) -> Op[None]:
    """Accept inputs again."""
    yield [d.exec("UPDATE runs SET inputs_sealed = FALSE WHERE run_id = ?", run_id)]


def ack_inputs(d: Dialect, run_id: str, upto_cursor: int, *, fence: int) -> Op[None]:
    """Mark inputs up to the cursor delivered."""
    return fenced(d, run_id, fence, d.exec(_ACK, run_id, upto_cursor))


# gates --------------------------------------------------------------------------------------
_GATE_FOR_CALL = "SELECT * FROM gates WHERE run_id = ? AND call_id = ?"


def create_gate(d: Dialect, gate: GateRecord, *, fence: int) -> Op[GateRecord]:
    """Insert a pending gate (same run + call returns the existing one)."""
    suffix = " ON CONFLICT (run_id, call_id) DO NOTHING"
    insert = d.insert("gates", codec.gate_columns(gate), suffix)
    [row] = yield [d.query(_SHARE_FENCE, gate.run_id)]
    raise_if_stale(gate.run_id, fence, int(row[0]["fence"]) if row else None)
    [inserted] = yield [insert]
    if inserted:
        return gate
    [found] = yield [d.query(_GATE_FOR_CALL, gate.run_id, gate.call_id)]
    if not found:
        raise NotFoundError(f"gate {gate.ref} not found")
    return codec.row_gate(found[0])


def get_gate(d: Dialect, ref: str) -> Op[GateRecord]:
    """The gate, or :class:`NotFoundError`."""
    [found] = yield [d.query("SELECT * FROM gates WHERE ref = ?", ref)]
    if not found:
        raise NotFoundError(f"gate {ref} not found")
    return codec.row_gate(found[0])


def gate_for_call(d: Dialect, run_id: str, call_id: str) -> Op[GateRecord | None]:
    """The gate opened for a call, if any."""
    [found] = yield [d.query(_GATE_FOR_CALL, run_id, call_id)]
    return codec.row_gate(found[0]) if found else None


def resolve_gate(
    d: Dialect,
    ref: str,
    status: GateDecision,
    *,
    reason: str | None,
    now: float,
    how: GateResolution,
) -> Op[GateRecord]:
    """Resolve a pending gate once: one conditional UPDATE wins (who, digests and edited
    arguments written with the status)."""
    edited = None if how.edited_arguments is None else codec.dumps(dict(how.edited_arguments))
    [row] = yield [
        d.query(
            "UPDATE gates SET status = ?, reason = ?, resolved_at = ?, resolved_by = ?,"
            " shown_digest = ?, approved_digest = ?, edited_arguments = ?"
            " WHERE ref = ? AND status = 'pending' RETURNING *",
            status,
            reason,
            now,
            how.resolved_by,
            how.shown_digest,
            how.approved_digest,
            edited,
            ref,
        )
    ]
    if row:
        return codec.row_gate(row[0])
    [found] = yield [d.query("SELECT status FROM gates WHERE ref = ?", ref)]
    if not found:
        raise NotFoundError(f"gate {ref} not found")
    raise GateResolvedError(f"gate {ref} is already {found[0]['status']}")


def list_gates(
    d: Dialect, *, scope: Scope | None, status: str | None, limit: int | None = None
) -> Op[list[GateRecord]]:
    """Gates of a scope and/or in a status, newest first (the newest ``limit``)."""
    clause, params = where(d, scope, None if status is None else [status])
    sql = f"SELECT * FROM gates{clause} ORDER BY created_at DESC, ref DESC"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(max(0, limit))
    [found] = yield [d.query(sql, *params)]
    return [codec.row_gate(row) for row in found]


# run events ---------------------------------------------------------------------------------
def append_run_events(
    d: Dialect, run_id: str, events: Sequence[Mapping[str, Any]], *, keep: int, now: float
) -> Op[int]:
    """Append events after the run's last one, keep the newest ``keep``; the last seq."""
    last = yield from append_event_batches(d, {run_id: events}, keep=keep, now=now)
    return last[run_id]


def append_event_batches(
    d: Dialect, batches: Mapping[str, Sequence[Mapping[str, Any]]], *, keep: int, now: float
) -> Op[dict[str, int]]:
    """Append each run's events after its last one, keep the newest ``keep`` of each run; the
    last seq of each run. One read of the runs' last seqs and one insert for every run (with
    an :attr:`~reverie.store.sql_core.Dialect.events_call`: one statement in all)."""
    runs = sorted(batches)  # the order PostgreSQL's per-run locks are taken in
    if not runs:
        return {}
    if d.events_call is not None:
        numbered = [
            codec.run_event_row(run_id, n, data, now)
            for run_id in runs
            for n, data in enumerate(batches[run_id], start=1)
        ]
        as_json = json_records(codec.RUN_EVENT_COLUMNS, numbered)
        counts = [len(batches[run_id]) for run_id in runs]
        [answer] = yield [Guard(d.sql(d.events_call), (runs, counts, as_json, keep))]
        return {row["run_id"]: int(row["last"]) for row in answer or ()}
    # The last seq of each run from the key's index, whatever the number of events it keeps.
    reads = [
        d.query(
            "SELECT v.run_id, (SELECT MAX(e.seq) FROM run_events AS e"
            f" WHERE e.run_id = v.run_id) AS last FROM {source}",
            *params,
        )
        for source, params in d.each_of("run_id", runs)
    ]
    found = yield reads
    last = dict.fromkeys(runs, 0)
    for tops in found:
        for row in tops:
            if row["last"] is not None:
                last[row["run_id"]] = int(row["last"])
    rows: list[tuple[Any, ...]] = []
    for run_id in runs:
        seq = last[run_id]
        for data in batches[run_id]:
            seq += 1
            rows.append(codec.run_event_row(run_id, seq, data, now))
        last[run_id] = seq
    writes: list[Statement] = []
    if rows:
        writes.append(d.insert_rows("run_events", codec.RUN_EVENT_COLUMNS, rows))
    # Only a run past the bound has events to drop (seqs count from 1).
    writes += [
        d.exec("DELETE FROM run_events WHERE run_id = ? AND seq <= ?", run_id, seq - keep)
        for run_id, seq in last.items()
        if seq > keep
    ]
    yield writes
    return last


def run_events(d: Dialect, run_id: str, *, after_seq: int, limit: int) -> Op[list[RunEventRecord]]:
    """Stored events with a seq above ``after_seq``, oldest first, at most ``limit``."""
    [found] = yield [
        d.query(
            "SELECT * FROM run_events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            run_id,
            after_seq,
            max(0, limit),
        )
    ]
    return [codec.row_run_event(row) for row in found]
