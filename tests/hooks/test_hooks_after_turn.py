"""after_turn: sequential, each hook bounded, failures recorded, never raises."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable

import pytest

from reverie.core.scope import Scope
from reverie.hooks import (
    DEFAULT_AFTER_TURN_TIMEOUT_S,
    AfterTurnContext,
    HookDispatcher,
    HookRegistry,
)


@pytest.fixture
def ctx(scope: Scope) -> AfterTurnContext:
    return AfterTurnContext(
        scope=scope, run_id="run-1", profile="interactive", completed=True, status="completed"
    )


async def test_slow_after_turn_hook_is_recorded_as_timed_out_and_the_next_hook_still_runs(
    registry: HookRegistry, dispatcher: HookDispatcher, ctx: AfterTurnContext
) -> None:
    seen: list[str] = []

    async def slow(c: AfterTurnContext) -> None:
        await asyncio.sleep(1)

    async def audit(c: AfterTurnContext) -> None:
        seen.append(c.run_id)

    registry.register("after_turn", slow, name="a-slow", timeout_s=0.05)
    registry.register("after_turn", audit, name="b-audit")

    started = time.perf_counter()
    result = await dispatcher.after_turn(ctx)

    assert time.perf_counter() - started < 0.5
    assert seen == ["run-1"]
    assert result.ran == ("b-audit",)
    assert [(f.hook, f.point, f.reason) for f in result.failures] == [
        ("a-slow", "after_turn", "timeout")
    ]


async def test_after_turn_hook_that_raises_is_recorded_and_never_raises(
    registry: HookRegistry, dispatcher: HookDispatcher, ctx: AfterTurnContext
) -> None:
    def broken(c: AfterTurnContext) -> None:
        raise RuntimeError("boom")

    registry.register("after_turn", broken, name="a-broken")
    registry.register("after_turn", lambda c: None, name="b-fine")

    result = await dispatcher.after_turn(ctx)

    assert result.ran == ("b-fine",)
    assert [(f.hook, f.reason, f.detail) for f in result.failures] == [
        ("a-broken", "exception", "RuntimeError")
    ]


async def test_after_turn_hooks_run_one_after_another_in_order(
    registry: HookRegistry, dispatcher: HookDispatcher, ctx: AfterTurnContext
) -> None:
    log: list[str] = []

    def hook(name: str) -> Callable[[AfterTurnContext], Awaitable[None]]:
        async def run(c: AfterTurnContext) -> None:
            log.append(f"{name}:start")
            await asyncio.sleep(0.01)
            log.append(f"{name}:end")

        return run

    registry.register("after_turn", hook("second"), name="second", priority=1)
    registry.register("after_turn", hook("first"), name="first", priority=0)

    await dispatcher.after_turn(ctx)

    assert log == ["first:start", "first:end", "second:start", "second:end"]


async def test_after_turn_uses_the_dispatchers_timeout_when_the_hook_sets_none(
    registry: HookRegistry, ctx: AfterTurnContext
) -> None:
    async def slow(c: AfterTurnContext) -> None:
        await asyncio.sleep(1)

    registry.register("after_turn", slow, name="slow")
    dispatcher = HookDispatcher(registry, after_turn_timeout_s=0.05)

    result = await dispatcher.after_turn(ctx)

    assert DEFAULT_AFTER_TURN_TIMEOUT_S == 5.0
    assert [f.reason for f in result.failures] == ["timeout"]


async def test_sync_after_turn_hook_runs_in_a_worker_thread(
    registry: HookRegistry, dispatcher: HookDispatcher, ctx: AfterTurnContext
) -> None:
    threads: list[int] = []
    registry.register("after_turn", lambda c: threads.append(threading.get_ident()), name="sync")

    result = await dispatcher.after_turn(ctx)

    assert result.ran == ("sync",)
    assert threads and threads[0] != threading.get_ident()


async def test_after_turn_with_no_hooks_is_empty(
    dispatcher: HookDispatcher, ctx: AfterTurnContext
) -> None:
    result = await dispatcher.after_turn(ctx)

    assert (result.ran, result.failures) == ((), ())
