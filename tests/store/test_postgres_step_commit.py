"""A PostgreSQL step commit that waits for a row lock sees what the holder committed.

The step commit is one statement (migration 5's ``reverie_commit_step``): it locks the thread row,
then the run row, and only then reads the heads and the fence it checks, each read taking a fresh
snapshot. So a commit that queued behind another transaction's lock decides on the rows that
transaction committed, not on the database as it was when the commit was sent. Needs
``REVERIE_TEST_POSTGRES_URL``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

import psycopg
import pytest

from reverie import Scope
from reverie.core.transcript import TranscriptItem
from reverie.errors import LeaseLost, TranscriptConflict
from reverie.store import NewItem, RunRecord
from reverie.store.base import StepReceipt, StepWrite
from reverie.store.postgres import PostgresStore, temporary_schema

POSTGRES_URL = os.environ.get("REVERIE_TEST_POSTGRES_URL", "")
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        not POSTGRES_URL, reason="set REVERIE_TEST_POSTGRES_URL; .ci/run starts a server"
    ),
]
ANA = Scope(tenant="acme", user="ana")
T = TypeVar("T")


@pytest.fixture
async def url() -> AsyncIterator[str]:
    async with temporary_schema(POSTGRES_URL, prefix="reverie_test") as scoped:
        yield f"{scoped}&application_name=reverie_step_{os.getpid()}"


async def _running(store: PostgresStore) -> int:
    await store.create_thread("t", ANA)
    await store.create_run(RunRecord(run_id="r", thread_id="t", scope=ANA, agent_name="x"))
    await store.append_items("t", "r", [NewItem(role="user", content="go")], fence=None)
    return await store.acquire_lease("r", "me", ttl_s=60, now=time.time())


def _step(seq: int | None) -> StepWrite:
    items = []
    if seq is not None:
        items.append(
            TranscriptItem(
                ref=f"itm-{seq}", seq=seq, thread_id="t", run_id="r", role="assistant", content="a"
            )
        )
    return StepWrite(
        thread_id="t",
        items=items,
        after_seq=None if seq is None else seq - 1,
        checkpoint_kind="BeforeModel",
        checkpoint=b"state",
        guard_cursor=0,
    )


async def _behind_the_lock(url: str, holder: psycopg.AsyncConnection, commit: Awaitable[T]) -> T:
    """Start ``commit``, wait until it queues for a row lock, commit ``holder``, return it."""
    task: asyncio.Future[T] = asyncio.ensure_future(commit)
    app = psycopg.conninfo.conninfo_to_dict(url)["application_name"]
    waiting = (
        "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = %s"
        " AND wait_event_type = 'Lock'"
    )
    async with await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True) as probe:
        for _ in range(600):  # generous: the machine may be loaded
            row = await (await probe.execute(waiting, (app,))).fetchone()
            if (row is not None and row[0]) or task.done():
                break
            await asyncio.sleep(0.05)
    assert not task.done(), "the commit did not wait for the lock"
    await holder.commit()
    return await task


async def _holder(url: str, *statements: str) -> psycopg.AsyncConnection:
    conn = await psycopg.AsyncConnection.connect(url)
    for statement in statements:
        await conn.execute(statement)
    return conn


_APPEND_SEQ_2 = (
    "INSERT INTO items (ref, thread_id, seq, run_id, role, content, tool_calls, meta,"
    " created_at) VALUES ('itm-other', 't', 2, 'r', 'user', 'also', '[]', '{}', 0)"
)


async def test_a_step_commit_that_waited_for_the_thread_lock_checks_the_rows_committed_meanwhile(
    url: str,
) -> None:
    async with PostgresStore(url, max_connections=1) as store:
        fence = await _running(store)
        holder = await _holder(
            url, "SELECT 1 FROM threads WHERE thread_id = 't' FOR NO KEY UPDATE", _APPEND_SEQ_2
        )
        async with holder:
            with pytest.raises(TranscriptConflict):
                await _behind_the_lock(url, holder, store.commit_step("r", _step(2), fence=fence))
        assert [i.ref for i in await store.thread_items("t")][1:] == ["itm-other"]
        assert await store.load_checkpoint("r") is None


async def test_a_step_commit_receipt_counts_the_rows_committed_while_it_waited_for_the_lock(
    url: str,
) -> None:
    async with PostgresStore(url, max_connections=1) as store:
        fence = await _running(store)
        holder = await _holder(
            url, "SELECT 1 FROM threads WHERE thread_id = 't' FOR NO KEY UPDATE", _APPEND_SEQ_2
        )
        async with holder:
            receipt: StepReceipt = await _behind_the_lock(
                url, holder, store.commit_step("r", _step(None), fence=fence)
            )
        assert receipt.head_seq == 2


async def test_a_step_commit_that_waited_for_a_takeover_of_its_run_raises_lease_lost(
    url: str,
) -> None:
    async with PostgresStore(url, max_connections=1) as store:
        fence = await _running(store)
        holder = await _holder(url, "UPDATE runs SET fence = fence + 1 WHERE run_id = 'r'")
        async with holder:
            with pytest.raises(LeaseLost):
                await _behind_the_lock(url, holder, store.commit_step("r", _step(2), fence=fence))
        assert [i.seq for i in await store.thread_items("t")] == [1]
