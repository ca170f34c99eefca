"""Memory documents for :class:`~reverie.store.postgres.PostgresStore`: its full-text search.

Everything else of the ``DocumentStore`` is shared with SQLite
(:class:`reverie.store.sql_documents.SQLDocuments`). Search matches
``memory_entries.body_tsv``, a stored ``to_tsvector('simple', body)`` with a GIN index
(schema version 2, :mod:`reverie.store.postgres_schema`), against an OR of
``plainto_tsquery('simple', term)`` — one per word of
:func:`~reverie.store.documents.search_terms`, each passed as a parameter — so free text
never forms a query of its own. Hits are ranked by ``ts_rank``.
"""

from __future__ import annotations

from reverie.core.scope import Scope
from reverie.store.documents import SearchHit, search_terms
from reverie.store.rows import Row as CodecRow, row_scope
from reverie.store.sql_documents import SCOPE as _SCOPE, SQLDocuments, scope_params as _scope_params

__all__ = ["PostgresDocuments"]


def _row_hit(row: CodecRow) -> SearchHit:
    return SearchHit(
        kind="log" if row["kind"] == "log" else "document",
        ref=row["ref"],
        text=row["body"],
        scope=row_scope(row),
        score=float(row["rank"]),
        created_at=row["created_at"],
    )


class PostgresDocuments(SQLDocuments):
    """The ``DocumentStore`` methods of :class:`~reverie.store.postgres.PostgresStore`."""

    async def search(self, scope: Scope, query: str, *, limit: int = 5) -> list[SearchHit]:
        """Full-text search over the scope's log and documents, best (``ts_rank``) first."""
        terms = search_terms(query)
        if not terms or limit <= 0:
            return []
        tsquery = " || ".join(["plainto_tsquery('simple', ?)"] * len(terms))
        return await self._select_rows(
            "search memory",
            _row_hit,
            "SELECT e.scope_tenant, e.scope_user, e.scope_agent, e.scope_project, e.kind,"
            " e.ref, e.body, e.created_at, ts_rank(e.body_tsv, q.query) AS rank"
            f" FROM memory_entries AS e, (SELECT {tsquery} AS query) AS q"
            f" WHERE {_SCOPE.replace('scope_', 'e.scope_')} AND e.body_tsv @@ q.query"
            " ORDER BY rank DESC, e.id DESC LIMIT ?",
            *terms,
            *_scope_params(scope),
            limit,
        )
