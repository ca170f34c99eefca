"""Helpers shared by the conformance tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from reverie.core.scope import Scope
from reverie.store import (
    GateRecord,
    MemoryStore,
    NewItem,
    RunRecord,
    SQLiteStore,
    Store,
    TranscriptItem,
)

ANA = Scope(tenant="acme", user="ana")
BOB = Scope(tenant="acme", user="bob")
T0 = 1_000.0
"""A fixed 'now' for lease tests (the store takes the clock from the caller)."""


@dataclass(frozen=True, slots=True)
class RunCtx:
    """A thread with one run on it, as most tests need."""

    thread_id: str
    run_id: str
    scope: Scope


async def make_run(
    store: Store,
    run_id: str = "run-1",
    *,
    thread_id: str | None = None,
    scope: Scope = ANA,
    **fields: Any,
) -> RunCtx:
    """Create the thread (if needed) and a run on it (``queued`` unless ``status=`` says).

    Each run gets its own thread unless ``thread_id`` names one (``run-1`` → ``thr-1``): a
    thread holds one active run at a time.
    """
    if thread_id is None:
        thread_id = "thr-" + run_id.removeprefix("run-")
    await store.create_thread(thread_id, scope)
    await store.create_run(
        RunRecord(run_id=run_id, thread_id=thread_id, scope=scope, agent_name="assistant", **fields)
    )
    return RunCtx(thread_id=thread_id, run_id=run_id, scope=scope)


def say(*texts: str, role: Any = "assistant") -> list[NewItem]:
    """Transcript items with the given texts."""
    return [NewItem(role=role, content=text) for text in texts]


def texts(rows: Iterable[TranscriptItem]) -> list[str]:
    """The contents of transcript rows, in order."""
    return [row.content for row in rows]


def gate(
    ctx: RunCtx, ref: str = "gate-1", *, call_id: str = "call-1", created_at: float = T0
) -> GateRecord:
    """A pending approval gate for a call of the run."""
    return GateRecord(
        ref=ref,
        run_id=ctx.run_id,
        call_id=call_id,
        tool="send_email",
        arguments={"to": "ana@example.com"},
        scope=ctx.scope,
        created_at=created_at,
    )


@asynccontextmanager
async def second_instance(store: Store) -> AsyncIterator[Store]:
    """Another store on the same data: a second connection (SQLite: file; PostgreSQL: schema)."""
    if isinstance(store, MemoryStore):
        yield store  # one process: two tasks on the same store
        return
    other: Store
    if isinstance(store, SQLiteStore):
        other = SQLiteStore(store.path)
    else:
        from reverie.store.postgres import PostgresStore

        assert isinstance(store, PostgresStore)
        other = PostgresStore(store._url)
    await other.open()
    try:
        yield other
    finally:
        await other.close()
