"""The memory documents (``DocumentStore``) of both SQL stores, written once but for search.

The tables are those of schema version 2 (:mod:`reverie.store.migrations`,
:mod:`reverie.store.postgres_schema`). Every statement filters on all four scope columns (an
unset agent/project is stored as ``''``, so the scope can be part of a primary key).

A document write is a compare-and-swap: creating (``expected_version`` 0) is an
``INSERT … ON CONFLICT DO NOTHING``, replacing is ``UPDATE … WHERE version = expected``. On
SQLite the writer's lock already orders writers; on PostgreSQL, of writers racing on one
version, the first takes the row lock and the others, re-checking the condition against its
row, change nothing and raise :class:`ConflictError`. The history row and the search entry are
written in the same transaction.

Search is each backend's own (SQLite's FTS5 table, PostgreSQL's ``tsvector``), and so are the
extra columns a search entry carries (:meth:`SQLDocuments._entry_columns`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import date
from typing import Any, TypeVar

from reverie.core.scope import Scope
from reverie.errors import ConflictError, StoreError
from reverie.store import rows as codec
from reverie.store.documents import Document, DocumentVersion, LogEntry, MemoryPassRecord
from reverie.store.sql_core import Dialect, Op, OpRunner

__all__ = ["SCOPE", "SQLDocuments", "row_pass", "scope_columns", "scope_params"]

T = TypeVar("T")

SCOPE = "scope_tenant = ? AND scope_user = ? AND scope_agent = ? AND scope_project = ?"
"""The four scope columns of a memory row (parameters: :func:`scope_params`)."""


def scope_params(scope: Scope) -> list[str]:
    """The values of :data:`SCOPE`."""
    return [scope.tenant, scope.user, scope.agent or "", scope.project or ""]


def scope_columns(scope: Scope) -> dict[str, str]:
    """The scope columns of a memory row."""
    tenant, user, agent, project = scope_params(scope)
    return {
        "scope_tenant": tenant,
        "scope_user": user,
        "scope_agent": agent,
        "scope_project": project,
    }


def _row_version(row: codec.Row) -> DocumentVersion:
    return DocumentVersion(version=row["version"], text=row["text"], created_at=row["created_at"])


def _row_log(row: codec.Row) -> LogEntry:
    return LogEntry(
        scope=codec.row_scope(row),
        day=date.fromisoformat(row["ref"]),
        text=row["body"],
        created_at=row["created_at"],
    )


def row_pass(row: codec.Row) -> MemoryPassRecord:
    """A ``memory_passes`` row as a record."""
    return MemoryPassRecord(
        pass_id=row["pass_id"],
        scope=codec.row_scope(row),
        run_id=row["run_id"],
        report=json.loads(row["report"]),
        created_at=row["created_at"],
    )


# ops ----------------------------------------------------------------------------------------
_VERSION = f"SELECT version FROM memory_documents WHERE {SCOPE} AND path = ?"


def _conflict(d: Dialect, scope: Scope, path: str, expected: int) -> Op[ConflictError]:
    """The error of a lost compare-and-swap, naming the version the document is at now."""
    [row] = yield [d.query(_VERSION, *scope_params(scope), path)]
    current = int(row[0]["version"]) if row else 0
    return ConflictError(
        f"memory document {path!r} is at version {current}, not {expected}",
        current_version=current,
    )


def write_document(
    d: Dialect,
    scope: Scope,
    path: str,
    text: str,
    expected_version: int,
    *,
    entry: dict[str, Any],
    now: float,
) -> Op[Document]:
    """Compare-and-swap a document, its history row and its search entry."""
    params = scope_params(scope)
    if expected_version == 0:
        columns = {
            **scope_columns(scope),
            "path": path,
            "text": text,
            "version": 1,
            "updated_at": now,
        }
        [inserted] = yield [d.insert("memory_documents", columns, " ON CONFLICT DO NOTHING")]
        if not inserted:
            raise (yield from _conflict(d, scope, path, expected_version))
        yield [d.insert("memory_entries", entry)]
        version = 1
    else:
        [row] = yield [
            d.query(
                "UPDATE memory_documents SET text = ?, version = version + 1, updated_at = ?"
                f" WHERE {SCOPE} AND path = ? AND version = ? RETURNING version",
                text,
                now,
                *params,
                path,
                expected_version,
            )
        ]
        if not row:
            raise (yield from _conflict(d, scope, path, expected_version))
        version = int(row[0]["version"])
        yield [
            d.exec(
                "UPDATE memory_entries SET body = ?, created_at = ?"
                f" WHERE {SCOPE} AND kind = 'document' AND ref = ?",
                text,
                now,
                *params,
                path,
            )
        ]
    history = {
        **scope_columns(scope),
        "path": path,
        "version": version,
        "text": text,
        "created_at": now,
    }
    yield [d.insert("memory_document_versions", history)]
    return Document(text=text, version=version)


def save_memory_pass(
    d: Dialect, record: MemoryPassRecord, *, replace: bool, now: float
) -> Op[MemoryPassRecord]:
    """Keep a curation pass (idempotent on ``pass_id``; ``replace`` updates it)."""
    columns = {
        "pass_id": record.pass_id,
        **scope_columns(record.scope),
        "run_id": record.run_id,
        "report": codec.dumps(dict(record.report)),
        "created_at": now,
    }
    [inserted] = yield [d.insert("memory_passes", columns, " ON CONFLICT DO NOTHING")]
    if inserted:
        return MemoryPassRecord(
            pass_id=record.pass_id,
            scope=record.scope,
            run_id=record.run_id,
            report=dict(record.report),
            created_at=now,
        )
    update = d.exec(
        "UPDATE memory_passes SET run_id = ?, report = ? WHERE pass_id = ?",
        columns["run_id"],
        columns["report"],
        record.pass_id,
    )
    *_, row = yield [
        *([update] if replace else []),
        d.query("SELECT * FROM memory_passes WHERE pass_id = ?", record.pass_id),
    ]
    if not row:  # it conflicted on pass_id, and passes are never deleted
        raise StoreError(f"memory curation pass {record.pass_id} vanished")
    return row_pass(row[0])


def count_turn(d: Dialect, owner: Scope, interval: int, *, now: float) -> Op[bool]:
    """One atomic increment of the owner's turn count; whether a pass is due."""
    [[row]] = yield [
        d.query(
            "INSERT INTO memory_turn_counts (scope_tenant, scope_user, turns, updated_at)"
            " VALUES (?, ?, 1, ?) ON CONFLICT (scope_tenant, scope_user) DO UPDATE SET"
            " turns = CASE WHEN memory_turn_counts.turns + 1 >= ? THEN 0"
            " ELSE memory_turn_counts.turns + 1 END,"
            " updated_at = excluded.updated_at RETURNING turns",
            owner.tenant,
            owner.user,
            now,
            interval,
        )
    ]
    return int(row["turns"]) == 0


def select(d: Dialect, decode: Callable[[codec.Row], T], sql: str, *params: Any) -> Op[list[T]]:
    """One read statement, decoded row by row."""
    [found] = yield [d.query(sql, *params)]
    return [decode(row) for row in found]


# the mixin ----------------------------------------------------------------------------------
class SQLDocuments(OpRunner):
    """The ``DocumentStore`` methods of both SQL stores but :meth:`search`."""

    def _entry_columns(
        self, scope: Scope, kind: str, ref: str, body: str, now: float
    ) -> dict[str, Any]:
        """The columns of a search entry (a backend adds what its index needs)."""
        return {**scope_columns(scope), "kind": kind, "ref": ref, "body": body, "created_at": now}

    async def _select_rows(
        self, action: str, decode: Callable[[codec.Row], T], sql: str, *params: Any
    ) -> list[T]:
        """One read statement, decoded row by row."""
        return await self._read_op(action, lambda: select(self.dialect, decode, sql, *params))

    async def read_document(self, scope: Scope, path: str) -> Document | None:
        """The current text and version of a document, or ``None``."""
        rows = await self._select_rows(
            "read a memory document",
            lambda row: Document(text=row["text"], version=row["version"]),
            f"SELECT text, version FROM memory_documents WHERE {SCOPE} AND path = ?",
            *scope_params(scope),
            path,
        )
        return rows[0] if rows else None

    async def write_document(
        self, scope: Scope, path: str, text: str, expected_version: int
    ) -> Document:
        """Compare-and-swap a document (0: create); :class:`ConflictError` when stale."""
        text = self.dialect.text(text)
        now = time.time()
        entry = self._entry_columns(scope, "document", path, text, now)
        return await self._write_op(
            "write a memory document",
            lambda: write_document(
                self.dialect, scope, path, text, expected_version, entry=entry, now=now
            ),
        )

    async def list_documents(self, scope: Scope) -> list[str]:
        """The paths of the scope's documents, sorted (byte order on every backend)."""
        return await self._select_rows(
            "list memory documents",
            lambda row: str(row["path"]),
            f"SELECT path FROM memory_documents WHERE {SCOPE} ORDER BY path{self.dialect.bytewise}",
            *scope_params(scope),
        )

    async def history(self, scope: Scope, path: str, *, limit: int = 50) -> list[DocumentVersion]:
        """Versions of a document, newest first."""
        if limit <= 0:
            return []
        return await self._select_rows(
            "read a memory document's history",
            _row_version,
            "SELECT version, text, created_at FROM memory_document_versions"
            f" WHERE {SCOPE} AND path = ? ORDER BY version DESC LIMIT ?",
            *scope_params(scope),
            path,
            limit,
        )

    async def append_log(self, scope: Scope, day: date, text: str) -> LogEntry:
        """Append an entry to the scope's log for ``day``."""
        now = time.time()
        text = self.dialect.text(text)
        entry = self._entry_columns(scope, "log", day.isoformat(), text, now)

        def append() -> Op[None]:
            yield [self.dialect.insert("memory_entries", entry)]

        await self._write_op("append to the memory log", append)
        return LogEntry(scope=scope, day=day, text=text, created_at=now)

    async def read_log(self, scope: Scope, day: date) -> list[LogEntry]:
        """The scope's log entries of ``day``, oldest first."""
        return await self._select_rows(
            "read the memory log",
            _row_log,
            f"SELECT * FROM memory_entries WHERE {SCOPE} AND kind = 'log' AND ref = ? ORDER BY id",
            *scope_params(scope),
            day.isoformat(),
        )

    async def save_memory_pass(
        self, record: MemoryPassRecord, *, replace: bool = False
    ) -> MemoryPassRecord:
        """Keep a curation pass (idempotent on ``pass_id``; ``replace`` updates it)."""
        now = time.time()
        return await self._write_op(
            "save a memory curation pass",
            lambda: save_memory_pass(self.dialect, record, replace=replace, now=now),
        )

    async def list_memory_passes(self, scope: Scope, *, limit: int = 100) -> list[MemoryPassRecord]:
        """The scope's curation passes, newest first."""
        if limit <= 0:
            return []
        return await self._select_rows(
            "list memory curation passes",
            row_pass,
            f"SELECT * FROM memory_passes WHERE {SCOPE}"
            " ORDER BY created_at DESC, pass_id DESC LIMIT ?",
            *scope_params(scope),
            limit,
        )

    async def count_turn(self, owner: Scope, interval: int) -> bool:
        """One atomic increment of the owner's turn count; whether a pass is due."""
        now = time.time()
        return await self._write_op(
            "count a completed turn", lambda: count_turn(self.dialect, owner, interval, now=now)
        )

    async def changed_scopes(self, owner: Scope, path: str, *, limit: int = 100) -> list[Scope]:
        """The owner's scopes whose ``path`` changed since their latest curation pass."""
        if limit <= 0:
            return []
        return await self._select_rows(
            "list the scopes whose memory changed",
            codec.row_scope,
            "SELECT d.scope_tenant, d.scope_user, d.scope_agent, d.scope_project"
            " FROM memory_documents d WHERE d.scope_tenant = ? AND d.scope_user = ?"
            " AND d.path = ? AND d.updated_at > COALESCE((SELECT MAX(p.created_at)"
            " FROM memory_passes p WHERE p.scope_tenant = d.scope_tenant"
            " AND p.scope_user = d.scope_user AND p.scope_agent = d.scope_agent"
            " AND p.scope_project = d.scope_project), -1)"
            " ORDER BY d.scope_agent, d.scope_project LIMIT ?",
            owner.tenant,
            owner.user,
            path,
            limit,
        )
