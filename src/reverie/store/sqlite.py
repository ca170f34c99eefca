"""The embedded SQLite backend (docs/scaling.md): one file, WAL, writes from one connection.

Layout of a :class:`SQLiteStore`:

- a **writer** connection on its own thread, with **group commit**
  (:mod:`reverie.store.sqlite_writer`). Every write method hands that thread one synchronous
  operation; the thread takes whatever operations are queued, runs them in one
  ``BEGIN IMMEDIATE`` … ``COMMIT`` transaction (an operation that fails is undone alone and
  raises to its own caller only), and answers every caller after the ``COMMIT``. A lone caller
  pays one thread hop per write; concurrent callers share one commit. ``BEGIN IMMEDIATE`` takes
  SQLite's write lock up front (other processes wait up to ``busy_timeout``), so what an
  operation reads cannot change before it commits. Fenced writes are compare-and-sets on
  ``runs.fence`` inside that transaction: the fence is read first, or the statement itself
  carries the test (``WHERE … fence = ?``) and, when it changed nothing, the fence is read
  right after it, in the same transaction, to tell a stale fence (:class:`LeaseLost`) from a
  write with nothing to change. Two processes racing on one file cannot both win.
- a **reader** connection (``query_only``) on a second thread. Under WAL it reads the last
  committed state while a write is in progress. Each read method is one hop; each statement
  runs on its own, so a read never holds a snapshot open.

Operations run on the writer thread hold the write lock: they are kept to statements, and what
can be built before (columns, JSON) is built on the event loop. ``new_id`` is the exception:
it reads ``os.urandom``, which releases the GIL, and a busy event loop that releases the GIL
waits behind these threads to get it back.

A write whose caller is cancelled while it waits may or may not be applied (it is never
applied in part). Every ``sqlite3`` error is re-raised as :class:`StoreError` (or
:class:`ConflictError` for a constraint violation) with the original kept in ``__cause__``.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from collections.abc import Mapping, Sequence
from sqlite3 import Row
from typing import Any

from reverie.core.ids import new_id
from reverie.core.scope import Scope
from reverie.core.vocabulary import GateDecision
from reverie.errors import (
    ConflictError,
    GateResolvedError,
    NotFoundError,
    RunBusy,
    RunEndedError,
    ThreadBusy,
)
from reverie.store import sql_core as core, sqlite_schema as schema
from reverie.store.base import (
    ACTIVE_STATUSES,
    CheckpointKind,
    CheckpointRecord,
    GateRecord,
    GateStatus,
    InputKind,
    InputRecord,
    JournalEntry,
    NewItem,
    RunRecord,
    RunStatus,
    StepReceipt,
    StepWrite,
    ThreadRecord,
    TranscriptItem,
)
from reverie.store.run_events import MAX_RUN_EVENTS, RunEventRecord
from reverie.store.sqlite_connections import SQLiteConnections
from reverie.store.sqlite_documents import SQLiteDocuments
from reverie.store.sqlite_schema import SYNCHRONOUS_MODES

__all__ = ["SYNCHRONOUS_MODES", "SQLiteStore"]


_ACTIVE_RUN_SQL = (
    "SELECT * FROM runs WHERE thread_id = ? AND status IN (?, ?, ?) ORDER BY created_at LIMIT 1"
)


class SQLiteStore(SQLiteDocuments, SQLiteConnections):
    """A durable :class:`~reverie.store.base.Store` in one SQLite file.

    Use it as ``async with SQLiteStore(path) as store: ...`` or call :meth:`open` and
    :meth:`close` yourself. Several instances (in one process or many) may share a file; the
    fencing token and ``BEGIN IMMEDIATE`` keep their writes consistent.

    Args:
        path: The database file. Its parent directory is created on :meth:`open`.
        synchronous: ``PRAGMA synchronous`` of the writer: ``NORMAL`` (default; under WAL a
            power loss may drop the last commits but never corrupts the file), ``FULL``,
            ``EXTRA`` or ``OFF``.
        busy_timeout_s: How long a write waits for another process's write lock before it
            fails with :class:`StoreError`.

    Raises:
        ConfigError: ``path`` is ``":memory:"`` (use :class:`~reverie.store.MemoryStore`) or
            ``synchronous`` is not one of the accepted values.
    """

    # threads and transcript -------------------------------------------------------------
    async def create_thread(self, thread_id: str, scope: Scope) -> ThreadRecord:
        """Create a thread owned by ``scope``; an existing thread is returned as it is."""
        rec = ThreadRecord(thread_id=thread_id, scope=scope, created_at=time.time())

        columns = schema.thread_columns(rec)

        def write(db: sqlite3.Connection) -> Row | None:
            row = schema.one(db, "SELECT * FROM threads WHERE thread_id = ?", (thread_id,))
            if row is None:
                schema.insert(db, "threads", [columns])
            return row

        found = await self._transact("create a thread", write)
        return rec if found is None else schema.row_thread(found)

    async def get_thread(self, thread_id: str) -> ThreadRecord:
        """The thread, or :class:`NotFoundError`."""
        sql = "SELECT * FROM threads WHERE thread_id = ?"
        return await self._select_one(f"thread {thread_id}", schema.row_thread, sql, (thread_id,))

    async def append_items(
        self, thread_id: str, run_id: str | None, items: Sequence[NewItem], *, fence: int | None
    ) -> list[TranscriptItem]:
        """Append rows; ``seq`` is assigned inside the transaction, so it is gap-free."""
        # The columns are built here; the writer only draws the refs (see below) and seqs.
        now = time.time()
        columns = [
            schema.new_item_columns(thread_id, run_id, item, created_at=now) for item in items
        ]
        rows = [tuple(row.values()) for row in columns]
        sql = schema.insert_sql("items", ["ref", *columns[0], "seq"]) if columns else ""

        def write(db: sqlite3.Connection) -> tuple[int, list[str]]:
            # One statement for every check and the next seq, inside the transaction.
            [head] = schema.rows(
                db,
                "SELECT EXISTS (SELECT 1 FROM threads WHERE thread_id = ?),"
                " (SELECT COALESCE(MAX(seq), 0) FROM items WHERE thread_id = ?),"
                " (SELECT fence FROM runs WHERE run_id = ?)",
                (thread_id, thread_id, run_id),
            )
            if not head[0]:
                raise NotFoundError(f"thread {thread_id} not found")
            if run_id is not None and fence is not None:
                schema.raise_if_stale(run_id, fence, head[2])
            first = int(head[1]) + 1
            # new_id reads os.urandom, which lets go of the GIL: on the event loop that costs
            # a wait for the GIL behind these threads, here it only delays this batch.
            refs = [new_id("itm") for _ in rows]
            if rows:
                db.executemany(
                    sql,
                    [
                        (ref, *row, seq)
                        for seq, (ref, row) in enumerate(zip(refs, rows, strict=True), first)
                    ],
                )
            return first, refs

        first, refs = await self._transact("append transcript items", write)
        out = [
            schema.new_item(ref, seq, thread_id, run_id, item)
            for seq, (ref, item) in enumerate(zip(refs, items, strict=True), start=first)
        ]
        self._items.add(out)
        return out

    async def get_items(self, refs: Sequence[str]) -> list[TranscriptItem]:
        """Rows by ref, in the order asked; :class:`NotFoundError` names the first missing."""
        sql = "SELECT ref, * FROM items WHERE ref IN ({marks})"
        found = await self._select_in("read transcript items", self._items.decode, sql, (), refs)
        for ref in refs:
            if ref not in found:
                raise NotFoundError(f"transcript item {ref} not found")
        return [found[ref] for ref in refs]

    async def thread_items(
        self, thread_id: str, *, upto_seq: int | None = None, last: int | None = None
    ) -> list[TranscriptItem]:
        """Non-superseded rows of a thread in ``seq`` order, optionally up to a seq / last N."""
        where = "thread_id = ? AND superseded = 0"
        params: list[Any] = [thread_id]
        if upto_seq is not None:
            where += " AND seq <= ?"
            params.append(upto_seq)
        rows: list[TranscriptItem] = []
        if last is None:
            sql = f"SELECT * FROM items WHERE {where} ORDER BY seq"
            rows = await self._select("read a thread", self._items.decode, sql, params)
        elif last > 0:
            # Newest first through the (thread_id, seq) index: a window costs O(window).
            rows = await self._window(f"{where} ORDER BY seq DESC LIMIT ?", [*params, last])
            rows.reverse()
        if not rows:
            await self.get_thread(thread_id)  # an empty thread, or NotFoundError
        return rows

    async def _window(self, tail: str, params: Sequence[Any]) -> list[TranscriptItem]:
        """``SELECT … FROM items WHERE {tail}``, reading only the refs when all are cached.

        The prompt window is read on every model call and its rows are almost always cached
        (appended by this store, or read before): then only their refs cross from SQLite to
        Python, in one statement. Otherwise the full rows are read, also in one statement,
        so the answer is always one snapshot.
        """
        cache = self._items
        narrow = f"SELECT ref FROM items WHERE {tail}"
        full = f"SELECT * FROM items WHERE {tail}"

        def read(db: sqlite3.Connection) -> tuple[list[str], list[Row] | None]:
            refs = [row[0] for row in schema.rows(db, narrow, params)]
            return refs, (schema.rows(db, full, params) if cache.missing(refs) else None)

        refs, rows = await self._read("read a thread", read)
        if rows is None:
            items: list[TranscriptItem] = []
            for ref in refs:
                item = cache.get(ref)
                if item is None:  # evicted since the reader looked (a full cache): read rows
                    rows = await self._read(
                        "read a thread", lambda db: schema.rows(db, full, params)
                    )
                    break
                items.append(item)
            else:
                return items
        return [cache.decode(row) for row in rows]

    async def thread_head(self, thread_id: str) -> int:
        """The thread's highest seq, superseded rows included (0 for an empty thread)."""
        return await self._read(
            "read a thread's head",
            lambda db: core.drive(db, core.thread_head(core.SQLITE, thread_id)),
        )

    async def commit_step(self, run_id: str, step: StepWrite, *, fence: int) -> StepReceipt:
        """Write a loop boundary as one operation of the writer's group commit.

        See :meth:`Store.commit_step`; the written items join the item cache.
        """
        receipt = await self._transact(
            "commit a step",
            lambda db: core.drive(db, core.commit_step(core.SQLITE, run_id, step, fence=fence)),
        )
        if step.items:
            self._items.add(core.step_items(run_id, step))
        return receipt

    async def supersede_items_after(self, thread_id: str, run_id: str, seq: int) -> int:
        """Mark rows of ``run_id`` with ``seq`` greater than the given one superseded."""
        return await self._change(
            "supersede transcript items",
            "UPDATE items SET superseded = 1"
            " WHERE thread_id = ? AND run_id = ? AND seq > ? AND superseded = 0",
            (thread_id, run_id, seq),
        )

    # runs and leases ----------------------------------------------------------------------
    async def create_run(self, run: RunRecord) -> RunRecord:
        """Insert a run; if its owner's idempotency key exists, return that run instead.

        Raises:
            ConflictError: A run with the same id (and no matching idempotency key) exists.
        """

        def write(db: sqlite3.Connection) -> RunRecord:
            if run.idempotency_key is not None:
                sql = "SELECT * FROM runs WHERE idempotency_key = ?"
                row = schema.one(db, sql, (schema.owner_key(run.scope, run.idempotency_key),))
                if row is not None:
                    return schema.row_run(row)
            if schema.one(db, "SELECT 1 FROM runs WHERE run_id = ?", (run.run_id,)) is not None:
                raise ConflictError(f"run {run.run_id} already exists")
            # One active run per thread: checked inside the writer's BEGIN IMMEDIATE
            # transaction, so of two processes starting runs on one thread only one succeeds.
            busy = schema.one(db, _ACTIVE_RUN_SQL, (run.thread_id, *ACTIVE_STATUSES))
            if busy is not None:
                raise ThreadBusy(run.thread_id, busy["run_id"], busy["status"])
            now = time.time()
            rec = dataclasses.replace(run, created_at=now, updated_at=now)
            schema.insert(db, "runs", [schema.run_columns(rec)])
            return rec

        return await self._transact("create a run", write)

    async def active_run(self, thread_id: str) -> RunRecord | None:
        """The thread's active (queued, running or blocked) run, if any."""
        rows = await self._select(
            "find a thread's active run",
            schema.row_run,
            _ACTIVE_RUN_SQL,
            (thread_id, *ACTIVE_STATUSES),
        )
        return rows[0] if rows else None

    async def get_run(self, run_id: str) -> RunRecord:
        """The run, or :class:`NotFoundError`."""
        sql = "SELECT * FROM runs WHERE run_id = ?"
        return await self._select_one(f"run {run_id}", schema.row_run, sql, (run_id,))

    async def list_runs(
        self,
        *,
        scope: Scope | None = None,
        statuses: Sequence[str] | None = None,
        limit: int = 100,
        tenant: str | None = None,
    ) -> list[RunRecord]:
        """Runs of a scope (tenant and user) or a tenant, and/or in some statuses, newest first."""
        if statuses is not None and not statuses:
            return []
        where, params = schema.where(scope, statuses, tenant=tenant)
        sql = f"SELECT * FROM runs{where} ORDER BY created_at DESC, run_id DESC LIMIT ?"
        return await self._select("list runs", schema.row_run, sql, [*params, limit])

    async def set_run_status(
        self,
        run_id: str,
        status: RunStatus,
        *,
        fence: int | None,
        exit: Mapping[str, Any] | None = None,
    ) -> RunRecord:
        """Set the status (and exit payload); checked against the fence when given."""
        params = (status, schema.exit_column(exit), time.time(), run_id, fence, fence)

        def write(db: sqlite3.Connection) -> RunRecord:
            row = schema.one(
                db,
                "UPDATE runs SET status = ?, exit = COALESCE(?, exit), updated_at = ?"
                " WHERE run_id = ? AND (? IS NULL OR fence = ?) RETURNING *",
                params,
            )
            if row is None:
                if fence is not None:
                    schema.check_fence(db, run_id, fence)
                raise NotFoundError(f"run {run_id} not found")
            return schema.row_run(row)

        return await self._transact("set a run's status", write)

    async def request_cancel(self, run_id: str) -> RunRecord:
        """Record a durable cancel request (not fenced: anyone may ask)."""
        now = time.time()

        def write(db: sqlite3.Connection) -> RunRecord:
            row = schema.one(
                db,
                "UPDATE runs SET cancel_requested = 1, updated_at = ? WHERE run_id = ? RETURNING *",
                (now, run_id),
            )
            if row is None:
                raise NotFoundError(f"run {run_id} not found")
            return schema.row_run(row)

        return await self._transact("request a cancel", write)

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
        if that owner still holds it (two workers taking over the same dead owner: one wins).

        The test of the current lease and the write of the new one are one UPDATE statement
        inside the writer's ``BEGIN IMMEDIATE`` transaction, so of two processes racing for a
        run exactly one wins.

        Raises:
            RunBusy: Another owner holds an unexpired lease and ``force`` is false.
            NotFoundError: There is no such run.
        """

        def write(db: sqlite3.Connection) -> int:
            row = schema.one(
                db,
                "UPDATE runs SET lease_owner = ?, lease_expires_at = ?, fence = fence + 1"
                " WHERE run_id = ? AND (? OR lease_owner IS NULL OR lease_owner = ?"
                " OR lease_owner = ? OR lease_expires_at IS NULL OR lease_expires_at <= ?)"
                " RETURNING fence",
                (owner, now + ttl_s, run_id, force, owner, take_over, now),
            )
            if row is not None:
                return int(row[0])
            schema.get_run(db, run_id)  # NotFoundError, or else the lease is held
            raise RunBusy(f"run {run_id} is leased by a live worker")

        return await self._transact("acquire a lease", write)

    async def renew_lease(self, run_id: str, fence: int, *, ttl_s: float, now: float) -> None:
        """Extend the lease; :class:`LeaseLost` if ``fence`` is stale."""
        await self._fenced(
            "renew a lease",
            "UPDATE runs SET lease_expires_at = ? WHERE run_id = ? AND fence = ?",
            (now + ttl_s, run_id, fence),
            run_id,
            fence,
        )

    async def release_lease(self, run_id: str, fence: int) -> None:
        """Drop the lease if ``fence`` is still current (no error otherwise)."""
        await self._change(
            "release a lease",
            "UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL"
            " WHERE run_id = ? AND fence = ?",
            (run_id, fence),
        )

    async def expired_leases(self, now: float) -> list[RunRecord]:
        """Runs in ``running`` or ``queued`` whose lease has expired or was never taken."""
        sql = (
            "SELECT * FROM runs WHERE status IN ('running', 'queued')"
            " AND (lease_expires_at IS NULL OR lease_expires_at <= ?) ORDER BY created_at, run_id"
        )
        return await self._select("list expired leases", schema.row_run, sql, (now,))

    # checkpoints --------------------------------------------------------------------------
    async def save_checkpoint(
        self, run_id: str, kind: CheckpointKind, payload: bytes, *, fence: int
    ) -> None:
        """Replace the run's latest checkpoint (the payload is stored as opaque bytes)."""
        await self._fenced(
            "save a checkpoint",
            "INSERT INTO checkpoints (run_id, kind, payload, created_at)"
            f" SELECT ?, ?, ?, ? WHERE {schema.FENCED} ON CONFLICT (run_id) DO UPDATE"
            " SET kind = excluded.kind, payload = excluded.payload,"
            " created_at = excluded.created_at",
            (run_id, kind, bytes(payload), time.time(), run_id, fence),
            run_id,
            fence,
        )

    async def load_checkpoint(self, run_id: str) -> CheckpointRecord | None:
        """The latest checkpoint, or ``None``."""
        sql = "SELECT * FROM checkpoints WHERE run_id = ?"
        rows = await self._select("load a checkpoint", schema.row_checkpoint, sql, (run_id,))
        return rows[0] if rows else None

    # side-effect journal ------------------------------------------------------------------
    async def journal_started(self, run_id: str, call_id: str, tool: str, *, fence: int) -> None:
        """Record that a call started (idempotent: never downgrades a finished row)."""
        await self._fenced(  # no change: a stale fence, or the row was there already (fine)
            "journal a started call",
            "INSERT INTO journal (run_id, call_id, tool, state, outcome, updated_at)"
            f" SELECT ?, ?, ?, 'started', NULL, ? WHERE {schema.FENCED}"
            " ON CONFLICT (run_id, call_id) DO NOTHING",
            (run_id, call_id, tool, time.time(), run_id, fence),
            run_id,
            fence,
        )

    async def journal_finished(
        self, run_id: str, call_id: str, outcome: Mapping[str, Any], *, fence: int
    ) -> None:
        """Record a call's outcome (keeping the tool name from its ``started`` row)."""
        await self._fenced(
            "journal a finished call",
            "INSERT INTO journal (run_id, call_id, tool, state, outcome, updated_at)"
            f" SELECT ?, ?, '', 'finished', ?, ? WHERE {schema.FENCED}"
            " ON CONFLICT (run_id, call_id) DO UPDATE SET state = 'finished',"
            " outcome = excluded.outcome, updated_at = excluded.updated_at",
            (run_id, call_id, schema.dumps(dict(outcome)), time.time(), run_id, fence),
            run_id,
            fence,
        )

    async def journal_get(self, run_id: str, call_ids: Sequence[str]) -> dict[str, JournalEntry]:
        """Journal rows for the given calls (calls with no row are left out)."""
        sql = "SELECT call_id, * FROM journal WHERE run_id = ? AND call_id IN ({marks})"
        found = await self._select_in(
            "read the journal", schema.row_journal, sql, (run_id,), call_ids
        )
        return {c: found[c] for c in call_ids if c in found}

    # inputs -------------------------------------------------------------------------------
    async def enqueue_input(
        self, run_id: str, kind: InputKind, payload: Mapping[str, Any], *, input_id: str
    ) -> InputRecord:
        """Append an input; the same ``input_id`` returns the existing row (dedupe).

        Raises:
            RunEndedError: The queue is sealed (:meth:`seal_inputs`) and the input is new.
        """
        now = time.time()

        def write(db: sqlite3.Connection) -> InputRecord:
            run = schema.one(db, "SELECT inputs_sealed FROM runs WHERE run_id = ?", (run_id,))
            if run is None:
                raise NotFoundError(f"run {run_id} not found")
            sql = "SELECT * FROM inputs WHERE run_id = ? AND input_id = ?"
            row = schema.one(db, sql, (run_id, input_id))
            if row is not None:
                return schema.row_input(row)
            if run["inputs_sealed"]:
                raise RunEndedError(f"run {run_id} has ended and accepts no more inputs")
            sql = "SELECT COALESCE(MAX(cursor), 0) FROM inputs WHERE run_id = ?"
            top = int(schema.rows(db, sql, (run_id,))[0][0])
            rec = InputRecord(
                run_id=run_id, cursor=top + 1, input_id=input_id, kind=kind, payload=dict(payload)
            )
            schema.insert(db, "inputs", [schema.input_columns(rec, created_at=now)])
            return rec

        return await self._transact("enqueue an input", write)

    async def poll_inputs(self, run_id: str, *, after_cursor: int) -> list[InputRecord]:
        """Inputs with cursor greater than ``after_cursor``, in order."""
        sql = "SELECT * FROM inputs WHERE run_id = ? AND cursor > ? ORDER BY cursor"
        return await self._select("poll inputs", schema.row_input, sql, (run_id, after_cursor))

    async def seal_inputs(self, run_id: str, *, after_cursor: int) -> list[InputRecord]:
        """Close the queue unless inputs past the cursor are waiting (then return them).

        One transaction on the same writer as :meth:`enqueue_input`, so an input is either
        returned here or refused with :class:`RunEndedError`, never lost in between.
        """

        def write(db: sqlite3.Connection) -> list[InputRecord]:
            schema.get_run(db, run_id)
            sql = "SELECT * FROM inputs WHERE run_id = ? AND cursor > ? ORDER BY cursor"
            waiting = schema.rows(db, sql, (run_id, after_cursor))
            if not waiting:
                schema.execute(db, "UPDATE runs SET inputs_sealed = 1 WHERE run_id = ?", (run_id,))
            return [schema.row_input(row) for row in waiting]

        return await self._transact("seal inputs", write)

    async def unseal_inputs(self, run_id: str) -> None:
        """Accept inputs again."""
        sql = "UPDATE runs SET inputs_sealed = 0 WHERE run_id = ?"
        await self._change("unseal inputs", sql, (run_id,))

    async def ack_inputs(self, run_id: str, upto_cursor: int, *, fence: int) -> None:
        """Mark inputs up to the cursor delivered."""
        await self._fenced(  # no change: a stale fence, or no inputs to ack
            "ack inputs",
            "UPDATE inputs SET acked = 1"
            f" WHERE run_id = ? AND cursor <= ? AND acked = 0 AND {schema.FENCED}",
            (run_id, upto_cursor, run_id, fence),
            run_id,
            fence,
        )

    # gates --------------------------------------------------------------------------------
    async def create_gate(self, gate: GateRecord, *, fence: int) -> GateRecord:
        """Insert a pending gate (same run + call returns the existing one)."""

        def write(db: sqlite3.Connection) -> GateRecord:
            schema.check_fence(db, gate.run_id, fence)
            sql = "SELECT * FROM gates WHERE run_id = ? AND call_id = ?"
            row = schema.one(db, sql, (gate.run_id, gate.call_id))
            if row is not None:
                return schema.row_gate(row)
            schema.insert(db, "gates", [schema.gate_columns(gate)])
            return gate

        return await self._transact("create a gate", write)

    async def get_gate(self, ref: str) -> GateRecord:
        """The gate, or :class:`NotFoundError`."""
        sql = "SELECT * FROM gates WHERE ref = ?"
        return await self._select_one(f"gate {ref}", schema.row_gate, sql, (ref,))

    async def gate_for_call(self, run_id: str, call_id: str) -> GateRecord | None:
        """The gate opened for a call, if any."""
        sql = "SELECT * FROM gates WHERE run_id = ? AND call_id = ?"
        rows = await self._select("read a gate", schema.row_gate, sql, (run_id, call_id))
        return rows[0] if rows else None

    async def resolve_gate(
        self, ref: str, status: GateDecision, *, reason: str | None, now: float
    ) -> GateRecord:
        """Resolve a pending gate once; :class:`GateResolvedError` on a second resolution."""

        def write(db: sqlite3.Connection) -> GateRecord:
            row = schema.one(
                db,
                "UPDATE gates SET status = ?, reason = ?, resolved_at = ?"
                " WHERE ref = ? AND status = 'pending' RETURNING *",
                (status, reason, now, ref),
            )
            if row is not None:
                return schema.row_gate(row)
            found = schema.one(db, "SELECT status FROM gates WHERE ref = ?", (ref,))
            if found is None:
                raise NotFoundError(f"gate {ref} not found")
            raise GateResolvedError(f"gate {ref} is already {found['status']}")

        return await self._transact("resolve a gate", write)

    async def list_gates(
        self, *, scope: Scope | None = None, status: GateStatus | None = "pending"
    ) -> list[GateRecord]:
        """Gates of a scope (tenant and user) and/or in a status, newest first."""
        where, params = schema.where(scope, None if status is None else [status])
        sql = f"SELECT * FROM gates{where} ORDER BY created_at DESC, ref DESC"
        return await self._select("list gates", schema.row_gate, sql, params)

    # run events ---------------------------------------------------------------------------
    async def append_run_events(
        self, run_id: str, events: Sequence[Mapping[str, Any]], *, keep: int = MAX_RUN_EVENTS
    ) -> int:
        """Append events after the run's last one; keep the newest ``keep``; the last seq."""
        now = time.time()

        def write(db: sqlite3.Connection) -> int:
            found = schema.one(
                db,
                "SELECT COALESCE(MAX(seq), 0) AS last FROM run_events WHERE run_id = ?",
                (run_id,),
            )
            seq = int(found["last"]) if found is not None else 0
            rows = []
            for data in events:
                seq += 1
                record = RunEventRecord(
                    run_id=run_id, seq=seq, kind=str(data["kind"]), data=data, created_at=now
                )
                rows.append(schema.run_event_columns(record))
            schema.insert(db, "run_events", rows)
            schema.execute(
                db, "DELETE FROM run_events WHERE run_id = ? AND seq <= ?", (run_id, seq - keep)
            )
            return seq

        last = await self._transact("append run events", write)
        self._event_waiters.wake(run_id)
        return last

    async def run_events(
        self, run_id: str, *, after_seq: int = 0, limit: int = 1000
    ) -> list[RunEventRecord]:
        """Stored events with a seq above ``after_seq``, oldest first, at most ``limit``."""
        sql = "SELECT * FROM run_events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?"
        params = (run_id, after_seq, max(0, limit))
        return await self._select("read run events", schema.row_run_event, sql, params)

    async def wait_run_events(self, run_id: str, *, timeout_s: float) -> None:
        """Return when this process appended events of the run, or after ``timeout_s`` (other
        processes' appends are seen by polling: SQLite has no notifications)."""
        await self._event_waiters.wait(run_id, timeout_s)
