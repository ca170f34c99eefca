"""A segment's lease is renewed while it runs (docs/durability.md): one renewer per runtime."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from reverie import Agent, Runtime, Scope, tool
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.errors import LeaseLost, StoreError
from reverie.store.memory import MemoryStore
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="acme", user="ana")
TTL_S = 0.3
"""A short lease: renewed every 0.1 s. No test waits for a duration; they wait for renewals."""
GUARD_S = 120.0
"""A hang guard no test waits out, even on a loaded machine."""


class RenewalStore(MemoryStore):
    """A memory store that counts renewals by (run, fence) and lets a test shape their outcome."""

    def __init__(self) -> None:
        super().__init__()
        self.renewed: Counter[tuple[str, int]] = Counter()
        self.refused: Counter[tuple[str, int]] = Counter()
        self.fail_next: set[str] = set()
        """Runs whose next renewal fails with a transient ``StoreError``."""
        self.changed = asyncio.Event()
        self.stall: str | None = None
        """A run whose renewals wait until the renewal is cancelled."""
        self.stalled = asyncio.Event()

    async def renew_lease(self, run_id: str, fence: int, *, ttl_s: float, now: float) -> None:
        key = (run_id, fence)
        self.changed.set()
        if run_id == self.stall:
            self.stalled.set()
            await asyncio.Event().wait()  # until the renewer stops renewing it
        if run_id in self.fail_next:
            self.fail_next.discard(run_id)
            self.refused[key] += 1
            raise StoreError("the store is briefly unavailable")
        try:
            await super().renew_lease(run_id, fence, ttl_s=ttl_s, now=now)
        except LeaseLost:
            self.refused[key] += 1
            raise
        self.renewed[key] += 1

    async def until(self, condition: Callable[[], bool]) -> None:
        async with asyncio.timeout(GUARD_S):
            while not condition():
                self.changed.clear()
                await self.changed.wait()


def waiting_agent(release: asyncio.Event, entered: Callable[[], None] = lambda: None) -> Agent:
    """One tool call that waits for ``release``, then a reply."""

    @tool(effects=set())
    async def wait() -> str:
        """Wait for the test."""
        entered()
        await release.wait()
        return "released"

    def script(request: ModelRequest) -> ModelResponse:
        done = any(m.role == "tool" for m in request.messages)
        return reply("done") if done else call("wait")

    return Agent(name="waiter", model=ScriptedModel(script), tools=[wait])


def fence_of(store: RenewalStore, run_id: str) -> int:
    return store._runs[run_id].fence


async def test_a_running_segment_keeps_its_lease_renewed() -> None:
    store, release = RenewalStore(), asyncio.Event()
    async with Runtime(store, lease_ttl_s=TTL_S) as rt:
        handle = await rt.start(waiting_agent(release), "go", scope=SCOPE)
        await store.until(
            lambda: store.renewed[(handle.run_id, fence_of(store, handle.run_id))] >= 3
        )
        release.set()
        result = await handle.result()
    assert result.status == "completed"
    assert not store.refused


async def test_every_concurrent_segments_lease_is_renewed() -> None:
    store, release = RenewalStore(), asyncio.Event()
    entered: list[None] = []
    agent = waiting_agent(release, lambda: entered.append(None))
    async with Runtime(store, lease_ttl_s=TTL_S) as rt:
        handles = [
            await rt.start(agent, "go", scope=Scope(tenant="t", user=f"u{i}")) for i in range(20)
        ]
        await store.until(lambda: len(entered) == len(handles))  # every segment has its lease
        keys = [(h.run_id, fence_of(store, h.run_id)) for h in handles]
        await store.until(lambda: all(store.renewed[k] >= 2 for k in keys))
        release.set()
        results = [await h.result() for h in handles]
    assert {r.status for r in results} == {"completed"}


async def test_a_lease_taken_over_is_no_longer_renewed_while_the_others_are() -> None:
    store, release = RenewalStore(), asyncio.Event()
    entered: list[None] = []
    agent = waiting_agent(release, lambda: entered.append(None))
    async with Runtime(store, lease_ttl_s=TTL_S) as rt:
        lost = await rt.start(agent, "go", scope=Scope(tenant="t", user="a"))
        kept = await rt.start(agent, "go", scope=Scope(tenant="t", user="b"))
        await store.until(lambda: len(entered) == 2)  # both segments have their lease
        old = (lost.run_id, fence_of(store, lost.run_id))
        kept_key = (kept.run_id, fence_of(store, kept.run_id))
        await store.until(lambda: store.renewed[old] >= 1)
        # Another worker takes the run over (as if this one had stalled past its lease).
        owner = store._runs[lost.run_id].lease_owner
        await store.acquire_lease(
            lost.run_id, "elsewhere", ttl_s=GUARD_S, now=1e12, take_over=owner
        )
        await store.until(lambda: store.refused[old] >= 1)
        seen = store.renewed[kept_key]
        await store.until(lambda: store.renewed[kept_key] >= seen + 3)
        assert store.refused[old] == 1  # one refusal, then no more attempts
        release.set()
        assert (await kept.result()).status == "completed"
        with pytest.raises(LeaseLost):
            await lost.result()  # its next fenced write found the lease taken


async def test_a_renewal_that_fails_for_a_moment_is_tried_again() -> None:
    store, release = RenewalStore(), asyncio.Event()
    entered = asyncio.Event()
    async with Runtime(store, lease_ttl_s=TTL_S) as rt:
        handle = await rt.start(waiting_agent(release, entered.set), "go", scope=SCOPE)
        await entered.wait()
        key = (handle.run_id, fence_of(store, handle.run_id))
        store.fail_next.add(handle.run_id)
        await store.until(lambda: store.refused[key] == 1 and store.renewed[key] >= 2)
        release.set()
        assert (await handle.result()).status == "completed"


async def test_a_segment_shorter_than_a_renewal_wake_starts_no_renewal_task() -> None:
    store = RenewalStore()
    loop = asyncio.get_running_loop()
    started: list[str] = []
    create_task = loop.create_task

    def recording(coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        started.append(coro.__qualname__)
        return create_task(coro, **kwargs)

    async with Runtime(store) as rt:  # the default lease: a wake every 5 s
        loop.create_task = recording  # type: ignore[method-assign]
        try:
            for user in ("ana", "bo", "cy"):
                result = await rt.run(
                    Agent(name="a", model=ScriptedModel([reply("hi")])),
                    "go",
                    scope=Scope(tenant="t", user=user),
                )
                assert result.status == "completed"
        finally:
            del loop.create_task
    assert "SegmentRunner._drive" in started  # (the recording saw the runs' tasks)
    assert not [name for name in started if name.startswith("Renewer.")]
    assert not store.renewed


async def test_a_renewal_cut_off_by_the_last_segment_ending_leaves_the_next_segment_renewed() -> (
    None
):
    # The last lease is let go while its renewal is still waiting on the store: that renewal
    # is cancelled, and a segment that starts right after must get a renewal of its own.
    store = RenewalStore()
    first_release, second_release = asyncio.Event(), asyncio.Event()
    entered = asyncio.Event()
    async with Runtime(store, lease_ttl_s=TTL_S) as rt:
        first = await rt.start(
            waiting_agent(first_release, entered.set), "go", scope=Scope(tenant="t", user="a")
        )
        await entered.wait()
        store.stall = first.run_id
        async with asyncio.timeout(GUARD_S):
            await store.stalled.wait()  # its renewal is in flight, waiting on the store
        first_release.set()
        assert (await first.result()).status == "completed"
        entered.clear()
        second = await rt.start(
            waiting_agent(second_release, entered.set), "go", scope=Scope(tenant="t", user="b")
        )
        await entered.wait()
        key = (second.run_id, fence_of(store, second.run_id))
        await store.until(lambda: store.renewed[key] >= 2)
        second_release.set()
        assert (await second.result()).status == "completed"
