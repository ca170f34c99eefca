"""Threads and the append-only transcript (DESIGN §6)."""

from __future__ import annotations

import pytest

from conformance.support import ANA, BOB, RunCtx, make_run, say, texts
from reverie.core.messages import ToolCall
from reverie.errors import NotFoundError
from reverie.store import NewItem, Store


async def test_create_thread_then_get_returns_it_with_its_scope(store: Store) -> None:
    created = await store.create_thread("thr-9", ANA)
    got = await store.get_thread("thr-9")
    assert got == created
    assert got.scope == ANA
    assert got.created_at > 0


async def test_create_thread_again_returns_the_existing_thread(store: Store) -> None:
    first = await store.create_thread("thr-9", ANA)
    again = await store.create_thread("thr-9", BOB)
    assert again == first


async def test_get_thread_unknown_raises_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.get_thread("nope")


async def test_append_to_unknown_thread_raises_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.append_items("nope", None, say("hi"), fence=None)


async def test_appended_items_round_trip_every_field(store: Store, run: RunCtx) -> None:
    call = ToolCall(id="c1", name="add", arguments={"a": 1, "b": [2, 3]})
    item = NewItem(
        role="assistant",
        content="thinking…",
        tool_calls=(call,),
        tool_call_id=None,
        name=None,
        input_id="in-1",
        meta={"usage": {"tokens": 7}},
    )
    [written] = await store.append_items(run.thread_id, run.run_id, [item], fence=None)
    [read] = await store.get_items([written.ref])
    assert read == written
    assert read.tool_calls == (call,)
    assert read.meta == {"usage": {"tokens": 7}}
    assert read.run_id == run.run_id and read.input_id == "in-1" and not read.superseded


async def test_transcript_seq_is_monotonic_and_gap_free_per_thread(store: Store) -> None:
    await store.create_thread("a", ANA)
    await store.create_thread("b", ANA)
    first = await store.append_items("a", None, say("1", "2"), fence=None)
    other = await store.append_items("b", None, say("x"), fence=None)
    second = await store.append_items("a", None, say("3"), fence=None)
    assert [i.seq for i in first + second] == [1, 2, 3]
    assert [i.seq for i in other] == [1]
    assert len({i.ref for i in first + second + other}) == 4


async def test_transcript_is_append_only_earlier_rows_are_unchanged(store: Store) -> None:
    await store.create_thread("a", ANA)
    before = await store.append_items("a", None, say("1"), fence=None)
    await store.append_items("a", None, say("2"), fence=None)
    assert await store.get_items([before[0].ref]) == before


async def test_get_items_returns_rows_in_the_order_asked(store: Store, run: RunCtx) -> None:
    rows = await store.append_items(run.thread_id, None, say("a", "b", "c"), fence=None)
    refs = [rows[2].ref, rows[0].ref, rows[2].ref, rows[1].ref]
    assert texts(await store.get_items(refs)) == ["c", "a", "c", "b"]


async def test_get_items_unknown_ref_raises_not_found(store: Store, run: RunCtx) -> None:
    rows = await store.append_items(run.thread_id, None, say("a"), fence=None)
    with pytest.raises(NotFoundError):
        await store.get_items([rows[0].ref, "itm_missing"])


async def test_thread_items_upto_seq_and_last(store: Store, run: RunCtx) -> None:
    await store.append_items(run.thread_id, None, say("1", "2", "3", "4"), fence=None)
    assert texts(await store.thread_items(run.thread_id)) == ["1", "2", "3", "4"]
    assert texts(await store.thread_items(run.thread_id, upto_seq=2)) == ["1", "2"]
    assert texts(await store.thread_items(run.thread_id, last=3)) == ["2", "3", "4"]
    assert texts(await store.thread_items(run.thread_id, upto_seq=3, last=2)) == ["2", "3"]
    assert await store.thread_items(run.thread_id, last=0) == []


async def test_thread_items_of_unknown_thread_raises_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.thread_items("nope")


async def test_thread_items_skip_superseded_rows(store: Store, run: RunCtx) -> None:
    await store.append_items(run.thread_id, run.run_id, say("1", "2", "3"), fence=None)
    assert texts(await store.thread_items(run.thread_id)) == ["1", "2", "3"]
    assert await store.supersede_items_after(run.thread_id, run.run_id, 1) == 2
    rows = await store.thread_items(run.thread_id)
    assert texts(rows) == ["1"]
    assert await store.thread_items(run.thread_id, last=2) == rows


async def test_superseded_rows_stay_readable_by_ref_and_marked(store: Store, run: RunCtx) -> None:
    rows = await store.append_items(run.thread_id, run.run_id, say("1", "2"), fence=None)
    assert await store.get_items([r.ref for r in rows]) == rows  # read once before
    await store.supersede_items_after(run.thread_id, run.run_id, 1)
    [kept, dropped] = await store.get_items([r.ref for r in rows])
    assert kept == rows[0]
    assert dropped.superseded and dropped.content == "2"


async def test_supersede_marks_only_that_runs_rows_after_the_seq(store: Store) -> None:
    ctx = await make_run(store, "run-1", status="completed")
    await make_run(store, "run-2", thread_id=ctx.thread_id)
    await store.append_items(ctx.thread_id, "run-1", say("a1"), fence=None)  # seq 1
    await store.append_items(ctx.thread_id, "run-2", say("b2"), fence=None)  # seq 2
    await store.append_items(ctx.thread_id, "run-1", say("a3", "a4"), fence=None)  # seq 3, 4
    await store.append_items(ctx.thread_id, "run-2", say("b5"), fence=None)  # seq 5
    assert await store.supersede_items_after(ctx.thread_id, "run-1", 3) == 1
    assert texts(await store.thread_items(ctx.thread_id)) == ["a1", "b2", "a3", "b5"]
    # Already superseded rows are not counted again.
    assert await store.supersede_items_after(ctx.thread_id, "run-1", 0) == 2


async def test_new_rows_after_supersede_continue_the_seq(store: Store, run: RunCtx) -> None:
    await store.append_items(run.thread_id, run.run_id, say("1", "2"), fence=None)
    await store.supersede_items_after(run.thread_id, run.run_id, 1)
    [again] = await store.append_items(run.thread_id, run.run_id, say("2'"), fence=None)
    assert again.seq == 3
    assert [r.seq for r in await store.thread_items(run.thread_id)] == [1, 3]
