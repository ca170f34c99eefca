"""``after_turn`` work never delays ``rt.run()`` (DESIGN §11): the caller gets its result first;
the hooks run in a task the runtime owns, under an overall deadline whose miss is recorded;
reverie's own after-turn upkeep (recording, curation) logs its failures at DEBUG."""

from __future__ import annotations

import asyncio
import logging

import pytest

from reverie import Agent, Runtime, Scope
from reverie.errors import UsageError
from reverie.hooks import AFTER_TURN_CEILING_S, DEFAULT_AFTER_TURN_TIMEOUT_S, AfterTurnContext
from reverie.testing import ScriptedModel, reply

SCOPE = Scope(tenant="acme", user="ana")


def agent() -> Agent:
    return Agent(name="a", model=ScriptedModel(lambda request: reply("ok")))


async def test_after_turn_hooks_do_not_delay_rt_run_and_run_in_an_owned_task() -> None:
    started = asyncio.Event()
    release = asyncio.Event()
    finished: list[str] = []

    async def slow(ctx: AfterTurnContext) -> None:
        started.set()
        await release.wait()
        finished.append(ctx.run_id)

    async with Runtime.open(":memory:") as rt:
        rt.hooks.register("after_turn", slow, name="slow-audit", timeout_s=3600)
        first = await rt.run(agent(), "hi", scope=SCOPE)  # returns while the hook waits
        assert first.status == "completed"
        await asyncio.wait_for(started.wait(), timeout=20)
        assert finished == []
        release.set()
        # The owner's next turn starts once the previous turn's after-turn work is done.
        second = await rt.run(agent(), "again", scope=SCOPE)
        assert finished[0] == first.run_id
    assert finished == [first.run_id, second.run_id]  # aclose waited for the second's work


async def test_after_turn_work_past_its_overall_deadline_is_stopped_and_recorded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cancelled = asyncio.Event()

    async def stuck(ctx: AfterTurnContext) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    caplog.set_level(logging.INFO, logger="reverie")
    # The hook's own timeout is longer: only the ceiling stops it.
    async with Runtime.open(":memory:", after_turn_ceiling_s=0.2) as rt:
        rt.hooks.register("after_turn", stuck, name="stuck", timeout_s=3600)
        result = await rt.run(agent(), "hi", scope=SCOPE)
        await asyncio.wait_for(cancelled.wait(), timeout=20)
        await rt._after_turn.drain()
        missed = list(rt._after_turn.missed)
    assert result.status == "completed"
    assert [m.run_id for m in missed] == [result.run_id]
    assert any(
        result.run_id in r.getMessage() and "deadline" in r.getMessage() for r in caplog.records
    )


async def test_reverie_upkeep_after_turn_failures_are_logged_at_debug_not_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def slow_upkeep(ctx: AfterTurnContext) -> None:
        await asyncio.Event().wait()

    caplog.set_level(logging.DEBUG, logger="reverie")
    async with Runtime.open(":memory:") as rt:
        rt.hooks.register_builtin("after_turn", slow_upkeep, name="upkeep", timeout_s=0.05)
        result = await rt.run(agent(), "hi", scope=SCOPE)
        await rt._after_turn.drain()
    assert result.status == "completed"
    about = [r for r in caplog.records if "upkeep" in r.getMessage()]
    assert about and all(r.levelno == logging.DEBUG for r in about)


async def test_the_after_turn_deadline_is_the_sum_of_the_hooks_timeouts_capped_by_a_ceiling() -> (
    None
):
    async def quiet(ctx: AfterTurnContext) -> None:
        return None

    async with Runtime.open(":memory:") as rt:
        assert rt.after_turn_deadline_s == 0
        rt.hooks.register("after_turn", quiet, name="a", timeout_s=9.0)
        rt.hooks.register("after_turn", quiet, name="b", timeout_s=8.0)
        assert rt.after_turn_deadline_s == 17.0  # past the old fixed 15 s: each gets its own
        rt.hooks.register("after_turn", quiet, name="c")  # the default timeout counts
        assert rt.after_turn_deadline_s == 17.0 + DEFAULT_AFTER_TURN_TIMEOUT_S
        rt.hooks.register("after_turn", quiet, name="d", timeout_s=3600)
        assert rt.after_turn_deadline_s == AFTER_TURN_CEILING_S
    async with Runtime.open(":memory:", after_turn_ceiling_s=4.0) as rt:
        rt.hooks.register("after_turn", quiet, name="a", timeout_s=3.0)
        assert rt.after_turn_deadline_s == 3.0
        rt.hooks.register("after_turn", quiet, name="b", timeout_s=3.0)
        assert rt.after_turn_deadline_s == 4.0
    with pytest.raises(UsageError, match="after_turn_ceiling_s"):
        Runtime.open(":memory:", after_turn_ceiling_s=0)


async def test_every_after_turn_hook_gets_its_own_timeout_and_each_miss_is_recorded_per_hook(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[str] = []

    async def stuck(ctx: AfterTurnContext) -> None:
        await asyncio.Event().wait()

    async def last(ctx: AfterTurnContext) -> None:
        ran.append(ctx.run_id)

    caplog.set_level(logging.INFO, logger="reverie")
    async with Runtime.open(":memory:") as rt:
        rt.hooks.register("after_turn", stuck, name="first-stuck", timeout_s=0.05)
        rt.hooks.register("after_turn", stuck, name="second-stuck", timeout_s=0.05)
        rt.hooks.register("after_turn", last, name="last")
        result = await rt.run(agent(), "hi", scope=SCOPE)
    # Closing the runtime waited for the after-turn work.
    assert ran == [result.run_id]  # the two misses left the third hook its turn
    failed = [r.getMessage() for r in caplog.records if "failed (timeout)" in r.getMessage()]
    assert any("first-stuck" in m and result.run_id in m for m in failed)
    assert any("second-stuck" in m and result.run_id in m for m in failed)
    assert not any("deadline" in r.getMessage() for r in caplog.records)  # no overall cut


async def test_a_slow_after_turn_hook_cut_off_by_the_ceiling_cannot_hide_a_later_hooks_miss(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def slow(ctx: AfterTurnContext) -> None:
        await asyncio.Event().wait()

    caplog.set_level(logging.INFO, logger="reverie")
    async with Runtime.open(":memory:", after_turn_ceiling_s=0.1) as rt:
        rt.hooks.register("after_turn", slow, name="a-slow", timeout_s=3600)
        rt.hooks.register("after_turn", slow, name="b-second", timeout_s=3600)
        result = await rt.run(agent(), "hi", scope=SCOPE)
    messages = [r.getMessage() for r in caplog.records]
    for hook in ("a-slow", "b-second"):  # each miss recorded as the hook's own
        assert any(f"after_turn hook {hook} failed (timeout)" in m for m in messages), hook
    (cut,) = [m for m in messages if "deadline" in m and result.run_id in m]
    assert "a-slow, b-second" in cut
