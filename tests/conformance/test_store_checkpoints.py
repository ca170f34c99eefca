"""Checkpoints and the side-effect journal (DESIGN §6)."""

from __future__ import annotations

import pytest

from conformance.support import T0, RunCtx
from reverie.store import JournalEntry, Store


@pytest.fixture
async def fence(store: Store, run: RunCtx) -> int:
    """The run's current fencing token."""
    return await store.acquire_lease(run.run_id, "w1", ttl_s=30, now=T0)


async def test_load_checkpoint_of_a_run_without_one_is_none(store: Store, run: RunCtx) -> None:
    assert await store.load_checkpoint(run.run_id) is None
    assert await store.load_checkpoint("nope") is None


async def test_save_checkpoint_replaces_the_latest(store: Store, run: RunCtx, fence: int) -> None:
    await store.save_checkpoint(run.run_id, "BeforeModel", b"\x00first", fence=fence)
    await store.save_checkpoint(run.run_id, "BeforeSideEffect", b"\xffsecond\x00", fence=fence)
    cp = await store.load_checkpoint(run.run_id)
    assert cp is not None
    assert (cp.run_id, cp.kind, cp.payload) == (run.run_id, "BeforeSideEffect", b"\xffsecond\x00")
    assert isinstance(cp.payload, bytes)
    assert cp.created_at > 0


async def test_checkpoint_payload_is_opaque_bytes(store: Store, run: RunCtx, fence: int) -> None:
    """The store does not decode payloads: garbage is kept as is (the runtime rejects it)."""
    garbage = bytes(range(256)) * 4
    await store.save_checkpoint(run.run_id, "Final", garbage, fence=fence)
    cp = await store.load_checkpoint(run.run_id)
    assert cp is not None and cp.payload == garbage


async def test_journal_started_then_finished(store: Store, run: RunCtx, fence: int) -> None:
    await store.journal_started(run.run_id, "call-1", "send_email", fence=fence)
    started = await store.journal_get(run.run_id, ["call-1"])
    assert started == {
        "call-1": JournalEntry(
            run_id=run.run_id, call_id="call-1", tool="send_email", state="started"
        )
    }
    await store.journal_finished(run.run_id, "call-1", {"ok": True, "text": "sent"}, fence=fence)
    [entry] = (await store.journal_get(run.run_id, ["call-1"])).values()
    assert (entry.tool, entry.state, entry.outcome) == (
        "send_email",
        "finished",
        {"ok": True, "text": "sent"},
    )


async def test_journal_started_again_is_idempotent_and_never_undoes_finished(
    store: Store, run: RunCtx, fence: int
) -> None:
    await store.journal_started(run.run_id, "call-1", "send_email", fence=fence)
    await store.journal_started(run.run_id, "call-1", "send_email", fence=fence)
    await store.journal_finished(run.run_id, "call-1", {"ok": True}, fence=fence)
    await store.journal_started(run.run_id, "call-1", "send_email", fence=fence)
    entry = (await store.journal_get(run.run_id, ["call-1"]))["call-1"]
    assert (entry.state, entry.outcome) == ("finished", {"ok": True})


async def test_journal_get_returns_only_calls_with_rows(
    store: Store, run: RunCtx, fence: int
) -> None:
    await store.journal_started(run.run_id, "call-1", "a", fence=fence)
    await store.journal_started(run.run_id, "call-3", "c", fence=fence)
    got = await store.journal_get(run.run_id, ["call-3", "call-2", "call-1"])
    assert list(got) == ["call-3", "call-1"]
    assert {e.tool for e in got.values()} == {"a", "c"}
    assert await store.journal_get("other-run", ["call-1"]) == {}
    assert await store.journal_get(run.run_id, []) == {}
