"""A run's start, a segment's start and a segment's end: one transaction each.

``Store.start_run`` (thread, run, opening rows), ``Store.begin_segment`` (lease, running,
unseal, the state to load) and ``Store.end_segment`` (status, exit, seal, lease release) are
all-or-nothing, with the rules of the separate operations they stand for.
"""

from __future__ import annotations

import asyncio

import pytest

from conformance.support import ANA, BOB, T0, RunCtx, make_run, say, second_instance, texts
from reverie.core.ids import new_id
from reverie.errors import (
    ConflictError,
    LeaseLost,
    NotFoundError,
    RunBusy,
    RunEndedError,
    ThreadBusy,
    UsageError,
)
from reverie.store import RunRecord, Store
from reverie.store.base import StepWrite


def record(run_id: str, thread_id: str = "thr-1", **fields: object) -> RunRecord:
    scope = fields.pop("scope", ANA)
    return RunRecord(
        run_id=run_id,
        thread_id=thread_id,
        scope=scope,  # type: ignore[arg-type]
        agent_name="assistant",
        **fields,  # type: ignore[arg-type]
    )


async def begin(store: Store, run_id: str, owner: str = "w1", **kwargs: object) -> int:
    return (await store.begin_segment(run_id, owner, ttl_s=30, now=T0, **kwargs)).fence  # type: ignore[arg-type]


async def sealed(store: Store, run_id: str) -> bool:
    """Whether the run's input queue refuses a new input (one is queued when it does not)."""
    try:
        await store.enqueue_input(run_id, "steering", {}, input_id=new_id("probe"))
    except RunEndedError:
        return True
    return False


# start_run ----------------------------------------------------------------------------------
async def test_start_run_creates_the_run_and_appends_its_opening_rows(store: Store) -> None:
    await store.create_thread("thr-1", ANA)
    await store.append_items("thr-1", None, say("earlier"), fence=None)
    run = await store.start_run(record("run-1"), say("hello", "world", role="user"))
    assert (run.run_id, run.status) == ("run-1", "queued")
    assert (await store.get_run("run-1")).status == "queued"
    rows = await store.thread_items("thr-1")
    assert texts(rows) == ["earlier", "hello", "world"]
    opening = [(r.seq, r.run_id, r.role) for r in rows[1:]]
    assert opening == [(2, "run-1", "user"), (3, "run-1", "user")]
    assert await store.thread_head("thr-1") == 3


async def test_start_run_creates_a_missing_thread_for_the_runs_owner_when_asked(
    store: Store,
) -> None:
    await store.start_run(record("run-1"), say("hi", role="user"), create_thread=True)
    thread = await store.get_thread("thr-1")
    assert (thread.scope.tenant, thread.scope.user) == (ANA.tenant, ANA.user)
    assert texts(await store.thread_items("thr-1")) == ["hi"]


async def test_start_run_on_an_existing_thread_with_create_thread_keeps_the_thread(
    store: Store,
) -> None:
    await store.create_thread("thr-1", ANA)
    await store.append_items("thr-1", None, say("earlier"), fence=None)
    await store.start_run(record("run-1"), say("next", role="user"), create_thread=True)
    assert texts(await store.thread_items("thr-1")) == ["earlier", "next"]


async def test_start_run_on_a_missing_thread_raises_not_found_and_writes_nothing(
    store: Store,
) -> None:
    with pytest.raises(NotFoundError):
        await store.start_run(record("run-1"), say("hi", role="user"))
    with pytest.raises(NotFoundError):
        await store.get_run("run-1")
    with pytest.raises(NotFoundError):
        await store.get_thread("thr-1")


@pytest.mark.parametrize("create_thread", [False, True])
async def test_start_run_on_another_owners_thread_raises_not_found_and_writes_nothing(
    store: Store, create_thread: bool
) -> None:
    await store.create_thread("thr-1", BOB)
    with pytest.raises(NotFoundError):
        await store.start_run(record("run-1"), say("hi", role="user"), create_thread=create_thread)
    with pytest.raises(NotFoundError):
        await store.get_run("run-1")
    assert await store.thread_head("thr-1") == 0
    assert (await store.get_thread("thr-1")).scope.user == BOB.user


@pytest.mark.parametrize("create_thread", [False, True])
async def test_start_run_on_a_busy_thread_raises_thread_busy_and_writes_nothing(
    store: Store, create_thread: bool
) -> None:
    await store.start_run(record("run-1"), say("first", role="user"), create_thread=True)
    with pytest.raises(ThreadBusy) as busy:
        await store.start_run(
            record("run-2"), say("second", role="user"), create_thread=create_thread
        )
    assert (busy.value.run_id, busy.value.status) == ("run-1", "queued")
    with pytest.raises(NotFoundError):
        await store.get_run("run-2")
    assert texts(await store.thread_items("thr-1")) == ["first"]


async def test_start_run_refused_for_a_duplicate_run_id_creates_no_thread(store: Store) -> None:
    await make_run(store, "run-1")  # thr-1, busy
    with pytest.raises(ConflictError):
        await store.start_run(record("run-1", "thr-new"), say("x"), create_thread=True)
    with pytest.raises(NotFoundError):
        await store.get_thread("thr-new")


@pytest.mark.parametrize("create_thread", [False, True])
async def test_start_run_with_an_existing_idempotency_key_returns_that_run_and_writes_nothing(
    store: Store, create_thread: bool
) -> None:
    first = await store.start_run(
        record("run-1", idempotency_key="k"), say("hi", role="user"), create_thread=True
    )
    again = await store.start_run(
        record("run-2", idempotency_key="k"), say("hi", role="user"), create_thread=create_thread
    )
    assert again.run_id == first.run_id == "run-1"
    assert texts(await store.thread_items("thr-1")) == ["hi"]
    with pytest.raises(NotFoundError):
        await store.get_run("run-2")
    # On another thread the same key still names the run, and that thread is not created.
    elsewhere = await store.start_run(
        record("run-3", "thr-2", idempotency_key="k"), say("x"), create_thread=True
    )
    assert elsewhere.run_id == "run-1"
    with pytest.raises(NotFoundError):
        await store.get_thread("thr-2")


async def test_start_run_idempotency_keys_are_per_owner(store: Store) -> None:
    await store.start_run(record("run-1", idempotency_key="k"), say("a"), create_thread=True)
    other = await store.start_run(
        record("run-2", "thr-2", idempotency_key="k", scope=BOB), say("b"), create_thread=True
    )
    assert other.run_id == "run-2"


async def test_start_run_with_an_existing_run_id_raises_conflict_and_writes_nothing(
    store: Store,
) -> None:
    await store.start_run(record("run-1"), say("a"), create_thread=True)
    await store.set_run_status("run-1", "completed", fence=None)
    with pytest.raises(ConflictError):
        await store.start_run(record("run-1"), say("b"))
    assert texts(await store.thread_items("thr-1")) == ["a"]


async def test_concurrent_start_run_on_one_thread_from_two_connections_admits_exactly_one(
    store: Store,
) -> None:
    await store.create_thread("thr-1", ANA)
    async with second_instance(store) as other:

        async def start(via: Store, n: int) -> str:
            try:
                run = await via.start_run(record(f"run-{n}"), say(f"from {n}", role="user"))
            except ThreadBusy:
                return "busy"
            return run.run_id

        got = await asyncio.gather(*(start(store if n % 2 else other, n) for n in range(8)))
    winners = [g for g in got if g != "busy"]
    assert len(winners) == 1
    rows = await store.thread_items("thr-1")
    assert [(r.run_id, r.content) for r in rows] == [(winners[0], f"from {winners[0][4:]}")]


async def test_concurrent_keyed_start_run_from_two_connections_makes_one_run(
    store: Store,
) -> None:
    async with second_instance(store) as other:

        async def start(via: Store, n: int) -> str:
            rec = record(f"run-{n}", idempotency_key="k")
            try:
                return (await via.start_run(rec, say("hi"), create_thread=True)).run_id
            except ThreadBusy as busy:
                return busy.run_id  # the keyed run got there first and is still active

        got = await asyncio.gather(*(start(store if n % 2 else other, n) for n in range(6)))
    assert len(set(got)) == 1
    assert texts(await store.thread_items("thr-1")) == ["hi"]


# begin_segment ------------------------------------------------------------------------------
async def test_begin_segment_leases_the_run_marks_it_running_and_reads_its_state(
    store: Store,
) -> None:
    await store.create_thread("thr-1", ANA)
    await store.append_items("thr-1", None, say("old", "older"), fence=None)
    await store.start_run(record("run-1"), say("hi", role="user"))
    await store.enqueue_input("run-1", "steering", {"n": 1}, input_id="i1")
    await store.seal_inputs("run-1", after_cursor=1)
    start = await store.begin_segment("run-1", "w1", ttl_s=30, now=T0, window=2)
    assert start.started and start.prior_status == "queued"
    leased = (start.run.status, start.run.lease_owner, start.run.fence)
    assert leased == ("running", "w1", start.fence)
    assert start.checkpoint is None
    assert start.head_seq == 3
    assert texts(start.items) == ["older", "hi"]
    assert [i.input_id for i in start.inputs] == ["i1"]
    run = await store.get_run("run-1")
    assert (run.status, run.lease_owner, run.fence) == ("running", "w1", start.fence)
    assert not await sealed(store, "run-1")  # unsealed


async def test_begin_segment_returns_the_checkpoint_newest_rows_and_unacked_inputs(
    store: Store, run: RunCtx
) -> None:
    await store.append_items(run.thread_id, None, say("a", "b", "c"), fence=None)
    await store.enqueue_input(run.run_id, "steering", {}, input_id="i1")
    await store.enqueue_input(run.run_id, "follow_up", {}, input_id="i2")
    fence = await begin(store, run.run_id)
    step = StepWrite(
        thread_id=run.thread_id, checkpoint_kind="BeforeModel", checkpoint=b"cp", ack_cursor=1
    )
    await store.commit_step(run.run_id, step, fence=fence)
    await store.append_items(run.thread_id, run.run_id, say("mine"), fence=fence)
    await store.supersede_items_after(run.thread_id, run.run_id, 3)
    start = await store.begin_segment(run.run_id, "w1", ttl_s=30, now=T0, window=10)
    assert start.fence == fence + 1
    assert start.prior_status == "running"  # its worker never ended the segment
    assert start.checkpoint is not None
    assert (start.checkpoint.kind, start.checkpoint.payload) == ("BeforeModel", b"cp")
    assert start.head_seq == 4  # superseded rows count
    assert texts(start.items) == ["a", "b", "c"]
    assert [i.input_id for i in start.inputs] == ["i2"]


async def test_begin_segment_without_a_window_reads_no_rows(store: Store, run: RunCtx) -> None:
    await store.append_items(run.thread_id, None, say("a"), fence=None)
    start = await store.begin_segment(run.run_id, "w1", ttl_s=30, now=T0)
    assert (start.head_seq, list(start.items)) == (1, [])


async def test_begin_segment_of_a_run_a_live_owner_holds_raises_run_busy_and_writes_nothing(
    store: Store, run: RunCtx
) -> None:
    held = await store.acquire_lease(run.run_id, "w1", ttl_s=30, now=T0)
    await store.seal_inputs(run.run_id, after_cursor=0)
    with pytest.raises(RunBusy):
        await store.begin_segment(run.run_id, "w2", ttl_s=30, now=T0 + 1)
    after = await store.get_run(run.run_id)
    assert (after.status, after.lease_owner, after.fence) == ("queued", "w1", held)
    assert await sealed(store, run.run_id)


async def test_begin_segment_takes_over_a_dead_owners_lease(store: Store, run: RunCtx) -> None:
    held = await store.acquire_lease(run.run_id, "dead", ttl_s=30, now=T0)
    start = await store.begin_segment(run.run_id, "w2", ttl_s=30, now=T0 + 1, take_over="dead")
    assert (start.fence, start.run.lease_owner) == (held + 1, "w2")


async def test_begin_segment_of_an_expired_lease_takes_it(store: Store, run: RunCtx) -> None:
    await store.acquire_lease(run.run_id, "w1", ttl_s=30, now=T0)
    start = await store.begin_segment(run.run_id, "w2", ttl_s=30, now=T0 + 31)
    assert start.run.lease_owner == "w2"


async def test_begin_segment_of_a_missing_run_raises_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.begin_segment("nope", "w1", ttl_s=30, now=T0)


async def test_begin_segment_of_an_ended_run_only_takes_the_lease(
    store: Store, run: RunCtx
) -> None:
    fence = await begin(store, run.run_id)
    await store.end_segment(run.run_id, "completed", fence=fence, exit={"kind": "reply"})
    start = await store.begin_segment(run.run_id, "w2", ttl_s=30, now=T0, window=5)
    assert not start.started
    assert (start.prior_status, start.run.status, start.run.exit) == (
        "completed",
        "completed",
        {"kind": "reply"},
    )
    assert (start.fence, start.run.lease_owner) == (fence + 1, "w2")
    assert await sealed(store, run.run_id)  # still closed


# end_segment --------------------------------------------------------------------------------
@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
async def test_end_segment_writes_the_status_and_exit_seals_and_releases_the_lease(
    store: Store, run: RunCtx, status: str
) -> None:
    fence = await begin(store, run.run_id)
    ended = await store.end_segment(
        run.run_id,
        status,  # type: ignore[arg-type]
        fence=fence,
        exit={"status": status},
    )
    stored = await store.get_run(run.run_id)
    for rec in (ended, stored):
        assert (rec.status, rec.exit, rec.lease_owner, rec.lease_expires_at) == (
            status,
            {"status": status},
            None,
            None,
        )
        assert rec.fence == fence
    assert await sealed(store, run.run_id)
    assert await store.active_run(run.thread_id) is None


async def test_end_segment_blocked_keeps_the_input_queue_open(store: Store, run: RunCtx) -> None:
    fence = await begin(store, run.run_id)
    ended = await store.end_segment(run.run_id, "blocked", fence=fence, exit={"gate_ref": "g"})
    assert (ended.status, ended.lease_owner) == ("blocked", None)
    assert not await sealed(store, run.run_id)
    # A released lease is free at once: another worker resumes the run.
    assert await store.acquire_lease(run.run_id, "w2", ttl_s=30, now=T0) == fence + 1


async def test_end_segment_without_an_exit_keeps_the_recorded_one(
    store: Store, run: RunCtx
) -> None:
    fence = await begin(store, run.run_id)
    await store.set_run_status(run.run_id, "running", fence=fence, exit={"kind": "earlier"})
    ended = await store.end_segment(run.run_id, "failed", fence=fence)
    assert ended.exit == {"kind": "earlier"}


async def test_end_segment_with_a_stale_fence_raises_lease_lost_and_writes_nothing(
    store: Store, run: RunCtx
) -> None:
    stale = await begin(store, run.run_id)
    await store.acquire_lease(run.run_id, "w2", ttl_s=30, now=T0, force=True)
    with pytest.raises(LeaseLost):
        await store.end_segment(run.run_id, "completed", fence=stale, exit={"x": 1})
    after = await store.get_run(run.run_id)
    assert (after.status, after.exit, after.lease_owner) == ("running", None, "w2")
    assert not await sealed(store, run.run_id)


async def test_end_segment_of_a_missing_run_raises_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.end_segment("nope", "completed", fence=1)


@pytest.mark.parametrize("status", ["queued", "running"])
async def test_end_segment_with_an_active_status_raises_usage_error_and_writes_nothing(
    store: Store, run: RunCtx, status: str
) -> None:
    fence = await begin(store, run.run_id)
    with pytest.raises(UsageError):
        await store.end_segment(run.run_id, status, fence=fence)  # type: ignore[arg-type]
    after = await store.get_run(run.run_id)
    assert (after.status, after.lease_owner) == ("running", "w1")
