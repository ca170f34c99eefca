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
  (:func:`reverie.store.sql_ops.fenced`). That lock conflicts with a takeover's
  ``UPDATE``: a write with an old fence either commits before the new lease is handed out or
  sees the new fence and raises :class:`LeaseLost`; it can never land after it.
- **Transcript seq** is drawn after locking the thread row (``FOR NO KEY UPDATE``), so
  appends to one thread are serialised and ``seq`` is unique and gap-free; the input
  **cursor** and the input queue's **seal** are drawn and tested under the run row's lock.
- **Gates** resolve with ``UPDATE … WHERE status = 'pending'``: one resolution wins.

The SQL of every method is shared with SQLite (:mod:`reverie.store.sql_ops`, run through
:class:`~reverie.store.sql_store.SQLStore` in pipeline mode: a batch of statements is one
round trip, and a step commit is one statement, a call of the schema's
``reverie_commit_step``); here are only the transcript reads, which go
through the item cache (:mod:`reverie.store.item_cache`), and the ``LISTEN`` of event
followers.

Every ``psycopg`` error is re-raised as :class:`StoreError` (or :class:`ConflictError` for an
integrity violation) with the original in ``__cause__``; messages name the database as
``postgresql://host:port/dbname`` and never carry the user or password of the URL.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

from psycopg import AsyncConnection, sql

from reverie.errors import NotFoundError
from reverie.store import postgres_connections as db, sql_ops as ops
from reverie.store.base import NewItem, StepReceipt, StepWrite, TranscriptItem
from reverie.store.item_cache import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_THREADS,
    EMPTY,
    ItemCache,
    ThreadRows,
)
from reverie.store.postgres_connections import PostgresConnections
from reverie.store.postgres_documents import PostgresDocuments
from reverie.store.rows import row_item
from reverie.store.sql_schedules import SQLSchedules
from reverie.store.sql_store import SQLStore

__all__ = ["PostgresStore", "temporary_schema"]


class PostgresStore(PostgresConnections, PostgresDocuments, SQLSchedules, SQLStore):
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
        item_cache_threads: Threads whose decoded rows the item cache keeps at most
            (:mod:`reverie.store.item_cache`; 0 turns it off).
        item_cache_bytes: Estimated bytes of rows the item cache keeps at most.

    Raises:
        ConfigError: The URL cannot be parsed, or ``max_connections`` is below 1.
    """

    def __init__(
        self,
        url: str,
        *,
        max_connections: int = 8,
        connect_timeout_s: float = 10.0,
        item_cache_threads: int = DEFAULT_MAX_THREADS,
        item_cache_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        super().__init__(url, max_connections=max_connections, connect_timeout_s=connect_timeout_s)
        self.item_cache = ItemCache(max_threads=item_cache_threads, max_bytes=item_cache_bytes)
        """Decoded transcript rows of recently read threads (:mod:`reverie.store.item_cache`)."""

    # Every Store method is SQLStore's (the shared SQL of reverie.store.sql_ops) but the
    # transcript reads, which go through the item cache (and the writes that fill it), and the
    # LISTEN of run-event followers.

    # threads and transcript -------------------------------------------------------------
    async def append_items(
        self, thread_id: str, run_id: str | None, items: Sequence[NewItem], *, fence: int | None
    ) -> list[TranscriptItem]:
        """Append rows; ``seq`` is drawn inside the transaction, so it is gap-free."""
        out = await super().append_items(thread_id, run_id, items, fence=fence)
        self.item_cache.appended(thread_id, out)
        return out

    async def commit_step(self, run_id: str, step: StepWrite, *, fence: int) -> StepReceipt:
        """Write a loop boundary in one transaction (see :meth:`Store.commit_step`).

        The written items join the item cache.
        """
        receipt = await super().commit_step(run_id, step, fence=fence)
        if step.items:
            self.item_cache.appended(step.thread_id, ops.step_items(run_id, step))
        return receipt

    async def supersede_items_after(self, thread_id: str, run_id: str, seq: int) -> int:
        """Mark rows of ``run_id`` with ``seq`` greater than the given one superseded."""
        count = await super().supersede_items_after(thread_id, run_id, seq)
        self.item_cache.superseded(thread_id, run_id, seq)
        return count

    async def get_items(self, refs: Sequence[str]) -> list[TranscriptItem]:
        """Rows by ref, in the order asked; :class:`NotFoundError` names the first missing."""
        unique = list(dict.fromkeys(refs))
        sql = "SELECT * FROM items WHERE ref = ANY(%s)"
        rows = await self._select("read transcript items", row_item, sql, (unique,))
        found = {row.ref: row for row in rows}
        for ref in refs:
            if ref not in found:
                raise NotFoundError(f"transcript item {ref} not found")
        return [found[ref] for ref in refs]

    async def thread_items(
        self, thread_id: str, *, upto_seq: int | None = None, last: int | None = None
    ) -> list[TranscriptItem]:
        """Non-superseded rows of a thread in ``seq`` order, optionally up to a seq / last N.

        One statement, one snapshot: it returns the seq of every row of the answer and the full
        columns of only the rows the item cache does not hold (see
        :mod:`reverie.store.item_cache`), so a row appended or superseded by any process is seen.
        """
        if last is not None and last <= 0:
            await self.get_thread(thread_id)
            return []
        entry = self.item_cache.entry(thread_id)
        rows = await self._thread_rows(thread_id, upto_seq, last, entry)
        if rows is None:  # a cached row left the entry meanwhile: read every row in full
            rows = await self._thread_rows(thread_id, upto_seq, last, None)
            assert rows is not None
        if not rows:
            await self.get_thread(thread_id)  # an empty thread, or NotFoundError
        self.item_cache.read(thread_id, rows)
        return rows

    async def _thread_rows(
        self, thread_id: str, upto_seq: int | None, last: int | None, entry: ThreadRows | None
    ) -> list[TranscriptItem] | None:
        """The answer of :meth:`thread_items`, or ``None`` if ``entry`` misses a cached row."""
        where = "thread_id = %s AND NOT superseded"
        params: list[Any] = [thread_id]
        if upto_seq is not None:
            where += " AND seq <= %s"
            params.append(upto_seq)
        if last is None:
            window = f"SELECT seq FROM items WHERE {where}"
        else:  # newest first through the (thread_id, seq) index: a window costs O(window)
            window = f"SELECT seq FROM items WHERE {where} ORDER BY seq DESC LIMIT %s"
            params.append(last)
        low, high = EMPTY if entry is None else entry.span
        sql = (
            f"SELECT w.seq AS window_seq, i.* FROM ({window}) AS w LEFT JOIN items AS i"
            " ON i.thread_id = %s AND i.seq = w.seq AND NOT (w.seq BETWEEN %s AND %s)"
            " ORDER BY w.seq"
        )
        found = await self._select("read a thread", _row, sql, [*params, thread_id, low, high])
        out: list[TranscriptItem] = []
        for row in found:
            if row["ref"] is not None:
                out.append(row_item(row))
                continue
            cached = None if entry is None else entry.rows.get(row["window_seq"])
            if cached is None:
                return None
            out.append(cached)
        return out

    # run events ---------------------------------------------------------------------------
    async def wait_run_events(self, run_id: str, *, timeout_s: float) -> None:
        """Return when events of the run were appended (any process: ``LISTEN``), or after
        ``timeout_s``."""
        self._follow_notifications()
        await self._event_waiters.wait(run_id, timeout_s)


def _row(row: Mapping[str, Any]) -> Mapping[str, Any]:
    return row


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
