"""docs/loop.md: ``race_cancellation`` runs the work in the calling task, the token cuts it."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from reverie.loop.control import Cancelled, CancelToken, race_cancellation

GUARD_S = 60.0
"""A hang guard: generous, so a loaded machine never trips it."""


async def test_cancel_during_the_work_ends_it_with_cancelled_and_the_token_reason() -> None:
    token = CancelToken()
    started = asyncio.Event()
    interrupted: list[bool] = []

    async def work() -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            interrupted.append(True)
            raise
        return "never"

    async def canceller() -> None:
        await started.wait()
        token.cancel("user left")

    async with asyncio.timeout(GUARD_S):
        other = asyncio.ensure_future(canceller())
        with pytest.raises(Cancelled, match="user left"):
            await race_cancellation(work(), token)
        await other
    assert interrupted == [True]


async def test_the_works_own_exception_propagates() -> None:
    async def work() -> None:
        await asyncio.sleep(0)
        raise LookupError("from the work")

    with pytest.raises(LookupError, match="from the work"):
        await race_cancellation(work(), CancelToken())


async def test_the_work_runs_in_the_calling_task_and_no_task_is_left_behind() -> None:
    before = asyncio.all_tasks()
    seen: list[tuple[asyncio.Task[object] | None, set[asyncio.Task[object]]]] = []

    async def work() -> int:
        await asyncio.sleep(0)
        seen.append((asyncio.current_task(), asyncio.all_tasks()))
        return 7

    assert await race_cancellation(work(), CancelToken()) == 7
    assert seen == [(asyncio.current_task(), before)]
    assert asyncio.all_tasks() == before


async def test_no_task_is_left_behind_after_a_cancelled_race() -> None:
    token = CancelToken()
    before = asyncio.all_tasks()

    async def work() -> None:
        token.cancel("stop")
        await asyncio.Event().wait()

    async with asyncio.timeout(GUARD_S):
        with pytest.raises(Cancelled, match="stop"):
            await race_cancellation(work(), token)
    assert asyncio.all_tasks() == before


async def test_the_caller_awaits_normally_after_an_interrupted_race() -> None:
    token = CancelToken()

    async def work() -> None:
        token.cancel()
        await asyncio.Event().wait()

    async with asyncio.timeout(GUARD_S):
        with pytest.raises(Cancelled):
            await race_cancellation(work(), token)
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await asyncio.sleep(0)  # no cancellation request is left pending on the caller


async def test_an_answer_ready_together_with_cancellation_is_discarded() -> None:
    token = CancelToken()

    async def work() -> str:
        token.cancel("late")  # the answer is ready, but so is cancellation
        return "the answer"

    with pytest.raises(Cancelled, match="late"):
        await race_cancellation(work(), token)
    await asyncio.sleep(0)


async def test_a_failure_together_with_cancellation_ends_cancelled() -> None:
    token = CancelToken()

    async def work() -> None:
        token.cancel("gone")
        raise LookupError("discarded")

    with pytest.raises(Cancelled, match="gone"):
        await race_cancellation(work(), token)


async def test_work_that_swallows_the_interruption_still_ends_cancelled() -> None:
    token = CancelToken()
    started = asyncio.Event()

    async def work() -> str:
        started.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()
        return "swallowed"

    async def canceller() -> None:
        await started.wait()
        token.cancel("really")

    async with asyncio.timeout(GUARD_S):
        other = asyncio.ensure_future(canceller())
        with pytest.raises(Cancelled, match="really"):
            await race_cancellation(work(), token)
        await other
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await asyncio.sleep(0)


async def test_a_cancellation_of_the_caller_propagates_as_cancelled_error() -> None:
    token = CancelToken()
    started = asyncio.Event()

    async def work() -> None:
        started.set()
        await asyncio.Event().wait()

    async def caller() -> None:
        await race_cancellation(work(), token)

    async with asyncio.timeout(GUARD_S):
        task = asyncio.ensure_future(caller())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert not token.cancelled


async def test_a_cancelled_token_refuses_the_work_before_it_starts() -> None:
    token = CancelToken()
    token.cancel("before")
    ran: list[bool] = []

    async def work() -> None:
        ran.append(True)

    coroutine = work()
    with pytest.raises(Cancelled, match="before"):
        await race_cancellation(coroutine, token)
    coroutine.close()
    assert ran == []


async def test_a_token_outlives_its_races() -> None:
    token = CancelToken()
    for n in range(3):
        assert await race_cancellation(asyncio.sleep(0, result=n), token) == n
    token.cancel("later")
    with pytest.raises(Cancelled, match="later"):
        token.check()


async def test_work_raced_against_a_token_that_already_fired_is_closed_unstarted() -> None:
    import inspect

    ran: list[bool] = []

    async def work() -> str:
        ran.append(True)
        return "never"

    token = CancelToken()
    token.cancel("gone")
    coro = work()
    with pytest.raises(Cancelled, match="gone"):
        await race_cancellation(coro, token)
    assert ran == [] and inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED


async def test_work_that_never_waits_answers_without_the_caller_yielding_to_the_loop() -> None:
    # An instant model or a wave of pure tools: the race costs no suspension, no task.
    ran: list[str] = []
    asyncio.get_running_loop().call_soon(ran.append, "other")

    async def work() -> str:
        return "now"

    assert await race_cancellation(work(), CancelToken()) == "now"
    assert ran == []
    await asyncio.sleep(0)
    assert ran == ["other"]


async def test_work_that_waits_after_its_first_step_is_still_cut_by_the_token() -> None:
    token = CancelToken()
    steps: list[str] = []

    async def work() -> str:
        steps.append("first")  # runs before anything else can
        await asyncio.sleep(0)
        steps.append("second")
        token.cancel("midway")
        await asyncio.Event().wait()
        return "never"

    async with asyncio.timeout(GUARD_S):
        with pytest.raises(Cancelled, match="midway"):
            await race_cancellation(work(), token)
    assert steps == ["first", "second"]
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
