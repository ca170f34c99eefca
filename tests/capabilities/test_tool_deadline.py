"""A tool call's deadline is counted from the call's start and armed only once the call waits."""

from __future__ import annotations

import asyncio

import pytest

from reverie.capabilities.deadline import DeadlinePassed, within


async def test_a_call_that_never_waits_returns_its_value() -> None:
    async def quick() -> int:
        return 7

    assert await within(quick(), 0.0) == 7


async def test_a_call_that_waits_past_its_deadline_fails_with_deadline_passed() -> None:
    async def forever() -> None:
        await asyncio.Event().wait()

    with pytest.raises(DeadlinePassed):
        await within(forever(), 0.01)


async def test_the_deadline_counts_from_the_start_of_the_call_not_from_its_first_wait() -> None:
    loop = asyncio.get_running_loop()
    now = loop.time()
    clock = [now]
    loop.time = lambda: clock[0]  # type: ignore[method-assign]
    try:

        async def slow_start() -> str:
            clock[0] += 10.0  # ten seconds of work before the first wait
            for _ in range(5):
                await asyncio.sleep(0)
            return "done"

        # Counted from the first wait, the 5 s deadline would still be ahead (the clock stands
        # still from there); counted from the start it has passed, and the first wait ends it.
        with pytest.raises(DeadlinePassed):
            await within(slow_start(), 5.0)
    finally:
        del loop.time


async def test_what_the_call_waits_for_reaches_it_values_and_errors() -> None:
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[int] = loop.create_future()
    failure: asyncio.Future[int] = loop.create_future()

    async def waits_for(future: asyncio.Future[int]) -> int:
        return await future + 1

    got = asyncio.ensure_future(within(waits_for(answer), 60.0))
    broke = asyncio.ensure_future(within(waits_for(failure), 60.0))
    await asyncio.sleep(0)
    answer.set_result(41)
    failure.set_exception(ValueError("no"))
    assert await got == 42
    with pytest.raises(ValueError, match="no"):
        await broke


async def test_a_tools_own_timeout_error_is_not_its_deadline() -> None:
    async def upstream() -> None:
        await asyncio.sleep(0)
        raise TimeoutError("upstream")

    with pytest.raises(TimeoutError, match="upstream"):
        await within(upstream(), 60.0)


async def test_a_cancelled_call_is_cancelled_and_runs_its_cleanup() -> None:
    started, cleaned = asyncio.Event(), asyncio.Event()

    async def waits() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.set()

    task = asyncio.ensure_future(within(waits(), 60.0))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned.is_set()


async def test_a_call_may_catch_a_cancellation_and_go_on() -> None:
    started = asyncio.Event()

    async def stubborn() -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
            await asyncio.sleep(0)
            return "kept going"
        return "unreachable"

    task = asyncio.ensure_future(within(stubborn(), 60.0))
    await started.wait()
    task.cancel()
    assert await task == "kept going"
