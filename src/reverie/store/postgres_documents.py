"""Memory documents for :class:`~reverie.store.postgres.PostgresStore` (its ``DocumentStore`` part).

The tables are those of schema version 2 (:mod:`reverie.store.postgres_schema`). Every
statement filters on all four scope columns (an unset agent/project is stored as ``''``).

- A document write is a compare-and-swap: creating (``expected_version`` 0) is an
  ``INSERT … ON CONFLICT DO NOTHING``, replacing is ``UPDATE … WHERE version = expected``.
  Of writers racing on one version, the first takes the row lock and the others, re-checking
  the condition against its row, change nothing and raise :class:`ConflictError`. The history
  row and the search entry are written in the same transaction.
- Search matches ``memory_entries.body_tsv``, a stored ``to_tsvector('simple', body)`` with a
  GIN index, against an OR of ``plainto_tsquery('simple', term)`` — one per word of
  :func:`~reverie.store.documents.search_terms`, each passed as a parameter — so free text
  never forms a query of its own. Hits are ranked by ``ts_rank``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import date
from typing import Any, Protocol, TypeVar

from reverie.core.scope import Scope
from reverie.errors import ConflictError, StoreError
from reverie.store import postgres_connections as db, postgres_schema as schema
from reverie.store.documents import (
    Document,
    DocumentVersion,
    LogEntry,
    MemoryPassRecord,
    SearchHit,
    search_terms,
)
from reverie.store.postgres_schema import Conn
from reverie.store.sql_core import pg_text

__all__ = ["PostgresDocuments"]

T = TypeVar("T")
Row = Mapping[str, Any]

_SCOPE = "scope_tenant = %s AND scope_user = %s AND scope_agent = %s AND scope_project = %s"


class _Connections(Protocol):
    """What the mixin needs from :class:`~reverie.store.postgres.PostgresStore`."""

    async def _transact(self, action: str, fn: Callable[[Conn], Awaitable[T]]) -> T: ...

    async def _select(
        self, action: str, decode: Callable[[Row], T], sql: str, params: Sequence[Any] = ()
    ) -> list[T]: ...


def _scope_params(scope: Scope) -> list[str]:
    return [scope.tenant, scope.user, scope.agent or "", scope.project or ""]


def _scope_columns(scope: Scope) -> dict[str, str]:
    tenant, user, agent, project = _scope_params(scope)
    return {
        "scope_tenant": tenant,
        "scope_user": user,
        "scope_agent": agent,
        "scope_project": project,
    }


def _entry(scope: Scope, kind: str, ref: str, body: str, now: float) -> dict[str, Any]:
    return {**_scope_columns(scope), "kind": kind, "ref": ref, "body": body, "created_at": now}


def _row_version(row: Row) -> DocumentVersion:
    return DocumentVersion(version=row["version"], text=row["text"], created_at=row["created_at"])


def _row_log(row: Row) -> LogEntry:
    return LogEntry(
        scope=schema.row_scope(row),
        day=date.fromisoformat(row["ref"]),
        text=row["body"],
        created_at=row["created_at"],
    )


def _row_hit(row: Row) -> SearchHit:
    return SearchHit(
        kind="log" if row["kind"] == "log" else "document",
        ref=row["ref"],
        text=row["body"],
        scope=schema.row_scope(row),
        score=float(row["rank"]),
        created_at=row["created_at"],
    )


def _row_pass(row: Row) -> MemoryPassRecord:
    return MemoryPassRecord(
        pass_id=row["pass_id"],
        scope=schema.row_scope(row),
        run_id=row["run_id"],
        report=json.loads(row["report"]),
        created_at=row["created_at"],
    )


async def _conflict(conn: Conn, params: Sequence[str], path: str, expected: int) -> ConflictError:
    """The error for a lost compare-and-swap, naming the version the document is at now."""
    sql = f"SELECT version FROM memory_documents WHERE {_SCOPE} AND path = %s"
    row = await db.one(conn, sql, [*params, path])
    current = int(row["version"]) if row is not None else 0
    return ConflictError(
        f"memory document {path!r} is at version {current}, not {expected}",
        current_version=current,
    )


class PostgresDocuments:
    """The ``DocumentStore`` methods of :class:`~reverie.store.postgres.PostgresStore`."""

    async def read_document(self: _Connections, scope: Scope, path: str) -> Document | None:
        """The current text and version of a document, or ``None``."""
        rows = await self._select(
            "read a memory document",
            lambda row: Document(text=row["text"], version=row["version"]),
            f"SELECT text, version FROM memory_documents WHERE {_SCOPE} AND path = %s",
            [*_scope_params(scope), path],
        )
        return rows[0] if rows else None

    async def write_document(
        self: _Connections, scope: Scope, path: str, text: str, expected_version: int
    ) -> Document:
        """Compare-and-swap a document (0: create); :class:`ConflictError` when stale."""
        params = _scope_params(scope)
        text = pg_text(text)

        async def write(conn: Conn) -> Document:
            now = time.time()
            if expected_version == 0:
                columns = {
                    **_scope_columns(scope),
                    "path": path,
                    "text": text,
                    "version": 1,
                    "updated_at": now,
                }
                suffix = " ON CONFLICT DO NOTHING"
                if not await db.insert(conn, "memory_documents", columns, suffix):
                    raise await _conflict(conn, params, path, expected_version)
                await db.insert(conn, "memory_entries", _entry(scope, "document", path, text, now))
                version = 1
            else:
                row = await db.one(
                    conn,
                    "UPDATE memory_documents SET text = %s, version = version + 1,"
                    f" updated_at = %s WHERE {_SCOPE} AND path = %s AND version = %s"
                    " RETURNING version",
                    [text, now, *params, path, expected_version],
                )
                if row is None:
                    raise await _conflict(conn, params, path, expected_version)
                version = int(row["version"])
                await db.execute(
                    conn,
                    "UPDATE memory_entries SET body = %s, created_at = %s"
                    f" WHERE {_SCOPE} AND kind = 'document' AND ref = %s",
                    [text, now, *params, path],
                )
            await db.insert(
                conn,
                "memory_document_versions",
                {
                    **_scope_columns(scope),
                    "path": path,
                    "version": version,
                    "text": text,
                    "created_at": now,
                },
            )
            return Document(text=text, version=version)

        return await self._transact("write a memory document", write)

    async def list_documents(self: _Connections, scope: Scope) -> list[str]:
        """The paths of the scope's documents, sorted (byte order, as in SQLite)."""
        return await self._select(
            "list memory documents",
            lambda row: str(row["path"]),
            f'SELECT path FROM memory_documents WHERE {_SCOPE} ORDER BY path COLLATE "C"',
            _scope_params(scope),
        )

    async def history(
        self: _Connections, scope: Scope, path: str, *, limit: int = 50
    ) -> list[DocumentVersion]:
        """Versions of a document, newest first."""
        if limit <= 0:
            return []
        return await self._select(
            "read a memory document's history",
            _row_version,
            "SELECT version, text, created_at FROM memory_document_versions"
            f" WHERE {_SCOPE} AND path = %s ORDER BY version DESC LIMIT %s",
            [*_scope_params(scope), path, limit],
        )

    async def append_log(self: _Connections, scope: Scope, day: date, text: str) -> LogEntry:
        """Append an entry to the scope's log for ``day``."""
        now = time.time()
        text = pg_text(text)
        entry = _entry(scope, "log", day.isoformat(), text, now)

        async def write(conn: Conn) -> None:
            await db.insert(conn, "memory_entries", entry)

        await self._transact("append to the memory log", write)
        return LogEntry(scope=scope, day=day, text=text, created_at=now)

    async def read_log(self: _Connections, scope: Scope, day: date) -> list[LogEntry]:
        """The scope's log entries of ``day``, oldest first."""
        return await self._select(
            "read the memory log",
            _row_log,
            f"SELECT * FROM memory_entries WHERE {_SCOPE} AND kind = 'log' AND ref = %s"
            " ORDER BY id",
            [*_scope_params(scope), day.isoformat()],
        )

    async def search(
        self: _Connections, scope: Scope, query: str, *, limit: int = 5
    ) -> list[SearchHit]:
        """Full-text search over the scope's log and documents, best (``ts_rank``) first."""
        terms = search_terms(query)
        if not terms or limit <= 0:
            return []
        tsquery = " || ".join(["plainto_tsquery('simple', %s)"] * len(terms))
        return await self._select(
            "search memory",
            _row_hit,
            "SELECT e.scope_tenant, e.scope_user, e.scope_agent, e.scope_project, e.kind,"
            " e.ref, e.body, e.created_at, ts_rank(e.body_tsv, q.query) AS rank"
            f" FROM memory_entries AS e, (SELECT {tsquery} AS query) AS q"
            f" WHERE {_SCOPE.replace('scope_', 'e.scope_')} AND e.body_tsv @@ q.query"
            " ORDER BY rank DESC, e.id DESC LIMIT %s",
            [*terms, *_scope_params(scope), limit],
        )

    async def save_memory_pass(
        self: _Connections, record: MemoryPassRecord, *, replace: bool = False
    ) -> MemoryPassRecord:
        """Keep a curation pass (idempotent on ``pass_id``; ``replace`` updates it)."""
        now = time.time()
        columns = {
            "pass_id": record.pass_id,
            **_scope_columns(record.scope),
            "run_id": record.run_id,
            "report": schema.dumps(dict(record.report)),
            "created_at": now,
        }

        async def write(conn: Conn) -> MemoryPassRecord:
            if await db.insert(conn, "memory_passes", columns, " ON CONFLICT DO NOTHING"):
                return MemoryPassRecord(
                    pass_id=record.pass_id,
                    scope=record.scope,
                    run_id=record.run_id,
                    report=dict(record.report),
                    created_at=now,
                )
            if replace:
                await conn.execute(
                    "UPDATE memory_passes SET run_id = %s, report = %s WHERE pass_id = %s",
                    [columns["run_id"], columns["report"], record.pass_id],
                )
            sql = "SELECT * FROM memory_passes WHERE pass_id = %s"
            row = await db.one(conn, sql, [record.pass_id])
            if row is None:  # it conflicted on pass_id, and passes are never deleted
                raise StoreError(f"memory curation pass {record.pass_id} vanished")
            return _row_pass(row)

        return await self._transact("save a memory curation pass", write)

    async def list_memory_passes(
        self: _Connections, scope: Scope, *, limit: int = 100
    ) -> list[MemoryPassRecord]:
        """The scope's curation passes, newest first."""
        if limit <= 0:
            return []
        return await self._select(
            "list memory curation passes",
            _row_pass,
            f"SELECT * FROM memory_passes WHERE {_SCOPE}"
            " ORDER BY created_at DESC, pass_id DESC LIMIT %s",
            [*_scope_params(scope), limit],
        )

    async def count_turn(self: _Connections, owner: Scope, interval: int) -> bool:
        """One atomic increment of the owner's turn count; whether a pass is due."""
        now = time.time()

        async def write(conn: Conn) -> bool:
            row = await db.one(
                conn,
                "INSERT INTO memory_turn_counts (scope_tenant, scope_user, turns, updated_at)"
                " VALUES (%s, %s, 1, %s) ON CONFLICT (scope_tenant, scope_user) DO UPDATE SET"
                " turns = CASE WHEN memory_turn_counts.turns + 1 >= %s THEN 0"
                " ELSE memory_turn_counts.turns + 1 END,"
                " updated_at = EXCLUDED.updated_at RETURNING turns",
                [owner.tenant, owner.user, now, interval],
            )
            assert row is not None
            return int(row["turns"]) == 0

        return await self._transact("count a completed turn", write)

    async def changed_scopes(
        self: _Connections, owner: Scope, path: str, *, limit: int = 100
    ) -> list[Scope]:
        """The owner's scopes whose ``path`` changed since their latest curation pass."""
        if limit <= 0:
            return []
        return await self._select(
            "list the scopes whose memory changed",
            schema.row_scope,
            "SELECT d.scope_tenant, d.scope_user, d.scope_agent, d.scope_project"
            " FROM memory_documents d WHERE d.scope_tenant = %s AND d.scope_user = %s"
            " AND d.path = %s AND d.updated_at > COALESCE((SELECT MAX(p.created_at)"
            " FROM memory_passes p WHERE p.scope_tenant = d.scope_tenant"
            " AND p.scope_user = d.scope_user AND p.scope_agent = d.scope_agent"
            " AND p.scope_project = d.scope_project), -1)"
            " ORDER BY d.scope_agent, d.scope_project LIMIT %s",
            [owner.tenant, owner.user, path, limit],
        )
