"""The runtime's side of memory: binding a provider, per-run context, recording, ``rt.memory``.

:class:`MemoryService` is what :class:`~reverie.runtime.Runtime` holds when it was opened with
``memory=...``. It binds the provider to the store, registers the builtin ``after_turn`` hook
that records each completed interactive turn, builds the memory tools once, and hands each run
segment a :class:`RunMemory` that produces the memory context of every prompt.

Failures never reach the user's turn: a lane that raises or times out is ``Unavailable`` (a
degradation note in the prompt), and a recording that fails is logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from reverie.core.messages import Message
from reverie.core.scope import Scope
from reverie.errors import CapabilityError, UsageError
from reverie.hooks import AfterTurnContext, HookRegistry
from reverie.memory.context import (
    AssembledContext,
    MemoryBudgets,
    assemble_context,
    prepare_snippets,
)
from reverie.memory.curation import CurationRunner
from reverie.memory.manifest import Lane
from reverie.memory.native import STANDING_DOCUMENT
from reverie.memory.provider import (
    SESSION_ROLES,
    LaneResult,
    MemoryProvider,
    Snippets,
    Unavailable,
    document_provider,
)
from reverie.memory.tools import WriteGuard, memory_tools
from reverie.store.base import Store
from reverie.store.documents import (
    Document,
    DocumentStore,
    DocumentVersion,
    MemoryPassRecord,
    SearchHit,
)

__all__ = ["RECORD_HOOK_NAME", "MemoryService", "RunMemory", "RuntimeMemory", "memory_service"]

log = logging.getLogger("reverie.memory")

RECORD_HOOK_NAME: Final = "reverie.memory.record"
"""The builtin ``after_turn`` hook that records completed turns."""

DEFAULT_LANE_TIMEOUT_S: Final = 10.0
_RECENT_ITEMS: Final = 200
"""How far back a turn's messages are looked for in its thread."""


class MemoryService:
    """A memory provider, as one runtime uses it.

    Args:
        provider: The provider (``NativeMemory()``, ``MCPMemory(...)``, or your own).
        budgets: Byte budgets of the memory context in a prompt.
        lane_timeout_s: Bound on each lane call; past it the lane is ``Unavailable``.
    """

    def __init__(
        self,
        provider: MemoryProvider,
        *,
        budgets: MemoryBudgets | None = None,
        lane_timeout_s: float = DEFAULT_LANE_TIMEOUT_S,
    ) -> None:
        if not isinstance(provider, MemoryProvider):
            raise UsageError(
                "memory= takes a memory provider such as reverie.memory.NativeMemory() or "
                f"MCPMemory(...), got {type(provider).__name__}"
            )
        documents = document_provider(provider)
        if budgets is None:
            budgets = MemoryBudgets()
        if documents is not None:
            # The standing document's prompt budget is the provider's document budget.
            budgets = MemoryBudgets(
                total_bytes=budgets.total_bytes,
                snippet_bytes=budgets.snippet_bytes,
                standing_bytes=documents.document_budget_bytes,
                long_term_snippets=budgets.long_term_snippets,
            )
        self.provider = provider
        self.budgets = budgets
        self.lane_timeout_s = lane_timeout_s
        self._tools = memory_tools(provider, snippet_bytes=budgets.snippet_bytes)
        self._store: Store | None = None

    # ------------------------------------------------------------------ lifecycle
    async def open(self, store: Store, hooks: HookRegistry) -> None:
        """Bind the provider to the (open) store and register the recording hook."""
        await self.provider.bind(store)
        self._store = store
        if self.provider.manifest.declares("record_interaction") and RECORD_HOOK_NAME not in hooks:
            hooks.register_builtin(
                "after_turn", self.record_turn, name=RECORD_HOOK_NAME, phase="telemetry"
            )

    async def aclose(self) -> None:
        """Close the provider."""
        await self.provider.aclose()

    # ------------------------------------------------------------------ per run
    def tools(self, agent_tools: Sequence[Any]) -> list[Any]:
        """The memory tools to add to an agent's (an agent's own tool of the same name wins)."""
        taken = {getattr(getattr(t, "descriptor", None), "name", None) for t in agent_tools}
        return [t for t in self._tools if t.name not in taken]

    def pass_tools(self, names: Sequence[str], guard: WriteGuard) -> list[Any]:
        """Fresh memory tools for one curation pass: only ``names``, bound to ``guard``."""
        tools = memory_tools(self.provider, snippet_bytes=self.budgets.snippet_bytes, guard=guard)
        return [t for t in tools if t.name in names]

    def for_run(self, *, scope: Scope, thread_id: str, run_id: str, store: Store) -> RunMemory:
        """The memory context source of one run segment."""
        return RunMemory(self, scope=scope, thread_id=thread_id, run_id=run_id, store=store)

    async def lane(
        self, lane: Lane, call: Callable[[], Awaitable[LaneResult]]
    ) -> LaneResult | None:
        """Call a declared lane under the timeout; ``None`` if the manifest does not declare it.

        An exception or a timeout is ``Unavailable`` (logged by type only).
        """
        if not self.provider.manifest.declares(lane):
            return None
        try:
            async with asyncio.timeout(self.lane_timeout_s):
                return await call()
        except TimeoutError:
            log.info("memory lane %s timed out after %ss", lane, self.lane_timeout_s)
            return Unavailable(f"{lane} timed out")
        except Exception as exc:
            log.info("memory lane %s failed: %s", lane, type(exc).__name__)
            return Unavailable(f"{lane} failed: {type(exc).__name__}")

    # ------------------------------------------------------------------ recording
    async def record_turn(self, ctx: AfterTurnContext) -> None:
        """The builtin ``after_turn`` hook: record a completed turn; never raises."""
        if not ctx.completed or self._store is None:
            return
        try:
            run = await self._store.get_run(ctx.run_id)
            rows = await self._store.thread_items(run.thread_id, last=_RECENT_ITEMS)
            messages = [
                Message(role=r.role, content=r.content)
                for r in rows
                if r.run_id == ctx.run_id
                and r.role in SESSION_ROLES
                and r.content
                # A compaction summary is the model's digest of the turn, not a message of it.
                and "summary_of" not in r.meta
            ]
            if messages:
                await self.provider.record_interaction(ctx.scope, messages)
        except Exception as exc:
            # Never the user's turn's problem, and never the memory's content in a log.
            log.warning(
                "memory: recording run %s failed (%s); the turn is unaffected",
                ctx.run_id,
                type(exc).__name__,
            )


def memory_service(
    provider: MemoryProvider | None, *, budget_bytes: int | None = None
) -> MemoryService | None:
    """The service for ``Runtime.open(memory=..., memory_budget_bytes=...)`` (``None``: off).

    Args:
        provider: The provider, or ``None`` for no memory.
        budget_bytes: The aggregate budget of recalled snippets in a prompt (default 6,000).

    Raises:
        UsageError: ``provider`` is not a memory provider, or the budget is not positive.
    """
    if provider is None:
        return None
    if budget_bytes is not None and budget_bytes < 1:
        raise UsageError("memory_budget_bytes must be a positive number of bytes")
    budgets = MemoryBudgets(total_bytes=budget_bytes) if budget_bytes is not None else None
    return MemoryService(provider, budgets=budgets)


class RunMemory:
    """The memory context of one run segment's prompts.

    Long- and short-term lanes are read once, at the first prompt ("before the run"), with the
    user's message of the run as the query; the standing document is read for every prompt, so
    a write the model makes shows in its next prompt.
    """

    def __init__(
        self, service: MemoryService, *, scope: Scope, thread_id: str, run_id: str, store: Store
    ) -> None:
        self._service = service
        self.scope = scope
        self.thread_id = thread_id
        self.run_id = run_id
        self._store = store
        self._before_run: tuple[LaneResult | None, LaneResult | None] | None = None
        self.last: AssembledContext | None = None
        """The most recent assembly (for tests and diagnostics)."""

    async def _query(self, upto_seq: int | None) -> str:
        rows = await self._store.thread_items(self.thread_id, upto_seq=upto_seq, last=_RECENT_ITEMS)
        users = [r for r in rows if r.role == "user"]
        own = [r for r in users if r.run_id == self.run_id]
        chosen = own[0] if own else (users[-1] if users else None)
        return chosen.content if chosen is not None else ""

    async def message(self, upto_seq: int | None = None) -> Message | None:
        """The user-role memory context message for the next prompt (``None``: nothing)."""
        service, scope = self._service, self.scope
        provider = service.provider
        if self._before_run is None:
            query = await self._query(upto_seq)
            short = await service.lane(
                "short_term", lambda: provider.read_short_term(scope, self.thread_id)
            )
            long: LaneResult | None = None
            if query.strip():
                long = await service.lane(
                    "long_term",
                    lambda: provider.read_long_term(
                        scope, query, service.budgets.long_term_snippets
                    ),
                )
            self._before_run = (short, long)
        standing = await service.lane("profile_read", lambda: provider.profile_read(scope))
        self.last = assemble_context(
            scope,
            standing=standing,
            short_term=self._before_run[0],
            long_term=self._before_run[1],
            budgets=service.budgets,
        )
        return self.last.message


class RuntimeMemory:
    """``rt.memory``: read, write and search a scope's memory from application code.

    These are trusted operator calls: no budget applies to writes (the model's writes are
    budgeted by ``memory_write``), but every write is still a compare-and-swap.
    """

    def __init__(
        self, service: MemoryService | None, store: Store, curation: CurationRunner | None = None
    ) -> None:
        self._service = service
        self._store = store
        self._curation = curation

    @property
    def provider(self) -> MemoryProvider | None:
        """The runtime's memory provider (``None``: memory is off)."""
        return self._service.provider if self._service is not None else None

    def _documents(self) -> DocumentStore:
        if self._service is None:
            raise UsageError("memory is off: open the runtime with memory=NativeMemory()")
        documents = document_provider(self._service.provider)
        if documents is None:
            raise UsageError(
                f"memory provider {self._service.provider.manifest.name!r} has no documents"
            )
        return documents.documents

    async def read(self, scope: Scope, path: str = STANDING_DOCUMENT) -> Document:
        """The document's text and version; a missing document is ``Document("", 0)``."""
        doc = await self._documents().read_document(_scope(scope), path)
        return doc if doc is not None else Document(text="", version=0)

    async def write(self, scope: Scope, path: str, text: str, *, expected_version: int) -> Document:
        """Replace a document if it is still at ``expected_version`` (0: create it).

        Raises:
            ConflictError: The document changed since that version; nothing was written.
        """
        return await self._documents().write_document(_scope(scope), path, text, expected_version)

    async def history(
        self, scope: Scope, path: str = STANDING_DOCUMENT, *, limit: int = 50
    ) -> list[DocumentVersion]:
        """Versions of a document, newest first."""
        return await self._documents().history(_scope(scope), path, limit=limit)

    async def search(self, scope: Scope, query: str, *, limit: int = 5) -> list[SearchHit]:
        """Search the scope's memory: full-text in the store, or the provider's search.

        Raises:
            UsageError: Memory is off.
            CapabilityError: kind ``unavailable``, when a remote provider cannot answer.
        """
        scope = _scope(scope)
        if self._service is None:
            raise UsageError("memory is off: open the runtime with memory=NativeMemory()")
        if document_provider(self._service.provider) is not None:
            return await self._documents().search(scope, query, limit=limit)
        result = await self._service.provider.read_long_term(scope, query, limit)
        if isinstance(result, Unavailable):
            raise CapabilityError("unavailable", "the memory provider is unavailable")
        if not isinstance(result, Snippets):
            return []
        kept, _ = prepare_snippets(
            result.items, scope, snippet_bytes=self._service.budgets.snippet_bytes
        )
        return [
            SearchHit(
                kind="remote",
                ref=s.source,
                text=s.text,
                scope=scope,
                score=s.score or 0.0,
                created_at=0.0,
            )
            for s in kept[:limit]
        ]

    async def passes(self, scope: Scope, *, limit: int = 100) -> list[MemoryPassRecord]:
        """The curation passes run over the scope's memory and their reports, newest first."""
        if not isinstance(self._store, DocumentStore):
            return []
        return await self._store.list_memory_passes(_scope(scope), limit=limit)

    async def curate(self, scope: Scope, *, model: Any = None) -> MemoryPassRecord:
        """Run one curation pass over the scope's memory now and wait for its record.

        Args:
            scope: The owner whose memory is tidied.
            model: A model (or spec) for the pass; default the runtime's ``curation_model``.

        Raises:
            UsageError: Memory is off, the provider declares no curation pass, or there is no
                model (neither ``model`` nor ``curation_model``).
        """
        scope = _scope(scope)
        if self._service is None:
            raise UsageError("memory is off: open the runtime with memory=NativeMemory()")
        if self._curation is None:
            raise UsageError(
                f"memory provider {self._service.provider.manifest.name!r} declares no "
                "curation pass"
            )
        return await self._curation.run_now(scope, model=model)

    async def wait_for_passes(self) -> list[MemoryPassRecord]:
        """Wait for the curation passes running in this process; the records kept for them.

        Bound it with ``asyncio.timeout(...)``: a timeout stops the waiting, never the passes.
        Closing the runtime does not wait: a pass still running then is stopped like any
        other run.
        """
        if self._curation is None:
            return []
        return await self._curation.wait()


def _scope(scope: Scope) -> Scope:
    if not isinstance(scope, Scope):
        raise UsageError("scope must be a reverie.Scope")
    return scope
