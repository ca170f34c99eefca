"""The embedded SQLite backend (DESIGN §15): one file, WAL, writes from one connection.

Layout of a :class:`SQLiteStore`:

- a **writer** connection. Every write is one ``BEGIN IMMEDIATE`` … ``COMMIT`` transaction on it,
  serialised inside the process by an :class:`asyncio.Lock` and across processes by SQLite's
  write lock (``BEGIN IMMEDIATE`` takes it up front and waits up to ``busy_timeout`` for it).
  Fence checks read ``runs.fence`` inside that same transaction, so the check and the write are
  one atomic compare-and-set: two processes racing on one file cannot both win.
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
    LeaseLost,
    NotFoundError,
    RunBusy,
    RunEndedError,
    StoreError,
)
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
from reverie.store.sqlite_schema import (
    SYNCHRONOUS_MODES,
    Columns,
    close_all,
    dumps,
    exit_column,
    gate_columns,
    input_columns,
    item_columns,
    open_connections,
    row_checkpoint,
    row_gate,
    row_input,
    row_item,
    row_journal,
    row_run,
    row_thread,
    run_columns,
    thread_columns,
)
from reverie.store.sqlite_schema import (
    db_errors as _db_errors,
)

__all__ = ["SYNCHRONOUS_MODES", "SQLiteStore"]

T = TypeVar("T")

_CHUNK = 500
"""Keys per ``IN (...)`` query, well under SQLite's bound-parameter limit."""


def _marks(n: int) -> str:
    return ",".join("?" * n)


def _where(scope: Scope | None, statuses: Sequence[str] | None) -> tuple[str, list[Any]]:
    """The WHERE clause of the list queries: scope means tenant and user, as in MemoryStore."""
    clauses: list[str] = []
    params: list[Any] = []
    if scope is not None:
        clauses.append("scope_tenant = ? AND scope_user = ?")
        params += [scope.tenant, scope.user]
    if statuses is not None:
        clauses.append(f"status IN ({_marks(len(statuses))})")
        params += statuses
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


async def _rows(db: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> list[Row]:
    return list(await db.execute_fetchall(sql, params))


async def _one(db: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> Row | None:
    rows = await _rows(db, sql, params)
    return rows[0] if rows else None


async def _exec(db: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> int:
    """Run one statement and return the number of rows it changed."""
    async with db.execute(sql, params) as cursor:
        return cursor.rowcount


async def _insert(db: aiosqlite.Connection, table: str, row: Columns) -> None:
    # Table and column names come from this package's codecs, never from callers.
    sql = f"INSERT INTO {table} ({', '.join(row)}) VALUES ({_marks(len(row))})"
    await _exec(db, sql, tuple(row.values()))


async def _get_run(db: aiosqlite.Connection, run_id: str) -> RunRecord:
    row = await _one(db, "SELECT * FROM runs WHERE run_id = ?", (run_id,))
    if row is None:
        raise NotFoundError(f"run {run_id} not found")
    return row_run(row)


async def _check_fence(db: aiosqlite.Connection, run_id: str, fence: int) -> None:
    """The compare half of a compare-and-set; runs inside the write transaction."""
    row = await _one(db, "SELECT fence FROM runs WHERE run_id = ?", (run_id,))
    if row is None:
        raise NotFoundError(f"run {run_id} not found")
    if row["fence"] != fence:
        raise LeaseLost(f"run {run_id}: fencing token {fence} is stale (now {row['fence']})")


class SQLiteStore:
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
        if self._writer is not None:
            return
        try:
            await asyncio.to_thread(self.path.parent.mkdir, parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the directory of {self.path}: {exc}") from exc
        with _db_errors(f"open {self.path}"):
            self._writer, self._reader = await open_connections(
                self.path, synchronous=self.synchronous, busy_ms=self._busy_ms
            )

    async def close(self) -> None:
        """Close both connections (after a write in progress finishes). Safe to call twice."""
        async with self._write_lock:
            reader, writer = self._reader, self._writer
            self._reader = self._writer = None
            with _db_errors(f"close {self.path}"):
                await close_all(reader, writer)

    async def connection_settings(self) -> dict[str, Any]:
        """The pragmas in force on the writer connection (for diagnostics and tests)."""
        db = self._require(self._writer)
        names = ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
        with _db_errors("read pragmas"):
            return {name: (await _rows(db, f"PRAGMA {name}"))[0][0] for name in names}

    def _require(self, db: aiosqlite.Connection | None) -> aiosqlite.Connection:
        if db is None:
            raise StoreError(f"SQLiteStore({self.path}) is not open; call open() first")
        return db

    @contextlib.asynccontextmanager
    async def _write(
        self, action: str, *, run_id: str | None = None, fence: int | None = None
    ) -> AsyncIterator[aiosqlite.Connection]:
        """One write transaction: BEGIN IMMEDIATE … COMMIT, rolled back on any error.

        With ``run_id`` and ``fence`` the run's fence is checked first, inside the transaction,
        so no other writer can move it between the check and the write.

        A cancelled write leaves the connection clean, wherever the cancel lands (even in
        BEGIN): a statement already handed to aiosqlite's thread still runs, but calls run in
        the order they were queued, so the ROLLBACK queued here runs after it. A cancel during
        COMMIT may still commit; the ROLLBACK is then a no-op.
        """
        async with self._write_lock:
            db = self._require(self._writer)
            with _db_errors(action):
                try:
                    await _exec(db, "BEGIN IMMEDIATE")
                    if run_id is not None and fence is not None:
                        await _check_fence(db, run_id, fence)
                    yield db
                    await _exec(db, "COMMIT")
                except BaseException:
                    await db.rollback()  # only rolls back if a transaction is open
                    raise

    async def _select(
        self, action: str, decode: Callable[[Row], T], sql: str, params: Sequence[Any] = ()
    ) -> list[T]:
        """One read statement on the reader connection, decoded row by row."""
        db = self._require(self._reader)
        with _db_errors(action):
            rows = await _rows(db, sql, params)
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
    ) -> list[T]:
        """``sql`` with ``{marks}`` filled for the (deduplicated) keys, in chunks."""
        unique = list(dict.fromkeys(keys))
        out: list[T] = []
        for start in range(0, len(unique), _CHUNK):
            chunk = unique[start : start + _CHUNK]
            query = sql.format(marks=_marks(len(chunk)))
            out += await self._select(action, decode, query, (*params, *chunk))
        return out

    # threads and transcript -------------------------------------------------------------
    async def create_thread(self, thread_id: str, scope: Scope) -> ThreadRecord:
        """Create a thread owned by ``scope``; an existing thread is returned as it is."""
        async with self._write("create a thread") as db:
            row = await _one(db, "SELECT * FROM threads WHERE thread_id = ?", (thread_id,))
            if row is not None:
                return row_thread(row)
            rec = ThreadRecord(thread_id=thread_id, scope=scope, created_at=time.time())
            await _insert(db, "threads", thread_columns(rec))
        return rec

    async def get_thread(self, thread_id: str) -> ThreadRecord:
        """The thread, or :class:`NotFoundError`."""
        sql = "SELECT * FROM threads WHERE thread_id = ?"
        return await self._select_one(f"thread {thread_id}", row_thread, sql, (thread_id,))

    async def append_items(
        self, thread_id: str, run_id: str | None, items: Sequence[NewItem], *, fence: int | None
    ) -> list[TranscriptItem]:
        """Append rows; ``seq`` is assigned inside the transaction, so it is gap-free."""
        async with self._write("append transcript items", run_id=run_id, fence=fence) as db:
            if await _one(db, "SELECT 1 FROM threads WHERE thread_id = ?", (thread_id,)) is None:
                raise NotFoundError(f"thread {thread_id} not found")
            sql = "SELECT COALESCE(MAX(seq), 0) FROM items WHERE thread_id = ?"
            top = int((await _rows(db, sql, (thread_id,)))[0][0])
            now = time.time()
            out: list[TranscriptItem] = []
            for seq, item in enumerate(items, start=top + 1):
                rec = TranscriptItem(
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
                await _insert(db, "items", item_columns(rec, created_at=now))
                out.append(rec)
        return out

    async def get_items(self, refs: Sequence[str]) -> list[TranscriptItem]:
        """Rows by ref, in the order asked; :class:`NotFoundError` names the first missing."""
        sql = "SELECT * FROM items WHERE ref IN ({marks})"
        rows = await self._select_in("read transcript items", row_item, sql, (), refs)
        found = {row.ref: row for row in rows}
        for ref in refs:
            if ref not in found:
                raise NotFoundError(f"transcript item {ref} not found")
        return [found[ref] for ref in refs]

    async def thread_items(
        self, thread_id: str, *, upto_seq: int | None = None, last: int | None = None
    ) -> list[TranscriptItem]:
        """Non-superseded rows of a thread in ``seq`` order, optionally up to a seq / last N."""
        await self.get_thread(thread_id)
        if last is not None and last <= 0:
            return []
        sql = "SELECT * FROM items WHERE thread_id = ? AND superseded = 0"
        params: list[Any] = [thread_id]
        if upto_seq is not None:
            sql += " AND seq <= ?"
            params.append(upto_seq)
        if last is None:
            return await self._select("read a thread", row_item, sql + " ORDER BY seq", params)
        sql += " ORDER BY seq DESC LIMIT ?"
        rows = await self._select("read a thread", row_item, sql, [*params, last])
        return rows[::-1]

    async def supersede_items_after(self, thread_id: str, run_id: str, seq: int) -> int:
        """Mark rows of ``run_id`` with ``seq`` greater than the given one superseded."""
        async with self._write("supersede transcript items") as db:
            return await _exec(
                db,
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
                row = await _one(db, sql, (run.idempotency_key,))
                if row is not None:
                    return row_run(row)
            if await _one(db, "SELECT 1 FROM runs WHERE run_id = ?", (run.run_id,)) is not None:
                raise ConflictError(f"run {run.run_id} already exists")
            now = time.time()
            rec = dataclasses.replace(run, created_at=now, updated_at=now)
            await _insert(db, "runs", run_columns(rec))
        return rec

    async def get_run(self, run_id: str) -> RunRecord:
        """The run, or :class:`NotFoundError`."""
        sql = "SELECT * FROM runs WHERE run_id = ?"
        return await self._select_one(f"run {run_id}", row_run, sql, (run_id,))

    async def list_runs(
        self, *, scope: Scope | None = None, statuses: Sequence[str] | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Runs of a scope (tenant and user) and/or in some statuses, newest first."""
        if statuses is not None and not statuses:
            return []
        where, params = _where(scope, statuses)
        sql = f"SELECT * FROM runs{where} ORDER BY created_at DESC, run_id DESC LIMIT ?"
        return await self._select("list runs", row_run, sql, [*params, limit])

    async def set_run_status(
        self,
        run_id: str,
        status: RunStatus,
        *,
        fence: int | None,
        exit: Mapping[str, Any] | None = None,
    ) -> RunRecord:
        """Set the status (and exit payload); checked against the fence when given."""
        async with self._write("set a run's status", run_id=run_id, fence=fence) as db:
            run = await _get_run(db, run_id)
            new_exit = dict(exit) if exit is not None else run.exit
            rec = dataclasses.replace(run, status=status, exit=new_exit, updated_at=time.time())
            await _exec(
                db,
                "UPDATE runs SET status = ?, exit = ?, updated_at = ? WHERE run_id = ?",
                (rec.status, exit_column(rec.exit), rec.updated_at, run_id),
            )
        return rec

    async def request_cancel(self, run_id: str) -> RunRecord:
        """Record a durable cancel request (not fenced: anyone may ask)."""
        async with self._write("request a cancel") as db:
            sql = "UPDATE runs SET cancel_requested = 1, updated_at = ? WHERE run_id = ?"
            await _exec(db, sql, (time.time(), run_id))
            return await _get_run(db, run_id)

    async def acquire_lease(
        self, run_id: str, owner: str, *, ttl_s: float, now: float, force: bool = False
    ) -> int:
        """Take the run's lease and return a new fencing token.

        The read of the current lease and the write of the new one are one ``BEGIN
        IMMEDIATE`` transaction, so of two processes racing for a run exactly one wins.

        Raises:
            RunBusy: Another owner holds an unexpired lease and ``force`` is false.
        """
        async with self._write("acquire a lease") as db:
            run = await _get_run(db, run_id)
            held = (
                run.lease_owner is not None
                and run.lease_owner != owner
                and run.lease_expires_at is not None
                and run.lease_expires_at > now
            )
            if held and not force:
                raise RunBusy(f"run {run_id} is leased by a live worker")
            await _exec(
                db,
                "UPDATE runs SET lease_owner = ?, lease_expires_at = ?, fence = ? WHERE run_id = ?",
                (owner, now + ttl_s, run.fence + 1, run_id),
            )
        return run.fence + 1

    async def renew_lease(self, run_id: str, fence: int, *, ttl_s: float, now: float) -> None:
        """Extend the lease; :class:`LeaseLost` if ``fence`` is stale."""
        async with self._write("renew a lease", run_id=run_id, fence=fence) as db:
            sql = "UPDATE runs SET lease_expires_at = ? WHERE run_id = ?"
            await _exec(db, sql, (now + ttl_s, run_id))

    async def release_lease(self, run_id: str, fence: int) -> None:
        """Drop the lease if ``fence`` is still current (no error otherwise)."""
        async with self._write("release a lease") as db:
            await _exec(
                db,
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
        return await self._select("list expired leases", row_run, sql, (now,))

    # checkpoints --------------------------------------------------------------------------
    async def save_checkpoint(
        self, run_id: str, kind: CheckpointKind, payload: bytes, *, fence: int
    ) -> None:
        """Replace the run's latest checkpoint (the payload is stored as opaque bytes)."""
        async with self._write("save a checkpoint", run_id=run_id, fence=fence) as db:
            await _exec(
                db,
                "INSERT INTO checkpoints (run_id, kind, payload, created_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (run_id) DO UPDATE SET kind = excluded.kind,"
                " payload = excluded.payload, created_at = excluded.created_at",
                (run_id, kind, bytes(payload), time.time()),
            )

    async def load_checkpoint(self, run_id: str) -> CheckpointRecord | None:
        """The latest checkpoint, or ``None``."""
        sql = "SELECT * FROM checkpoints WHERE run_id = ?"
        rows = await self._select("load a checkpoint", row_checkpoint, sql, (run_id,))
        return rows[0] if rows else None

    # side-effect journal ------------------------------------------------------------------
    async def journal_started(self, run_id: str, call_id: str, tool: str, *, fence: int) -> None:
        """Record that a call started (idempotent: never downgrades a finished row)."""
        async with self._write("journal a started call", run_id=run_id, fence=fence) as db:
            await _exec(
                db,
                "INSERT INTO journal (run_id, call_id, tool, state, outcome, updated_at)"
                " VALUES (?, ?, ?, 'started', NULL, ?) ON CONFLICT (run_id, call_id) DO NOTHING",
                (run_id, call_id, tool, time.time()),
            )

    async def journal_finished(
        self, run_id: str, call_id: str, outcome: Mapping[str, Any], *, fence: int
    ) -> None:
        """Record a call's outcome (keeping the tool name from its ``started`` row)."""
        async with self._write("journal a finished call", run_id=run_id, fence=fence) as db:
            await _exec(
                db,
                "INSERT INTO journal (run_id, call_id, tool, state, outcome, updated_at)"
                " VALUES (?, ?, '', 'finished', ?, ?) ON CONFLICT (run_id, call_id) DO UPDATE"
                " SET state = 'finished', outcome = excluded.outcome,"
                " updated_at = excluded.updated_at",
                (run_id, call_id, dumps(dict(outcome)), time.time()),
            )

    async def journal_get(self, run_id: str, call_ids: Sequence[str]) -> dict[str, JournalEntry]:
        """Journal rows for the given calls (calls with no row are left out)."""
        sql = "SELECT * FROM journal WHERE run_id = ? AND call_id IN ({marks})"
        rows = await self._select_in("read the journal", row_journal, sql, (run_id,), call_ids)
        found = {row.call_id: row for row in rows}
        return {c: found[c] for c in call_ids if c in found}

    # inputs -------------------------------------------------------------------------------
    async def enqueue_input(
        self, run_id: str, kind: InputKind, payload: Mapping[str, Any], *, input_id: str
    ) -> InputRecord:
        """Append an input; the same ``input_id`` returns the existing row (dedupe)."""
        async with self._write("enqueue an input") as db:
            run = await _one(db, "SELECT inputs_sealed FROM runs WHERE run_id = ?", (run_id,))
            if run is None:
                raise NotFoundError(f"run {run_id} not found")
            sql = "SELECT * FROM inputs WHERE run_id = ? AND input_id = ?"
            row = await _one(db, sql, (run_id, input_id))
            if row is not None:
                return row_input(row)
            if run["inputs_sealed"]:
                raise RunEndedError(f"run {run_id} has ended and accepts no more inputs")
            sql = "SELECT COALESCE(MAX(cursor), 0) FROM inputs WHERE run_id = ?"
            top = int((await _rows(db, sql, (run_id,)))[0][0])
            rec = InputRecord(
                run_id=run_id, cursor=top + 1, input_id=input_id, kind=kind, payload=dict(payload)
            )
            await _insert(db, "inputs", input_columns(rec, created_at=time.time()))
        return rec

    async def poll_inputs(self, run_id: str, *, after_cursor: int) -> list[InputRecord]:
        """Inputs with cursor greater than ``after_cursor``, in order."""
        sql = "SELECT * FROM inputs WHERE run_id = ? AND cursor > ? ORDER BY cursor"
        return await self._select("poll inputs", row_input, sql, (run_id, after_cursor))

    async def seal_inputs(self, run_id: str, *, after_cursor: int) -> list[InputRecord]:
        """Close the queue unless inputs past the cursor are waiting (then return them).

        One transaction with the same lock as :meth:`enqueue_input`, so an input is either
        returned here or refused with :class:`RunEndedError`, never lost in between.
        """
        async with self._write("seal inputs") as db:
            await _get_run(db, run_id)
            sql = "SELECT * FROM inputs WHERE run_id = ? AND cursor > ? ORDER BY cursor"
            waiting = [row_input(row) for row in await _rows(db, sql, (run_id, after_cursor))]
            if not waiting:
                await _exec(db, "UPDATE runs SET inputs_sealed = 1 WHERE run_id = ?", (run_id,))
        return waiting

    async def unseal_inputs(self, run_id: str) -> None:
        """Accept inputs again."""
        async with self._write("unseal inputs") as db:
            await _exec(db, "UPDATE runs SET inputs_sealed = 0 WHERE run_id = ?", (run_id,))

    async def ack_inputs(self, run_id: str, upto_cursor: int, *, fence: int) -> None:
        """Mark inputs up to the cursor delivered."""
        async with self._write("ack inputs", run_id=run_id, fence=fence) as db:
            sql = "UPDATE inputs SET acked = 1 WHERE run_id = ? AND cursor <= ? AND acked = 0"
            await _exec(db, sql, (run_id, upto_cursor))

    # gates --------------------------------------------------------------------------------
    async def create_gate(self, gate: GateRecord, *, fence: int) -> GateRecord:
        """Insert a pending gate (same run + call returns the existing one)."""
        async with self._write("create a gate", run_id=gate.run_id, fence=fence) as db:
            sql = "SELECT * FROM gates WHERE run_id = ? AND call_id = ?"
            row = await _one(db, sql, (gate.run_id, gate.call_id))
            if row is not None:
                return row_gate(row)
            await _insert(db, "gates", gate_columns(gate))
        return gate

    async def get_gate(self, ref: str) -> GateRecord:
        """The gate, or :class:`NotFoundError`."""
        return await self._select_one(
            f"gate {ref}", row_gate, "SELECT * FROM gates WHERE ref = ?", (ref,)
        )

    async def gate_for_call(self, run_id: str, call_id: str) -> GateRecord | None:
        """The gate opened for a call, if any."""
        sql = "SELECT * FROM gates WHERE run_id = ? AND call_id = ?"
        rows = await self._select("read a gate", row_gate, sql, (run_id, call_id))
        return rows[0] if rows else None

    async def resolve_gate(
        self, ref: str, status: Literal["approved", "denied"], *, reason: str | None, now: float
    ) -> GateRecord:
        """Resolve a pending gate once; :class:`GateResolvedError` on a second resolution."""
        async with self._write("resolve a gate") as db:
            row = await _one(db, "SELECT * FROM gates WHERE ref = ?", (ref,))
            if row is None:
                raise NotFoundError(f"gate {ref} not found")
            gate = row_gate(row)
            if gate.status != "pending":
                raise GateResolvedError(f"gate {ref} is already {gate.status}")
            sql = "UPDATE gates SET status = ?, reason = ?, resolved_at = ? WHERE ref = ?"
            await _exec(db, sql, (status, reason, now, ref))
        return dataclasses.replace(gate, status=status, reason=reason, resolved_at=now)

    async def list_gates(
        self, *, scope: Scope | None = None, status: GateStatus | None = "pending"
    ) -> list[GateRecord]:
        """Gates of a scope (tenant and user) and/or in a status, newest first."""
        where, params = _where(scope, None if status is None else [status])
        sql = f"SELECT * FROM gates{where} ORDER BY created_at DESC, ref DESC"
        return await self._select("list gates", row_gate, sql, params)
