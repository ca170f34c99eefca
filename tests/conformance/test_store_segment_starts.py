"""A run's start and its first segment's start in one transaction (``SegmentStarts``).

``start_segment`` is ``start_run`` and then ``begin_segment`` of the new run: the rules and
refusals of ``start_run`` hold, and the answer is what ``begin_segment`` would have read.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from conformance.support import ANA, BOB, T0, make_run, say, texts
from reverie.core.transcript import NewItem
from reverie.errors import ConflictError, LeaseLost, NotFoundError, RunBusy, ThreadBusy
from reverie.store import RunRecord, Store
from reverie.store.base import SegmentStart, SegmentStarts, StepWrite


def record(run_id: str, thread_id: str = "thr-1", **fields: object) -> RunRecord:
    scope = fields.pop("scope", ANA)
    return RunRecord(
        run_id=run_id,
        thread_id=thread_id,
        scope=scope,  # type: ignore[arg-type]
        agent_name="assistant",
        **fields,  # type: ignore[arg-type]
    )


async def start(
    store: Store,
    run: RunRecord,
    items: Sequence[NewItem],
    *,
    create_thread: bool = False,
    window: int = 0,
    owner: str = "w1",
) -> SegmentStart:
    assert isinstance(store, SegmentStarts)
    return await store.start_segment(
        run, items, owner=owner, ttl_s=30, now=T0, create_thread=create_thread, window=window
    )


async def test_every_backend_starts_a_run_with_its_segment(store: Store) -> None:
    assert isinstance(store, SegmentStarts)


async def test_start_segment_on_a_new_thread_leases_the_run_running_with_its_opening_rows(
    store: Store,
) -> None:
    begun = await start(
        store, record("run-1"), say("hi", "there", role="user"), create_thread=True, window=8
    )
    assert begun.started and begun.prior_status == "queued"
    assert (begun.run.status, begun.run.lease_owner, begun.run.fence) == (
        "running",
        "w1",
        begun.fence,
    )
    assert begun.run.lease_expires_at == T0 + 30
    assert (begun.checkpoint, list(begun.inputs), begun.head_seq) == (None, [], 2)
    assert texts(begun.items) == ["hi", "there"]
    assert [(i.seq, i.run_id, i.thread_id) for i in begun.items] == [
        (1, "run-1", "thr-1"),
        (2, "run-1", "thr-1"),
    ]
    stored = await store.get_run("run-1")
    assert (stored.status, stored.lease_owner, stored.fence) == ("running", "w1", begun.fence)
    assert [(r.ref, r.content) for r in await store.thread_items("thr-1")] == [
        (i.ref, i.content) for i in begun.items
    ]
    assert (await store.get_thread("thr-1")).scope == ANA


async def test_start_segment_reads_what_begin_segment_would_on_an_existing_thread(
    store: Store,
) -> None:
    await store.create_thread("thr-1", ANA)
    await store.append_items("thr-1", None, say("old", "older"), fence=None)
    begun = await start(store, record("run-1"), say("hi", role="user"), window=2)
    assert begun.head_seq == 3
    assert texts(begun.items) == ["older", "hi"]
    newest = await store.thread_items("thr-1", last=2)
    assert [(i.ref, i.seq) for i in begun.items] == [(i.ref, i.seq) for i in newest]
    narrow = await start(store, record("run-2", "thr-2"), say("a", "b"), create_thread=True)
    assert (narrow.head_seq, list(narrow.items)) == (2, [])  # no window: no rows
    one = await start(store, record("run-3", "thr-3"), say("a", "b"), create_thread=True, window=1)
    assert texts(one.items) == ["b"]


async def test_a_started_segment_holds_the_lease_and_its_fence(store: Store) -> None:
    begun = await start(store, record("run-1"), say("hi"), create_thread=True)
    with pytest.raises(RunBusy):
        await store.begin_segment("run-1", "w2", ttl_s=30, now=T0 + 1)
    await store.renew_lease("run-1", begun.fence, ttl_s=30, now=T0 + 5)
    receipt = await store.commit_step(
        "run-1",
        StepWrite(thread_id="thr-1", checkpoint_kind="BeforeModel", checkpoint=b"{}"),
        fence=begun.fence,
    )
    assert not receipt.cancel_requested
    with pytest.raises(LeaseLost):
        await store.end_segment("run-1", "completed", fence=begun.fence + 1)
    ended = await store.end_segment("run-1", "completed", fence=begun.fence)
    assert (ended.status, ended.lease_owner) == ("completed", None)


async def test_a_run_started_with_its_segment_is_its_threads_active_run(store: Store) -> None:
    await start(store, record("run-1"), say("hi"), create_thread=True)
    with pytest.raises(ThreadBusy):
        await store.start_run(record("run-2"), say("again"))
    assert [r.run_id for r in await store.list_runs(statuses=["running"])] == ["run-1"]


async def test_start_segment_on_a_busy_thread_raises_thread_busy_and_writes_nothing(
    store: Store,
) -> None:
    ctx = await make_run(store, "run-1")
    with pytest.raises(ThreadBusy):
        await start(store, record("run-2", ctx.thread_id), say("x"), window=4)
    with pytest.raises(NotFoundError):
        await store.get_run("run-2")
    assert texts(await store.thread_items(ctx.thread_id)) == []


async def test_start_segment_on_a_missing_or_another_owners_thread_raises_not_found(
    store: Store,
) -> None:
    with pytest.raises(NotFoundError):
        await start(store, record("run-1", "thr-missing"), say("x"))
    await store.create_thread("thr-bob", BOB)
    with pytest.raises(NotFoundError):
        await start(store, record("run-2", "thr-bob"), say("x"), create_thread=True)
    for run_id in ("run-1", "run-2"):
        with pytest.raises(NotFoundError):
            await store.get_run(run_id)
    assert texts(await store.thread_items("thr-bob")) == []


async def test_start_segment_refused_for_a_duplicate_run_id_creates_no_thread(
    store: Store,
) -> None:
    await make_run(store, "run-1")
    with pytest.raises(ConflictError):
        await start(store, record("run-1", "thr-new"), say("x"), create_thread=True)
    with pytest.raises(NotFoundError):
        await store.get_thread("thr-new")
    assert (await store.get_run("run-1")).status == "queued"


async def test_start_segment_with_an_existing_idempotency_key_returns_that_run_unleased(
    store: Store,
) -> None:
    first = await store.start_run(
        record("run-1", idempotency_key="k"), say("hi", role="user"), create_thread=True
    )
    again = await start(
        store, record("run-2", "thr-2", idempotency_key="k"), say("hi"), create_thread=True
    )
    assert again.run.run_id == first.run_id == "run-1"
    assert (again.run.status, again.run.lease_owner) == ("queued", None)
    assert (await store.get_run("run-1")).lease_owner is None
    with pytest.raises(NotFoundError):
        await store.get_run("run-2")
    with pytest.raises(NotFoundError):
        await store.get_thread("thr-2")
    assert texts(await store.thread_items("thr-1")) == ["hi"]


async def test_a_keyed_start_segment_on_an_existing_thread_reads_its_older_rows(
    store: Store,
) -> None:
    await store.create_thread("thr-1", ANA)
    await store.append_items("thr-1", None, say("old"), fence=None)
    begun = await start(store, record("run-1", idempotency_key="k"), say("hi"), window=8)
    assert (begun.run.run_id, begun.run.status, begun.head_seq) == ("run-1", "running", 2)
    assert texts(begun.items) == ["old", "hi"]
