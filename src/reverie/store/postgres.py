"""The PostgreSQL backend (docs/scaling.md): the schema and semantics of SQLite, for many workers.

:class:`PostgresStore` keeps runs, transcripts, leases, inputs, gates and memory in one
PostgreSQL database that any number of processes on any number of machines share. It talks to
the server with ``psycopg`` 3's async driver over a small pool of its own
(:mod:`reverie.store.postgres_connections`), so no call blocks the event loop.

How the rules of the ``Store`` protocol hold with many writers (READ COMMITTED, the default):

- **Leases** are one conditional ``UPDATE … RETURNING fence``: of two workers racing for a run,
  the second waits for the first's row lock, re-checks the condition against the row the first
  wrote, and loses (:class:`RunBusy`). ``take_over`` only matches while the dead owner still
  holds the lease.
- **Fenced writes** first read the run's fence ``FOR SHARE`` in the write's transaction
  (:func:`~reverie.store.postgres_schema.lock_fence`). That lock conflicts with a takeover's
  ``UPDATE``: a write with an old fence either commits before the new lease is handed out or
  sees the new fence and raises :class:`LeaseLost`; it can never land after it.
- **Transcript seq** is drawn after locking the thread row (``FOR NO KEY UPDATE``), so
  appends to one thread are serialised and ``seq`` is unique and gap-free; the input
  **cursor** and the input queue's **seal** are drawn and tested under the run row's lock.
- **Gates** resolve with ``UPDATE … WHERE status = 'pending'``: one resolution wins.

Every ``psycopg`` error is re-raised as :class:`StoreError` (or :class:`ConflictError` for an
integrity violation) with the original in ``__cause__``; messages name the database as
``postgresql://host:port/dbname`` and never carry the user or password of the URL.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

from psycopg import AsyncConnection, sql

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
from reverie.store import postgres_connections as db, postgres_schema as schema, sql_core as core
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
from reverie.store.postgres_connections import PostgresConnections
from reverie.store.postgres_documents import PostgresDocuments
from reverie.store.postgres_schema import Conn
from reverie.store.run_events import MAX_RUN_EVENTS, RunEventRecord

__all__ = ["PostgresStore", "temporary_schema"]


_ACTIVE_RUN_SQL = (
    "SELECT * FROM runs WHERE thread_id = %s AND status IN (%s, %s, %s) ORDER BY created_at LIMIT 1"
)


class PostgresStore(PostgresDocuments, PostgresConnections):
    """A durable :class:`~reverie.store.base.Store` (and memory store) in PostgreSQL.

    Use it as ``async with PostgresStore(url) as store: ...`` or call :meth:`open` and
    :meth:`close` yourself; ``open_store("postgresql://…")`` builds one.

    Args:
        url: A libpq connection URL, ``postgresql://user:password@host:5432/dbname``, with
            any libpq query parameters (``sslmode``, ``options=-csearch_path%3Dreverie`` to
            keep the tables in a schema of their own, …).
        max_connections: Connections (and so operations in flight) at most, per store.
        connect_timeout_s: How long opening a connection may take, unless the URL sets
            ``connect_timeout``.

    Raises:
        ConfigError: The URL cannot be parsed, or ``max_connections`` is below 1.
    """

    # threads and transcript -------------------------------------------------------------
    async def create_thread(self, thread_id: str, scope: Scope) -> ThreadRecord:
        """Create a thread owned by ``scope``; an existing thread is returned as it is."""
        rec = ThreadRecord(thread_id=thread_id, scope=scope, created_at=time.time())
        columns = schema.thread_columns(rec)

        async def write(conn: Conn) -> ThreadRecord:
            if await db.insert(conn, "threads", columns, " ON CONFLICT DO NOTHING"):
                return rec
            sql = "SELECT * FROM threads WHERE thread_id = %s"
            return schema.row_thread(await db.found(conn, sql, (thread_id,), f"thread {thread_id}"))

        return await self._transact("create a thread", write)

    async def get_thread(self, thread_id: str) -> ThreadRecord:
        """The thread, or :class:`NotFoundError`."""
        sql = "SELECT * FROM threads WHERE thread_id = %s"
        return await self._select_one(f"thread {thread_id}", schema.row_thread, sql, (thread_id,))

    async def append_items(
        self, thread_id: str, run_id: str | None, items: Sequence[NewItem], *, fence: int | None
    ) -> list[TranscriptItem]:
        """Append rows; ``seq`` is drawn under the thread row's lock, so it is gap-free."""
        now = time.time()
        refs = [new_id("itm") for _ in items]

        async def write(conn: Conn) -> list[TranscriptItem]:
            # The lock first, then MAX(seq) in a later statement: under READ COMMITTED that
            # statement's snapshot is taken after the lock, so it sees the previous append.
            sql = "SELECT 1 FROM threads WHERE thread_id = %s FOR NO KEY UPDATE"
            if await db.one(conn, sql, (thread_id,)) is None:
                raise NotFoundError(f"thread {thread_id} not found")
            if run_id is not None and fence is not None:
                await db.lock_fence(conn, run_id, fence)
            sql = "SELECT COALESCE(MAX(seq), 0) AS top FROM items WHERE thread_id = %s"
            top = await db.one(conn, sql, (thread_id,))
            first = int(top["top"]) + 1 if top is not None else 1
            out = [
                schema.new_item(ref, seq, thread_id, run_id, item)
                for seq, (ref, item) in enumerate(zip(refs, items, strict=True), start=first)
            ]
            if out:
                columns = [schema.item_columns(rec, created_at=now) for rec in out]
                async with conn.cursor() as cur:
                    await cur.executemany(
                        db.insert_sql("items", list(columns[0])),
                        [list(row.values()) for row in columns],
                    )
            return out

        return await self._transact("append transcript items", write)

    async def get_items(self, refs: Sequence[str]) -> list[TranscriptItem]:
        """Rows by ref, in the order asked; :class:`NotFoundError` names the first missing."""
        unique = list(dict.fromkeys(refs))
        sql = "SELECT * FROM items WHERE ref = ANY(%s)"
        rows = await self._select("read transcript items", schema.row_item, sql, (unique,))
        found = {row.ref: row for row in rows}
        for ref in refs:
            if ref not in found:
                raise NotFoundError(f"transcript item {ref} not found")
        return [found[ref] for ref in refs]

    async def thread_items(
        self, thread_id: str, *, upto_seq: int | None = None, last: int | None = None
    ) -> list[TranscriptItem]:
        """Non-superseded rows of a thread in ``seq`` order, optionally up to a seq / last N."""
        if last is not None and last <= 0:
            await self.get_thread(thread_id)
            return []
        where = "thread_id = %s AND NOT superseded"
        params: list[Any] = [thread_id]
        if upto_seq is not None:
            where += " AND seq <= %s"
            params.append(upto_seq)
        if last is None:
            sql = f"SELECT * FROM items WHERE {where} ORDER BY seq"
        else:  # newest first through the (thread_id, seq) index: a window costs O(window)
            sql = (
                f"SELECT * FROM (SELECT * FROM items WHERE {where} ORDER BY seq DESC LIMIT %s)"
                " AS window_rows ORDER BY seq"
            )
            params.append(last)
        rows = await self._select("read a thread", schema.row_item, sql, params)
        if not rows:
            await self.get_thread(thread_id)  # an empty thread, or NotFoundError
        return rows

    async def thread_head(self, thread_id: str) -> int:
        """The thread's highest seq, superseded rows included (0 for an empty thread)."""
        return await self._read_op(
            "read a thread's head", core.thread_head(core.POSTGRES, thread_id)
        )

    async def commit_step(self, run_id: str, step: StepWrite, *, fence: int) -> StepReceipt:
        """Write a loop boundary in one transaction (see :meth:`Store.commit_step`).

        The thread and run rows are locked first (``FOR NO KEY UPDATE``: appends to the
        thread, enqueues to the run and lease takeovers wait), then the heads are read and
        everything is written in pipeline mode: two round trips and the ``COMMIT``.
        """
        return await self._run_op(
            "commit a step", core.commit_step(core.POSTGRES, run_id, step, fence=fence)
        )

    async def supersede_items_after(self, thread_id: str, run_id: str, seq: int) -> int:
        """Mark rows of ``run_id`` with ``seq`` greater than the given one superseded."""
        return await self._change(
            "supersede transcript items",
            "UPDATE items SET superseded = TRUE"
            " WHERE thread_id = %s AND run_id = %s AND seq > %s AND NOT superseded",
            (thread_id, run_id, seq),
        )

    # runs and leases ----------------------------------------------------------------------
    async def create_run(self, run: RunRecord) -> RunRecord:
        """Insert a run; if its owner's idempotency key exists, return that run instead.

        Raises:
            ConflictError: A run with the same id (and no matching idempotency key) exists.
        """
        now = time.time()
        rec = dataclasses.replace(run, created_at=now, updated_at=now)
        columns = schema.run_columns(rec)
        by_key = "SELECT * FROM runs WHERE idempotency_key = %s"
        key = columns["idempotency_key"]  # qualified by the owner

        async def write(conn: Conn) -> RunRecord:
            if run.idempotency_key is not None:
                row = await db.one(conn, by_key, (key,))
                if row is not None:
                    return schema.row_run(row)
            sql = "SELECT 1 FROM runs WHERE run_id = %s"
            if await db.one(conn, sql, (run.run_id,)) is not None:
                raise ConflictError(f"run {run.run_id} already exists")
            # One active run per thread: the thread row's lock serialises run creation on the
            # thread across every worker, so the check and the insert are one atomic step.
            await db.one(
                conn, "SELECT 1 FROM threads WHERE thread_id = %s FOR UPDATE", (run.thread_id,)
            )
            busy = await db.one(conn, _ACTIVE_RUN_SQL, (run.thread_id, *ACTIVE_STATUSES))
            if busy is not None:
                raise ThreadBusy(run.thread_id, busy["run_id"], busy["status"])
            # A concurrent create with the same key commits first: keep its run (a duplicate
            # run_id is still a unique violation, hence ConflictError).
            if await db.insert(conn, "runs", columns, " ON CONFLICT (idempotency_key) DO NOTHING"):
                return rec
            what = f"run with idempotency key of {run.run_id}"
            return schema.row_run(await db.found(conn, by_key, (key,), what))

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
        sql = "SELECT * FROM runs WHERE run_id = %s"
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
        where, params = db.where(scope, statuses, tenant=tenant)
        sql = f"SELECT * FROM runs{where} ORDER BY created_at DESC, run_id DESC LIMIT %s"
        return await self._select("list runs", schema.row_run, sql, [*params, max(0, limit)])

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

        async def write(conn: Conn) -> RunRecord:
            # One UPDATE: a concurrent takeover's row lock is waited for and its fence seen.
            row = await db.one(
                conn,
                "UPDATE runs SET status = %s, exit = COALESCE(%s, exit), updated_at = %s"
                " WHERE run_id = %s AND (%s::bigint IS NULL OR fence = %s) RETURNING *",
                params,
            )
            if row is None:
                if fence is not None:
                    await db.read_fence(conn, run_id, fence)
                raise NotFoundError(f"run {run_id} not found")
            return schema.row_run(row)

        return await self._transact("set a run's status", write)

    async def request_cancel(self, run_id: str) -> RunRecord:
        """Record a durable cancel request (not fenced: anyone may ask)."""
        sql = (
            "UPDATE runs SET cancel_requested = TRUE, updated_at = %s WHERE run_id = %s RETURNING *"
        )
        rows = await self._select("request a cancel", schema.row_run, sql, (time.time(), run_id))
        if not rows:
            raise NotFoundError(f"run {run_id} not found")
        return rows[0]

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
        if that owner still holds it. The test and the write are one ``UPDATE``; a concurrent
        one waits for the row lock and re-tests against the winner's row, so one wins.

        Raises:
            RunBusy: Another owner holds an unexpired lease and ``force`` is false.
            NotFoundError: There is no such run.
        """

        async def write(conn: Conn) -> int:
            row = await db.one(
                conn,
                "UPDATE runs SET lease_owner = %s, lease_expires_at = %s, fence = fence + 1"
                " WHERE run_id = %s AND (%s OR lease_owner IS NULL OR lease_owner = %s"
                " OR lease_owner = %s OR lease_expires_at IS NULL OR lease_expires_at <= %s)"
                " RETURNING fence",
                (owner, now + ttl_s, run_id, force, owner, take_over, now),
            )
            if row is not None:
                return int(row["fence"])
            if await db.one(conn, "SELECT 1 FROM runs WHERE run_id = %s", (run_id,)) is None:
                raise NotFoundError(f"run {run_id} not found")
            raise RunBusy(f"run {run_id} is leased by a live worker")

        return await self._transact("acquire a lease", write)

    async def renew_lease(self, run_id: str, fence: int, *, ttl_s: float, now: float) -> None:
        """Extend the lease; :class:`LeaseLost` if ``fence`` is stale."""

        async def write(conn: Conn) -> None:
            sql = "UPDATE runs SET lease_expires_at = %s WHERE run_id = %s AND fence = %s"
            if not await db.execute(conn, sql, (now + ttl_s, run_id, fence)):
                await db.read_fence(conn, run_id, fence)

        await self._transact("renew a lease", write)

    async def release_lease(self, run_id: str, fence: int) -> None:
        """Drop the lease if ``fence`` is still current (no error otherwise)."""
        await self._change(
            "release a lease",
            "UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL"
            " WHERE run_id = %s AND fence = %s",
            (run_id, fence),
        )

    async def expired_leases(self, now: float) -> list[RunRecord]:
        """Runs in ``running`` or ``queued`` whose lease has expired or was never taken."""
        sql = (
            "SELECT * FROM runs WHERE status IN ('running', 'queued')"
            " AND (lease_expires_at IS NULL OR lease_expires_at <= %s)"
            " ORDER BY created_at, run_id"
        )
        return await self._select("list expired leases", schema.row_run, sql, (now,))

    # checkpoints --------------------------------------------------------------------------
    async def save_checkpoint(
        self, run_id: str, kind: CheckpointKind, payload: bytes, *, fence: int
    ) -> None:
        """Replace the run's latest checkpoint (the payload is stored as opaque bytes)."""
        await self._fenced(
            "save a checkpoint",
            run_id,
            fence,
            "INSERT INTO checkpoints (run_id, kind, payload, created_at)"
            " VALUES (%s, %s, %s, %s) ON CONFLICT (run_id) DO UPDATE"
            " SET kind = excluded.kind, payload = excluded.payload,"
            " created_at = excluded.created_at",
            (run_id, kind, bytes(payload), time.time()),
        )

    async def load_checkpoint(self, run_id: str) -> CheckpointRecord | None:
        """The latest checkpoint, or ``None``."""
        sql = "SELECT * FROM checkpoints WHERE run_id = %s"
        rows = await self._select("load a checkpoint", schema.row_checkpoint, sql, (run_id,))
        return rows[0] if rows else None

    # side-effect journal ------------------------------------------------------------------
    async def journal_started(self, run_id: str, call_id: str, tool: str, *, fence: int) -> None:
        """Record that a call started (idempotent: never downgrades a finished row)."""
        await self._fenced(
            "journal a started call",
            run_id,
            fence,
            "INSERT INTO journal (run_id, call_id, tool, state, outcome, updated_at)"
            " VALUES (%s, %s, %s, 'started', NULL, %s) ON CONFLICT (run_id, call_id) DO NOTHING",
            (run_id, call_id, tool, time.time()),
        )

    async def journal_finished(
        self, run_id: str, call_id: str, outcome: Mapping[str, Any], *, fence: int
    ) -> None:
        """Record a call's outcome (keeping the tool name from its ``started`` row)."""
        await self._fenced(
            "journal a finished call",
            run_id,
            fence,
            "INSERT INTO journal (run_id, call_id, tool, state, outcome, updated_at)"
            " VALUES (%s, %s, '', 'finished', %s, %s) ON CONFLICT (run_id, call_id)"
            " DO UPDATE SET state = 'finished', outcome = excluded.outcome,"
            " updated_at = excluded.updated_at",
            (run_id, call_id, schema.dumps(dict(outcome)), time.time()),
        )

    async def journal_get(self, run_id: str, call_ids: Sequence[str]) -> dict[str, JournalEntry]:
        """Journal rows for the given calls (calls with no row are left out)."""
        sql = "SELECT * FROM journal WHERE run_id = %s AND call_id = ANY(%s)"
        params = (run_id, list(dict.fromkeys(call_ids)))
        rows = await self._select("read the journal", schema.row_journal, sql, params)
        found = {row.call_id: row for row in rows}
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

        async def write(conn: Conn) -> InputRecord:
            sealed = await _lock_run(conn, run_id, "inputs_sealed")
            sql = "SELECT * FROM inputs WHERE run_id = %s AND input_id = %s"
            row = await db.one(conn, sql, (run_id, input_id))
            if row is not None:
                return schema.row_input(row)
            if sealed:
                raise RunEndedError(f"run {run_id} has ended and accepts no more inputs")
            sql = "SELECT COALESCE(MAX(cursor), 0) AS top FROM inputs WHERE run_id = %s"
            top = await db.one(conn, sql, (run_id,))
            rec = InputRecord(
                run_id=run_id,
                cursor=(int(top["top"]) if top is not None else 0) + 1,
                input_id=input_id,
                kind=kind,
                payload=dict(payload),
            )
            await db.insert(conn, "inputs", schema.input_columns(rec, created_at=now))
            return rec

        return await self._transact("enqueue an input", write)

    async def poll_inputs(self, run_id: str, *, after_cursor: int) -> list[InputRecord]:
        """Inputs with cursor greater than ``after_cursor``, in order."""
        sql = "SELECT * FROM inputs WHERE run_id = %s AND cursor > %s ORDER BY cursor"
        return await self._select("poll inputs", schema.row_input, sql, (run_id, after_cursor))

    async def seal_inputs(self, run_id: str, *, after_cursor: int) -> list[InputRecord]:
        """Close the queue unless inputs past the cursor are waiting (then return them).

        Under the same run row lock as :meth:`enqueue_input`, so an input is either returned
        here or refused with :class:`RunEndedError`, never lost in between.
        """

        async def write(conn: Conn) -> list[InputRecord]:
            await _lock_run(conn, run_id, "inputs_sealed")
            sql = "SELECT * FROM inputs WHERE run_id = %s AND cursor > %s ORDER BY cursor"
            waiting = await db.rows(conn, sql, (run_id, after_cursor))
            if not waiting:
                sql = "UPDATE runs SET inputs_sealed = TRUE WHERE run_id = %s"
                await db.execute(conn, sql, (run_id,))
            return [schema.row_input(row) for row in waiting]

        return await self._transact("seal inputs", write)

    async def unseal_inputs(self, run_id: str) -> None:
        """Accept inputs again."""
        sql = "UPDATE runs SET inputs_sealed = FALSE WHERE run_id = %s"
        await self._change("unseal inputs", sql, (run_id,))

    async def ack_inputs(self, run_id: str, upto_cursor: int, *, fence: int) -> None:
        """Mark inputs up to the cursor delivered."""
        await self._fenced(
            "ack inputs",
            run_id,
            fence,
            "UPDATE inputs SET acked = TRUE WHERE run_id = %s AND cursor <= %s AND NOT acked",
            (run_id, upto_cursor),
        )

    # gates --------------------------------------------------------------------------------
    async def create_gate(self, gate: GateRecord, *, fence: int) -> GateRecord:
        """Insert a pending gate (same run + call returns the existing one)."""
        columns = schema.gate_columns(gate)
        by_call = "SELECT * FROM gates WHERE run_id = %s AND call_id = %s"

        async def write(conn: Conn) -> GateRecord:
            await db.lock_fence(conn, gate.run_id, fence)
            suffix = " ON CONFLICT (run_id, call_id) DO NOTHING"
            if await db.insert(conn, "gates", columns, suffix):
                return gate
            found = await db.found(conn, by_call, (gate.run_id, gate.call_id), f"gate {gate.ref}")
            return schema.row_gate(found)

        return await self._transact("create a gate", write)

    async def get_gate(self, ref: str) -> GateRecord:
        """The gate, or :class:`NotFoundError`."""
        sql = "SELECT * FROM gates WHERE ref = %s"
        return await self._select_one(f"gate {ref}", schema.row_gate, sql, (ref,))

    async def gate_for_call(self, run_id: str, call_id: str) -> GateRecord | None:
        """The gate opened for a call, if any."""
        sql = "SELECT * FROM gates WHERE run_id = %s AND call_id = %s"
        rows = await self._select("read a gate", schema.row_gate, sql, (run_id, call_id))
        return rows[0] if rows else None

    async def resolve_gate(
        self, ref: str, status: GateDecision, *, reason: str | None, now: float
    ) -> GateRecord:
        """Resolve a pending gate once; :class:`GateResolvedError` on a second resolution."""

        async def write(conn: Conn) -> GateRecord:
            row = await db.one(
                conn,
                "UPDATE gates SET status = %s, reason = %s, resolved_at = %s"
                " WHERE ref = %s AND status = 'pending' RETURNING *",
                (status, reason, now, ref),
            )
            if row is not None:
                return schema.row_gate(row)
            sql = "SELECT status FROM gates WHERE ref = %s"
            found = await db.found(conn, sql, (ref,), f"gate {ref}")
            raise GateResolvedError(f"gate {ref} is already {found['status']}")

        return await self._transact("resolve a gate", write)

    async def list_gates(
        self, *, scope: Scope | None = None, status: GateStatus | None = "pending"
    ) -> list[GateRecord]:
        """Gates of a scope (tenant and user) and/or in a status, newest first."""
        where, params = db.where(scope, None if status is None else [status])
        sql = f"SELECT * FROM gates{where} ORDER BY created_at DESC, ref DESC"
        return await self._select("list gates", schema.row_gate, sql, params)

    # run events ---------------------------------------------------------------------------
    async def append_run_events(
        self, run_id: str, events: Sequence[Mapping[str, Any]], *, keep: int = MAX_RUN_EVENTS
    ) -> int:
        """Append events after the run's last one; keep the newest ``keep``; the last seq.

        Followers in every process are woken by ``NOTIFY`` when the append commits.
        """
        now = time.time()

        async def write(conn: Conn) -> int:
            # One appender of a run at a time, so sequence numbers never collide.
            await db.execute(conn, "SELECT pg_advisory_xact_lock(hashtext(%s))", (run_id,))
            found = await db.one(
                conn,
                "SELECT COALESCE(MAX(seq), 0) AS last FROM run_events WHERE run_id = %s",
                (run_id,),
            )
            seq = int(found["last"]) if found is not None else 0
            for data in events:
                seq += 1
                record = RunEventRecord(
                    run_id=run_id, seq=seq, kind=str(data["kind"]), data=data, created_at=now
                )
                await db.insert(conn, "run_events", schema.run_event_columns(record))
            await db.execute(
                conn, "DELETE FROM run_events WHERE run_id = %s AND seq <= %s", (run_id, seq - keep)
            )
            await db.execute(conn, "SELECT pg_notify(%s, %s)", (db.EVENTS_CHANNEL, run_id))
            return seq

        last = await self._transact("append run events", write)
        self._event_waiters.wake(run_id)
        return last

    async def run_events(
        self, run_id: str, *, after_seq: int = 0, limit: int = 1000
    ) -> list[RunEventRecord]:
        """Stored events with a seq above ``after_seq``, oldest first, at most ``limit``."""
        query = "SELECT * FROM run_events WHERE run_id = %s AND seq > %s ORDER BY seq LIMIT %s"
        params = (run_id, after_seq, max(0, limit))
        return await self._select("read run events", schema.row_run_event, query, params)

    async def wait_run_events(self, run_id: str, *, timeout_s: float) -> None:
        """Return when events of the run were appended (any process: ``LISTEN``), or after
        ``timeout_s``."""
        self._follow_notifications()
        await self._event_waiters.wait(run_id, timeout_s)


async def _lock_run(conn: Conn, run_id: str, column: str) -> Any:
    """Lock the run row for an update of its own columns; return one of them."""
    sql = f"SELECT {column} FROM runs WHERE run_id = %s FOR NO KEY UPDATE"
    row = await db.found(conn, sql, (run_id,), f"run {run_id}")
    return row[column]


@asynccontextmanager
async def temporary_schema(url: str, *, prefix: str = "reverie_tmp") -> AsyncIterator[str]:
    """A new, empty schema on the server for the time of the block; dropped afterwards.

    Yields ``url`` with ``options=-csearch_path=<schema>`` appended, so every store opened on
    the yielded URL keeps its tables there. For tests against one server (each test gets a
    fresh database of its own) and for trying reverie out on a shared database.

    Args:
        url: A ``postgresql://`` URL of a role allowed to create schemas.
        prefix: The start of the schema's name; a random suffix makes it unique.

    Raises:
        StoreError: The server refused to create the schema.
    """
    name = f"{prefix}_{uuid.uuid4().hex[:16]}"
    label, secrets = db.describe_url(url)
    joiner = "&" if "?" in url else "?"
    scoped = f"{url}{joiner}options={quote(f'-csearch_path={name}', safe='')}"
    statement = sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name))
    with db.db_errors(f"create a schema on {label}", secrets):
        async with await AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute(statement)
    try:
        yield scoped
    finally:
        drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
        with db.db_errors(f"drop a schema on {label}", secrets):
            async with await AsyncConnection.connect(url, autocommit=True) as conn:
                await conn.execute(drop)
