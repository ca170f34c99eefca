"""Memory in the store: the ``DocumentStore`` protocol and its records (docs/memory.md).

A store that also holds memory implements :class:`DocumentStore` next to
:class:`~reverie.store.base.Store`. It keeps, per scope:

- **documents** (``MEMORY.md``, ``notes/people.md``, …) with a version that every write bumps.
  A write names the version it read (``expected_version``; ``0`` for a document that does not
  exist yet) and is a compare-and-swap: a stale version raises
  :class:`~reverie.errors.ConflictError` and changes nothing, so two writers racing on one
  version cannot both win and no content is lost silently;
- every **version** of every document (``history``);
- a **daily log** of interactions (``append_log``), which the native provider writes after each
  turn;
- a **full-text index** over the log and the documents (``search``);
- the **curation passes** run over the scope and their reports.

Scope isolation: every row carries the four scope fields and every query filters on all four
(an unset ``agent``/``project`` is its own value, not a wildcard). No method can return a row of
another scope; a search can never match another scope's text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Literal, Protocol, runtime_checkable

from reverie.core.scope import Scope

__all__ = [
    "Document",
    "DocumentStore",
    "DocumentVersion",
    "LogEntry",
    "MemoryPassRecord",
    "SearchHit",
    "indexed_words",
    "search_terms",
]


@dataclass(frozen=True, slots=True)
class Document:
    """A memory document as read: its text and the version a conditional write must name."""

    text: str
    version: int
    """1 for the first write, +1 for every write after it. A missing document is version 0."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DocumentVersion:
    """One past (or the current) version of a document."""

    version: int
    text: str
    created_at: float
    """When this version was written (epoch seconds)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LogEntry:
    """One entry of a scope's daily interaction log."""

    scope: Scope
    day: date
    text: str
    created_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchHit:
    """A full-text match: a log entry or a document, with the scope it belongs to."""

    kind: Literal["log", "document", "remote"]
    """``remote``: a row of a remote provider (``MCPMemory``), not of this store."""
    ref: str
    """The document's path, or the log entry's day (``YYYY-MM-DD``), or the remote source."""
    text: str
    """The whole entry (the context pipeline truncates it)."""
    scope: Scope
    """The scope of the row (always the scope searched; carried so callers can check)."""
    score: float
    """Higher is better; comparable only within one result list."""
    created_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryPassRecord:
    """A curation pass over one scope's memory and its report (docs/memory.md)."""

    pass_id: str
    """``memory-curation-{tenant}-{user}-{triggering_run_id}``: the idempotency key."""
    scope: Scope
    run_id: str
    """The unbound run that performed the pass."""
    report: Mapping[str, Any] = field(default_factory=dict)
    """The pass's JSON report (``changed``, ``summary``, …)."""
    created_at: float = 0.0


@runtime_checkable
class DocumentStore(Protocol):
    """Scoped memory documents, their history, a daily log and full-text search."""

    async def read_document(self, scope: Scope, path: str) -> Document | None:
        """The current text and version of a document, or ``None`` if it does not exist."""
        ...

    async def write_document(
        self, scope: Scope, path: str, text: str, expected_version: int
    ) -> Document:
        """Replace a document if its version is still ``expected_version`` (0: create it).

        The compare and the write are one atomic step; the new version is also kept in the
        history and the search index.

        Raises:
            ConflictError: The document's version is not ``expected_version``; its
                ``current_version`` says what it is. Nothing was written.
        """
        ...

    async def list_documents(self, scope: Scope) -> list[str]:
        """The paths of the scope's documents, sorted."""
        ...

    async def history(self, scope: Scope, path: str, *, limit: int = 50) -> list[DocumentVersion]:
        """Versions of a document, newest first (the current one included)."""
        ...

    async def append_log(self, scope: Scope, day: date, text: str) -> LogEntry:
        """Append an entry to the scope's log for ``day`` (and to the search index)."""
        ...

    async def read_log(self, scope: Scope, day: date) -> list[LogEntry]:
        """The scope's log entries of ``day``, oldest first."""
        ...

    async def search(self, scope: Scope, query: str, *, limit: int = 5) -> list[SearchHit]:
        """Full-text search over the scope's log and documents, best first.

        The query is free text: it is split into words (:func:`search_terms`), never passed
        to a query language, so no input can change what is searched or whose rows.
        """
        ...

    async def save_memory_pass(
        self, record: MemoryPassRecord, *, replace: bool = False
    ) -> MemoryPassRecord:
        """Keep a curation pass; a second save with the same ``pass_id`` returns the first,
        unless ``replace``: then its run and report replace the first's (``created_at`` kept).
        """
        ...

    async def list_memory_passes(self, scope: Scope, *, limit: int = 100) -> list[MemoryPassRecord]:
        """The scope's curation passes, newest first."""
        ...

    async def count_turn(self, owner: Scope, interval: int) -> bool:
        """Count one completed turn of ``owner`` (its tenant and user) in one atomic step.

        Returns:
            Whether this was the ``interval``-th turn since the count last came due (the count
            then starts over). Exact across processes: of N turns, one in ``interval`` is due.
        """
        ...

    async def changed_scopes(self, owner: Scope, path: str, *, limit: int = 100) -> list[Scope]:
        """The scopes of ``owner`` (its tenant and user, any agent or project) whose document
        ``path`` was written after their latest curation pass (or that never had one)."""
        ...


_WORD = re.compile(r"[^\W_]+")
"""Runs of letters and digits: the words SQLite's ``unicode61`` tokenizer makes."""
_STOP_WORDS = frozenset(
    _WORD.findall(
        "a an and are as at be but by did do does for from had has have he her his how i if in "
        "is it its me my of on or our she so that the their them they this to was we were what "
        "when where which who why will with you your"
    )
)
MAX_SEARCH_TERMS = 32
"""Words of a query beyond this many are ignored."""


def _words(text: str) -> list[str]:
    words = _WORD.findall(text.lower())
    return [word for word in words if len(word) >= 2 and word not in _STOP_WORDS]


def search_terms(query: str) -> list[str]:
    """The words a search looks for: lower-cased, deduplicated, without stop words.

    Both backends use this, so they agree on what a query means. A query of only stop words
    and punctuation has no terms (and finds nothing). At most :data:`MAX_SEARCH_TERMS`.
    """
    return list(dict.fromkeys(_words(query)))[:MAX_SEARCH_TERMS]


def indexed_words(text: str) -> frozenset[str]:
    """Every word of an entry that a search term can match (the in-memory index)."""
    return frozenset(_words(text))
