"""Memory documents for :class:`~reverie.store.sqlite.SQLiteStore` (the ``DocumentStore`` part).

Mixed into the store, it uses the store's connections the same way the run tables do: each write
is one operation of the writer's group commit, inside a ``BEGIN IMMEDIATE`` transaction (so a
compare-and-swap cannot interleave with another write, and a stale one fails alone); reads go
to the ``query_only`` reader. The tables are those of schema version 2
(:mod:`reverie.store.migrations`).

Every statement filters on all four scope columns. Search is one FTS5 query whose expression
always requires the scope's token *and* whose join re-checks the scope columns, and whose words
are quoted one by one: free text cannot form an FTS query of its own.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from datetime import date
from typing import Any, Protocol, TypeVar

from reverie.core.scope import Scope
from reverie.errors import ConflictError
from reverie.store import sqlite_schema as schema
from reverie.store.documents import (
    Document,
    DocumentVersion,
    LogEntry,
    MemoryPassRecord,
    SearchHit,
    search_terms,
)

__all__ = ["SQLiteDocuments", "scope_token"]

T = TypeVar("T")

_SCOPE = "scope_tenant = ? AND scope_user = ? AND scope_agent = ? AND scope_project = ?"


class _Connections(Protocol):
    """What the mixin needs from :class:`~reverie.store.sqlite.SQLiteStore`."""

    async def _transact(self, action: str, fn: Callable[[sqlite3.Connection], T]) -> T: ...

    async def _select(
        self, action: str, decode: Callable[[sqlite3.Row], T], sql: str, params: Sequence[Any] = ()
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


def _row_scope(row: sqlite3.Row) -> Scope:
    return Scope(
        tenant=row["scope_tenant"],
        user=row["scope_user"],
        agent=row["scope_agent"] or None,
        project=row["scope_project"] or None,
    )


def scope_token(scope: Scope) -> str:
    """The FTS token of a scope: ``s`` + hex digest of the four fields (one unicode61 token)."""
    return "s" + hashlib.sha256(scope.key().encode("utf-8")).hexdigest()[:40]


def _fts_query(scope: Scope, terms: Sequence[str]) -> str:
    # Each term is a quoted string (FTS5 escapes '"' by doubling it), OR-ed and ranked by BM25;
    # the scope token is a required conjunct.
    words = " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
    return f'scope_token : "{scope_token(scope)}" AND body : ({words})'


def _row_version(row: sqlite3.Row) -> DocumentVersion:
    return DocumentVersion(version=row["version"], text=row["text"], created_at=row["created_at"])


def _row_log(row: sqlite3.Row) -> LogEntry:
    return LogEntry(
        scope=_row_scope(row),
        day=date.fromisoformat(row["ref"]),
        text=row["body"],
        created_at=row["created_at"],
    )


def _row_hit(row: sqlite3.Row) -> SearchHit:
    return SearchHit(
        kind="log" if row["kind"] == "log" else "document",
        ref=row["ref"],
        text=row["body"],
        scope=_row_scope(row),
        score=-float(row["rank"]),
        created_at=row["created_at"],
    )


def _row_pass(row: sqlite3.Row) -> MemoryPassRecord:
    return MemoryPassRecord(
        pass_id=row["pass_id"],
        scope=_row_scope(row),
        run_id=row["run_id"],
        report=json.loads(row["report"]),
        created_at=row["created_at"],
    )


class SQLiteDocuments:
    """The ``DocumentStore`` methods of :class:`~reverie.store.sqlite.SQLiteStore`."""

    async def read_document(self: _Connections, scope: Scope, path: str) -> Document | None:
        """The current text and version of a document, or ``None``."""
        rows = await self._select(
            "read a memory document",
            lambda row: Document(text=row["text"], version=row["version"]),
            f"SELECT text, version FROM memory_documents WHERE {_SCOPE} AND path = ?",
            [*_scope_params(scope), path],
        )
        return rows[0] if rows else None

    async def write_document(
        self: _Connections, scope: Scope, path: str, text: str, expected_version: int
    ) -> Document:
        """Compare-and-swap a document (0: create); :class:`ConflictError` when stale."""
        params = _scope_params(scope)

        def write(db: sqlite3.Connection) -> Document:
            row = schema.one(
                db,
                f"SELECT version FROM memory_documents WHERE {_SCOPE} AND path = ?",
                [*params, path],
            )
            current = int(row[0]) if row is not None else 0
            if current != expected_version:
                raise ConflictError(
                    f"memory document {path!r} is at version {current}, not {expected_version}",
                    current_version=current,
                )
            version, now = current + 1, time.time()
            if row is None:
                schema.insert(
                    db,
                    "memory_documents",
                    [
                        {
                            **_scope_columns(scope),
                            "path": path,
                            "text": text,
                            "version": version,
                            "updated_at": now,
                        }
                    ],
                )
                schema.insert(db, "memory_entries", [_entry(scope, "document", path, text, now)])
            else:
                schema.execute(
                    db,
                    "UPDATE memory_documents SET text = ?, version = ?, updated_at = ?"
                    f" WHERE {_SCOPE} AND path = ?",
                    [text, version, now, *params, path],
                )
                schema.execute(
                    db,
                    "UPDATE memory_entries SET body = ?, created_at = ?"
                    f" WHERE {_SCOPE} AND kind = 'document' AND ref = ?",
                    [text, now, *params, path],
                )
            schema.insert(
                db,
                "memory_document_versions",
                [
                    {
                        **_scope_columns(scope),
                        "path": path,
                        "version": version,
                        "text": text,
                        "created_at": now,
                    }
                ],
            )
            return Document(text=text, version=version)

        return await self._transact("write a memory document", write)

    async def list_documents(self: _Connections, scope: Scope) -> list[str]:
        """The paths of the scope's documents, sorted."""
        return await self._select(
            "list memory documents",
            lambda row: str(row["path"]),
            f"SELECT path FROM memory_documents WHERE {_SCOPE} ORDER BY path",
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
            f" WHERE {_SCOPE} AND path = ? ORDER BY version DESC LIMIT ?",
            [*_scope_params(scope), path, limit],
        )

    async def append_log(self: _Connections, scope: Scope, day: date, text: str) -> LogEntry:
        """Append an entry to the scope's log for ``day``."""
        now = time.time()
        entry = _entry(scope, "log", day.isoformat(), text, now)
        await self._transact(
            "append to the memory log", lambda db: schema.insert(db, "memory_entries", [entry])
        )
        return LogEntry(scope=scope, day=day, text=text, created_at=now)

    async def read_log(self: _Connections, scope: Scope, day: date) -> list[LogEntry]:
        """The scope's log entries of ``day``, oldest first."""
        return await self._select(
            "read the memory log",
            _row_log,
            f"SELECT * FROM memory_entries WHERE {_SCOPE} AND kind = 'log' AND ref = ? ORDER BY id",
            [*_scope_params(scope), day.isoformat()],
        )

    async def search(
        self: _Connections, scope: Scope, query: str, *, limit: int = 5
    ) -> list[SearchHit]:
        """FTS5 search over the scope's log and documents, best (BM25) first."""
        terms = search_terms(query)
        if not terms or limit <= 0:
            return []
        return await self._select(
            "search memory",
            _row_hit,
            "SELECT e.*, bm25(memory_fts, 0.0, 1.0) AS rank FROM memory_fts"
            " JOIN memory_entries AS e ON e.id = memory_fts.rowid"
            f" WHERE memory_fts MATCH ? AND {_SCOPE.replace('scope_', 'e.scope_')}"
            " ORDER BY rank, e.id DESC LIMIT ?",
            [_fts_query(scope, terms), *_scope_params(scope), limit],
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

        def write(db: sqlite3.Connection) -> MemoryPassRecord:
            row = schema.one(db, "SELECT * FROM memory_passes WHERE pass_id = ?", [record.pass_id])
            if row is not None and not replace:
                return _row_pass(row)
            if row is not None:
                db.execute(
                    "UPDATE memory_passes SET run_id = ?, report = ? WHERE pass_id = ?",
                    [columns["run_id"], columns["report"], record.pass_id],
                )
                return dataclasses.replace(
                    _row_pass(row), run_id=record.run_id, report=dict(record.report)
                )
            schema.insert(db, "memory_passes", [columns])
            return MemoryPassRecord(
                pass_id=record.pass_id,
                scope=record.scope,
                run_id=record.run_id,
                report=dict(record.report),
                created_at=now,
            )

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
            " ORDER BY created_at DESC, pass_id DESC LIMIT ?",
            [*_scope_params(scope), limit],
        )

    async def count_turn(self: _Connections, owner: Scope, interval: int) -> bool:
        """One atomic increment of the owner's turn count; whether a pass is due."""
        now = time.time()

        def write(db: sqlite3.Connection) -> bool:
            row = db.execute(
                "INSERT INTO memory_turn_counts (scope_tenant, scope_user, turns, updated_at)"
                " VALUES (?, ?, 1, ?) ON CONFLICT (scope_tenant, scope_user) DO UPDATE SET"
                " turns = CASE WHEN turns + 1 >= ? THEN 0 ELSE turns + 1 END,"
                " updated_at = excluded.updated_at RETURNING turns",
                [owner.tenant, owner.user, now, interval],
            ).fetchone()
            return int(row[0]) == 0

        return await self._transact("count a completed turn", write)

    async def changed_scopes(
        self: _Connections, owner: Scope, path: str, *, limit: int = 100
    ) -> list[Scope]:
        """The owner's scopes whose ``path`` changed since their latest curation pass."""
        if limit <= 0:
            return []
        return await self._select(
            "list the scopes whose memory changed",
            _row_scope,
            "SELECT d.scope_tenant, d.scope_user, d.scope_agent, d.scope_project"
            " FROM memory_documents d WHERE d.scope_tenant = ? AND d.scope_user = ?"
            " AND d.path = ? AND d.updated_at > COALESCE((SELECT MAX(p.created_at)"
            " FROM memory_passes p WHERE p.scope_tenant = d.scope_tenant"
            " AND p.scope_user = d.scope_user AND p.scope_agent = d.scope_agent"
            " AND p.scope_project = d.scope_project), -1)"
            " ORDER BY d.scope_agent, d.scope_project LIMIT ?",
            [owner.tenant, owner.user, path, limit],
        )


def _entry(scope: Scope, kind: str, ref: str, body: str, now: float) -> dict[str, Any]:
    return {
        **_scope_columns(scope),
        "scope_token": scope_token(scope),
        "kind": kind,
        "ref": ref,
        "body": body,
        "created_at": now,
    }
