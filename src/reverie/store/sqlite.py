"""The embedded SQLite backend (DESIGN §15): one file, WAL, writes from one connection.

Layout of a :class:`SQLiteStore`:

- a **writer** connection, used under an :class:`asyncio.Lock`. A write of several statements
  is one ``BEGIN IMMEDIATE`` … ``COMMIT`` transaction: it takes SQLite's write lock up front
  (other processes wait up to ``busy_timeout``), so what it reads cannot change before it
  commits. A write that is one statement runs on its own, which SQLite makes just as atomic.
  Fenced writes are compare-and-sets on ``runs.fence``: the fence is read inside the
  transaction, or the statement itself carries the test (``WHERE … fence = ?``). Two processes
  racing on one file cannot both win.
- a **reader** connection (``query_only``). Under WAL it reads the last committed state while a
  write is in progress. Each read is one statement, so it never holds a snapshot open.

Both connections are :mod:`aiosqlite` connections: the SQLite calls run on their own threads and
never block the event loop. Every ``sqlite3`` error is re-raised as :class:`StoreError` (or
:class:`ConflictError` for a constraint violation) with the original kept in ``__cause__``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from sqlite3 import Row
from typing import Any, Literal, TypeVar

import aiosqlite

from reverie.core.ids import new_id
from reverie.core.scope import Scope
from reverie.errors import (
    ConfigError,
    ConflictError,
    GateResolvedError,
    NotFoundError,
    RunBusy,
    RunEndedError,
    StoreError,
)
from reverie.store import sqlite_schema as schema
from reverie.store.base import (
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
    ThreadRecord,
    TranscriptItem,
)
from reverie.store.sqlite_documents import SQLiteDocuments
from reverie.store.sqlite_schema import SYNCHRONOUS_MODES, db_errors

__all__ = ["SYNCHRONOUS_MODES", "SQLiteStore"]

T = TypeVar("T")

_CHUNK = 500
"""Keys per ``IN (...)`` query, well under SQLite's bound-parameter limit."""


class SQLiteStore(SQLiteDocuments):
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

    def __init__(
        self, path: str | Path, *, synchronous: str = "NORMAL", busy_timeout_s: float = 5.0
    ) -> None:
        if str(path) in ("", ":memory:"):
            raise ConfigError("SQLiteStore needs a file path; use MemoryStore for ':memory:'")
        mode = synchronous.upper()
        if mode not in SYNCHRONOUS_MODES:
            accepted = ", ".join(sorted(SYNCHRONOUS_MODES))
            raise ConfigError(f"synchronous={synchronous!r} is not one of {accepted}")
        self.path = Path(path).expanduser()
        """The database file."""
        self.synchronous = mode
        """The ``PRAGMA synchronous`` applied to the writer."""
        self._busy_ms = max(0, int(busy_timeout_s * 1000))
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._write_lock = asyncio.Lock()
        self._items = schema.ItemCache()

    async def __aenter__(self) -> SQLiteStore:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # lifecycle ----------------------------------------------------------------------------
    async def open(self) -> None:
        """Create the file if needed, set WAL and the pragmas, and migrate the schema.

        Raises:
            StoreError: The file is not a SQLite database (garbage, truncated), its schema is
                newer than this build, or it cannot be opened. Nothing is left open.
        """
        async with self._write_lock:  # two concurrent open() calls connect once
            if self._writer is not None:
                return
            try:
                await asyncio.to_thread(self.path.parent.mkdir, parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the directory of {self.path}: {exc}") from exc
            with db_errors(f"open {self.path}"):
                self._writer, self._reader = await schema.open_connections(
                    self.path, synchronous=self.synchronous, busy_ms=self._busy_ms
                )

    async def close(self) -> None:
        """Close both connections (after a write in progress finishes). Safe to call twice."""
        async with self._write_lock:
            reader, writer = self._reader, self._writer
            self._reader = self._writer = None
            with db_errors(f"close {self.path}"):
                await schema.close_all(reader, writer)

    async def connection_settings(self) -> dict[str, Any]:
        """The pragmas in force on the writer connection (for diagnostics and tests)."""
        db = self._require(self._writer)
        names = ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
        with db_errors("read pragmas"):
            return {name: (await schema.rows(db, f"PRAGMA {name}"))[0][0] for name in names}

    def _require(self, db: aiosqlite.Connection | None) -> aiosqlite.Connection:
        if db is None:
            raise StoreError(f"SQLiteStore({self.path}) is not open; call open() first")
        return db

    @contextlib.asynccontextmanager
    async def _write(self, action: str) -> AsyncIterator[aiosqlite.Connection]:
        """The writer, under the write lock, in one BEGIN IMMEDIATE … COMMIT transaction.

        A cancelled write leaves the connection clean, wherever the cancel lands (even in
        BEGIN): a statement already handed to aiosqlite's thread still runs, but calls run in
        the order they were queued, so the ROLLBACK queued here runs after it. A cancel during
        COMMIT may still commit; the ROLLBACK is then a no-op.
        """
        async with self._write_lock:
            db = self._require(self._writer)
            with db_errors(action):
                try:
                    await schema.execute(db, "BEGIN IMMEDIATE")
                    yield db
                    await schema.execute(db, "COMMIT")
                except BaseException:
                    await db.rollback()  # only rolls back if a transaction is open
                    raise

    async def _change(self, action: str, sql: str, params: Sequence[Any]) -> int:
        """One write statement, atomic on its own; returns the number of rows it changed.

        Compare-and-set writes put the fence test in the statement (``WHERE`` on
        ``runs.fence``) and so need no BEGIN/COMMIT round trips. The write lock is still
        taken so that no statement lands inside another coroutine's open transaction.
        """
        async with self._write_lock:
            db = self._require(self._writer)
            with db_errors(action):
                return await schema.execute(db, sql, params)

    async def _change_returning(self, action: str, sql: str, params: Sequence[Any]) -> Row | None:
        """Like :meth:`_change` for an ``UPDATE … RETURNING`` of at most one row."""
        async with self._write_lock:
            db = self._require(self._writer)
            with db_errors(action):
                return await schema.one(db, sql, params)

    async def _verify_fence(self, run_id: str, fence: int) -> None:
        """After a fenced statement changed nothing: raise if the run or the fence is why.

        Fences only grow, so a fence that is current now was current when the statement ran,
        and one that is stale now was stale then.
        """
        sql = "SELECT fence FROM runs WHERE run_id = ?"
        current = await self._select("check a fence", schema.first_int, sql, (run_id,))
        schema.raise_if_stale(run_id, fence, current[0] if current else None)

    async def _select(
        self, action: str, decode: Callable[[Row], T], sql: str, params: Sequence[Any] = ()
    ) -> list[T]:
        """One read statement on the reader connection, decoded row by row."""
        db = self._require(self._reader)
        with db_errors(action):
            rows = await schema.rows(db, sql, params)
        return [decode(row) for row in rows]

    async def _select_one(
        self, what: str, decode: Callable[[Row], T], sql: str, params: Sequence[Any]
    ) -> T:
        """One row, or :class:`NotFoundError` naming ``what``."""
        rows = await self._select(f"read {what}", decode, sql, params)
        if not rows:
            raise NotFoundError(f"{what} not found")
        return rows[0]

    async def _select_in(
        self,
        action: str,
        decode: Callable[[Row], T],
        sql: str,
        params: Sequence[Any],
        keys: Sequence[str],
    ) -> dict[str, T]:
        """``sql`` with ``{marks}`` filled for the distinct keys, in chunks; by the first column."""
        unique = list(dict.fromkeys(keys))
        found: dict[str, T] = {}
        for start in range(0, len(unique), _CHUNK):
            chunk = unique[start : start + _CHUNK]
            query = sql.format(marks=schema.marks(len(chunk)))
            pairs = await self._select(
                action, lambda row: (row[0], decode(row)), query, (*params, *chunk)
            )
            found.update(pairs)
        return found

    # threads and transcript -------------------------------------------------------------
    async def create_thread(self, thread_id: str, scope: Scope) -> ThreadRecord:
        """Create a thread owned by ``scope``; an existing thread is returned as it is."""
        async with self._write("create a thread") as db:
            row = await schema.one(db, "SELECT * FROM threads WHERE thread_id = ?", (thread_id,))
            if row is not None:
                return schema.row_thread(row)
            rec = ThreadRecord(thread_id=thread_id, scope=scope, created_at=time.time())
            await schema.insert(db, "threads", [schema.thread_columns(rec)])
        return rec

    async def get_thread(self, thread_id: str) -> ThreadRecord:
        """The thread, or :class:`NotFoundError`."""
        sql = "SELECT * FROM threads WHERE thread_id = ?"
        return await self._select_one(f"thread {thread_id}", schema.row_thread, sql, (thread_id,))

    async def append_items(
        self, thread_id: str, run_id: str | None, items: Sequence[NewItem], *, fence: int | None
    ) -> list[TranscriptItem]:
        """Append rows; ``seq`` is assigned inside the transaction, so it is gap-free."""
        async with self._write("append transcript items") as db:
            # One round trip for every check and the next seq, inside the transaction.
            [head] = await schema.rows(
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
            now = time.time()
            out = [
                TranscriptItem(
                    ref=new_id("itm"),
                    seq=seq,
                    thread_id=thread_id,
                    run_id=run_id,
                    role=item.role,
                    content=item.content,
                    tool_calls=item.tool_calls,
                    tool_call_id=item.tool_call_id,
                    name=item.name,
                    input_id=item.input_id,
                    meta=dict(item.meta),
                )
                for seq, item in enumerate(items, start=int(head[1]) + 1)
            ]
            rows = [schema.item_columns(rec, created_at=now) for rec in out]
            await schema.insert(db, "items", rows)
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
        sql = "SELECT * FROM items WHERE thread_id = ? AND superseded = 0"
        params: list[Any] = [thread_id]
        if upto_seq is not None:
            sql += " AND seq <= ?"
            params.append(upto_seq)
        rows: list[TranscriptItem] = []
        if last is None:
            rows = await self._select(
                "read a thread", self._items.decode, sql + " ORDER BY seq", params
            )
        elif last > 0:
            # Newest first through the (thread_id, seq) index: a window costs O(window).
            sql += " ORDER BY seq DESC LIMIT ?"
            rows = await self._select("read a thread", self._items.decode, sql, [*params, last])
            rows.reverse()
        if not rows:
            await self.get_thread(thread_id)  # an empty thread, or NotFoundError
        return rows

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
        """Insert a run; if its idempotency key exists, return that run instead.

        Raises:
            ConflictError: A run with the same id (and no matching idempotency key) exists.
        """
        async with self._write("create a run") as db:
            if run.idempotency_key is not None:
                sql = "SELECT * FROM runs WHERE idempotency_key = ?"
                row = await schema.one(db, sql, (run.idempotency_key,))
                if row is not None:
                    return schema.row_run(row)
            sql = "SELECT 1 FROM runs WHERE run_id = ?"
            if await schema.one(db, sql, (run.run_id,)) is not None:
                raise ConflictError(f"run {run.run_id} already exists")
            now = time.time()
            rec = dataclasses.replace(run, created_at=now, updated_at=now)
            await schema.insert(db, "runs", [schema.run_columns(rec)])
        return rec

    async def get_run(self, run_id: str) -> RunRecord:
        """The run, or :class:`NotFoundError`."""
        sql = "SELECT * FROM runs WHERE run_id = ?"
        return await self._select_one(f"run {run_id}", schema.row_run, sql, (run_id,))

    async def list_runs(
        self, *, scope: Scope | None = None, statuses: Sequence[str] | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Runs of a scope (tenant and user) and/or in some statuses, newest first."""
        if statuses is not None and not statuses:
            return []
        where, params = schema.where(scope, statuses)
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
        row = await self._change_returning(
            "set a run's status",
            "UPDATE runs SET status = ?, exit = COALESCE(?, exit), updated_at = ?"
            " WHERE run_id = ? AND (? IS NULL OR fence = ?) RETURNING *",
            (status, schema.exit_column(exit), time.time(), run_id, fence, fence),
        )
        if row is None:
            if fence is not None:
                await self._verify_fence(run_id, fence)
            raise NotFoundError(f"run {run_id} not found")
        return schema.row_run(row)

    async def request_cancel(self, run_id: str) -> RunRecord:
        """Record a durable cancel request (not fenced: anyone may ask)."""
        row = await self._change_returning(
            "request a cancel",
            "UPDATE runs SET cancel_requested = 1, updated_at = ? WHERE run_id = ? RETURNING *",
            (time.time(), run_id),
        )
        if row is None:
            raise NotFoundError(f"run {run_id} not found")
        return schema.row_run(row)

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

        The test of the current lease and the write of the new one are one UPDATE statement,
        atomic in SQLite, so of two processes racing for a run exactly one wins.

        Raises:
            RunBusy: Another owner holds an unexpired lease and ``force`` is false.
            NotFoundError: There is no such run.
        """
        row = await self._change_returning(
            "acquire a lease",
            "UPDATE runs SET lease_owner = ?, lease_expires_at = ?, fence = fence + 1"
            " WHERE run_id = ? AND (? OR lease_owner IS NULL OR lease_owner = ?"
            " OR lease_owner = ? OR lease_expires_at IS NULL OR lease_expires_at <= ?)"
            " RETURNING fence",
            (owner, now + ttl_s, run_id, force, owner, take_over, now),
        )
        if row is None:
            await self.get_run(run_id)  # NotFoundError, or else the lease is held
            raise RunBusy(f"run {run_id} is leased by a live worker")
        return int(row[0])

    async def renew_lease(self, run_id: str, fence: int, *, ttl_s: float, now: float) -> None:
        """Extend the lease; :class:`LeaseLost` if ``fence`` is stale."""
        sql = "UPDATE runs SET lease_expires_at = ? WHERE run_id = ? AND fence = ?"
        if not await self._change("renew a lease", sql, (now + ttl_s, run_id, fence)):
            await self._verify_fence(run_id, fence)

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
        changed = await self._change(
            "save a checkpoint",
            "INSERT INTO checkpoints (run_id, kind, payload, created_at)"
            f" SELECT ?, ?, ?, ? WHERE {schema.FENCED} ON CONFLICT (run_id) DO UPDATE"
            " SET kind = excluded.kind, payload = excluded.payload,"
            " created_at = excluded.created_at",
            (run_id, kind, bytes(payload), time.time(), run_id, fence),
        )
        if not changed:
            await self._verify_fence(run_id, fence)

    async def load_checkpoint(self, run_id: str) -> CheckpointRecord | None:
        """The latest checkpoint, or ``None``."""
        sql = "SELECT * FROM checkpoints WHERE run_id = ?"
        rows = await self._select("load a checkpoint", schema.row_checkpoint, sql, (run_id,))
        return rows[0] if rows else None

    # side-effect journal ------------------------------------------------------------------
    async def journal_started(self, run_id: str, call_id: str, tool: str, *, fence: int) -> None:
        """Record that a call started (idempotent: never downgrades a finished row)."""
        changed = await self._change(
            "journal a started call",
            "INSERT INTO journal (run_id, call_id, tool, state, outcome, updated_at)"
            f" SELECT ?, ?, ?, 'started', NULL, ? WHERE {schema.FENCED}"
            " ON CONFLICT (run_id, call_id) DO NOTHING",
            (run_id, call_id, tool, time.time(), run_id, fence),
        )
        if not changed:  # a stale fence, or the row was there already (fine)
            await self._verify_fence(run_id, fence)

    async def journal_finished(
        self, run_id: str, call_id: str, outcome: Mapping[str, Any], *, fence: int
    ) -> None:
        """Record a call's outcome (keeping the tool name from its ``started`` row)."""
        changed = await self._change(
            "journal a finished call",
            "INSERT INTO journal (run_id, call_id, tool, state, outcome, updated_at)"
            f" SELECT ?, ?, '', 'finished', ?, ? WHERE {schema.FENCED}"
            " ON CONFLICT (run_id, call_id) DO UPDATE SET state = 'finished',"
            " outcome = excluded.outcome, updated_at = excluded.updated_at",
            (run_id, call_id, schema.dumps(dict(outcome)), time.time(), run_id, fence),
        )
        if not changed:
            await self._verify_fence(run_id, fence)

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
        async with self._write("enqueue an input") as db:
            run = await schema.one(db, "SELECT inputs_sealed FROM runs WHERE run_id = ?", (run_id,))
            if run is None:
                raise NotFoundError(f"run {run_id} not found")
            sql = "SELECT * FROM inputs WHERE run_id = ? AND input_id = ?"
            row = await schema.one(db, sql, (run_id, input_id))
            if row is not None:
                return schema.row_input(row)
            if run["inputs_sealed"]:
                raise RunEndedError(f"run {run_id} has ended and accepts no more inputs")
            sql = "SELECT COALESCE(MAX(cursor), 0) FROM inputs WHERE run_id = ?"
            top = int((await schema.rows(db, sql, (run_id,)))[0][0])
            rec = InputRecord(
                run_id=run_id, cursor=top + 1, input_id=input_id, kind=kind, payload=dict(payload)
            )
            await schema.insert(db, "inputs", [schema.input_columns(rec, created_at=time.time())])
        return rec

    async def poll_inputs(self, run_id: str, *, after_cursor: int) -> list[InputRecord]:
        """Inputs with cursor greater than ``after_cursor``, in order."""
        sql = "SELECT * FROM inputs WHERE run_id = ? AND cursor > ? ORDER BY cursor"
        return await self._select("poll inputs", schema.row_input, sql, (run_id, after_cursor))

    async def seal_inputs(self, run_id: str, *, after_cursor: int) -> list[InputRecord]:
        """Close the queue unless inputs past the cursor are waiting (then return them).

        One transaction under the same lock as :meth:`enqueue_input`, so an input is either
        returned here or refused with :class:`RunEndedError`, never lost in between.
        """
        async with self._write("seal inputs") as db:
            await schema.get_run(db, run_id)
            sql = "SELECT * FROM inputs WHERE run_id = ? AND cursor > ? ORDER BY cursor"
            waiting = await schema.rows(db, sql, (run_id, after_cursor))
            if not waiting:
                sql = "UPDATE runs SET inputs_sealed = 1 WHERE run_id = ?"
                await schema.execute(db, sql, (run_id,))
        return [schema.row_input(row) for row in waiting]

    async def unseal_inputs(self, run_id: str) -> None:
        """Accept inputs again."""
        sql = "UPDATE runs SET inputs_sealed = 0 WHERE run_id = ?"
        await self._change("unseal inputs", sql, (run_id,))

    async def ack_inputs(self, run_id: str, upto_cursor: int, *, fence: int) -> None:
        """Mark inputs up to the cursor delivered."""
        changed = await self._change(
            "ack inputs",
            "UPDATE inputs SET acked = 1"
            f" WHERE run_id = ? AND cursor <= ? AND acked = 0 AND {schema.FENCED}",
            (run_id, upto_cursor, run_id, fence),
        )
        if not changed:  # a stale fence, or no inputs to ack
            await self._verify_fence(run_id, fence)

    # gates --------------------------------------------------------------------------------
    async def create_gate(self, gate: GateRecord, *, fence: int) -> GateRecord:
        """Insert a pending gate (same run + call returns the existing one)."""
        async with self._write("create a gate") as db:
            await schema.check_fence(db, gate.run_id, fence)
            sql = "SELECT * FROM gates WHERE run_id = ? AND call_id = ?"
            row = await schema.one(db, sql, (gate.run_id, gate.call_id))
            if row is not None:
                return schema.row_gate(row)
            await schema.insert(db, "gates", [schema.gate_columns(gate)])
        return gate

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
        self, ref: str, status: Literal["approved", "denied"], *, reason: str | None, now: float
    ) -> GateRecord:
        """Resolve a pending gate once; :class:`GateResolvedError` on a second resolution."""
        row = await self._change_returning(
            "resolve a gate",
            "UPDATE gates SET status = ?, reason = ?, resolved_at = ?"
            " WHERE ref = ? AND status = 'pending' RETURNING *",
            (status, reason, now, ref),
        )
        if row is None:
            gate = await self.get_gate(ref)  # NotFoundError, or else it was resolved already
            raise GateResolvedError(f"gate {ref} is already {gate.status}")
        return schema.row_gate(row)

    async def list_gates(
        self, *, scope: Scope | None = None, status: GateStatus | None = "pending"
    ) -> list[GateRecord]:
        """Gates of a scope (tenant and user) and/or in a status, newest first."""
        where, params = schema.where(scope, None if status is None else [status])
        sql = f"SELECT * FROM gates{where} ORDER BY created_at DESC, ref DESC"
        return await self._select("list gates", schema.row_gate, sql, params)
