"""A process killed between a run's end and its ``after_turn`` hooks (docs/hooks.md).

The status is written (``end_segment``) before the hooks run, in the process that ran the turn
only: ``after_turn`` fires at most once. A worker SIGKILLed while its hook runs leaves the run
ended — its lease given up with the status — and no later process runs the hooks again.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from reverie import Agent, Runtime, Scope
from reverie.hooks import AfterTurnContext
from reverie.testing import ScriptedModel, reply

pytestmark = [pytest.mark.crash, pytest.mark.slow]

START_TIMEOUT_S = 60.0
SCOPE = Scope(tenant="acme", user="ana")

_CHILD = """
import asyncio, sys
from reverie import Agent, Runtime, Scope
from reverie.testing import ScriptedModel, reply

async def main(url):
    async with Runtime.open(url) as rt:
        async def hook(ctx):
            print("hook", ctx.run_id, flush=True)
            await asyncio.Event().wait()  # killed here

        rt.hooks.register("after_turn", hook, name="audit", timeout_s=600)
        agent = Agent(name="replier", model=ScriptedModel([reply("done")]))
        await rt.run(agent, "go", scope=Scope(tenant="acme", user="ana"))
        await asyncio.Event().wait()

asyncio.run(main(sys.argv[1]))
"""


async def test_a_worker_killed_before_its_after_turn_hooks_ran_leaves_the_run_ended_for_good(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'after_turn.db'}"
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _CHILD, url, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), START_TIMEOUT_S)
        kind, run_id = line.decode().split()
        assert kind == "hook"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        await child.wait()
    seen: list[str] = []

    async def audit(ctx: AfterTurnContext) -> None:
        seen.append(ctx.run_id)

    agent = Agent(name="replier", model=ScriptedModel([reply("again")]))
    async with Runtime.open(url, agents=[agent]) as rt:
        rt.hooks.register("after_turn", audit, name="audit")
        assert await rt.recover() == []  # an ended run is not resumed
        result = await rt.get_result(run_id)
        run = await rt.store.get_run(run_id)
    assert (result.status, result.text) == ("completed", "done")
    assert (run.status, run.lease_owner) == ("completed", None)
    assert seen == []  # nobody runs the killed worker's hooks again
