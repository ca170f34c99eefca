"""The step commit: one transaction per loop boundary (``Store.commit_step``, ``thread_head``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from conformance.support import T0, RunCtx, make_run, say, second_instance, texts
from reverie.core.ids import new_id
from reverie.errors import LeaseLost, NotFoundError, RunEndedError, TranscriptConflict, UsageError
from reverie.store import Store, TranscriptItem
from reverie.store.base import JournalWrite, StepWrite


def rows(
    ctx: RunCtx, after: int, *contents: str, run_id: str | None = None
) -> list[TranscriptItem]:
    """Transcript rows with refs and seqs drawn by the writer, following seq ``after``."""
    return [
        TranscriptItem(
            ref=new_id("itm"),
            seq=seq,
            thread_id=ctx.thread_id,
            run_id=ctx.run_id if run_id is None else run_id,
            role="assistant",
            content=content,
            meta={"n": seq},
        )
        for seq, content in enumerate(contents, start=after + 1)
    ]


async def lease(store: Store, ctx: RunCtx, owner: str = "w1") -> int:
    return await store.acquire_lease(ctx.run_id, owner, ttl_s=30, now=T0)


def full_step(ctx: RunCtx, after: int, **fields: Any) -> StepWrite:
    """A step with every part: two items, two journal records, a checkpoint, ack and seal."""
    return StepWrite(
        thread_id=ctx.thread_id,
        items=rows(ctx, after, "call", "result"),
        after_seq=after,
        journal=[
            JournalWrite(call_id="c1", tool="search", state="started"),
            JournalWrite(call_id="c2", tool="fetch", state="finished", outcome={"ok": 2}),
        ],
        checkpoint_kind="BeforeModel",
        checkpoint=b"\x00state",
        ack_cursor=1,
        seal=True,
        **fields,
    )


async def assert_nothing_written(store: Store, ctx: RunCtx, *, head: int = 0) -> None:
    """None of items, journal, checkpoint, ack or seal of a refused step is in the store."""
    assert await store.thread_head(ctx.thread_id) == head
    assert await store.journal_get(ctx.run_id, ["c1", "c2"]) == {}
    assert await store.load_checkpoint(ctx.run_id) is None
    assert [i.acked for i in await store.poll_inputs(ctx.run_id, after_cursor=0)] == [False]
    await store.enqueue_input(ctx.run_id, "steering", {}, input_id="after-refusal")  # not sealed


async def test_commit_step_writes_items_journal_checkpoint_ack_and_seal(
    store: Store, run: RunCtx
) -> None:
    await store.enqueue_input(run.run_id, "steering", {}, input_id="i1")
    fence = await lease(store, run)
    step = full_step(run, 0, guard_cursor=1)
    receipt = await store.commit_step(run.run_id, step, fence=fence)
    assert (receipt.head_seq, receipt.inputs_waiting, receipt.cancel_requested) == (2, False, False)
    assert await store.thread_items(run.thread_id) == list(step.items)
    assert await store.get_items([step.items[1].ref]) == [step.items[1]]
    journal = await store.journal_get(run.run_id, ["c1", "c2"])
    assert (journal["c1"].state, journal["c1"].tool, journal["c1"].outcome) == (
        "started",
        "search",
        None,
    )
    assert (journal["c2"].state, journal["c2"].tool, journal["c2"].outcome) == (
        "finished",
        "fetch",
        {"ok": 2},
    )
    checkpoint = await store.load_checkpoint(run.run_id)
    assert checkpoint is not None
    assert (checkpoint.kind, checkpoint.payload) == ("BeforeModel", b"\x00state")
    assert [i.acked for i in await store.poll_inputs(run.run_id, after_cursor=0)] == [True]
    with pytest.raises(RunEndedError):
        await store.enqueue_input(run.run_id, "steering", {}, input_id="i2")


async def test_commit_step_with_a_stale_fence_writes_nothing(store: Store, run: RunCtx) -> None:
    await store.enqueue_input(run.run_id, "steering", {}, input_id="i1")
    stale = await lease(store, run)
    await store.acquire_lease(run.run_id, "w2", ttl_s=30, now=T0, force=True)
    with pytest.raises(LeaseLost):
        await store.commit_step(run.run_id, full_step(run, 0), fence=stale)
    await assert_nothing_written(store, run)


async def test_commit_step_after_a_foreign_append_raises_transcript_conflict_and_writes_nothing(
    store: Store, run: RunCtx
) -> None:
    await store.enqueue_input(run.run_id, "steering", {}, input_id="i1")
    fence = await lease(store, run)
    await store.append_items(run.thread_id, None, say("foreign"), fence=None)
    with pytest.raises(TranscriptConflict):
        await store.commit_step(run.run_id, full_step(run, 0), fence=fence)
    await assert_nothing_written(store, run, head=1)
    assert texts(await store.thread_items(run.thread_id)) == ["foreign"]


async def test_commit_step_on_a_missing_thread_raises_not_found_and_writes_nothing(
    store: Store, run: RunCtx
) -> None:
    await store.enqueue_input(run.run_id, "steering", {}, input_id="i1")
    fence = await lease(store, run)
    step = StepWrite(
        thread_id="no-such-thread",
        journal=[JournalWrite(call_id="c1", tool="search", state="started")],
        checkpoint_kind="BeforeModel",
        checkpoint=b"x",
        ack_cursor=1,
        seal=True,
    )
    with pytest.raises(NotFoundError):
        await store.commit_step(run.run_id, step, fence=fence)
    await assert_nothing_written(store, run)


async def test_commit_step_for_a_missing_run_raises_not_found(store: Store, run: RunCtx) -> None:
    with pytest.raises(NotFoundError):
        await store.commit_step("no-such-run", StepWrite(thread_id=run.thread_id), fence=1)


async def test_commit_step_items_must_follow_after_seq_without_a_gap(
    store: Store, run: RunCtx
) -> None:
    fence = await lease(store, run)
    gap = StepWrite(thread_id=run.thread_id, items=rows(run, 1, "skips seq 1"), after_seq=0)
    with pytest.raises(UsageError):
        await store.commit_step(run.run_id, gap, fence=fence)
    assert await store.thread_head(run.thread_id) == 0


async def test_commit_step_items_take_the_run_id_of_the_committing_run(
    store: Store, run: RunCtx
) -> None:
    fence = await lease(store, run)
    items = rows(run, 0, "orphan", run_id="other-run")
    await store.commit_step(
        run.run_id, StepWrite(thread_id=run.thread_id, items=items, after_seq=0), fence=fence
    )
    [stored] = await store.thread_items(run.thread_id)
    assert stored.run_id == run.run_id
    assert (stored.ref, stored.seq, stored.content) == (items[0].ref, 1, "orphan")


async def test_consecutive_steps_follow_the_head_of_the_previous_receipt(
    store: Store, run: RunCtx
) -> None:
    fence = await lease(store, run)
    head = 0
    for n in range(3):
        items = rows(run, head, f"a{n}", f"b{n}")
        step = StepWrite(thread_id=run.thread_id, items=items, after_seq=head)
        head = (await store.commit_step(run.run_id, step, fence=fence)).head_seq
    assert head == 6 == await store.thread_head(run.thread_id)
    window = await store.thread_items(run.thread_id, last=3)
    assert texts(window) == ["b1", "a2", "b2"]


async def test_guarded_parts_are_skipped_when_an_input_past_guard_cursor_waits(
    store: Store, run: RunCtx
) -> None:
    await store.enqueue_input(run.run_id, "steering", {}, input_id="i1")
    await store.enqueue_input(run.run_id, "steering", {}, input_id="i2")
    fence = await lease(store, run)
    step = full_step(run, 0, guard_cursor=1)
    receipt = await store.commit_step(run.run_id, step, fence=fence)
    assert (receipt.inputs_waiting, receipt.head_seq) == (True, 2)
    assert await store.thread_items(run.thread_id) == list(step.items)  # items commit
    assert set(await store.journal_get(run.run_id, ["c1", "c2"])) == {"c1", "c2"}  # journal too
    assert await store.load_checkpoint(run.run_id) is None
    assert [i.acked for i in await store.poll_inputs(run.run_id, after_cursor=0)] == [False, False]
    await store.enqueue_input(run.run_id, "steering", {}, input_id="i3")  # not sealed


async def test_guarded_parts_are_written_when_no_input_is_past_guard_cursor(
    store: Store, run: RunCtx
) -> None:
    await store.enqueue_input(run.run_id, "steering", {}, input_id="i1")
    await store.enqueue_input(run.run_id, "steering", {}, input_id="i2")
    fence = await lease(store, run)
    step = StepWrite(
        thread_id=run.thread_id,
        checkpoint_kind="BeforeSideEffect",
        checkpoint=b"cp",
        ack_cursor=2,
        guard_cursor=2,
    )
    receipt = await store.commit_step(run.run_id, step, fence=fence)
    assert receipt.inputs_waiting is False
    checkpoint = await store.load_checkpoint(run.run_id)
    assert checkpoint is not None and checkpoint.kind == "BeforeSideEffect"
    assert [i.acked for i in await store.poll_inputs(run.run_id, after_cursor=0)] == [True, True]


async def test_guarded_parts_are_always_written_without_a_guard_cursor(
    store: Store, run: RunCtx
) -> None:
    await store.enqueue_input(run.run_id, "steering", {}, input_id="i1")
    await store.enqueue_input(run.run_id, "steering", {}, input_id="i2")
    fence = await lease(store, run)
    step = StepWrite(thread_id=run.thread_id, checkpoint_kind="Final", checkpoint=b"end", seal=True)
    receipt = await store.commit_step(run.run_id, step, fence=fence)
    assert receipt.inputs_waiting is False
    checkpoint = await store.load_checkpoint(run.run_id)
    assert checkpoint is not None and checkpoint.payload == b"end"
    with pytest.raises(RunEndedError):
        await store.enqueue_input(run.run_id, "steering", {}, input_id="i3")


async def test_a_step_replaces_the_previous_checkpoint(store: Store, run: RunCtx) -> None:
    fence = await lease(store, run)
    await store.save_checkpoint(run.run_id, "BeforeModel", b"old", fence=fence)
    step = StepWrite(thread_id=run.thread_id, checkpoint_kind="BeforeBlock", checkpoint=b"new")
    await store.commit_step(run.run_id, step, fence=fence)
    checkpoint = await store.load_checkpoint(run.run_id)
    assert checkpoint is not None
    assert (checkpoint.kind, checkpoint.payload) == ("BeforeBlock", b"new")


async def test_enqueue_after_a_sealing_step_raises_run_ended(store: Store, run: RunCtx) -> None:
    fence = await lease(store, run)
    step = StepWrite(thread_id=run.thread_id, seal=True, guard_cursor=0)
    assert (await store.commit_step(run.run_id, step, fence=fence)).inputs_waiting is False
    with pytest.raises(RunEndedError):
        await store.enqueue_input(run.run_id, "follow_up", {}, input_id="late")
    assert await store.poll_inputs(run.run_id, after_cursor=0) == []
    await store.unseal_inputs(run.run_id)
    await store.enqueue_input(run.run_id, "follow_up", {}, input_id="late")


async def test_an_input_enqueued_before_a_sealing_step_is_reported_and_the_run_stays_open(
    store: Store, run: RunCtx
) -> None:
    fence = await lease(store, run)
    early = await store.enqueue_input(run.run_id, "follow_up", {}, input_id="early")
    step = StepWrite(thread_id=run.thread_id, seal=True, guard_cursor=0)
    assert (await store.commit_step(run.run_id, step, fence=fence)).inputs_waiting is True
    more = await store.enqueue_input(run.run_id, "follow_up", {}, input_id="more")
    assert await store.poll_inputs(run.run_id, after_cursor=0) == [early, more]


async def test_step_ack_marks_inputs_up_to_the_cursor_as_ack_inputs_does(
    store: Store,
) -> None:
    by_step = await make_run(store, "run-step")
    by_call = await make_run(store, "run-call")
    for ctx in (by_step, by_call):
        for n in range(1, 5):
            await store.enqueue_input(ctx.run_id, "steering", {}, input_id=f"i{n}")
    await store.ack_inputs(by_call.run_id, 1, fence=await lease(store, by_call))
    await store.ack_inputs(by_call.run_id, 3, fence=await lease(store, by_call))
    fence = await lease(store, by_step)
    for cursor in (1, 3):
        step = StepWrite(thread_id=by_step.thread_id, ack_cursor=cursor)
        await store.commit_step(by_step.run_id, step, fence=fence)
    acked = [
        [i.acked for i in await store.poll_inputs(ctx.run_id, after_cursor=0)]
        for ctx in (by_step, by_call)
    ]
    assert acked[0] == acked[1] == [True, True, True, False]


async def test_journal_started_in_a_step_never_overwrites_finished(
    store: Store, run: RunCtx
) -> None:
    fence = await lease(store, run)
    steps = [
        [JournalWrite(call_id="c1", tool="send", state="started")],
        [JournalWrite(call_id="c1", tool="", state="finished", outcome={"sent": True})],
        [JournalWrite(call_id="c1", tool="send", state="started")],
    ]
    for journal in steps:
        step = StepWrite(thread_id=run.thread_id, journal=journal)
        await store.commit_step(run.run_id, step, fence=fence)
    entry = (await store.journal_get(run.run_id, ["c1"]))["c1"]
    assert (entry.state, entry.tool, entry.outcome) == ("finished", "send", {"sent": True})


async def test_journal_records_of_one_step_apply_in_order(store: Store, run: RunCtx) -> None:
    fence = await lease(store, run)
    await store.journal_finished(run.run_id, "c0", {"was": "before"}, fence=fence)
    journal = [
        JournalWrite(call_id="c1", tool="send", state="started"),
        JournalWrite(call_id="c1", tool="send", state="finished", outcome={"n": 1}),
        JournalWrite(call_id="c0", tool="late", state="started"),
    ]
    await store.commit_step(
        run.run_id, StepWrite(thread_id=run.thread_id, journal=journal), fence=fence
    )
    found = await store.journal_get(run.run_id, ["c0", "c1"])
    assert (found["c1"].state, found["c1"].outcome) == ("finished", {"n": 1})
    assert (found["c0"].state, found["c0"].outcome) == ("finished", {"was": "before"})


async def test_the_receipt_reports_cancel_requested_set_by_request_cancel(
    store: Store, run: RunCtx
) -> None:
    fence = await lease(store, run)
    step = StepWrite(thread_id=run.thread_id)
    assert (await store.commit_step(run.run_id, step, fence=fence)).cancel_requested is False
    await store.request_cancel(run.run_id)
    assert (await store.commit_step(run.run_id, step, fence=fence)).cancel_requested is True


async def test_thread_head_counts_superseded_rows(store: Store, run: RunCtx) -> None:
    fence = await lease(store, run)
    await store.append_items(run.thread_id, run.run_id, say("a", "b", "c"), fence=fence)
    assert await store.supersede_items_after(run.thread_id, run.run_id, 1) == 2
    assert texts(await store.thread_items(run.thread_id)) == ["a"]
    assert await store.thread_head(run.thread_id) == 3
    step = StepWrite(thread_id=run.thread_id, items=rows(run, 3, "d"), after_seq=3)
    assert (await store.commit_step(run.run_id, step, fence=fence)).head_seq == 4
    assert texts(await store.thread_items(run.thread_id)) == ["a", "d"]


async def test_thread_head_of_an_empty_thread_is_zero(store: Store, run: RunCtx) -> None:
    assert await store.thread_head(run.thread_id) == 0


async def test_thread_head_of_a_missing_thread_raises_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.thread_head("no-such-thread")


async def race(store: Store, producer: Store, ctx: RunCtx) -> None:
    """Enqueue inputs through ``producer`` while ``store`` seals the run with step commits."""
    fence = await lease(store, ctx)
    accepted: list[int] = []
    started = asyncio.Event()

    async def produce() -> None:
        for n in range(200):
            try:
                rec = await producer.enqueue_input(
                    ctx.run_id, "follow_up", {"n": n}, input_id=f"i{n}"
                )
            except RunEndedError:
                return
            finally:
                started.set()
            accepted.append(rec.cursor)

    async def seal() -> int:
        await started.wait()
        seen = 0
        while True:
            step = StepWrite(thread_id=ctx.thread_id, ack_cursor=seen, seal=True, guard_cursor=seen)
            receipt = await store.commit_step(ctx.run_id, step, fence=fence)
            if not receipt.inputs_waiting:
                return seen
            seen = (await store.poll_inputs(ctx.run_id, after_cursor=seen))[-1].cursor

    _, seen = await asyncio.gather(produce(), seal())
    assert accepted and max(accepted) <= seen  # every accepted input was delivered
    delivered = await store.poll_inputs(ctx.run_id, after_cursor=0)
    assert [i.cursor for i in delivered] == sorted(accepted)
    assert all(i.acked for i in delivered)


async def test_concurrent_commit_step_and_enqueue_input_never_lose_an_input(store: Store) -> None:
    async with second_instance(store) as producer:
        for attempt in range(4):
            await race(store, producer, await make_run(store, f"run-race{attempt}"))
