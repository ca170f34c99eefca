"""``after_turn`` work never delays ``rt.run()`` (DESIGN §11): the caller gets its result first;
the hooks run in a task the runtime owns, under an overall deadline whose miss is recorded;
reverie's own after-turn upkeep (recording, curation) logs its failures at DEBUG."""

from __future__ import annotations

import asyncio
import logging

import pytest

from reverie import Agent, Runtime, Scope
from reverie.hooks import AfterTurnContext
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
    async with Runtime.open(":memory:") as rt:
        rt._after_turn.deadline_s = 0.2  # the hook's own timeout is longer: only this stops it
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
