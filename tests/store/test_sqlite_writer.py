"""Group commit of the SQLite writer thread (:mod:`reverie.store.sqlite_writer`).

Each test parks the thread on a first operation that waits for a :class:`threading.Event`, so
the operations queued meanwhile are taken as one batch when it is released.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from reverie.core.scope import Scope
from reverie.errors import ConflictError, LeaseLost, StoreError
from reverie.store import NewItem, RunRecord, SQLiteStore, sqlite_schema as schema
from reverie.store.sqlite_writer import ConnectionThread

ANA = Scope(tenant="acme", user="ana")


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY)")
    return db


def _keys(path: Path) -> set[str]:
    """The committed rows, as another connection sees them."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        return {row[0] for row in db.execute("SELECT k FROM t")}


def _insert(key: str) -> Callable[[sqlite3.Connection], str]:
    def op(db: sqlite3.Connection) -> str:
        db.execute("INSERT INTO t (k) VALUES (?)", (key,))
        return key

    return op


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "w.db"


@pytest.fixture
async def writer(path: Path) -> AsyncIterator[ConnectionThread]:
    thread = ConnectionThread("test-writer", lambda: _connect(path))
    await thread.start()
    try:
        yield thread
    finally:
        await thread.close()


@contextlib.asynccontextmanager
async def _parked(writer: ConnectionThread) -> AsyncIterator[asyncio.TaskGroup]:
    """A task group whose tasks queue behind a parked writer; released on exit of the block."""
    loop = asyncio.get_running_loop()
    started, release = asyncio.Event(), threading.Event()

    def park(db: sqlite3.Connection) -> None:
        loop.call_soon_threadsafe(started.set)
        release.wait(10)

    async with asyncio.TaskGroup() as group:
        group.create_task(writer.transact("park", park))
        await started.wait()
        try:
            yield group
            await asyncio.sleep(0.01)  # let every task queue its operation
        finally:
            release.set()


def _queue(group: asyncio.TaskGroup, make: Callable[[], Awaitable[Any]]) -> asyncio.Task[Any]:
    async def outcome() -> Any:
        try:
            return await make()
        except StoreError as exc:  # kept as the task's result so the group is not cancelled
            return exc

    return group.create_task(outcome())


async def test_concurrent_writes_share_one_transaction(
    writer: ConnectionThread, path: Path
) -> None:
    seen: list[set[str]] = []

    def last(db: sqlite3.Connection) -> None:
        # Inside the batch: the rows before are written, but not committed yet.
        seen.append({row[0] for row in db.execute("SELECT k FROM t")})
        seen.append(_keys(path))

    async with _parked(writer) as group:
        for n in range(5):
            _queue(group, functools.partial(writer.transact, "insert", _insert(f"k{n}")))
        _queue(group, lambda: writer.transact("look", last))
    keys = {f"k{n}" for n in range(5)}
    assert seen == [keys, set()]
    assert _keys(path) == keys


async def test_a_failing_operation_in_a_batch_fails_alone(
    writer: ConnectionThread, path: Path
) -> None:
    def stale(db: sqlite3.Connection) -> None:
        raise LeaseLost("run r: fencing token 1 is stale (now 2)")

    def half(db: sqlite3.Connection) -> None:
        db.execute("INSERT INTO t (k) VALUES ('half')")
        raise ConflictError("changed its mind after writing")

    async with _parked(writer) as group:
        first = _queue(group, lambda: writer.transact("insert", _insert("a")))
        lost = _queue(group, lambda: writer.transact("stale write", stale))
        dup = _queue(group, lambda: writer.transact("insert", _insert("a")))
        undone = _queue(group, lambda: writer.transact("half write", half))
        after = _queue(group, lambda: writer.transact("insert", _insert("b")))
    assert (first.result(), after.result()) == ("a", "b")
    assert isinstance(lost.result(), LeaseLost)
    assert isinstance(dup.result(), ConflictError)  # the constraint violation, wrapped
    assert isinstance(dup.result().__cause__, sqlite3.IntegrityError)
    assert isinstance(undone.result(), ConflictError)
    assert _keys(path) == {"a", "b"}  # 'half' was rolled back, and only it


async def test_a_transaction_lost_mid_batch_reruns_each_operation_alone(
    writer: ConnectionThread, path: Path
) -> None:
    def lose(db: sqlite3.Connection) -> None:
        db.execute("ROLLBACK")  # as SQLite does on its own after e.g. SQLITE_FULL
        raise StoreError("disk full")

    async with _parked(writer) as group:
        before = _queue(group, lambda: writer.transact("insert", _insert("a")))
        broken = _queue(group, lambda: writer.transact("lose", lose))
        after = _queue(group, lambda: writer.transact("insert", _insert("b")))
    assert (before.result(), after.result()) == ("a", "b")
    assert isinstance(broken.result(), StoreError)
    assert _keys(path) == {"a", "b"}


async def test_a_caller_cancelled_before_its_turn_is_skipped_and_the_batch_commits(
    writer: ConnectionThread, path: Path
) -> None:
    async with _parked(writer) as group:
        kept = _queue(group, lambda: writer.transact("insert", _insert("kept")))
        dropped = _queue(group, lambda: writer.transact("insert", _insert("dropped")))
        await asyncio.sleep(0.01)
        dropped.cancel()
        also = _queue(group, lambda: writer.transact("insert", _insert("also")))
    assert (kept.result(), also.result()) == ("kept", "also")
    assert dropped.cancelled()
    assert _keys(path) == {"kept", "also"}


async def test_close_runs_what_is_queued_then_joins_the_thread(path: Path) -> None:
    writer = ConnectionThread("test-writer", lambda: _connect(path))
    await writer.start()
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(writer.transact("insert", _insert(f"k{n}"))) for n in range(20)]
        await asyncio.sleep(0)  # every task has queued its write
        await writer.close()
    assert [t.result() for t in tasks] == [f"k{n}" for n in range(20)]
    assert not any(t.name == "test-writer" for t in threading.enumerate())
    with pytest.raises(StoreError, match="closed"):
        await writer.transact("insert", _insert("late"))
    await writer.close()  # twice is fine


async def test_a_connect_failure_is_raised_by_start_and_close_still_joins(path: Path) -> None:
    def broken() -> sqlite3.Connection:
        raise sqlite3.OperationalError("unable to open database file")

    writer = ConnectionThread("test-writer", broken)
    with pytest.raises(sqlite3.OperationalError):
        await writer.start()
    await writer.close()
    assert not any(t.name == "test-writer" for t in threading.enumerate())


# through the store --------------------------------------------------------------------------
def _reverie_threads() -> Iterator[threading.Thread]:
    return (t for t in threading.enumerate() if t.name.startswith("reverie-sqlite"))


async def test_store_close_leaves_no_thread(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "x.db") as store:
        assert len(list(_reverie_threads())) == 3  # writer, reader, checkpointer
        await store.create_thread("thr-1", ANA)
    assert not list(_reverie_threads())


async def test_concurrent_fenced_writes_of_many_runs_are_each_checked(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "x.db") as store:
        fences: dict[str, int] = {}
        for n in range(10):
            await store.create_thread(f"thr-{n}", ANA)
            run = RunRecord(run_id=f"run-{n}", thread_id=f"thr-{n}", scope=ANA, agent_name="a")
            await store.create_run(run)
            fences[run.run_id] = await store.acquire_lease(run.run_id, "w", ttl_s=30, now=1.0)
        # Odd runs write with a stale fence: only they fail, in whatever batch they land.
        results = await asyncio.gather(
            *(
                store.journal_started(run_id, "call-1", "tool", fence=fence - (n % 2))
                for n, (run_id, fence) in enumerate(fences.items())
            ),
            return_exceptions=True,
        )
        assert [isinstance(r, LeaseLost) for r in results] == [n % 2 == 1 for n in range(10)]
        for n, run_id in enumerate(fences):
            assert bool(await store.journal_get(run_id, ["call-1"])) == (n % 2 == 0)


async def test_window_reads_are_right_whether_rows_are_cached_or_not(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "x.db") as a, SQLiteStore(tmp_path / "x.db") as b:
        await a.create_thread("thr-1", ANA)
        mine = await a.append_items("thr-1", "run-1", [NewItem(role="user")] * 3, fence=None)
        # b never saw these rows: it reads them whole, then from its cache.
        assert await b.thread_items("thr-1", last=2) == mine[1:]
        assert await b.thread_items("thr-1", last=2) == mine[1:]
        theirs = await b.append_items("thr-1", "run-1", [NewItem(role="user")] * 2, fence=None)
        assert await a.thread_items("thr-1", last=4) == [*mine[1:], *theirs]
        await b.supersede_items_after("thr-1", "run-1", 4)
        assert await a.thread_items("thr-1", last=4) == mine + theirs[:1]


async def test_window_read_falls_back_when_the_cache_drops_rows_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with SQLiteStore(tmp_path / "x.db") as store:
        await store.create_thread("thr-1", ANA)
        rows = await store.append_items("thr-1", None, [NewItem(role="user")] * 3, fence=None)
        # The reader thread believes every row is cached; the event loop then finds none.
        monkeypatch.setattr(schema.ItemCache, "missing", lambda self, refs: [])
        monkeypatch.setattr(schema.ItemCache, "get", lambda self, ref: None)
        assert await store.thread_items("thr-1", last=3) == rows
