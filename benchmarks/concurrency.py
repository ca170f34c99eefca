"""Many concurrent runs in one process (DESIGN §18).

    python benchmarks/concurrency.py [--runs 1000] [--steps 5] [--latency-ms 20]

Each run makes ``steps`` tool calls against a model that takes ``latency`` per answer, so the
ideal wall time is (steps + 1) x latency. Printed: wall time for the in-memory store and for
durable SQLite, next to a bare asyncio loop doing the same waits.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.testing import ScriptedModel, call, reply


@tool(effects=set())
async def bump(n: int) -> int:
    """Return n + 1."""
    return n + 1


def make_agent(steps: int, latency: float) -> Agent:
    async def model(request: ModelRequest) -> ModelResponse:
        await asyncio.sleep(latency)
        done = sum(1 for m in request.messages if m.role == "tool")
        return call("bump", n=done) if done < steps else reply("done")

    return Agent(
        name="bench",
        model=ScriptedModel(model),
        tools=[bump],
        limits=Limits(max_iterations=steps + 5),
    )


async def bare(runs: int, steps: int, latency: float) -> float:
    async def one() -> None:
        for i in range(steps + 1):
            await asyncio.sleep(latency)
            if i < steps:
                await bump(n=i)

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(runs)))
    return time.perf_counter() - start


async def reverie_runs(runs: int, steps: int, latency: float, url: str) -> float:
    agent = make_agent(steps, latency)
    async with Runtime.open(url, max_concurrent_runs=runs) as rt:
        start = time.perf_counter()
        handles = [
            await rt.start(agent, "go", scope=Scope(tenant="b", user=f"u{i}")) for i in range(runs)
        ]
        results = await asyncio.gather(*(h.result() for h in handles))
        elapsed = time.perf_counter() - start
    assert all(r.status == "completed" for r in results)
    return elapsed


async def main(runs: int, steps: int, latency_ms: float) -> None:
    latency = latency_ms / 1000
    ideal = (steps + 1) * latency
    b = await bare(runs, steps, latency)
    mem = await reverie_runs(runs, steps, latency, ":memory:")
    with tempfile.TemporaryDirectory() as tmp:
        sql = await reverie_runs(runs, steps, latency, f"sqlite:///{Path(tmp) / 'c.db'}")
    print(
        f"{runs} runs x {steps} tool steps, model latency {latency_ms:.0f} ms "
        f"(ideal wall {ideal * 1e3:.0f} ms)"
    )
    for label, value in (("bare asyncio", b), ("reverie in-memory", mem), ("reverie SQLite", sql)):
        print(f"  {label:<18} {value * 1e3:9.0f} ms   {value / ideal:6.1f}x ideal")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    a = parser.parse_args()
    asyncio.run(main(a.runs, a.steps, a.latency_ms))
