"""Per-model-call overhead of the loop, next to a bare asyncio loop doing the same work.

    python benchmarks/loop_overhead.py [--repeat 3] [--steps 10,200,1000] [--postgres URL]

An instant scripted model calls a trivial tool N-1 times, then replies. The figure is wall time
per model call (median of ``repeat``), for the in-memory store and for durable SQLite
(checkpoints on), at 10, 200 and 1,000 steps. Targets (issue 11), printed as ratios: durable
SQLite <= 0.5 ms per call at 200 steps, in-memory <= 0.2 ms, flat from 10 to 1,000 steps.

``--postgres URL`` (a role that may create schemas) adds PostgreSQL, each run in a schema of its
own, and the server's commit floor measured in the same run (``pg_floor.py``): the cost of an
empty commit and of a one-row insert commit (the WAL flush every durable step pays), so the
per-call figure reads against what the server itself takes (target: <= 3 ms per call).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import pg_floor

from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.testing import ScriptedModel, call, reply

STEPS = (10, 200, 1000)
SCOPE = Scope(tenant="bench", user="bench")
TARGET_MS = {"memory": 0.2, "sqlite": 0.5, "postgres": 3.0}
"""Per model call at 200 steps."""
TARGET_STEPS = 200


@tool(effects=set())
async def bump(n: int) -> int:
    """Return n + 1."""
    return n + 1


async def bare_loop(steps: int) -> float:
    """The same work with no framework: a list transcript and direct calls."""
    transcript: list[dict[str, object]] = [{"role": "user", "content": "go"}]

    async def model(i: int) -> dict[str, object]:
        if i < steps - 1:
            return {"role": "assistant", "call": ("bump", {"n": i})}
        return {"role": "assistant", "content": "done"}

    start = time.perf_counter()
    for i in range(steps):
        message = await model(i)
        transcript.append(message)
        if "call" in message:
            _, args = message["call"]  # type: ignore[misc]
            transcript.append({"role": "tool", "content": str(await bump(**args))})
    return (time.perf_counter() - start) / steps


async def reverie_loop(steps: int, url: str) -> float:
    script = [call("bump", n=i) for i in range(steps - 1)] + [reply("done")]
    agent = Agent(
        name="bench",
        # strict=False: the figure is the loop's overhead, not the double's rule check.
        model=ScriptedModel(script, stream_chunk=1 << 20, strict=False),
        tools=[bump],
        limits=Limits(max_iterations=steps + 5),
    )
    async with Runtime.open(url) as rt:
        start = time.perf_counter()
        result = await rt.run(agent, "go", scope=SCOPE)
        elapsed = time.perf_counter() - start
    assert result.status == "completed", result.exit
    return elapsed / steps


async def main(repeat: int, steps_list: tuple[int, ...], postgres: str | None) -> None:
    if postgres is not None:
        await pg_floor.report(postgres, steps_list, repeat, reverie_loop, TARGET_MS["postgres"])
    rows: list[tuple[int, float, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for steps in steps_list:
            bare = statistics.median([await bare_loop(steps) for _ in range(repeat)])
            mem = statistics.median([await reverie_loop(steps, ":memory:") for _ in range(repeat)])
            sql = statistics.median(
                [
                    await reverie_loop(steps, f"sqlite:///{Path(tmp) / f'b{steps}_{i}.db'}")
                    for i in range(repeat)
                ]
            )
            rows.append((steps, bare, mem, sql))
    print(
        f"{'steps':>6} {'bare ms/call':>13} {'memory ms/call':>15} {'sqlite ms/call':>15}"
        f" {'memory/bare':>12} {'sqlite/bare':>12}"
    )
    for steps, bare, mem, sql in rows:
        print(
            f"{steps:>6} {bare * 1e3:>13.4f} {mem * 1e3:>15.4f} {sql * 1e3:>15.4f}"
            f" {mem / bare:>12.0f}x {sql / bare:>11.0f}x"
        )
    first, last = rows[0], rows[-1]
    print(
        f"\ngrowth {first[0]} -> {last[0]} steps: memory {last[2] / first[2]:.2f}x, "
        f"sqlite {last[3] / first[3]:.2f}x (target: flat, 1.00x)"
    )
    at = [r for r in rows if r[0] == TARGET_STEPS]
    if at:
        _, _, mem, sql = at[0]
        for label, value in (("memory", mem), ("sqlite", sql)):
            target = TARGET_MS[label]
            print(
                f"{label} at {TARGET_STEPS} steps: {value * 1e3:.3f} ms/call = "
                f"{value * 1e3 / target:.2f}x the {target} ms target (<= 1.00x meets it)"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--postgres", metavar="URL", help="also measure PostgreSQL at URL")
    parser.add_argument(
        "--steps",
        default=",".join(map(str, STEPS)),
        help="comma-separated step counts (default: %(default)s)",
    )
    a = parser.parse_args()
    asyncio.run(main(a.repeat, tuple(int(n) for n in a.steps.split(",")), a.postgres))
