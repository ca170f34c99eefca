"""SQLite writes when two things happen at once (:mod:`reverie.store.sqlite_loop`).

A caller cancelled while its write is queued or while its batch commits, ``close()`` with
writes queued, and a ``COMMIT`` that fails: no write is lost or applied twice, and every caller
that still waits is answered. Driven through :class:`SQLiteStore`; the failing ``COMMIT`` is
real SQLite (a deferred foreign key broken by a trigger the test adds to the file), and the
lock is held by a real child process.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from reverie.core.scope import Scope
from reverie.errors import ConflictError, StoreError
from reverie.store import NewItem, SQLiteStore

ANA = Scope(tenant="acme", user="ana")
START_TIMEOUT_S = 60.0
"""How long a child process may take to start and take the lock (a loaded machine)."""

POISON = "poison"
"""Content whose row breaks a deferred foreign key: its transaction cannot ``COMMIT``."""


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "combo.db"


@pytest.fixture
async def loop_errors() -> AsyncIterator[list[dict[str, Any]]]:
    """What reached the event loop's exception handler (a future set twice, say)."""
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    yield seen
    loop.set_exception_handler(previous)


def _poison(path: Path) -> None:
    """Make a row with :data:`POISON` content break a deferred foreign key at ``COMMIT``."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.executescript(
            f"""
            CREATE TABLE poison_parent (id INTEGER PRIMARY KEY);
            CREATE TABLE poison_child (
                parent INTEGER REFERENCES poison_parent (id) DEFERRABLE INITIALLY DEFERRED
            );
            CREATE TRIGGER poison_row AFTER INSERT ON items WHEN NEW.content = '{POISON}'
            BEGIN INSERT INTO poison_child VALUES (1); END;
            """
        )


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(db_path) as opened:
        await opened.create_thread("thr", ANA)
    await asyncio.to_thread(_poison, db_path)
    async with SQLiteStore(db_path) as opened:
        yield opened


def _append(store: SQLiteStore, text: str, thread_id: str = "thr") -> Any:
    return store.append_items(thread_id, None, [NewItem(role="user", content=text)], fence=None)


async def _contents(path: Path, thread_id: str = "thr") -> list[str]:
    async with SQLiteStore(path) as fresh:
        rows = await fresh.thread_items(thread_id)
    assert [r.seq for r in rows] == list(range(1, len(rows) + 1))  # gap-free, no seq twice
    return [r.content for r in rows]


def _stat(store: SQLiteStore, name: str) -> int:
    return store.write_stats()[name]


# a cancelled caller -------------------------------------------------------------------------
async def test_a_write_whose_caller_is_cancelled_while_it_is_queued_is_skipped(
    store: SQLiteStore, db_path: Path, loop_errors: list[dict[str, Any]]
) -> None:
    tasks = [asyncio.create_task(_append(store, f"w{n}")) for n in range(5)]
    await asyncio.sleep(0)  # every task queued its write; the flush runs on the next turn
    assert not any(task.done() for task in tasks)
    tasks[2].cancel()
    before = _stat(store, "loop_transactions")
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(outcomes[2], asyncio.CancelledError)
    assert [len(o) for o in outcomes if not isinstance(o, BaseException)] == [1] * 4
    assert _stat(store, "loop_transactions") == before + 1
    await store.close()
    assert await _contents(db_path) == ["w0", "w1", "w3", "w4"]
    assert loop_errors == []


async def test_a_caller_cancelled_while_its_failed_batch_goes_to_the_thread_tears_nothing(
    store: SQLiteStore, db_path: Path, loop_errors: list[dict[str, Any]]
) -> None:
    # The batch fails its COMMIT on the loop and goes to the writer thread; a caller cancelled
    # while the thread runs it again gets its cancel, its write is in whole or not at all.
    tasks = [asyncio.create_task(_append(store, text)) for text in ("a", POISON, "b", "c")]
    await asyncio.sleep(0)  # every write queued
    await asyncio.sleep(0)  # the loop's flush ran: COMMIT failed, the batch was handed over
    assert _stat(store, "handed_over") == 4
    tasks[3].cancel()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(outcomes[1], ConflictError)
    assert isinstance(outcomes[3], asyncio.CancelledError)
    answered = [o for o in (outcomes[0], outcomes[2]) if not isinstance(o, BaseException)]
    assert [o[0].content for o in answered] == ["a", "b"]
    await store.close()
    assert await _contents(db_path) in (["a", "b"], ["a", "b", "c"])
    assert loop_errors == []


_LOCK_HOLDER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
"""


async def _lock(path: Path) -> asyncio.subprocess.Process:
    """A child process that holds the file's write lock until :func:`_release`."""
    holder = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _LOCK_HOLDER,
        str(path),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert holder.stdout is not None
    assert await asyncio.wait_for(holder.stdout.readline(), START_TIMEOUT_S) == b"locked\n"
    return holder


async def _release(holder: asyncio.subprocess.Process) -> None:
    assert holder.stdin is not None
    holder.stdin.write(b"go\n")
    await holder.stdin.drain()
    assert await asyncio.wait_for(holder.wait(), START_TIMEOUT_S) == 0


async def _handed_over(store: SQLiteStore, count: int) -> None:
    """Wait until ``count`` writes went to the writer thread (the loop runs on meanwhile)."""
    for _ in range(int(START_TIMEOUT_S * 100)):
        if _stat(store, "handed_over") >= count:
            break
        await asyncio.sleep(0.01)
    assert _stat(store, "handed_over") == count


async def test_callers_cancelled_while_the_writer_thread_commits_their_batch_tear_nothing(
    db_path: Path, loop_errors: list[dict[str, Any]]
) -> None:
    # Another process holds the lock: the batch goes to the writer thread, which waits for it.
    # Callers cancelled while it waits get CancelledError; their writes are applied whole or
    # not at all, and every other caller is answered after the COMMIT.
    async with SQLiteStore(db_path, busy_timeout_s=120) as store:
        await store.create_thread("thr", ANA)
        holder = await _lock(db_path)
        tasks = [
            asyncio.create_task(
                store.append_items(
                    "thr",
                    None,
                    [NewItem(role="user", content=f"w{n}.{k}") for k in range(3)],
                    fence=None,
                )
            )
            for n in range(6)
        ]
        await _handed_over(store, 6)
        for task in tasks[::2]:
            task.cancel()
        await _release(holder)
        outcomes = await asyncio.wait_for(
            asyncio.gather(*tasks, return_exceptions=True), START_TIMEOUT_S
        )
        # One more write after the batch: the store still works and sees the thread's head.
        [last] = await _append(store, "after")
    assert all(isinstance(o, asyncio.CancelledError) for o in outcomes[::2])
    answered = [o for o in outcomes[1::2] if not isinstance(o, BaseException)]
    assert [[r.content for r in o] for o in answered] == [
        [f"w{n}.{k}" for k in range(3)] for n in (1, 3, 5)
    ]
    contents = await _contents(db_path)
    assert contents[-1] == "after" == last.content
    written = {c.split(".")[0] for c in contents[:-1]}
    assert {"w1", "w3", "w5"} <= written
    # Whole or not at all, and never twice.
    assert sorted(contents[:-1]) == sorted(f"{w}.{k}" for w in written for k in range(3))
    assert loop_errors == []


# close() with writes queued --------------------------------------------------------------------
async def test_close_with_writes_queued_commits_them_and_answers_every_caller(
    db_path: Path, loop_errors: list[dict[str, Any]]
) -> None:
    store = SQLiteStore(db_path)
    await store.open()
    await store.create_thread("thr", ANA)
    tasks = [asyncio.create_task(_append(store, f"w{n}")) for n in range(300)]
    await asyncio.sleep(0)  # all queued; more than one loop transaction's worth
    await store.close()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert [o[0].content for o in outcomes if not isinstance(o, BaseException)] == [
        f"w{n}" for n in range(300)
    ]
    with pytest.raises(StoreError):
        await _append(store, "late")
    assert await _contents(db_path) == [f"w{n}" for n in range(300)]
    assert loop_errors == []


async def test_close_while_the_writer_thread_waits_for_the_lock_commits_what_is_queued(
    db_path: Path, loop_errors: list[dict[str, Any]]
) -> None:
    # Another process holds the lock: the first write is waiting on the writer thread when
    # more are queued on the loop and the store is closed. They are handed to the thread
    # ahead of its stop and committed once the lock is free; every caller is answered.
    async with SQLiteStore(db_path) as store:
        await store.create_thread("thr", ANA)
    store = SQLiteStore(db_path, busy_timeout_s=120)
    await store.open()
    holder = await _lock(db_path)
    first = asyncio.create_task(_append(store, "w0"))
    await _handed_over(store, 1)
    tasks = [first, *(asyncio.create_task(_append(store, f"w{n}")) for n in range(1, 10))]
    await asyncio.sleep(0)  # queued on the loop, not flushed yet
    closing = asyncio.create_task(store.close())
    await asyncio.sleep(0)  # close() handed the queued writes over and waits for the thread
    assert not closing.done()
    await _release(holder)
    await asyncio.wait_for(closing, START_TIMEOUT_S)
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert [o[0].content for o in outcomes if not isinstance(o, BaseException)] == [
        f"w{n}" for n in range(10)
    ]
    assert await _contents(db_path) == [f"w{n}" for n in range(10)]
    assert loop_errors == []


# a failed COMMIT ----------------------------------------------------------------------------
async def test_a_batch_whose_commit_fails_gives_each_write_its_own_outcome_once(
    store: SQLiteStore, db_path: Path, loop_errors: list[dict[str, Any]]
) -> None:
    texts = ["a", "b", POISON, "c", "d"]
    before = store.write_stats()
    outcomes = await asyncio.gather(*(_append(store, t) for t in texts), return_exceptions=True)
    after = store.write_stats()
    assert isinstance(outcomes[2], ConflictError)
    assert [o[0].content for o in outcomes if not isinstance(o, BaseException)] == [
        "a",
        "b",
        "c",
        "d",
    ]
    # The loop's transaction failed whole: the writer thread ran the batch again.
    assert after["loop_transactions"] == before["loop_transactions"]
    assert after["handed_over"] - before["handed_over"] == len(texts)
    # Each write is in once, with the seq it was answered with.
    assert [o[0].seq for o in outcomes if not isinstance(o, BaseException)] == [1, 2, 3, 4]
    # The loop writes again once the batch is through.
    await _append(store, "e")
    assert _stat(store, "loop_transactions") == after["loop_transactions"] + 1
    await store.close()
    assert await _contents(db_path) == ["a", "b", "c", "d", "e"]
    assert loop_errors == []


async def test_a_lone_write_whose_commit_fails_raises_and_leaves_nothing(
    store: SQLiteStore, db_path: Path, loop_errors: list[dict[str, Any]]
) -> None:
    await _append(store, "a")
    with pytest.raises(ConflictError):
        await _append(store, POISON)
    [b] = await _append(store, "b")
    assert b.seq == 2
    await store.close()
    assert await _contents(db_path) == ["a", "b"]
    assert loop_errors == []


async def test_a_batch_whose_commit_fails_on_the_writer_thread_gives_each_write_its_outcome(
    db_path: Path, loop_errors: list[dict[str, Any]]
) -> None:
    # loop_writes=False: the thread runs the batch itself; its failed COMMIT runs each write
    # again alone (one transaction each), so the poisoned one alone fails.
    async with SQLiteStore(db_path) as opened:
        await opened.create_thread("thr", ANA)
    await asyncio.to_thread(_poison, db_path)
    async with SQLiteStore(db_path, loop_writes=False) as store:
        texts = ["a", POISON, "b", POISON, "c"]
        outcomes = await asyncio.gather(*(_append(store, t) for t in texts), return_exceptions=True)
        assert _stat(store, "loop_transactions") == 0
    assert [type(o) for o in outcomes[1::2]] == [ConflictError, ConflictError]
    assert [o[0].content for o in outcomes[::2] if not isinstance(o, BaseException)] == [
        "a",
        "b",
        "c",
    ]
    assert await _contents(db_path) == ["a", "b", "c"]
    assert loop_errors == []
