"""Runs: creation, idempotency, listing, status and cancel requests (DESIGN §6, §14)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from conformance.support import ANA, BOB, RunCtx, make_run
from reverie.core.scope import Scope
from reverie.errors import ConflictError, LeaseLost, NotFoundError, ThreadBusy
from reverie.store import RunRecord, Store


async def test_create_run_then_get_returns_every_field(store: Store) -> None:
    scope = Scope(tenant="acme", user="ana", agent="helper", project="p1")
    await store.create_thread("thr-1", scope)
    created = await store.create_run(
        RunRecord(
            run_id="run-1",
            thread_id="thr-1",
            scope=scope,
            agent_name="assistant",
            profile="unbound",
            family_id="plan",
            has_actor=False,
            idempotency_key="key-1",
            meta={"origin": "cli", "tags": ["a"]},
        )
    )
    got = await store.get_run("run-1")
    assert got == created
    assert got.scope == scope
    assert (got.status, got.fence, got.lease_owner, got.exit) == ("queued", 0, None, None)
    assert got.profile == "unbound" and got.family_id == "plan" and got.has_actor is False
    assert got.meta == {"origin": "cli", "tags": ["a"]}
    assert got.created_at > 0 and got.updated_at == got.created_at


async def test_get_run_unknown_raises_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.get_run("nope")


async def test_create_run_with_an_existing_idempotency_key_returns_that_run(store: Store) -> None:
    await store.create_thread("thr-1", ANA)
    first = await store.create_run(
        RunRecord(run_id="run-1", thread_id="thr-1", scope=ANA, agent_name="a", idempotency_key="k")
    )
    again = await store.create_run(
        RunRecord(run_id="run-2", thread_id="thr-1", scope=ANA, agent_name="a", idempotency_key="k")
    )
    assert again == first
    with pytest.raises(NotFoundError):
        await store.get_run("run-2")


async def test_idempotency_keys_are_per_owner(store: Store) -> None:
    await store.create_thread("thr-1", ANA)
    await store.create_thread("thr-2", BOB)
    ana = await store.create_run(
        RunRecord(run_id="run-1", thread_id="thr-1", scope=ANA, agent_name="a", idempotency_key="k")
    )
    bob = await store.create_run(
        RunRecord(run_id="run-2", thread_id="thr-2", scope=BOB, agent_name="a", idempotency_key="k")
    )
    assert (ana.run_id, bob.run_id) == ("run-1", "run-2")
    assert (await store.get_run("run-2")).idempotency_key == "k"
    again = await store.create_run(
        RunRecord(run_id="run-3", thread_id="thr-2", scope=BOB, agent_name="a", idempotency_key="k")
    )
    assert again == bob
    listed = await store.list_runs(scope=ANA)
    assert [(r.run_id, r.idempotency_key) for r in listed] == [("run-1", "k")]


async def test_create_run_with_an_existing_run_id_raises_conflict(store: Store) -> None:
    await make_run(store, "run-1")
    with pytest.raises(ConflictError):
        await make_run(store, "run-1")


async def test_list_runs_filters_by_tenant_and_user_newest_first(store: Store) -> None:
    await make_run(store, "run-1", scope=ANA)
    await make_run(store, "run-2", thread_id="thr-2", scope=BOB)
    await make_run(store, "run-3", scope=Scope(tenant="acme", user="ana", agent="other"))
    await make_run(store, "run-4", thread_id="thr-4", scope=Scope(tenant="other", user="ana"))
    ana = await store.list_runs(scope=ANA)
    assert [r.run_id for r in ana] == ["run-3", "run-1"]
    assert [r.run_id for r in await store.list_runs()] == ["run-4", "run-3", "run-2", "run-1"]
    assert [r.run_id for r in await store.list_runs(limit=2)] == ["run-4", "run-3"]


async def test_list_runs_filters_by_status(store: Store) -> None:
    await make_run(store, "run-1")
    await make_run(store, "run-2")
    await make_run(store, "run-3")
    await store.set_run_status("run-1", "completed", fence=None)
    await store.set_run_status("run-3", "blocked", fence=None)
    done = await store.list_runs(statuses=["completed", "blocked"])
    assert [r.run_id for r in done] == ["run-3", "run-1"]
    assert [r.run_id for r in await store.list_runs(scope=ANA, statuses=["queued"])] == ["run-2"]
    assert await store.list_runs(statuses=[]) == []


async def test_list_runs_filters_by_agent_and_thread(store: Store) -> None:
    async def mailer_run(run_id: str, thread_id: str) -> None:
        await store.create_thread(thread_id, ANA)
        await store.create_run(
            RunRecord(run_id=run_id, thread_id=thread_id, scope=ANA, agent_name="mailer")
        )

    await mailer_run("run-1", "thr-1")
    await store.set_run_status("run-1", "completed", fence=None)
    await make_run(store, "run-2", thread_id="thr-1")
    await store.set_run_status("run-2", "completed", fence=None)
    await mailer_run("run-3", "thr-3")
    mailer = await store.list_runs(scope=ANA, agent="mailer")
    assert [r.run_id for r in mailer] == ["run-3", "run-1"]
    assert [r.run_id for r in await store.list_runs(thread_id="thr-1")] == ["run-2", "run-1"]
    both = await store.list_runs(agent="mailer", thread_id="thr-1", statuses=["completed"])
    assert [r.run_id for r in both] == ["run-1"]


async def test_list_runs_pages_by_a_keyset_cursor_without_gaps_or_repeats(store: Store) -> None:
    for n in range(7):
        await make_run(store, f"run-{n}")
    newest_first = [r.run_id for r in await store.list_runs(scope=ANA)]
    seen: list[str] = []
    before = None
    while True:
        page = await store.list_runs(scope=ANA, limit=3, before=before)
        if not page:
            break
        seen += [r.run_id for r in page]
        before = (page[-1].created_at, page[-1].run_id)
    assert seen == newest_first and len(seen) == 7


async def test_set_run_status_records_status_and_exit(store: Store, run: RunCtx) -> None:
    before = await store.get_run(run.run_id)
    rec = await store.set_run_status(
        run.run_id, "failed", fence=None, exit={"kind": "failed", "reason": "model_error"}
    )
    assert await store.get_run(run.run_id) == rec
    assert rec.status == "failed" and rec.exit == {"kind": "failed", "reason": "model_error"}
    assert rec.updated_at >= before.updated_at
    # Without a new exit payload the old one is kept.
    kept = await store.set_run_status(run.run_id, "running", fence=None)
    assert kept.exit == {"kind": "failed", "reason": "model_error"}


async def test_set_run_status_with_stale_fence_raises_lease_lost_and_writes_nothing(
    store: Store, run: RunCtx
) -> None:
    fence = await store.acquire_lease(run.run_id, "w1", ttl_s=30, now=1000.0)
    before = await store.get_run(run.run_id)
    with pytest.raises(LeaseLost):
        await store.set_run_status(run.run_id, "completed", fence=fence - 1, exit={"x": 1})
    assert await store.get_run(run.run_id) == before


async def test_set_run_status_of_unknown_run_raises_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.set_run_status("nope", "completed", fence=None)


async def test_request_cancel_is_recorded_durably(store: Store, run: RunCtx) -> None:
    rec = await store.request_cancel(run.run_id)
    assert rec.cancel_requested
    assert (await store.get_run(run.run_id)).cancel_requested
    with pytest.raises(NotFoundError):
        await store.request_cancel("nope")


@pytest.mark.parametrize("status", ["queued", "running", "blocked"])
async def test_a_thread_holds_one_active_run(store: Store, status: str) -> None:
    first = await make_run(store, "run-1")
    if status != "queued":
        await store.set_run_status(first.run_id, status, fence=None)  # type: ignore[arg-type]
    with pytest.raises(ThreadBusy) as busy:
        await make_run(store, "run-2", thread_id=first.thread_id)
    assert (busy.value.run_id, busy.value.status) == ("run-1", status)
    assert (await store.active_run(first.thread_id)).run_id == "run-1"  # type: ignore[union-attr]
    with pytest.raises(NotFoundError):
        await store.get_run("run-2")


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
async def test_a_thread_whose_run_ended_takes_a_new_run(store: Store, status: str) -> None:
    first = await make_run(store, "run-1")
    await store.set_run_status(first.run_id, status, fence=None)  # type: ignore[arg-type]
    assert await store.active_run(first.thread_id) is None
    second = await make_run(store, "run-2", thread_id=first.thread_id)
    assert (await store.get_run(second.run_id)).status == "queued"


async def test_concurrent_run_creation_on_one_thread_admits_exactly_one(store: Store) -> None:
    await store.create_thread("thr-1", ANA)

    async def create(n: int) -> str:
        try:
            rec = RunRecord(run_id=f"run-{n}", thread_id="thr-1", scope=ANA, agent_name="a")
            return (await store.create_run(rec)).run_id
        except ThreadBusy:
            return "busy"

    got = await asyncio.gather(*(create(n) for n in range(8)))
    assert len([g for g in got if g != "busy"]) == 1


async def test_idempotent_create_on_a_busy_thread_returns_the_keyed_run(store: Store) -> None:
    await store.create_thread("thr-1", ANA)
    keyed = RunRecord(
        run_id="run-1", thread_id="thr-1", scope=ANA, agent_name="a", idempotency_key="k"
    )
    first = await store.create_run(keyed)
    again = await store.create_run(dataclasses.replace(keyed, run_id="run-2"))
    assert again.run_id == first.run_id == "run-1"
