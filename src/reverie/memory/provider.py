"""The ``MemoryProvider`` protocol and what its lanes return (docs/memory.md).

A provider has four *lanes*; its manifest (:mod:`reverie.memory.manifest`) says which it
implements, and the host calls only those:

============================  ========================================  =====================
lane (manifest name)          method                                    when the host calls it
============================  ========================================  =====================
``profile_read``              ``profile_read(scope)``                   every prompt (the
                                                                        standing document)
``long_term``                 ``read_long_term(scope, query, max)``     once before a run
``short_term``                ``read_short_term(scope, thread_id)``     once before a run
``record_interaction``        ``record_interaction(scope, messages)``   after each completed
                                                                        interactive turn
============================  ========================================  =====================

A read lane returns :class:`Snippets`, :data:`EMPTY` or :class:`Unavailable`. *Broken* and
*empty* are different answers: a provider that cannot reach its backend says
``Unavailable(reason)`` (the prompt then carries a short degradation note), never ``Empty``.
The scope is always the host's: providers receive it, never choose it, and every snippet
carries the scope it came from so the host can drop any that does not match the run's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, Protocol, cast, get_args, runtime_checkable

from reverie.core.messages import Message
from reverie.core.scope import Scope

if TYPE_CHECKING:
    from reverie.memory.manifest import MemoryManifest
    from reverie.store.base import Store
    from reverie.store.documents import DocumentStore

__all__ = [
    "EMPTY",
    "SESSION_ROLES",
    "DocumentProvider",
    "Empty",
    "LaneResult",
    "MemoryProvider",
    "MemorySnippet",
    "SessionRole",
    "Snippets",
    "Unavailable",
    "document_provider",
]

SessionRole = Literal["user", "assistant"]
"""The roles of the messages a session hands to memory: the conversation, not the tools."""
SESSION_ROLES: Final[tuple[SessionRole, ...]] = get_args(SessionRole)


@dataclass(frozen=True, slots=True, kw_only=True)
class MemorySnippet:
    """One piece of remembered text and where it came from."""

    text: str
    """The remembered text: untrusted data, whatever its source."""
    scope: Scope | None
    """The scope the row belongs to, as the backend reported it (``None``: it did not say).
    The host drops a snippet whose scope is not exactly the run's."""
    source: str = "memory"
    """A short label for the envelope, e.g. ``"memory:log/2025-01-02"``."""
    score: float | None = None
    """The backend's relevance score, if any (higher is better)."""


@dataclass(frozen=True, slots=True, init=False)
class Snippets:
    """A lane found something: the snippets, best first."""

    items: tuple[MemorySnippet, ...]
    kind: Literal["snippets"]

    def __init__(self, items: Iterable[MemorySnippet] = ()) -> None:
        object.__setattr__(self, "items", tuple(items))
        object.__setattr__(self, "kind", "snippets")

    def __len__(self) -> int:
        return len(self.items)


@dataclass(frozen=True, slots=True)
class Empty:
    """A lane worked and found nothing. Use the :data:`EMPTY` instance."""

    kind: Literal["empty"] = "empty"


EMPTY = Empty()
"""The one ``Empty`` result."""


@dataclass(frozen=True, slots=True)
class Unavailable:
    """A lane could not answer (backend down, timeout, malformed response)."""

    reason: str
    """Why, for logs. It may come from a remote server: never put it in a prompt."""
    kind: Literal["unavailable"] = "unavailable"


LaneResult = Snippets | Empty | Unavailable
"""What a read lane returns."""


@runtime_checkable
class MemoryProvider(Protocol):
    """A memory backend the host reads before and writes after a turn.

    Implement the lanes your manifest declares; the host never calls the others (they may
    return :data:`EMPTY`). A lane should not raise: return :class:`Unavailable` instead. The
    host treats an exception from a lane as ``Unavailable`` anyway, and an exception from
    :meth:`record_interaction` is logged and never fails the turn.
    """

    @property
    def manifest(self) -> MemoryManifest:
        """The provider's manifest: its name, lanes, tools and scheduled ops."""
        ...

    async def bind(self, store: Store) -> None:
        """Called once when the runtime opens, with the runtime's (open) store."""
        ...

    async def aclose(self) -> None:
        """Called once when the runtime closes: release connections and processes."""
        ...

    async def profile_read(self, scope: Scope) -> LaneResult:
        """The standing document of the scope (``MEMORY.md``), as at most one snippet."""
        ...

    async def read_long_term(self, scope: Scope, query: str, max_snippets: int) -> LaneResult:
        """Memories relevant to ``query`` (the user's message), at most ``max_snippets``."""
        ...

    async def read_short_term(self, scope: Scope, thread_id: str) -> LaneResult:
        """Memory of the current conversation (e.g. a running summary)."""
        ...

    async def record_interaction(self, scope: Scope, messages: Sequence[Message]) -> None:
        """Remember a completed turn (the user's and the assistant's messages)."""
        ...


class DocumentProvider(MemoryProvider, Protocol):
    """A provider whose documents the memory tools can read and write (the native one)."""

    @property
    def documents(self) -> DocumentStore:
        """The document store, bound (raises :class:`~reverie.errors.UsageError` before)."""
        ...

    @property
    def document_budget_bytes(self) -> int:
        """The largest document a model write may leave (UTF-8 bytes)."""
        ...


def document_provider(provider: MemoryProvider) -> DocumentProvider | None:
    """``provider`` as a :class:`DocumentProvider` if it has documents, else ``None``.

    Checked on the class, so an unbound provider (whose ``documents`` raises) still counts.
    """
    kind = type(provider)
    if hasattr(kind, "documents") and hasattr(kind, "document_budget_bytes"):
        return cast("DocumentProvider", provider)
    return None
