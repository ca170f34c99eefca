"""``NativeMemory``: reverie's own memory provider, on the runtime's store (docs/memory.md).

It keeps everything in the store's :class:`~reverie.store.documents.DocumentStore` part:

- ``profile_read`` returns the standing document ``MEMORY.md`` of the scope;
- ``read_long_term`` is a full-text search (SQLite FTS5) over the scope's daily log and
  documents, the standing document left out (it is in every prompt already);
- ``record_interaction`` appends the turn (user and assistant messages, cleaned of control
  characters and credentials) to the scope's log for the day (UTC);
- the memory tools (:mod:`reverie.memory.tools`) read and write its documents with
  compare-and-swap versions.

Use ``Runtime.open(..., memory=NativeMemory())``: the runtime binds it to its store when it
opens. ``NativeMemory(store=...)`` binds it to another store up front (e.g. for
``reverie mcp-memory``).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence

from reverie.core.messages import Message
from reverie.core.scope import Scope
from reverie.errors import ConfigError, UsageError
from reverie.memory.manifest import MemoryManifest, bundled_manifest
from reverie.memory.provider import (
    EMPTY,
    SESSION_ROLES,
    LaneResult,
    MemorySnippet,
    Snippets,
    Unavailable,
)
from reverie.memory.sanitize import clean, truncate_utf8
from reverie.store.base import Store
from reverie.store.documents import DocumentStore

__all__ = ["STANDING_DOCUMENT", "NativeMemory", "format_interaction", "native_manifest"]

log = logging.getLogger("reverie.memory")

STANDING_DOCUMENT = "MEMORY.md"
"""The path of the standing document, in every prompt."""


def native_manifest() -> MemoryManifest:
    """The manifest shipped with :class:`NativeMemory` (``manifests/native.toml``)."""
    return bundled_manifest("native.toml")


def format_interaction(messages: Sequence[Message], *, max_bytes: int) -> str:
    """A turn as log text: ``user: …`` / ``assistant: …`` lines, cleaned and cut to size."""
    lines = [
        f"{m.role}: {m.content.strip()}"
        for m in messages
        if m.role in SESSION_ROLES and m.content.strip()
    ]
    return truncate_utf8(clean("\n".join(lines)), max_bytes)


class NativeMemory:
    """Memory in the runtime's own store: documents, a daily log and full-text search.

    Args:
        document_budget_bytes: The largest document a model's ``memory_write`` may leave, and
            the standing document's budget in the prompt (UTF-8 bytes).
        max_log_entry_bytes: Each recorded turn is cut to this.
        store: Bind to this store now instead of the runtime's.
    """

    def __init__(
        self,
        *,
        document_budget_bytes: int = 8_000,
        max_log_entry_bytes: int = 8_000,
        store: DocumentStore | None = None,
    ) -> None:
        if document_budget_bytes < 1 or max_log_entry_bytes < 1:
            raise UsageError("NativeMemory budgets must be positive numbers of bytes")
        self._budget = document_budget_bytes
        self._max_log = max_log_entry_bytes
        self._store = store
        self._fixed = store is not None
        """Bound at construction: the runtime's store does not replace it."""
        self._manifest = native_manifest()

    def __repr__(self) -> str:
        return f"NativeMemory(document_budget_bytes={self._budget})"

    @property
    def manifest(self) -> MemoryManifest:
        """``manifests/native.toml``."""
        return self._manifest

    @property
    def documents(self) -> DocumentStore:
        """The bound document store.

        Raises:
            UsageError: Not bound yet (open the runtime first).
        """
        if self._store is None:
            raise UsageError("NativeMemory is not bound to a store: open the runtime first")
        return self._store

    @property
    def document_budget_bytes(self) -> int:
        """The largest document a model write may leave, in UTF-8 bytes."""
        return self._budget

    async def bind(self, store: Store) -> None:
        """Use the runtime's store (unless one was given to the constructor).

        Binding again (the same provider, a new runtime) moves it to the new store.

        Raises:
            ConfigError: The store keeps no memory documents.
        """
        if self._fixed:
            return
        if not isinstance(store, DocumentStore):
            raise ConfigError(
                f"NativeMemory needs a store with memory documents; {type(store).__name__} "
                "has none (use the SQLite or in-memory store)"
            )
        self._store = store

    async def aclose(self) -> None:
        """Nothing to release: the store belongs to the runtime."""

    async def profile_read(self, scope: Scope) -> LaneResult:
        """``MEMORY.md`` of the scope, as one snippet (or ``EMPTY``)."""
        try:
            doc = await self.documents.read_document(scope, STANDING_DOCUMENT)
        except Exception as exc:
            return Unavailable(f"reading {STANDING_DOCUMENT} failed: {type(exc).__name__}")
        if doc is None or not doc.text.strip():
            return EMPTY
        return Snippets([MemorySnippet(text=doc.text, scope=scope, source=STANDING_DOCUMENT)])

    async def read_long_term(self, scope: Scope, query: str, max_snippets: int) -> LaneResult:
        """Full-text search of the scope's log and documents for ``query``."""
        try:
            # One more than asked: the standing document may be among the hits.
            hits = await self.documents.search(scope, query, limit=max_snippets + 1)
        except Exception as exc:
            return Unavailable(f"memory search failed: {type(exc).__name__}")
        snippets = [
            MemorySnippet(
                text=hit.text,
                scope=hit.scope,
                source=f"{hit.kind}/{hit.ref}" if hit.kind == "log" else hit.ref,
                score=hit.score,
            )
            for hit in hits
            if not (hit.kind == "document" and hit.ref == STANDING_DOCUMENT)
        ][:max_snippets]
        return Snippets(snippets) if snippets else EMPTY

    async def read_short_term(self, scope: Scope, thread_id: str) -> LaneResult:
        """Not declared: the thread's transcript is in the prompt already."""
        return EMPTY

    async def record_interaction(self, scope: Scope, messages: Sequence[Message]) -> None:
        """Append the turn to the scope's log of today (UTC)."""
        text = format_interaction(messages, max_bytes=self._max_log)
        if not text:
            return
        today = dt.datetime.now(dt.UTC).date()
        await self.documents.append_log(scope, today, text)
