"""The per-run input queue: steering, follow-ups and control inputs (DESIGN §7)."""

from __future__ import annotations

import pytest

from conformance.support import T0, RunCtx, make_run
from reverie.errors import NotFoundError, RunEndedError
from reverie.store import Store


async def test_enqueue_input_assigns_a_monotonic_cursor_per_run(store: Store) -> None:
    a = await make_run(store, "run-a")
    b = await make_run(store, "run-b")
    first = await store.enqueue_input(a.run_id, "steering", {"text": "1"}, input_id="i1")
    other = await store.enqueue_input(b.run_id, "follow_up", {"text": "x"}, input_id="i1")
    second = await store.enqueue_input(a.run_id, "cancel", {}, input_id="i2")
    assert (first.cursor, second.cursor, other.cursor) == (1, 2, 1)
    assert (first.kind, first.payload, first.acked) == ("steering", {"text": "1"}, False)


async def test_enqueue_input_with_the_same_input_id_returns_the_existing_row(
    store: Store, run: RunCtx
) -> None:
    first = await store.enqueue_input(run.run_id, "steering", {"text": "1"}, input_id="i1")
    again = await store.enqueue_input(run.run_id, "steering", {"text": "1"}, input_id="i1")
    assert again == first
    assert await store.poll_inputs(run.run_id, after_cursor=0) == [first]


async def test_enqueue_input_to_unknown_run_raises_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.enqueue_input("nope", "steering", {}, input_id="i1")


async def test_poll_inputs_returns_inputs_after_the_cursor_in_order(
    store: Store, run: RunCtx
) -> None:
    for n in range(1, 5):
        await store.enqueue_input(run.run_id, "steering", {"n": n}, input_id=f"i{n}")
    after = await store.poll_inputs(run.run_id, after_cursor=2)
    assert [(i.cursor, i.payload) for i in after] == [(3, {"n": 3}), (4, {"n": 4})]
    assert await store.poll_inputs(run.run_id, after_cursor=4) == []
    assert await store.poll_inputs("other-run", after_cursor=0) == []


async def test_ack_inputs_marks_inputs_up_to_the_cursor(store: Store, run: RunCtx) -> None:
    for n in range(1, 4):
        await store.enqueue_input(run.run_id, "steering", {}, input_id=f"i{n}")
    fence = await store.acquire_lease(run.run_id, "w1", ttl_s=30, now=T0)
    await store.ack_inputs(run.run_id, 2, fence=fence)
    rows = await store.poll_inputs(run.run_id, after_cursor=0)
    assert [(i.cursor, i.acked) for i in rows] == [(1, True), (2, True), (3, False)]


async def test_seal_inputs_returns_waiting_inputs_instead_of_sealing(
    store: Store, run: RunCtx
) -> None:
    waiting = await store.enqueue_input(run.run_id, "follow_up", {}, input_id="i1")
    assert await store.seal_inputs(run.run_id, after_cursor=0) == [waiting]
    # Not sealed: more inputs are still accepted.
    await store.enqueue_input(run.run_id, "steering", {}, input_id="i2")


async def test_sealed_queue_refuses_new_inputs_until_unsealed(store: Store, run: RunCtx) -> None:
    first = await store.enqueue_input(run.run_id, "steering", {}, input_id="i1")
    assert await store.seal_inputs(run.run_id, after_cursor=1) == []
    with pytest.raises(RunEndedError):
        await store.enqueue_input(run.run_id, "follow_up", {}, input_id="i2")
    # A retried delivery of an input already queued is still answered with its row.
    assert await store.enqueue_input(run.run_id, "steering", {}, input_id="i1") == first
    await store.unseal_inputs(run.run_id)
    later = await store.enqueue_input(run.run_id, "follow_up", {}, input_id="i2")
    assert later.cursor == 2


async def test_seal_inputs_of_unknown_run_raises_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.seal_inputs("nope", after_cursor=0)
