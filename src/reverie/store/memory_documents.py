"""Memory documents for :class:`~reverie.store.memory.MemoryStore` (the ``DocumentStore`` part).

The reference implementation of :class:`~reverie.store.documents.DocumentStore`: dicts keyed by
the full scope. Each method runs without awaiting in the middle, so under asyncio a
compare-and-swap write is atomic. Search ranks by the number of query terms an entry contains,
newest first among equals (SQLite ranks with BM25; the conformance suite pins only what both
guarantee).
"""

from __future__ import annotations

import dataclasses
import time
from datetime import date

from reverie.core.scope import Scope
from reverie.errors import ConflictError
from reverie.store.documents import (
    Document,
    DocumentVersion,
    LogEntry,
    MemoryPassRecord,
    SearchHit,
    indexed_words,
    search_terms,
)

__all__ = ["MemoryDocuments"]

_ScopeKey = tuple[str, str, str | None, str | None]


def _key(scope: Scope) -> _ScopeKey:
    return (scope.tenant, scope.user, scope.agent, scope.project)


class MemoryDocuments:
    """Dict-backed scoped documents, history, daily log, search and curation passes."""

    def __init__(self) -> None:
        self._documents: dict[tuple[_ScopeKey, str], list[DocumentVersion]] = {}
        self._log: dict[_ScopeKey, list[LogEntry]] = {}
        self._passes: dict[str, MemoryPassRecord] = {}
        self._turns: dict[tuple[str, str], int] = {}

    async def read_document(self, scope: Scope, path: str) -> Document | None:
        versions = self._documents.get((_key(scope), path))
        if not versions:
            return None
        return Document(text=versions[-1].text, version=versions[-1].version)

    async def write_document(
        self, scope: Scope, path: str, text: str, expected_version: int
    ) -> Document:
        versions = self._documents.setdefault((_key(scope), path), [])
        current = versions[-1].version if versions else 0
        if current != expected_version:
            raise ConflictError(
                f"memory document {path!r} is at version {current}, not {expected_version}",
                current_version=current,
            )
        versions.append(DocumentVersion(version=current + 1, text=text, created_at=time.time()))
        return Document(text=text, version=current + 1)

    async def list_documents(self, scope: Scope) -> list[str]:
        key = _key(scope)
        return sorted(
            path for (k, path), versions in self._documents.items() if k == key and versions
        )

    async def history(self, scope: Scope, path: str, *, limit: int = 50) -> list[DocumentVersion]:
        versions = self._documents.get((_key(scope), path), [])
        return list(reversed(versions))[: max(0, limit)]

    async def append_log(self, scope: Scope, day: date, text: str) -> LogEntry:
        entry = LogEntry(scope=scope, day=day, text=text, created_at=time.time())
        self._log.setdefault(_key(scope), []).append(entry)
        return entry

    async def read_log(self, scope: Scope, day: date) -> list[LogEntry]:
        return [e for e in self._log.get(_key(scope), []) if e.day == day]

    async def search(self, scope: Scope, query: str, *, limit: int = 5) -> list[SearchHit]:
        terms = set(search_terms(query))
        if not terms or limit <= 0:
            return []
        key = _key(scope)
        hits: list[SearchHit] = []
        for entry in self._log.get(key, []):
            score = len(terms & indexed_words(entry.text))
            if score:
                hits.append(
                    SearchHit(
                        kind="log",
                        ref=entry.day.isoformat(),
                        text=entry.text,
                        scope=entry.scope,
                        score=float(score),
                        created_at=entry.created_at,
                    )
                )
        for (k, path), versions in self._documents.items():
            if k != key or not versions:
                continue
            score = len(terms & indexed_words(versions[-1].text))
            if score:
                hits.append(
                    SearchHit(
                        kind="document",
                        ref=path,
                        text=versions[-1].text,
                        scope=scope,
                        score=float(score),
                        created_at=versions[-1].created_at,
                    )
                )
        hits.sort(key=lambda h: (h.score, h.created_at), reverse=True)
        return hits[:limit]

    async def save_memory_pass(
        self, record: MemoryPassRecord, *, replace: bool = False
    ) -> MemoryPassRecord:
        existing = self._passes.get(record.pass_id)
        if existing is not None and not replace:
            return existing
        created = existing.created_at if existing is not None else time.time()
        stored = dataclasses.replace(record, report=dict(record.report), created_at=created)
        self._passes[record.pass_id] = stored
        return stored

    async def list_memory_passes(self, scope: Scope, *, limit: int = 100) -> list[MemoryPassRecord]:
        rows = [p for p in self._passes.values() if _key(p.scope) == _key(scope)]
        rows.sort(key=lambda p: (p.created_at, p.pass_id), reverse=True)
        return rows[: max(0, limit)]

    async def count_turn(self, owner: Scope, interval: int) -> bool:
        key = (owner.tenant, owner.user)
        turns = self._turns.get(key, 0) + 1
        due = turns >= interval
        self._turns[key] = 0 if due else turns
        return due

    async def changed_scopes(self, owner: Scope, path: str, *, limit: int = 100) -> list[Scope]:
        latest: dict[_ScopeKey, float] = {}
        for record in self._passes.values():
            k = _key(record.scope)
            latest[k] = max(latest.get(k, -1.0), record.created_at)
        found: list[Scope] = []
        for (k, p), versions in sorted(
            self._documents.items(), key=lambda item: (item[0][0][2] or "", item[0][0][3] or "")
        ):
            if p != path or not versions or k[:2] != (owner.tenant, owner.user):
                continue
            if versions[-1].created_at > latest.get(k, -1.0):
                found.append(Scope(tenant=k[0], user=k[1], agent=k[2], project=k[3]))
        return found[: max(0, limit)]
