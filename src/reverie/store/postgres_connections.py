"""The connections of :class:`reverie.store.postgres.PostgresStore`: a small pool and helpers.

A store owns at most ``max_connections`` ``psycopg`` async connections. An
:class:`asyncio.LifoQueue` holds one *slot* per connection: a slot is an idle connection, or
``None`` for one not opened yet (or dropped); the slot given back last is taken first, so idle
connections are reused before a new one is opened. An operation takes a slot, opens the connection
if it has to, runs, and gives the slot back: so at most ``max_connections`` operations talk to
the server at once and the rest wait their turn, without a thread and without blocking the
event loop. A connection that comes back broken or inside a transaction (its operation was
interrupted half-way) is closed and its slot given back empty.

Connections are in autocommit mode: a read is one statement (its own snapshot, holding no
lock), a step commit is one statement (its own transaction), and a write of more statements
runs inside one transaction (:meth:`PostgresConnections._write_op`: ``BEGIN`` and ``COMMIT`` in
pipeline mode; :meth:`PostgresConnections._transact`: ``conn.transaction()``), rolled back whole
if anything in it raises. :meth:`PostgresConnections.open` opens two connections at once.

Also here, for the store's modules (imported there as ``db``): :func:`describe_url` (the only
way a connection URL appears in a message), :func:`db_errors` (``psycopg`` errors as store
errors, without echoing data or credentials), async statement helpers and the fence lock of
fenced writes (:func:`lock_fence`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager
from typing import Any, ClassVar, Self, TypeVar

import psycopg
from psycopg import AsyncConnection, AsyncPipeline
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row

from reverie.errors import ConfigError, ConflictError, StoreError
from reverie.store.migrations import migrate_op
from reverie.store.postgres_schema import MIGRATIONS, Conn
from reverie.store.run_events import EventWaiters
from reverie.store.sql_core import (
    EVENTS_CHANNEL,
    GUARD_REFUSED,
    POSTGRES,
    Count,
    Dialect,
    Guard,
    Many,
    Op,
    Query,
    Statement,
)

__all__ = ["EVENTS_CHANNEL", "PostgresConnections"]

log = logging.getLogger("reverie.store")

T = TypeVar("T")

Row = Mapping[str, Any]


# URLs and errors ----------------------------------------------------------------------------
_USERINFO = re.compile(r"://[^/@\s]*@")


def describe_url(url: str) -> tuple[str, tuple[str, ...]]:
    """A label for messages (``postgresql://host:port/dbname``) and the secrets to scrub.

    The label never holds the user name or the password; the secrets are the password (if
    the URL has one), which :func:`db_errors` removes from any message that quotes it.

    Raises:
        ConfigError: libpq cannot parse the URL (the message does not quote its user info).
    """
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error as exc:
        detail = _USERINFO.sub("://…@", str(exc))
        raise ConfigError(f"PostgreSQL URL is not valid: {detail}") from None
    host = str(params.get("host") or params.get("hostaddr") or "localhost")
    port = str(params.get("port") or 5432)
    dbname = str(params.get("dbname") or "")
    password = str(params.get("password") or "")
    return f"postgresql://{host}:{port}/{dbname}", tuple(s for s in (password,) if s)


def store_error(action: str, exc: BaseException, secrets: Sequence[str] = ()) -> BaseException:
    """What a store method raises for ``exc``: ``psycopg`` errors wrapped, others as they are.

    An integrity violation (unique key, foreign key) becomes :class:`ConflictError`, any other
    ``psycopg`` error :class:`StoreError`. The message names the action and the server's
    primary message and SQLSTATE (never its DETAIL, which quotes row values); any secret in it
    is masked. The original is kept in ``__cause__``.
    """
    if not isinstance(exc, psycopg.Error):
        return exc
    kind = ConflictError if isinstance(exc, psycopg.IntegrityError) else StoreError
    lines = str(exc).strip().splitlines()
    detail = exc.diag.message_primary or (lines[0] if lines else "")
    for secret in secrets:
        detail = detail.replace(secret, "***")
    code = f" (SQLSTATE {exc.sqlstate})" if exc.sqlstate else ""
    wrapped = kind(f"PostgreSQL store could not {action}: {detail or type(exc).__name__}{code}")
    wrapped.__cause__ = exc
    return wrapped


@contextlib.contextmanager
def db_errors(action: str, secrets: Sequence[str] = ()) -> Iterator[None]:
    """Re-raise ``psycopg`` errors as store errors (see :func:`store_error`)."""
    try:
        yield
    except psycopg.Error as exc:
        raise store_error(action, exc, secrets) from exc


# statement helpers --------------------------------------------------------------------------
async def rows(conn: Conn, sql: str, params: Sequence[Any] = ()) -> list[DictRow]:
    """Every row of one statement."""
    cur = await conn.execute(sql, params)
    return await cur.fetchall()


async def one(conn: Conn, sql: str, params: Sequence[Any] = ()) -> DictRow | None:
    """The first row of one statement, or ``None``."""
    found = await rows(conn, sql, params)
    return found[0] if found else None


async def execute(conn: Conn, sql: str, params: Sequence[Any] = ()) -> int:
    """Run one statement and return the number of rows it changed."""
    cur = await conn.execute(sql, params)
    return cur.rowcount


def insert_sql(table: str, names: Sequence[str]) -> str:
    """``INSERT INTO table (names…) VALUES (%s…)``."""
    # Table and column names come from the codecs, never from callers.
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join(['%s'] * len(names))})"


async def insert(conn: Conn, table: str, columns: Mapping[str, Any], suffix: str = "") -> int:
    """Insert one row (``suffix``: an ``ON CONFLICT`` clause); the number of rows inserted."""
    return await execute(conn, insert_sql(table, list(columns)) + suffix, list(columns.values()))


# ops (reverie.store.sql_core) ----------------------------------------------------------------
async def _send(conn: Conn, statement: Statement) -> Any:
    if isinstance(statement, Many):
        if statement.rows:
            async with conn.cursor() as cur:
                await cur.executemany(statement.sql, statement.rows)
        return None
    return await conn.execute(statement.sql, statement.params)


def refused(exc: BaseException) -> bool:
    """Whether ``exc`` is a :class:`~reverie.store.sql_core.Guard` that did not hold."""
    return isinstance(exc, psycopg.errors.InvalidTextRepresentation) and GUARD_REFUSED in (
        exc.diag.message_primary or ""
    )


async def drive(
    conn: Conn,
    op: Op[T],
    pipeline: AsyncPipeline | None = None,
    *,
    begin: bool = False,
    first: Sequence[Statement] | None = None,
) -> T:
    """Run ``op`` on ``conn`` (inside the caller's transaction, if any) and return its answer.

    In ``pipeline`` mode every statement of a batch is sent before any result is read, so a
    batch costs one round trip, and a batch of writes whose results the op does not need is
    not waited for at all (its errors surface at the next sync: the ``COMMIT`` at the latest).
    ``begin``: open the op's transaction (``BEGIN``, sent with its first batch) first.
    ``first``: the op's next batch, if it was taken already. A
    :class:`~reverie.store.sql_core.Guard` is sent by :meth:`PostgresConnections._write_op`
    only (alone, in a transaction of its own).
    """
    try:
        batch = next(op) if first is None else first
        if begin:
            await conn.execute("BEGIN")
        while True:
            sent = [await _send(conn, statement) for statement in batch]
            if pipeline is not None and any(isinstance(st, Count) for st in batch):
                await pipeline.sync()  # a row count is known once the results are in
            results: list[Any] = []
            for statement, cur in zip(batch, sent, strict=True):
                if isinstance(statement, Guard):
                    raise TypeError("a Guard is sent alone, as an op's first batch of a write")
                if isinstance(statement, Query):
                    results.append(await cur.fetchall())  # in pipeline mode: one flush
                elif isinstance(statement, Count):
                    results.append(cur.rowcount)
                else:
                    results.append(None)
            batch = op.send(results)
    except StopIteration as stop:
        result: T = stop.value
        return result


async def _guard(conn: Conn, batch: Sequence[Statement]) -> list[DictRow] | None:
    """Run an op's guarded first batch: its rows (none: it wrote nothing), or ``None`` if the
    guard refused.

    Its one statement is its own transaction (the connection is in autocommit mode): it
    commits as its answer comes back (one round trip), or, refused, rolls back whole.
    """
    [statement] = batch
    if not isinstance(statement, Guard):
        raise TypeError("a Guard is sent alone, as an op's first batch")
    try:
        cur = await conn.execute(statement.sql, statement.params)
    except psycopg.Error as exc:
        if refused(exc):
            return None
        raise
    return await cur.fetchall()


async def _rollback(conn: Conn, pipeline: AsyncPipeline) -> None:
    """Undo the open transaction of a failed op (a connection left in one is closed anyway)."""
    with contextlib.suppress(psycopg.Error):
        await conn.execute("ROLLBACK")
        await pipeline.sync()


async def migrate(conn: Conn, *, label: str) -> int:
    """Bring the schema up to the newest migration and return the version found before.

    One transaction holding a transaction-level advisory lock keyed on the current schema
    (:func:`reverie.store.migrations.migrate_op`, the runner SQLite uses too): two processes
    opening a fresh database wait for each other instead of both creating the tables, and a
    failed migration leaves the database as it was.

    Raises:
        StoreError: The database was created by a newer reverie.
        psycopg.Error: The database refused a statement; the caller wraps it.
    """
    async with conn.transaction():
        return await drive(conn, migrate_op(POSTGRES, MIGRATIONS, label=label))


# the pool -----------------------------------------------------------------------------------
class PostgresConnections:
    """Opening, closing and using the store's connections (arguments: see ``PostgresStore``)."""

    dialect: ClassVar[Dialect] = POSTGRES
    """How the shared SQL (:mod:`reverie.store.sql_ops`) is spelt here."""

    def __init__(
        self, url: str, *, max_connections: int = 8, connect_timeout_s: float = 10.0
    ) -> None:
        if max_connections < 1:
            raise ConfigError(f"max_connections must be at least 1, not {max_connections}")
        self.label, self._secrets = describe_url(url)  # ConfigError if unparseable
        """The database as messages name it: ``postgresql://host:port/dbname`` (no user)."""
        self.max_connections = max_connections
        """How many connections (and so concurrent operations) the store uses at most."""
        self._url = url
        self._connect_timeout = max(2, round(connect_timeout_s))  # libpq's minimum is 2 s
        self._slots: asyncio.Queue[Conn | None] | None = None
        self._lifecycle = asyncio.Lock()
        self._event_waiters = EventWaiters()  # this process's followers of run events
        self._listener: asyncio.Task[None] | None = None
        """LISTENs for appended run events (started by the first follower)."""

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # lifecycle ----------------------------------------------------------------------------
    async def open(self) -> None:
        """Connect and migrate the schema; further connections open when needed.

        Two connections are opened at once (one if ``max_connections`` is 1): a runtime's loop
        and its event recorder overlap from a run's first step, so the second would otherwise
        be opened inside the first run. Only the first must succeed.

        Raises:
            StoreError: The server cannot be reached or refuses the login, or the schema is
                newer than this build. Nothing is left open.
        """
        async with self._lifecycle:
            if self._slots is not None:
                return
            spare = None
            if self.max_connections > 1:
                spare = asyncio.get_running_loop().create_task(self._spare())
            try:
                with self._errors(f"open {self.label}"):
                    conn = await self._connect()
                    try:
                        await migrate(conn, label=self.label)
                    except BaseException:
                        await conn.close()
                        raise
            except BaseException:
                if spare is not None:
                    spare.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        extra = await spare
                        if extra is not None:
                            await extra.close()
                raise
            extra = None if spare is None else await spare
            # Last in, first out, the open connections on top: an operation takes the one
            # used last, so a store opens a third only when three operations overlap (a FIFO
            # would cycle through every slot, opening all of them, each a new server process
            # with cold caches).
            slots: asyncio.Queue[Conn | None] = asyncio.LifoQueue()
            for _ in range(self.max_connections - (1 if extra is None else 2)):
                slots.put_nowait(None)
            if extra is not None:
                slots.put_nowait(extra)
            slots.put_nowait(conn)
            self._slots = slots

    async def _spare(self) -> Conn | None:
        """A second connection for :meth:`open`, or ``None`` if it could not be made."""
        try:
            return await self._connect()
        except (psycopg.Error, OSError) as exc:
            log.debug("%s: a second connection was not opened: %s", self.label, type(exc).__name__)
            return None

    async def close(self) -> None:
        """Wait for the operations in flight, close every connection. Safe to call twice.

        Operations that were waiting for a connection fail with :class:`StoreError`.
        """
        async with self._lifecycle:
            listener, self._listener = self._listener, None
            if listener is not None:
                listener.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await listener
            slots, self._slots = self._slots, None
            if slots is None:
                return
            for _ in range(self.max_connections):
                conn = await slots.get()  # waits for the operations that hold one
                if conn is not None:
                    await conn.close()
            for _ in range(self.max_connections):
                slots.put_nowait(None)  # wakes waiters; they see the store closed

    def _follow_notifications(self) -> None:
        """Start the LISTEN connection that wakes this process's followers of run events."""
        if self._slots is not None and (self._listener is None or self._listener.done()):
            self._listener = asyncio.get_running_loop().create_task(self._listen())

    async def _listen(self) -> None:
        # Outside the pool: LISTEN holds its connection for as long as the store is open. If
        # it fails, followers still see new events when their wait times out (polling).
        try:
            with self._errors("listen for run events"):
                conn = await self._connect()
                async with conn:
                    await conn.execute(f"LISTEN {EVENTS_CHANNEL}")
                    async for note in conn.notifies():
                        self._event_waiters.wake(note.payload)
        except StoreError as exc:
            log.warning("run events: %s; followers poll instead", exc)

    async def _connect(self) -> Conn:
        params = conninfo_to_dict(self._url)
        timeout = None if "connect_timeout" in params else self._connect_timeout
        return await AsyncConnection.connect(
            self._url, autocommit=True, row_factory=dict_row, connect_timeout=timeout
        )

    def _errors(self, action: str) -> AbstractContextManager[None]:
        """``with self._errors(action):`` re-raises ``psycopg`` errors as store errors."""
        return db_errors(action, self._secrets)

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[Conn]:
        """A connection of the pool for one operation (waits while all are busy)."""
        slots = self._slots
        if slots is None:
            raise StoreError(f"PostgresStore({self.label}) is not open; call open() first")
        conn = await slots.get()
        try:
            if self._slots is not slots:
                raise StoreError(f"PostgresStore({self.label}) was closed")
            if conn is None or conn.closed:
                conn = None
                conn = await self._connect()
            yield conn
        finally:
            if conn is not None and (
                conn.closed
                or conn.info.transaction_status != TransactionStatus.IDLE
                or self._slots is not slots
            ):
                await conn.close()  # interrupted half-way, broken, or the store closed
                conn = None
            slots.put_nowait(conn)

    # ways in ------------------------------------------------------------------------------
    async def _transact(self, action: str, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """Run ``fn`` inside one transaction; whatever it raises rolls back all it wrote."""
        with self._errors(action):
            async with self._connection() as conn, conn.transaction():
                return await fn(conn)

    async def _write_op(self, action: str, make: Callable[[], Op[T]]) -> T:
        """Run an op (:mod:`reverie.store.sql_ops`) in one transaction, in pipeline mode.

        ``BEGIN`` and ``COMMIT`` are sent as statements of the pipeline (psycopg's
        ``transaction()`` would sync at both ends): ``BEGIN`` travels with the op's first
        batch and ``COMMIT`` with its last. An op whose first batch is a
        :class:`~reverie.store.sql_core.Guard` (a step commit, a segment's end: one statement
        that checks and writes) sends it as a transaction of its own, one round trip, and if
        the guard refused (or returned no rows: it wrote nothing), runs the batches it yields
        next in a new transaction.
        """
        with self._errors(action):
            async with self._connection() as conn:
                op = make()
                try:
                    batch = next(op)
                    if any(isinstance(statement, Guard) for statement in batch):
                        rows = await _guard(conn, batch)
                        batch = op.send([rows])
                        if rows:
                            raise TypeError("an op yielded a batch after a guard that held")
                except StopIteration as stop:
                    answer: T = stop.value
                    return answer
                async with conn.pipeline() as pipeline:
                    try:
                        outcome = await drive(conn, op, pipeline, begin=True, first=batch)
                    except BaseException:
                        await _rollback(conn, pipeline)
                        raise
                    await conn.execute("COMMIT")  # sent, and its outcome read, as it ends
                return outcome

    async def _read_op(self, action: str, make: Callable[[], Op[T]]) -> T:
        """Run a read-only op outside a transaction (each statement its own snapshot)."""
        with self._errors(action):
            async with self._connection() as conn:
                return await drive(conn, make())

    async def _select(
        self, action: str, decode: Callable[[Row], T], sql: str, params: Sequence[Any] = ()
    ) -> list[T]:
        """One read statement, decoded row by row."""
        with self._errors(action):
            async with self._connection() as conn:
                got = await rows(conn, sql, params)
        return [decode(row) for row in got]
