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
round trip); here are only the transcript reads and the ``LISTEN`` of event followers.

Every ``psycopg`` error is re-raised as :class:`StoreError` (or :class:`ConflictError` for an
integrity violation) with the original in ``__cause__``; messages name the database as
``postgresql://host:port/dbname`` and never carry the user or password of the URL.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

from psycopg import AsyncConnection, sql

from reverie.errors import NotFoundError
from reverie.store import postgres_connections as db
from reverie.store.base import TranscriptItem
from reverie.store.postgres_connections import PostgresConnections
from reverie.store.postgres_documents import PostgresDocuments
from reverie.store.rows import row_item
from reverie.store.sql_store import SQLStore

__all__ = ["PostgresStore", "temporary_schema"]


class PostgresStore(PostgresConnections, PostgresDocuments, SQLStore):
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

    # Every Store method is SQLStore's (the shared SQL of reverie.store.sql_ops) but the
    # transcript reads and the LISTEN of run-event followers.

    # threads and transcript -------------------------------------------------------------
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
        rows = await self._select("read a thread", row_item, sql, params)
        if not rows:
            await self.get_thread(thread_id)  # an empty thread, or NotFoundError
        return rows

    # run events ---------------------------------------------------------------------------
    async def wait_run_events(self, run_id: str, *, timeout_s: float) -> None:
        """Return when events of the run were appended (any process: ``LISTEN``), or after
        ``timeout_s``."""
        self._follow_notifications()
        await self._event_waiters.wait(run_id, timeout_s)


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
