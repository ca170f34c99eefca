"""Time from ``Runtime.resume`` to the next model call, for a run with a 1,000-item transcript.

    python benchmarks/resume.py [--items 1000] [--repeat 5]

A first runtime drives a run through ~items/2 tool steps on a SQLite file, then "dies" (is
closed while the model call is in flight, leaving a BeforeModel checkpoint). A fresh runtime on
the same file resumes it; the figure is the wall time until the resumed model is called.
DESIGN §18: <= 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="bench", user="bench")


@tool(effects=set())
async def bump(n: int) -> int:
    """Return n + 1."""
    return n + 1


async def prepare(url: str, steps: int) -> str:
    stuck = asyncio.Event()
    never = asyncio.Event()
    done = 0

    async def first(request: ModelRequest) -> ModelResponse:
        nonlocal done
        if done < steps:
            done += 1
            return call("bump", n=done)
        stuck.set()
        await never.wait()
        return reply("unreachable")

    agent = Agent(
        name="bench",
        model=ScriptedModel(first),
        tools=[bump],
        limits=Limits(max_iterations=steps + 10),
    )
    rt = await Runtime.open(url)
    handle = await rt.start(agent, "go", scope=SCOPE)
    await stuck.wait()
    await rt.aclose()  # the worker dies mid-call
    return handle.run_id


async def time_resume(url: str, run_id: str, steps: int) -> float:
    called = asyncio.Event()
    called_at = 0.0

    async def second(request: ModelRequest) -> Any:
        nonlocal called_at
        if not called.is_set():
            called_at = time.perf_counter()
            called.set()
        return reply("done")

    agent = Agent(
        name="bench",
        model=ScriptedModel(second),
        tools=[bump],
        limits=Limits(max_iterations=steps + 10),
    )
    async with Runtime.open(url, agents=[agent]) as rt:
        start = time.perf_counter()
        result = await rt.resume(run_id)
        assert result.status == "completed", result.exit
    return called_at - start


async def main(items: int, repeat: int) -> None:
    steps = items // 2
    figures: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeat):
            url = f"sqlite:///{Path(tmp) / f'r{i}.db'}"
            run_id = await prepare(url, steps)
            figures.append(await time_resume(url, run_id, steps))
    print(f"transcript items: ~{items}   resume -> next model call (SQLite, {repeat} runs)")
    print(
        f"  median {statistics.median(figures) * 1e3:.2f} ms   min {min(figures) * 1e3:.2f} ms"
        f"   max {max(figures) * 1e3:.2f} ms   (target <= 50 ms)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.items, args.repeat))
