"""Inputs sent between the steps of a running SQLite run arrive once, whoever sends them.

After a harmless wave the run reads its input queue once, and the SQLite store answers that
read from what it knows when nothing arrived (:mod:`reverie.store.sqlite_inputs`). What it
must never do is answer "nothing" for an input already committed: by this runtime, by another
runtime on the same file (its own connection), or by one in another process.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from reverie import Agent, Runtime, Scope, tool
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.store.sqlite import SQLiteStore
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="acme", user="ana")
STARTUP_S = 60


class Held:
    """A pure tool that waits on its second run until released."""

    def __init__(self) -> None:
        self.second = asyncio.Event()
        self.release = asyncio.Event()
        self.runs = 0

        @tool(effects=set())
        async def look(n: int) -> str:
            """Look at n."""
            self.runs += 1
            if self.runs == 2:
                self.second.set()
                await self.release.wait()
            return f"saw {n}"

        self.tool = look


def user_texts(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if m.role == "user"]


def script_of(requests: list[ModelRequest]) -> ScriptedModel:
    def answer(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        # Three looks, then a reply; a follow-up (after the reply) gets a reply of its own.
        looks = sum(1 for m in request.messages if m.role == "tool")
        return call("look", n=looks + 1) if looks < 3 else reply(f"done {len(requests)}")

    return ScriptedModel(answer)


async def test_steering_and_a_follow_up_from_another_runtime_on_the_file_each_arrive_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "between.db"
    held = Held()
    requests: list[ModelRequest] = []
    agent = Agent(name="watched", model=script_of(requests), tools=[held.tool])
    async with Runtime(SQLiteStore(path)) as rt, Runtime(SQLiteStore(path)) as other:
        handle = await rt.start(agent, "go", scope=SCOPE)
        await asyncio.wait_for(held.second.wait(), STARTUP_S)
        await other.send_input(handle.run_id, "steering", "also mind X")
        await other.send_input(handle.run_id, "follow_up", "and then Y")
        held.release.set()
        result = await handle.result()
        items = await rt.runs.thread_items(result.thread_id)
    assert result.status == "completed"
    # The call after the held wave has the steering; the follow-up comes after the reply.
    assert user_texts(requests[2]) == ["go", "also mind X"]
    assert [i.content for i in items if i.role == "user"] == ["go", "also mind X", "and then Y"]
    assert held.runs == 3


async def test_steering_from_this_runtime_between_steps_arrives_once(tmp_path: Path) -> None:
    held = Held()
    requests: list[ModelRequest] = []
    agent = Agent(name="watched", model=script_of(requests), tools=[held.tool])
    async with Runtime(SQLiteStore(tmp_path / "between.db")) as rt:
        handle = await rt.start(agent, "go", scope=SCOPE)
        await asyncio.wait_for(held.second.wait(), STARTUP_S)
        await rt.send_input(handle.run_id, "steering", "also mind X")
        held.release.set()
        result = await handle.result()
        items = await rt.runs.thread_items(result.thread_id)
    assert result.status == "completed"
    assert user_texts(requests[2]) == ["go", "also mind X"]
    assert [i.content for i in items if i.role == "user"] == ["go", "also mind X"]


_CANCELLER = """
import asyncio, sys
from reverie import Runtime
from reverie.store.sqlite import SQLiteStore

async def main(path, run_id):
    async with Runtime(SQLiteStore(path)) as rt:
        await rt.cancel(run_id, reason="from afar")
    print("cancelled", flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def test_a_cancel_from_another_process_between_steps_stops_the_next_model_call(
    tmp_path: Path,
) -> None:
    path = tmp_path / "between.db"
    held = Held()
    requests: list[ModelRequest] = []
    agent = Agent(name="watched", model=script_of(requests), tools=[held.tool])
    async with Runtime(SQLiteStore(path)) as rt:
        handle = await rt.start(agent, "go", scope=SCOPE)
        await asyncio.wait_for(held.second.wait(), STARTUP_S)
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _CANCELLER,
            str(path),
            handle.run_id,
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await asyncio.wait_for(child.communicate(), STARTUP_S)
        assert child.returncode == 0 and out.split() == [b"cancelled"]
        held.release.set()
        result = await handle.result()
    assert (result.status, getattr(result.exit, "reason", None)) == ("cancelled", "from afar")
    assert len(requests) == 2  # the read after the held wave saw the cancel
