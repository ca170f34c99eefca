"""Run leases and fencing tokens: one worker advances a run at a time (DESIGN §6)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from conformance.support import T0, RunCtx, gate, make_run, say
from reverie.errors import LeaseLost, NotFoundError, RunBusy
from reverie.store import Store


async def test_acquire_lease_returns_increasing_fences(store: Store, run: RunCtx) -> None:
    first = await store.acquire_lease(run.run_id, "w1", ttl_s=30, now=T0)
    second = await store.acquire_lease(run.run_id, "w1", ttl_s=30, now=T0 + 1)
    assert second > first
    rec = await store.get_run(run.run_id)
    assert (rec.lease_owner, rec.lease_expires_at, rec.fence) == ("w1", T0 + 31, second)


async def test_acquire_lease_of_unknown_run_raises_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.acquire_lease("nope", "w1", ttl_s=30, now=T0)


async def test_acquire_lease_held_by_another_live_owner_raises_run_busy(
    store: Store, run: RunCtx
) -> None:
    fence = await store.acquire_lease(run.run_id, "w1", ttl_s=30, now=T0)
    with pytest.raises(RunBusy):
        await store.acquire_lease(run.run_id, "w2", ttl_s=30, now=T0 + 29)
    rec = await store.get_run(run.run_id)
    assert (rec.lease_owner, rec.fence) == ("w1", fence)


async def test_acquire_lease_after_expiry_takes_over(store: Store, run: RunCtx) -> None:
    old = await store.acquire_lease(run.run_id, "w1", ttl_s=30, now=T0)
    new = await store.acquire_lease(run.run_id, "w2", ttl_s=30, now=T0 + 30)
    assert new > old
    assert (await store.get_run(run.run_id)).lease_owner == "w2"


async def test_acquire_lease_with_force_takes_over_a_live_lease(store: Store, run: RunCtx) -> None:
    old = await store.acquire_lease(run.run_id, "w1", ttl_s=30, now=T0)
    new = await store.acquire_lease(run.run_id, "w2", ttl_s=30, now=T0 + 1, force=True)
    assert new > old
    assert (await store.get_run(run.run_id)).lease_owner == "w2"


FencedWrite = Callable[[Store, RunCtx, int], Awaitable[None]]
NothingWritten = Callable[[Store, RunCtx], Awaitable[None]]


async def _append(store: Store, ctx: RunCtx, fence: int) -> None:
    await store.append_items(ctx.thread_id, ctx.run_id, say("late"), fence=fence)


async def _no_items(store: Store, ctx: RunCtx) -> None:
    assert await store.thread_items(ctx.thread_id) == []


async def _checkpoint(store: Store, ctx: RunCtx, fence: int) -> None:
    await store.save_checkpoint(ctx.run_id, "BeforeModel", b"late", fence=fence)


async def _no_checkpoint(store: Store, ctx: RunCtx) -> None:
    assert await store.load_checkpoint(ctx.run_id) is None


async def _started(store: Store, ctx: RunCtx, fence: int) -> None:
    await store.journal_started(ctx.run_id, "call-1", "send_email", fence=fence)


async def _finished(store: Store, ctx: RunCtx, fence: int) -> None:
    await store.journal_finished(ctx.run_id, "call-1", {"ok": True}, fence=fence)


async def _no_journal(store: Store, ctx: RunCtx) -> None:
    assert await store.journal_get(ctx.run_id, ["call-1"]) == {}


async def _ack(store: Store, ctx: RunCtx, fence: int) -> None:
    await store.ack_inputs(ctx.run_id, 1, fence=fence)


async def _not_acked(store: Store, ctx: RunCtx) -> None:
    assert [i.acked for i in await store.poll_inputs(ctx.run_id, after_cursor=0)] == [False]


async def _create_gate(store: Store, ctx: RunCtx, fence: int) -> None:
    await store.create_gate(gate(ctx), fence=fence)


async def _no_gate(store: Store, ctx: RunCtx) -> None:
    assert await store.gate_for_call(ctx.run_id, "call-1") is None


async def _status(store: Store, ctx: RunCtx, fence: int) -> None:
    await store.set_run_status(ctx.run_id, "completed", fence=fence)


async def _still_running(store: Store, ctx: RunCtx) -> None:
    assert (await store.get_run(ctx.run_id)).status == "running"


FENCED_WRITES: dict[str, tuple[FencedWrite, NothingWritten]] = {
    "append_items": (_append, _no_items),
    "save_checkpoint": (_checkpoint, _no_checkpoint),
    "journal_started": (_started, _no_journal),
    "journal_finished": (_finished, _no_journal),
    "ack_inputs": (_ack, _not_acked),
    "create_gate": (_create_gate, _no_gate),
    "set_run_status": (_status, _still_running),
}


@pytest.mark.parametrize("write", sorted(FENCED_WRITES))
async def test_old_fence_fails_every_fenced_write_after_takeover(store: Store, write: str) -> None:
    ctx = await make_run(store, status="running")
    await store.enqueue_input(ctx.run_id, "steering", {"text": "hi"}, input_id="in-1")
    old = await store.acquire_lease(ctx.run_id, "w1", ttl_s=30, now=T0)
    await store.acquire_lease(ctx.run_id, "w2", ttl_s=30, now=T0 + 1, force=True)
    act, nothing_written = FENCED_WRITES[write]
    with pytest.raises(LeaseLost):
        await act(store, ctx, old)
    await nothing_written(store, ctx)


@pytest.mark.parametrize("write", sorted(FENCED_WRITES))
async def test_current_fence_is_accepted_by_every_fenced_write(store: Store, write: str) -> None:
    """The write goes through, and the check above would have seen it (so it is not vacuous)."""
    ctx = await make_run(store, status="running")
    await store.enqueue_input(ctx.run_id, "steering", {"text": "hi"}, input_id="in-1")
    fence = await store.acquire_lease(ctx.run_id, "w1", ttl_s=30, now=T0)
    act, nothing_written = FENCED_WRITES[write]
    await act(store, ctx, fence)
    with pytest.raises(AssertionError):
        await nothing_written(store, ctx)


async def test_fenced_write_to_unknown_run_raises_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.save_checkpoint("nope", "BeforeModel", b"x", fence=1)


async def test_renew_lease_extends_expiry(store: Store, run: RunCtx) -> None:
    fence = await store.acquire_lease(run.run_id, "w1", ttl_s=30, now=T0)
    await store.renew_lease(run.run_id, fence, ttl_s=30, now=T0 + 20)
    assert (await store.get_run(run.run_id)).lease_expires_at == T0 + 50
    with pytest.raises(RunBusy):
        await store.acquire_lease(run.run_id, "w2", ttl_s=30, now=T0 + 40)


async def test_renew_lease_with_stale_fence_raises_lease_lost(store: Store, run: RunCtx) -> None:
    old = await store.acquire_lease(run.run_id, "w1", ttl_s=30, now=T0)
    await store.acquire_lease(run.run_id, "w2", ttl_s=30, now=T0 + 31)
    with pytest.raises(LeaseLost):
        await store.renew_lease(run.run_id, old, ttl_s=30, now=T0 + 32)
    assert (await store.get_run(run.run_id)).lease_expires_at == T0 + 61


async def test_release_lease_frees_the_run_for_another_owner(store: Store, run: RunCtx) -> None:
    fence = await store.acquire_lease(run.run_id, "w1", ttl_s=30, now=T0)
    await store.release_lease(run.run_id, fence)
    rec = await store.get_run(run.run_id)
    assert (rec.lease_owner, rec.lease_expires_at, rec.fence) == (None, None, fence)
    assert await store.acquire_lease(run.run_id, "w2", ttl_s=30, now=T0 + 1) > fence


async def test_release_lease_with_stale_fence_does_nothing(store: Store, run: RunCtx) -> None:
    old = await store.acquire_lease(run.run_id, "w1", ttl_s=30, now=T0)
    await store.acquire_lease(run.run_id, "w2", ttl_s=30, now=T0 + 1, force=True)
    await store.release_lease(run.run_id, old)
    assert (await store.get_run(run.run_id)).lease_owner == "w2"


async def test_expired_leases_lists_live_runs_whose_lease_expired_or_was_never_taken(
    store: Store,
) -> None:
    await make_run(store, "never-leased")
    await make_run(store, "expired", status="running")
    await make_run(store, "live", status="running")
    await make_run(store, "ended", status="completed")
    await make_run(store, "blocked", status="blocked")
    await store.acquire_lease("expired", "w1", ttl_s=10, now=T0)
    await store.acquire_lease("live", "w1", ttl_s=60, now=T0)
    found = await store.expired_leases(T0 + 10)
    assert sorted(r.run_id for r in found) == ["expired", "never-leased"]


async def test_take_over_only_succeeds_while_the_dead_owner_still_holds_the_lease(
    store: Store,
) -> None:
    run = await make_run(store)
    await store.acquire_lease(run.run_id, "dead", ttl_s=30, now=T0)
    first = await store.acquire_lease(run.run_id, "w1", ttl_s=30, now=T0 + 1, take_over="dead")
    assert first > 0
    # A second worker that also saw "dead" must not steal the lease from live w1.
    with pytest.raises(RunBusy):
        await store.acquire_lease(run.run_id, "w2", ttl_s=30, now=T0 + 1, take_over="dead")
