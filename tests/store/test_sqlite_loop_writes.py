"""SQLite writes on the event loop (:mod:`reverie.store.sqlite_loop`) and WAL checkpoints off it.

Driven through :class:`SQLiteStore`; ``write_stats()`` says which path a write took. Other
processes are real child processes on the same file.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reverie.core.ids import new_id
from reverie.core.scope import Scope
from reverie.errors import ConflictError, LeaseLost, ThreadBusy, TranscriptConflict
from reverie.store import NewItem, RunRecord, SQLiteStore, TranscriptItem, open_store
from reverie.store.base import StepWrite
from reverie.store.sqlite_checkpoint import wal_frames

ANA = Scope(tenant="acme", user="ana")
T0 = 1_000.0
START_TIMEOUT_S = 60.0
"""How long a child process may take to start and open the store (a loaded machine)."""


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "loop.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(db_path) as opened:
        yield opened


async def _leased_run(store: SQLiteStore, n: int) -> tuple[str, str, int]:
    """A thread with a run on it, leased: (thread id, run id, fence)."""
    thread_id, run_id = f"thr-{n}", f"run-{n}"
    await store.create_thread(thread_id, ANA)
    await store.create_run(
        RunRecord(run_id=run_id, thread_id=thread_id, scope=ANA, agent_name="assistant")
    )
    fence = await store.acquire_lease(run_id, "w1", ttl_s=600, now=T0)
    return thread_id, run_id, fence


def _step(thread_id: str, run_id: str, after: int, text: str) -> StepWrite:
    item = TranscriptItem(
        ref=new_id("itm"),
        seq=after + 1,
        thread_id=thread_id,
        run_id=run_id,
        role="assistant",
        content=text,
    )
    return StepWrite(
        thread_id=thread_id,
        items=[item],
        after_seq=after,
        checkpoint_kind="BeforeModel",
        checkpoint=text.encode(),
    )


def _stat(store: SQLiteStore, name: str) -> int:
    return store.write_stats()[name]


# group commit on the loop -------------------------------------------------------------------
async def test_a_lone_write_commits_on_the_loop_in_its_own_transaction(
    store: SQLiteStore,
) -> None:
    _, run_id, fence = await _leased_run(store, 1)
    before = store.write_stats()
    for n in range(5):
        await store.save_checkpoint(run_id, "BeforeModel", b"%d" % n, fence=fence)
    after = store.write_stats()
    assert after["loop_transactions"] - before["loop_transactions"] == 5
    assert after["handed_over"] == before["handed_over"] == 0
    loaded = await store.load_checkpoint(run_id)
    assert loaded is not None and loaded.payload == b"4"


async def test_a_lone_write_with_nothing_else_to_run_commits_in_the_callers_turn(
    store: SQLiteStore,
) -> None:
    _, run_id, fence = await _leased_run(store, 1)
    before = store.write_stats()
    await store.save_checkpoint(run_id, "BeforeModel", b"alone", fence=fence)
    after = store.write_stats()
    assert after["inline_commits"] - before["inline_commits"] == 1
    assert after["loop_transactions"] - before["loop_transactions"] == 1
    # Two writers in one turn: the first finds the second's task waiting to run, so it waits
    # for the flush, which the second joins.
    await asyncio.gather(
        store.save_checkpoint(run_id, "BeforeModel", b"a", fence=fence),
        store.save_checkpoint(run_id, "BeforeModel", b"b", fence=fence),
    )
    last = store.write_stats()
    assert last["inline_commits"] == after["inline_commits"]
    assert last["loop_transactions"] - after["loop_transactions"] == 1
    loaded = await store.load_checkpoint(run_id)
    assert loaded is not None and loaded.payload == b"b"


async def test_concurrent_step_commits_on_one_loop_share_one_transaction(
    store: SQLiteStore,
) -> None:
    runs = [await _leased_run(store, n) for n in range(100)]
    before = _stat(store, "loop_transactions")
    receipts = await asyncio.gather(
        *(
            store.commit_step(run_id, _step(thread_id, run_id, 0, run_id), fence=fence)
            for thread_id, run_id, fence in runs
        )
    )
    assert _stat(store, "loop_transactions") - before == 1
    assert [r.head_seq for r in receipts] == [1] * 100
    for thread_id, run_id, _ in runs:
        assert [i.content for i in await store.thread_items(thread_id)] == [run_id]


async def test_one_failing_op_in_a_batch_leaves_the_others_committed(
    store: SQLiteStore,
) -> None:
    runs = [await _leased_run(store, n) for n in range(6)]
    (t0, r0, f0), (t1, r1, f1), (t2, _, _), *good = runs
    before = _stat(store, "loop_transactions")
    outcomes = await asyncio.gather(
        store.commit_step(r0, _step(t0, r0, 0, "stale"), fence=f0 + 1),  # LeaseLost
        store.commit_step(r1, _step(t1, r1, 5, "behind"), fence=f1),  # TranscriptConflict
        store.create_run(RunRecord(run_id="run-x", thread_id=t2, scope=ANA, agent_name="a")),
        *(store.commit_step(r, _step(t, r, 0, r), fence=f) for t, r, f in good),
        return_exceptions=True,
    )
    assert _stat(store, "loop_transactions") - before == 1
    assert isinstance(outcomes[0], LeaseLost)
    assert isinstance(outcomes[1], TranscriptConflict)
    assert isinstance(outcomes[2], ThreadBusy)
    assert all(not isinstance(o, BaseException) for o in outcomes[3:]), outcomes
    for thread_id, run_id, _ in good:
        assert [i.content for i in await store.thread_items(thread_id)] == [run_id]
    for thread_id, run_id in ((t0, r0), (t1, r1)):
        assert await store.thread_head(thread_id) == 0
        assert await store.load_checkpoint(run_id) is None


async def test_a_failing_op_that_wrote_before_failing_is_undone_alone(
    store: SQLiteStore,
) -> None:
    # append_items with a stale fence fails before writing; an append whose second item
    # collides with an existing ref writes the first row, then fails: it must leave nothing.
    thread_id, run_id, fence = await _leased_run(store, 1)
    [existing] = await store.append_items(thread_id, run_id, [NewItem(role="user")], fence=fence)
    other_thread, other_run, other_fence = await _leased_run(store, 2)
    colliding = [
        TranscriptItem(
            ref=new_id("itm"), seq=2, thread_id=thread_id, run_id=run_id, role="assistant"
        ),
        TranscriptItem(
            ref=existing.ref, seq=3, thread_id=thread_id, run_id=run_id, role="assistant"
        ),
    ]
    before = _stat(store, "loop_transactions")
    outcomes = await asyncio.gather(
        store.commit_step(other_run, _step(other_thread, other_run, 0, "a"), fence=other_fence),
        store.commit_step(
            run_id, StepWrite(thread_id=thread_id, items=colliding, after_seq=1), fence=fence
        ),
        store.save_checkpoint(other_run, "BeforeModel", b"b", fence=other_fence),
        return_exceptions=True,
    )
    assert _stat(store, "loop_transactions") - before == 1
    assert not isinstance(outcomes[0], BaseException)
    assert isinstance(outcomes[1], ConflictError)  # the second row only: the first was undone
    assert outcomes[2] is None
    assert [i.ref for i in await store.thread_items(thread_id)] == [existing.ref]
    assert [i.content for i in await store.thread_items(other_thread)] == ["a"]
    loaded = await store.load_checkpoint(other_run)
    assert loaded is not None and loaded.payload == b"b"


async def test_every_caller_is_answered_only_after_its_batch_committed(
    store: SQLiteStore, db_path: Path
) -> None:
    runs = [await _leased_run(store, n) for n in range(20)]
    last_thread = runs[-1][0]
    seen: list[tuple[int, int]] = []

    async def commit(thread_id: str, run_id: str, fence: int) -> None:
        await store.commit_step(run_id, _step(thread_id, run_id, 0, run_id), fence=fence)
        # At once, before this task yields: another connection must see this write and the
        # batch's last one committed.
        with contextlib.closing(sqlite3.connect(db_path)) as db:
            mine, last = (
                db.execute("SELECT count(*) FROM items WHERE thread_id = ?", (t,)).fetchone()[0]
                for t in (thread_id, last_thread)
            )
        seen.append((mine, last))

    before = _stat(store, "loop_transactions")
    await asyncio.gather(*(commit(*run) for run in runs))
    assert _stat(store, "loop_transactions") - before == 1
    assert seen == [(1, 1)] * 20


async def test_writes_from_another_event_loop_go_through_the_writer_thread(
    store: SQLiteStore,
) -> None:
    _, run_id, fence = await _leased_run(store, 1)
    before = store.write_stats()

    def elsewhere() -> None:
        asyncio.run(store.save_checkpoint(run_id, "BeforeModel", b"other loop", fence=fence))

    await asyncio.to_thread(elsewhere)
    after = store.write_stats()
    assert after["handed_over"] == before["handed_over"] + 1
    assert after["loop_transactions"] == before["loop_transactions"]
    loaded = await store.load_checkpoint(run_id)
    assert loaded is not None and loaded.payload == b"other loop"


# brief reads on the loop ----------------------------------------------------------------------
async def test_a_poll_of_the_input_queue_is_answered_on_the_loop_without_a_thread_hop(
    store: SQLiteStore,
) -> None:
    _, run_id, _ = await _leased_run(store, 1)
    await store.enqueue_input(run_id, "steering", {"text": "a"}, input_id="in-1")
    before = _stat(store, "loop_reads")
    polled = await store.poll_inputs(run_id, after_cursor=0)
    assert [r.input_id for r in polled] == ["in-1"]
    assert _stat(store, "loop_reads") == before + 1
    # A write queued and committed since is seen by the next poll on the loop.
    await store.enqueue_input(run_id, "steering", {"text": "b"}, input_id="in-2")
    polled = await store.poll_inputs(run_id, after_cursor=polled[-1].cursor)
    assert [r.input_id for r in polled] == ["in-2"]


async def test_a_poll_while_the_writer_thread_holds_the_connection_goes_to_the_reader(
    store: SQLiteStore,
) -> None:
    _, run_id, _ = await _leased_run(store, 1)
    await store.enqueue_input(run_id, "steering", {"text": "a"}, input_id="in-1")
    holding, release = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    def hold_the_connection() -> None:
        with store._hold_writer():  # what the writer thread does around each batch
            loop.call_soon_threadsafe(holding.set)
            asyncio.run_coroutine_threadsafe(release.wait(), loop).result()

    held = asyncio.create_task(asyncio.to_thread(hold_the_connection))
    await asyncio.wait_for(holding.wait(), START_TIMEOUT_S)
    before = _stat(store, "loop_reads")
    polled = await asyncio.wait_for(store.poll_inputs(run_id, after_cursor=0), START_TIMEOUT_S)
    assert [r.input_id for r in polled] == ["in-1"]
    assert _stat(store, "loop_reads") == before  # answered by the reader thread
    release.set()
    await held


async def test_a_store_that_syncs_every_commit_keeps_its_reads_off_the_loop(
    tmp_path: Path,
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'full.db'}?synchronous=FULL")
    assert isinstance(store, SQLiteStore)
    async with store as opened:
        _, run_id, _ = await _leased_run(opened, 1)
        await opened.enqueue_input(run_id, "steering", {"text": "a"}, input_id="in-1")
        assert len(await opened.poll_inputs(run_id, after_cursor=0)) == 1
        assert _stat(opened, "loop_reads") == 0


# another process holds the lock: the writer thread waits, the loop does not --------------
_LOCK_HOLDER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
print("released", flush=True)
"""


async def test_a_write_while_another_process_holds_the_lock_waits_off_the_loop(
    db_path: Path,
) -> None:
    # A long busy timeout: had the loop waited for the lock itself, the release below could
    # never be sent and the write would fail after it.
    async with SQLiteStore(db_path, busy_timeout_s=120) as store:
        _, run_id, fence = await _leased_run(store, 1)
        holder = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _LOCK_HOLDER,
            str(db_path),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert holder.stdin is not None and holder.stdout is not None
        line = await asyncio.wait_for(holder.stdout.readline(), START_TIMEOUT_S)
        assert line == b"locked\n"
        write = asyncio.create_task(store.save_checkpoint(run_id, "BeforeModel", b"x", fence=fence))
        for _ in range(int(START_TIMEOUT_S * 100)):  # the loop runs on while the write waits
            if _stat(store, "handed_over"):
                break
            await asyncio.sleep(0.01)
        assert _stat(store, "handed_over") == 1
        assert not write.done()
        holder.stdin.write(b"go\n")
        await holder.stdin.drain()
        await asyncio.wait_for(write, START_TIMEOUT_S)
        assert await holder.stdout.readline() == b"released\n"
        assert await holder.wait() == 0
        loaded = await store.load_checkpoint(run_id)
        assert loaded is not None and loaded.payload == b"x"
        # The lock is free again: the next write commits on the loop.
        before = _stat(store, "loop_transactions")
        await store.save_checkpoint(run_id, "BeforeModel", b"y", fence=fence)
        assert _stat(store, "loop_transactions") == before + 1


_APPENDER = """
import asyncio, sys
from reverie.core.scope import Scope
from reverie.store import NewItem, SQLiteStore

async def main(path, name, rounds):
    async with SQLiteStore(path, busy_timeout_s=60) as store:
        await store.create_thread(f"thr-{name}", Scope(tenant="acme", user="ana"))
        print("open", flush=True)
        for r in range(rounds):
            await asyncio.gather(*(
                store.append_items(
                    "thr-shared", None, [NewItem(role="user", content=f"{name}.{r}.{k}")],
                    fence=None,
                )
                for k in range(10)
            ))
        print(store.write_stats()["handed_over"], flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


async def test_two_processes_writing_to_one_database_file_both_make_progress(
    db_path: Path,
) -> None:
    rounds = 30
    async with SQLiteStore(db_path) as store:
        await store.create_thread("thr-shared", ANA)
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _APPENDER,
            str(db_path),
            name,
            str(rounds),
            stdout=asyncio.subprocess.PIPE,
        )
        for name in ("a", "b")
    ]
    outputs = [(await proc.communicate())[0].decode().split() for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    async with SQLiteStore(db_path) as store:
        rows = await store.thread_items("thr-shared")
    assert [r.seq for r in rows] == list(range(1, 2 * rounds * 10 + 1))
    by_writer = Counter(r.content.split(".")[0] for r in rows)
    assert by_writer == {"a": rounds * 10, "b": rounds * 10}


# a crash mid-batch ------------------------------------------------------------------------
_CRASHER = """
import asyncio, sys
from reverie.core.scope import Scope
from reverie.store import NewItem, SQLiteStore

async def main(path):
    async with SQLiteStore(path) as store:
        for t in range(8):
            await store.create_thread(f"thr-{t}", Scope(tenant="acme", user="ana"))
        round = 0
        while True:  # until killed
            await asyncio.gather(*(
                store.append_items(
                    f"thr-{op % 8}", None,
                    [NewItem(role="user", content=f"{round}.{op}") for _ in range(5)],
                    fence=None,
                )
                for op in range(40)
            ))
            print(round, flush=True)
            round += 1

asyncio.run(main(sys.argv[1]))
"""


async def test_sigkill_mid_batch_leaves_either_all_of_an_op_or_none(db_path: Path) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _CRASHER, str(db_path), stdout=asyncio.subprocess.PIPE
    )
    assert child.stdout is not None
    for _ in range(5):  # a few batches committed: the next is under way when the kill lands
        assert await asyncio.wait_for(child.stdout.readline(), START_TIMEOUT_S)
    os.kill(child.pid, signal.SIGKILL)
    assert await child.wait() == -signal.SIGKILL
    async with SQLiteStore(db_path) as store:
        per_op: Counter[str] = Counter()
        for t in range(8):
            rows = await store.thread_items(f"thr-{t}")
            assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
            per_op.update(r.content for r in rows)
    assert len(per_op) >= 5 * 40
    assert set(per_op.values()) == {5}, [op for op, n in per_op.items() if n != 5]


# WAL checkpoints ---------------------------------------------------------------------------
async def test_wal_stays_bounded_under_a_steady_stream_of_writes(db_path: Path) -> None:
    pages = 8
    async with SQLiteStore(db_path, checkpoint_pages=pages) as store:
        _, run_id, fence = await _leased_run(store, 1)
        page = 4096 + 24
        # The bound: four times the checkpoint threshold, plus what the writes until the
        # store looked again added (eight commits of a 3 KB checkpoint and its index).
        bound = 32 + pages * 4 * page + 8 * 4 * page
        largest = 0
        for _ in range(1500):
            await store.save_checkpoint(run_id, "BeforeModel", os.urandom(3000), fence=fence)
            largest = max(largest, _stat(store, "wal_bytes"))
        assert largest <= bound
        # 1,500 writes of 3 KB (4.5 MB) went through a WAL bounded at 200 KB.
        assert _stat(store, "checkpoints") > 0
    # The last close checkpointed the file whole and removed the WAL.
    assert not await asyncio.to_thread(os.path.exists, f"{db_path}-wal")


async def test_the_wal_is_looked_at_by_writes_so_one_large_batch_past_its_bound_is_seen(
    db_path: Path,
) -> None:
    pages = 8
    async with SQLiteStore(db_path, checkpoint_pages=pages) as store:
        thread_id, run_id, fence = await _leased_run(store, 1)
        batches = _stat(store, "loop_transactions")
        # Forty rows of 3 KB queued in one turn: one loop transaction of ~40 WAL pages, past
        # the bound (four times 8 pages), however few commits came before it.
        await asyncio.gather(
            *(
                store.append_items(
                    thread_id, run_id, [NewItem(role="user", content="x" * 3000)], fence=fence
                )
                for _ in range(40)
            )
        )
        assert _stat(store, "loop_transactions") == batches + 1
        handed = _stat(store, "handed_over")
        # So the next write goes to the writer thread, which brings the WAL back first.
        await store.save_checkpoint(run_id, "BeforeModel", b"state", fence=fence)
        assert _stat(store, "handed_over") == handed + 1
        assert _stat(store, "checkpoints") > 0


async def test_a_wal_started_over_reuses_its_file_and_what_it_uses_stays_bounded(
    db_path: Path,
) -> None:
    pages = 8
    async with SQLiteStore(db_path, checkpoint_pages=pages) as store:
        _, run_id, fence = await _leased_run(store, 1)
        page = 4096 + 24
        bound = 32 + pages * 4 * page + 8 * 4 * page  # as in the test above
        reused, largest = False, 0
        for _ in range(1500):
            await store.save_checkpoint(run_id, "BeforeModel", os.urandom(3000), fence=fence)
            stats = store.write_stats()
            largest = max(largest, stats["wal_in_use"], stats["wal_bytes"])
            # Started over in the same file: new frames overwrite the old ones.
            reused = reused or 0 < stats["wal_in_use"] < stats["wal_bytes"]
        assert reused
        assert largest <= bound
        assert _stat(store, "checkpoints") > 0


async def test_the_wal_length_is_read_only_from_a_wal_index_header_sqlite_documents(
    tmp_path: Path, store: SQLiteStore
) -> None:
    _, run_id, fence = await _leased_run(store, 1)
    await store.save_checkpoint(run_id, "BeforeModel", b"x", fence=fence)
    real = store.path.with_name(store.path.name + "-shm")
    foreign = tmp_path / "other-shm"
    foreign.write_bytes(b"\x01" * 4096)  # not a wal-index SQLite 3.7.0 or later writes
    found = []
    for path in (real, foreign):
        fd = os.open(path, os.O_RDONLY)
        try:
            found.append(wal_frames(fd))
        finally:
            os.close(fd)
    in_use = store.write_stats()["wal_in_use"]
    assert found[0] is not None and in_use == 32 + found[0] * (4096 + 24)
    assert found[1] is None


async def test_checkpoints_are_off_the_loops_connection(store: SQLiteStore) -> None:
    settings = await store.connection_settings()
    assert settings["wal_autocheckpoint"] == 0


# synchronous ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("mode", "code", "on_loop"), [("NORMAL", 1, True), ("FULL", 2, False)])
async def test_synchronous_mode_is_selected_by_the_url_and_writes_are_durable(
    tmp_path: Path, mode: str, code: int, on_loop: bool
) -> None:
    path = tmp_path / "sync.db"
    store = open_store(f"sqlite:///{path}?synchronous={mode.lower()}")
    assert isinstance(store, SQLiteStore)
    async with store:
        assert (await store.connection_settings())["synchronous"] == code
        assert store.loop_writes is on_loop
        _, run_id, fence = await _leased_run(store, 1)
        await store.save_checkpoint(run_id, "BeforeModel", b"kept", fence=fence)
        stats = store.write_stats()
        assert (stats["loop_transactions"] > 0, stats["handed_over"] > 0) == (on_loop, not on_loop)
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT payload FROM checkpoints").fetchall() == [(b"kept",)]


async def test_loop_writes_can_be_chosen_for_synchronous_full(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "f.db", synchronous="FULL", loop_writes=True) as store:
        assert (await store.connection_settings())["synchronous"] == 2
        _, run_id, fence = await _leased_run(store, 1)
        await store.save_checkpoint(run_id, "BeforeModel", b"x", fence=fence)
        assert store.write_stats()["handed_over"] == 0
