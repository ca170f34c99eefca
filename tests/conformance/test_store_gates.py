"""Gates: pending until approved or denied, exactly once (DESIGN §8)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import pytest

from conformance.support import ANA, BOB, T0, RunCtx, gate, make_run
from reverie.errors import GateResolvedError, NotFoundError
from reverie.store import GateRecord, GateResolution, Store


@pytest.fixture
async def fence(store: Store, run: RunCtx) -> int:
    """The run's current fencing token."""
    return await store.acquire_lease(run.run_id, "w1", ttl_s=30, now=T0)


async def test_create_gate_then_get_returns_it(store: Store, run: RunCtx, fence: int) -> None:
    created = await store.create_gate(gate(run), fence=fence)
    assert created == gate(run)
    got = await store.get_gate("gate-1")
    assert got == created
    assert (got.status, got.kind, got.reason, got.resolved_at) == (
        "pending",
        "approval",
        None,
        None,
    )
    assert got.arguments == {"to": "ana@example.com"} and got.scope == ANA


async def test_create_gate_for_the_same_call_returns_the_existing_gate(
    store: Store, run: RunCtx, fence: int
) -> None:
    first = await store.create_gate(gate(run, "gate-1"), fence=fence)
    again = await store.create_gate(gate(run, "gate-2", created_at=T0 + 5), fence=fence)
    assert again == first
    with pytest.raises(NotFoundError):
        await store.get_gate("gate-2")


async def test_get_gate_unknown_raises_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.get_gate("nope")


async def test_gate_for_call_finds_the_gate_of_that_call(
    store: Store, run: RunCtx, fence: int
) -> None:
    created = await store.create_gate(gate(run), fence=fence)
    assert await store.gate_for_call(run.run_id, "call-1") == created
    assert await store.gate_for_call(run.run_id, "call-2") is None
    assert await store.gate_for_call("other-run", "call-1") is None


async def test_resolve_gate_once_then_a_second_resolution_raises(
    store: Store, run: RunCtx, fence: int
) -> None:
    await store.create_gate(gate(run), fence=fence)
    approved = await store.resolve_gate("gate-1", "approved", reason=None, now=T0 + 9)
    assert (approved.status, approved.resolved_at) == ("approved", T0 + 9)
    assert await store.get_gate("gate-1") == approved
    with pytest.raises(GateResolvedError):
        await store.resolve_gate("gate-1", "denied", reason="too late", now=T0 + 10)
    assert await store.get_gate("gate-1") == approved


async def test_deny_records_the_reason(store: Store, run: RunCtx, fence: int) -> None:
    await store.create_gate(gate(run), fence=fence)
    denied = await store.resolve_gate("gate-1", "denied", reason="not now", now=T0 + 1)
    assert (await store.get_gate("gate-1")) == denied
    assert (denied.status, denied.reason) == ("denied", "not now")


async def test_resolve_unknown_gate_raises_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.resolve_gate("nope", "approved", reason=None, now=T0)


def refs(gates: Iterable[GateRecord]) -> list[str]:
    return [g.ref for g in gates]


async def test_list_gates_filters_by_scope_and_status_newest_first(store: Store) -> None:
    ana = await make_run(store, "run-a", scope=ANA)
    bob = await make_run(store, "run-b", thread_id="thr-b", scope=BOB)
    fa = await store.acquire_lease(ana.run_id, "w1", ttl_s=30, now=T0)
    fb = await store.acquire_lease(bob.run_id, "w1", ttl_s=30, now=T0)
    await store.create_gate(gate(ana, "g1", call_id="c1", created_at=T0 + 1), fence=fa)
    await store.create_gate(gate(ana, "g2", call_id="c2", created_at=T0 + 2), fence=fa)
    await store.create_gate(gate(ana, "g3", call_id="c3", created_at=T0 + 3), fence=fa)
    await store.create_gate(gate(bob, "g4", call_id="c1", created_at=T0 + 4), fence=fb)
    await store.resolve_gate("g2", "approved", reason=None, now=T0 + 5)

    assert refs(await store.list_gates()) == ["g4", "g3", "g1"]
    assert refs(await store.list_gates(scope=ANA)) == ["g3", "g1"]
    assert refs(await store.list_gates(scope=ANA, status="approved")) == ["g2"]
    assert refs(await store.list_gates(scope=ANA, status=None)) == ["g3", "g2", "g1"]
    assert refs(await store.list_gates(status="denied")) == []


async def test_list_gates_with_a_limit_returns_the_newest(store: Store) -> None:
    ana = await make_run(store, "run-a", scope=ANA)
    fence = await store.acquire_lease(ana.run_id, "w1", ttl_s=30, now=T0)
    for n in range(1, 5):
        await store.create_gate(gate(ana, f"g{n}", call_id=f"c{n}", created_at=T0 + n), fence=fence)
    assert refs(await store.list_gates(scope=ANA, limit=2)) == ["g4", "g3"]
    assert refs(await store.list_gates(scope=ANA, status=None, limit=10)) == [
        "g4",
        "g3",
        "g2",
        "g1",
    ]


async def test_gate_keeps_its_kind(store: Store, run: RunCtx, fence: int) -> None:
    auth = dataclasses.replace(gate(run), kind="auth")
    await store.create_gate(auth, fence=fence)
    assert (await store.get_gate("gate-1")).kind == "auth"


async def test_resolution_keeps_who_resolved_the_digests_and_edited_arguments(
    store: Store, run: RunCtx, fence: int
) -> None:
    await store.create_gate(gate(run), fence=fence)
    how = GateResolution(
        resolved_by="carol",
        shown_digest="sha-shown",
        approved_digest="sha-approved",
        edited_arguments={"to": "bob@example.com", "nested": {"api_key": "[redacted]"}},
    )
    approved = await store.resolve_gate(
        "gate-1", "approved", reason=None, now=T0 + 3, resolution=how
    )
    got = await store.get_gate("gate-1")
    assert got == approved
    assert (got.resolved_by, got.shown_digest, got.approved_digest) == (
        "carol",
        "sha-shown",
        "sha-approved",
    )
    assert got.edited_arguments == {"to": "bob@example.com", "nested": {"api_key": "[redacted]"}}
    assert got.arguments == {"to": "ana@example.com"}  # what was shown stays as it was
    assert [g.resolved_by for g in await store.list_gates(status="approved")] == ["carol"]


async def test_resolution_without_details_leaves_the_new_fields_empty(
    store: Store, run: RunCtx, fence: int
) -> None:
    await store.create_gate(gate(run), fence=fence)
    denied = await store.resolve_gate("gate-1", "denied", reason="no", now=T0 + 3)
    got = await store.get_gate("gate-1")
    assert got == denied
    assert (got.resolved_by, got.shown_digest, got.approved_digest, got.edited_arguments) == (
        None,
        None,
        None,
        None,
    )
