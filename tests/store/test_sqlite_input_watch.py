"""A SQLite store answers an input poll without reading when it knows nothing arrived.

:mod:`reverie.store.sqlite_inputs`: a step commit notes its run's top input cursor, an input
this store enqueues drops the note, and any commit of another connection (another store,
another process) moves the wal-index header's commit counter off what this store last saw.
Whatever the interleaving, a poll answers what a read of the queue would: an input committed
before the poll is seen by it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from reverie.core.ids import new_id
from reverie.core.scope import Scope
from reverie.store import RunRecord, SQLiteStore, TranscriptItem
from reverie.store.base import StepWrite

ANA = Scope(tenant="acme", user="ana")
T0 = 1_000.0
START_TIMEOUT_S = 60.0
"""How long a child process may take to start and enqueue (a loaded machine)."""


async def _leased_run(store: SQLiteStore) -> tuple[str, str, int]:
    """A thread with a run on it, leased: (thread id, run id, fence)."""
    thread_id, run_id = new_id("thr"), new_id("run")
    await store.create_thread(thread_id, ANA)
    await store.create_run(
        RunRecord(run_id=run_id, thread_id=thread_id, scope=ANA, agent_name="assistant")
    )
    fence = await store.acquire_lease(run_id, "w1", ttl_s=600, now=T0)
    return thread_id, run_id, fence


async def _step(store: SQLiteStore, thread_id: str, run_id: str, fence: int, cursor: int) -> None:
    """One step commit of the run: a row and a checkpoint, guarded by ``cursor``."""
    after = await store.thread_head(thread_id)
    item = TranscriptItem(
        ref=new_id("itm"),
        seq=after + 1,
        thread_id=thread_id,
        run_id=run_id,
        role="assistant",
        content="step",
    )
    step = StepWrite(
        thread_id=thread_id,
        items=[item],
        after_seq=after,
        checkpoint_kind="BeforeModel",
        checkpoint=b"state",
        guard_cursor=cursor,
    )
    await store.commit_step(run_id, step, fence=fence)


def _input_reads(statements: list[str]) -> int:
    return sum(1 for s in statements if s.startswith("SELECT") and "FROM inputs" in s)


async def test_a_poll_after_a_step_commit_that_saw_no_input_reads_nothing(
    tmp_path: Path, sqlite_statements: list[str]
) -> None:
    async with SQLiteStore(tmp_path / "watch.db") as store:
        thread_id, run_id, fence = await _leased_run(store)
        await _step(store, thread_id, run_id, fence, 0)
        before = _input_reads(sqlite_statements)
        assert await store.poll_inputs(run_id, after_cursor=0) == []
        assert await store.poll_inputs(run_id, after_cursor=0) == []
        assert _input_reads(sqlite_statements) == before
        # A run no step commit of this store has seen is read.
        _, other, _ = await _leased_run(store)
        assert await store.poll_inputs(other, after_cursor=0) == []
        assert _input_reads(sqlite_statements) == before + 1


async def test_a_poll_past_a_lower_cursor_than_the_queue_top_reads_the_queue(
    tmp_path: Path,
) -> None:
    async with SQLiteStore(tmp_path / "watch.db") as store:
        thread_id, run_id, fence = await _leased_run(store)
        await store.enqueue_input(run_id, "steering", {"text": "a"}, input_id="in-1")
        await _step(store, thread_id, run_id, fence, 1)
        [waiting] = await store.poll_inputs(run_id, after_cursor=0)
        assert waiting.input_id == "in-1"
        assert await store.poll_inputs(run_id, after_cursor=1) == []


async def test_an_input_this_store_enqueues_after_a_step_commit_is_polled(
    tmp_path: Path,
) -> None:
    async with SQLiteStore(tmp_path / "watch.db") as store:
        thread_id, run_id, fence = await _leased_run(store)
        await _step(store, thread_id, run_id, fence, 0)
        assert await store.poll_inputs(run_id, after_cursor=0) == []
        await store.enqueue_input(run_id, "steering", {"text": "a"}, input_id="in-1")
        assert [r.input_id for r in await store.poll_inputs(run_id, after_cursor=0)] == ["in-1"]


async def test_an_input_enqueued_in_the_same_group_commit_as_a_step_is_polled(
    tmp_path: Path,
) -> None:
    async with SQLiteStore(tmp_path / "watch.db") as store:
        thread_id, run_id, fence = await _leased_run(store)
        await _step(store, thread_id, run_id, fence, 0)
        after = await store.thread_head(thread_id)
        item = TranscriptItem(
            ref=new_id("itm"), seq=after + 1, thread_id=thread_id, run_id=run_id, role="assistant"
        )
        step = StepWrite(thread_id=thread_id, items=[item], after_seq=after, guard_cursor=0)
        before = store.write_stats()["loop_transactions"]
        # The step is queued first: its checks read the queue before the input is added.
        await asyncio.gather(
            store.commit_step(run_id, step, fence=fence),
            store.enqueue_input(run_id, "steering", {"text": "a"}, input_id="in-1"),
        )
        assert store.write_stats()["loop_transactions"] == before + 1
        assert [r.input_id for r in await store.poll_inputs(run_id, after_cursor=0)] == ["in-1"]


async def test_an_input_another_store_on_the_file_enqueues_after_a_step_commit_is_polled(
    tmp_path: Path,
) -> None:
    path = tmp_path / "watch.db"
    async with SQLiteStore(path) as store, SQLiteStore(path) as other:
        thread_id, run_id, fence = await _leased_run(store)
        await _step(store, thread_id, run_id, fence, 0)
        assert await store.poll_inputs(run_id, after_cursor=0) == []
        await other.enqueue_input(run_id, "steering", {"text": "a"}, input_id="in-1")
        assert [r.input_id for r in await store.poll_inputs(run_id, after_cursor=0)] == ["in-1"]
        # Another store's unrelated commit sends the next poll to the file too; its answer
        # stays right, and the next step commit makes the watch exact again.
        await other.create_thread("thr-unrelated", ANA)
        assert [r.input_id for r in await store.poll_inputs(run_id, after_cursor=0)] == ["in-1"]
        assert await store.poll_inputs(run_id, after_cursor=1) == []


_ENQUEUER = """
import asyncio, sys
from reverie.store import SQLiteStore

async def main(path, run_id):
    async with SQLiteStore(path) as store:
        await store.enqueue_input(run_id, "steering", {"text": "from afar"}, input_id="in-far")
    print("enqueued", flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def test_an_input_another_process_enqueues_after_a_step_commit_is_polled(
    tmp_path: Path,
) -> None:
    path = tmp_path / "watch.db"
    async with SQLiteStore(path) as store:
        thread_id, run_id, fence = await _leased_run(store)
        await _step(store, thread_id, run_id, fence, 0)
        assert await store.poll_inputs(run_id, after_cursor=0) == []
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _ENQUEUER, str(path), run_id, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await asyncio.wait_for(child.communicate(), START_TIMEOUT_S)
        assert child.returncode == 0 and out.split() == [b"enqueued"]
        polled = await store.poll_inputs(run_id, after_cursor=0)
        assert [r.input_id for r in polled] == ["in-far"]


@contextlib.contextmanager
def _foreign_input_at_settle(
    store: SQLiteStore, path: Path, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[bool]]:
    """Another connection commits an input for the run just after this store's next loop
    ``COMMIT``, before the input watch reads the header that follows; yields what the watch
    was told of that commit (whether it wrote), once it settled."""
    watch = store._watch
    settle = watch.settle
    foreign = sqlite3.connect(path, isolation_level=None)
    wrote_flags: list[bool] = []

    def settle_late(before: bytes | None, *, wrote: bool) -> None:
        if not wrote_flags:  # the COMMIT returned; the header is read next
            foreign.execute(
                "INSERT INTO inputs (run_id, cursor, input_id, kind, payload, created_at)"
                " VALUES (?, 1, 'in-race', 'steering', '{}', 0)",
                (run_id,),
            )
        wrote_flags.append(wrote)
        settle(before, wrote=wrote)

    monkeypatch.setattr(watch, "settle", settle_late)
    try:
        yield wrote_flags
    finally:
        monkeypatch.undo()
        foreign.close()


async def test_a_foreign_commit_landing_just_after_ours_is_not_taken_for_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The narrowest window: another connection commits an input between this store's COMMIT
    # and its read of the header that follows. The counter then moved by two: not ours alone.
    path = tmp_path / "watch.db"
    async with SQLiteStore(path) as store:
        thread_id, run_id, fence = await _leased_run(store)
        await _step(store, thread_id, run_id, fence, 0)
        with _foreign_input_at_settle(store, path, run_id, monkeypatch) as raced:
            await _step(store, thread_id, run_id, fence, 0)
        assert raced
        assert [r.input_id for r in await store.poll_inputs(run_id, after_cursor=0)] == ["in-race"]


async def test_a_foreign_commit_after_a_commit_that_wrote_nothing_is_not_taken_for_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A transaction that changed no rows adds nothing to the counter: one step more is not
    # ours, even though it is the one step a commit that wrote would have added.
    path = tmp_path / "watch.db"
    async with SQLiteStore(path) as store:
        thread_id, run_id, fence = await _leased_run(store)
        await _step(store, thread_id, run_id, fence, 0)
        with _foreign_input_at_settle(store, path, run_id, monkeypatch) as seen:
            await store.create_thread(thread_id, ANA)  # exists: nothing written
        assert seen == [False]
        assert [r.input_id for r in await store.poll_inputs(run_id, after_cursor=0)] == ["in-race"]


async def test_a_store_whose_writes_go_to_the_writer_thread_reads_the_queue_at_every_poll(
    tmp_path: Path, sqlite_statements: list[str]
) -> None:
    async with SQLiteStore(tmp_path / "watch.db", loop_writes=False) as store:
        thread_id, run_id, fence = await _leased_run(store)
        await _step(store, thread_id, run_id, fence, 0)
        before = _input_reads(sqlite_statements)
        assert await store.poll_inputs(run_id, after_cursor=0) == []
        assert _input_reads(sqlite_statements) == before + 1


# every interleaving ---------------------------------------------------------------------------
_ACTIONS = st.lists(
    st.sampled_from(["step", "enqueue_here", "enqueue_there", "other_write", "poll"]),
    min_size=1,
    max_size=12,
)


async def _interleave(path: Path, actions: list[str]) -> None:
    async with SQLiteStore(path) as store, SQLiteStore(path) as other:
        thread_id, run_id, fence = await _leased_run(store)
        cursor = 0  # the highest cursor the run has polled, as the loop keeps it
        for n, action in enumerate(actions):
            if action == "step":
                await _step(store, thread_id, run_id, fence, cursor)
            elif action in ("enqueue_here", "enqueue_there"):
                by = store if action == "enqueue_here" else other
                await by.enqueue_input(run_id, "steering", {"n": n}, input_id=f"in-{n}")
            elif action == "other_write":
                await other.create_thread(f"thr-{n}", ANA)
            else:
                polled = await store.poll_inputs(run_id, after_cursor=cursor)
                with sqlite3.connect(path) as raw:
                    truth = raw.execute(
                        "SELECT cursor FROM inputs WHERE run_id = ? AND cursor > ? ORDER BY cursor",
                        (run_id, cursor),
                    ).fetchall()
                assert [r.cursor for r in polled] == [c for (c,) in truth], actions
                if polled:
                    cursor = polled[-1].cursor


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ACTIONS)
def test_a_poll_answers_what_a_read_of_the_queue_answers_whatever_the_interleaving(
    actions: list[str],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_interleave(Path(tmp) / "watch.db", actions))
