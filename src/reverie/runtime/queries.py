"""Read-only views of stored runs and gates: ``rt.runs`` and ``rt.gates``.

The command line and the HTTP server read runs, gates and transcripts through these instead of
the store, so what a surface may see is decided in one place: given a ``scope``, a record of
another owner (tenant and user) answers as a missing one, :class:`~reverie.errors.NotFoundError`.
Without a scope every owner's records are visible (the operator's view, as ``reverie runs list``).
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from reverie.errors import NotFoundError, UsageError
from reverie.runtime.event_log import StoredEvent, follow_events
from reverie.runtime.subagents import children_of
from reverie.store.run_events import RunEventLog, RunEventRecord

if TYPE_CHECKING:
    from reverie.core.scope import Scope
    from reverie.store.base import (
        CheckpointRecord,
        GateRecord,
        GateStatus,
        JournalEntry,
        RunCursor,
        RunRecord,
        Store,
        ThreadRecord,
        TranscriptItem,
    )

__all__ = ["Gates", "Runs"]


class _Owned(Protocol):
    @property
    def scope(self) -> Scope: ...


_R = TypeVar("_R", bound=_Owned)


def _visible(record: _R, scope: Scope | None, what: str) -> _R:
    """``record`` if ``scope`` may see it (no scope: everyone's); else "``what`` not found"."""
    owner = (record.scope.tenant, record.scope.user)
    if scope is not None and owner != (scope.tenant, scope.user):
        raise NotFoundError(f"{what} not found")
    return record


class Runs:
    """Stored runs, their threads and events: ``await rt.runs.get(run_id, scope=scope)``."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def get(self, run_id: str, *, scope: Scope | None = None) -> RunRecord:
        """The run ``run_id``.

        Raises:
            NotFoundError: No such run, or (with ``scope``) it belongs to another owner.
        """
        return _visible(await self._store.get_run(run_id), scope, f"run {run_id}")

    async def list(
        self,
        *,
        scope: Scope | None = None,
        tenant: str | None = None,
        statuses: Sequence[str] | None = None,
        limit: int = 100,
        agent: str | None = None,
        thread_id: str | None = None,
        before: RunCursor | None = None,
    ) -> builtins.list[RunRecord]:
        """Runs, newest first: ``scope``'s (its tenant and user), ``tenant``'s, or everyone's.

        ``agent`` and ``thread_id`` narrow the list; ``before`` is a keyset cursor, the
        ``(created_at, run_id)`` of the last run of the previous page.
        """
        return await self._store.list_runs(
            scope=scope,
            tenant=tenant,
            statuses=statuses,
            limit=limit,
            agent=agent,
            thread_id=thread_id,
            before=before,
        )

    async def journal(self, run_id: str, *, scope: Scope | None = None) -> dict[str, JournalEntry]:
        """The side-effect journal of the run's tool calls, by call id (``<ref>#<index>``).

        A call that has no entry never started; ``started`` without ``finished`` after the run
        moved on is a call whose effect is in doubt (docs/durability.md).

        Raises:
            NotFoundError: No such run, or (with ``scope``) it belongs to another owner.
        """
        run = await self.get(run_id, scope=scope)
        keys = [
            f"{item.ref}#{index}"
            for item in await self._store.thread_items(run.thread_id)
            if item.run_id == run_id and item.tool_calls
            for index in range(len(item.tool_calls))
        ]
        return await self._store.journal_get(run_id, keys) if keys else {}

    async def checkpoint(
        self, run_id: str, *, scope: Scope | None = None
    ) -> CheckpointRecord | None:
        """The run's latest checkpoint (``None``: never checkpointed).

        Raises:
            NotFoundError: No such run, or (with ``scope``) it belongs to another owner.
        """
        await self.get(run_id, scope=scope)
        return await self._store.load_checkpoint(run_id)

    async def recorded_events(
        self, run_id: str, *, after_seq: int = 0, limit: int = 1000, scope: Scope | None = None
    ) -> builtins.list[RunEventRecord]:
        """The run's stored events, oldest first, without waiting for new ones (empty when the
        store keeps none).

        Raises:
            NotFoundError: No such run, or (with ``scope``) it belongs to another owner.
        """
        await self.get(run_id, scope=scope)
        if not isinstance(self._store, RunEventLog):
            return []
        return await self._store.run_events(run_id, after_seq=after_seq, limit=limit)

    async def children(self, run: RunRecord) -> builtins.list[RunRecord]:
        """The runs ``run``'s subagent calls started, oldest first (docs/subagents.md)."""
        return await children_of(self._store, run)

    async def thread(self, thread_id: str, *, scope: Scope | None = None) -> ThreadRecord:
        """The thread ``thread_id``.

        Raises:
            NotFoundError: No such thread, or (with ``scope``) it belongs to another owner.
        """
        return _visible(await self._store.get_thread(thread_id), scope, f"thread {thread_id}")

    async def thread_items(
        self, thread_id: str, *, last: int | None = None, scope: Scope | None = None
    ) -> builtins.list[TranscriptItem]:
        """The thread's transcript in order (its ``last`` rows when given).

        Raises:
            NotFoundError: With ``scope``: no such thread, or it belongs to another owner.
        """
        if scope is not None:
            await self.thread(thread_id, scope=scope)
        return await self._store.thread_items(thread_id, last=last)

    @property
    def keeps_events(self) -> bool:
        """Whether the store keeps run events, so :meth:`events` can replay and follow them."""
        return isinstance(self._store, RunEventLog)

    async def events(
        self, run_id: str, *, after_seq: int | None = None, scope: Scope | None = None
    ) -> AsyncIterator[StoredEvent]:
        """The run's stored events after ``after_seq`` as ``(seq, event)``, then new ones live,
        until the run settles (from the start of its latest segment when ``after_seq`` is None).

        Raises:
            UsageError: The store keeps no run events (see :attr:`keeps_events`).
            NotFoundError: No such run, or (with ``scope``) it belongs to another owner.
        """
        if not self.keeps_events:
            raise UsageError("this store keeps no run events; follow a live run with attach()")
        await self.get(run_id, scope=scope)
        async for seq, data in follow_events(self._store, run_id, after_seq=after_seq):
            yield seq, data


class Gates:
    """Stored approval gates: ``await rt.gates.list(scope=scope)``."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def get(self, ref: str, *, scope: Scope | None = None) -> GateRecord:
        """The gate ``ref``.

        Raises:
            NotFoundError: No such gate, or (with ``scope``) it belongs to another owner.
        """
        return _visible(await self._store.get_gate(ref), scope, f"gate {ref}")

    async def list(
        self,
        *,
        scope: Scope | None = None,
        status: GateStatus | None = "pending",
        limit: int | None = None,
    ) -> builtins.list[GateRecord]:
        """Gates, newest first: pending ones unless ``status`` says otherwise (``None``: all);
        the newest ``limit`` when given."""
        return await self._store.list_gates(scope=scope, status=status, limit=limit)
