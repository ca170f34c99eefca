"""Memory documents for :class:`~reverie.store.sqlite.SQLiteStore`: its full-text search.

Everything else of the ``DocumentStore`` is shared with PostgreSQL
(:class:`reverie.store.sql_documents.SQLDocuments`). Search is one FTS5 query whose expression
always requires the scope's token *and* whose join re-checks the scope columns, and whose words
are quoted one by one: free text cannot form an FTS query of its own. The scope token is an
extra column of every search entry (schema version 2, :mod:`reverie.store.migrations`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from reverie.core.scope import Scope
from reverie.store.documents import SearchHit, search_terms
from reverie.store.rows import Row as CodecRow, row_scope
from reverie.store.sql_documents import SCOPE as _SCOPE, SQLDocuments, scope_params as _scope_params

__all__ = ["SQLiteDocuments", "scope_token"]


def scope_token(scope: Scope) -> str:
    """The FTS token of a scope: ``s`` + hex digest of the four fields (one unicode61 token)."""
    return "s" + hashlib.sha256(scope.key().encode("utf-8")).hexdigest()[:40]


def _fts_query(scope: Scope, terms: Sequence[str]) -> str:
    # Each term is a quoted string (FTS5 escapes '"' by doubling it), OR-ed and ranked by BM25;
    # the scope token is a required conjunct.
    words = " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
    return f'scope_token : "{scope_token(scope)}" AND body : ({words})'


def _row_hit(row: CodecRow) -> SearchHit:
    return SearchHit(
        kind="log" if row["kind"] == "log" else "document",
        ref=row["ref"],
        text=row["body"],
        scope=row_scope(row),
        score=-float(row["rank"]),
        created_at=row["created_at"],
    )


class SQLiteDocuments(SQLDocuments):
    """The ``DocumentStore`` methods of :class:`~reverie.store.sqlite.SQLiteStore`."""

    def _entry_columns(
        self, scope: Scope, kind: str, ref: str, body: str, now: float
    ) -> dict[str, Any]:
        """A search entry carries the scope's FTS token (see :func:`scope_token`)."""
        columns = super()._entry_columns(scope, kind, ref, body, now)
        return {**columns, "scope_token": scope_token(scope)}

    async def search(self, scope: Scope, query: str, *, limit: int = 5) -> list[SearchHit]:
        """FTS5 search over the scope's log and documents, best (BM25) first."""
        terms = search_terms(query)
        if not terms or limit <= 0:
            return []
        return await self._select_rows(
            "search memory",
            _row_hit,
            "SELECT e.*, bm25(memory_fts, 0.0, 1.0) AS rank FROM memory_fts"
            " JOIN memory_entries AS e ON e.id = memory_fts.rowid"
            f" WHERE memory_fts MATCH ? AND {_SCOPE.replace('scope_', 'e.scope_')}"
            " ORDER BY rank, e.id DESC LIMIT ?",
            _fts_query(scope, terms),
            *_scope_params(scope),
            limit,
        )
