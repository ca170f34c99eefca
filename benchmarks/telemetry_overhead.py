"""What logging and tracing cost per model call (docs/observability.md).

    python benchmarks/telemetry_overhead.py [--steps 50] [--repeat 5]

The loop of ``loop_overhead.py`` (instant scripted model, trivial tool, in-memory store) in
three modes: ``reverie`` logging above WARNING, the default (WARNING: the ports check the level
per event; no port is wrapped in either mode), and tracing on (an SDK tracer provider with an
in-memory exporter: every span is built and kept). Compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import time
from typing import Any

from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="bench", user="bench")


@tool(effects=set())
async def bump(n: int) -> int:
    """Return n + 1."""
    return n + 1


async def per_call(steps: int, tracer_provider: Any = None) -> float:
    script = [call("bump", n=i) for i in range(steps - 1)] + [reply("done")]
    agent = Agent(
        name="bench",
        model=ScriptedModel(script, stream_chunk=1 << 20),
        tools=[bump],
        limits=Limits(max_iterations=steps + 5),
    )
    async with Runtime.open(":memory:", tracer_provider=tracer_provider) as rt:
        start = time.perf_counter()
        result = await rt.run(agent, "go", scope=SCOPE)
        elapsed = time.perf_counter() - start
    assert result.status == "completed", result.exit
    return elapsed / steps


async def main(steps: int, repeat: int) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    logger = logging.getLogger("reverie")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    await per_call(steps)  # warm up imports and caches before measuring anything
    figures: dict[str, list[float]] = {"quiet": [], "logged": [], "traced": []}
    for _ in range(repeat):  # interleaved, so drift on a shared machine hits every mode
        logger.setLevel(logging.ERROR)
        figures["quiet"].append(await per_call(steps))
        logger.setLevel(logging.WARNING)
        figures["logged"].append(await per_call(steps))
        figures["traced"].append(await per_call(steps, provider))
    spans = len(exporter.get_finished_spans()) // repeat
    provider.shutdown()
    quiet, logged, traced = (statistics.median(figures[k]) for k in ("quiet", "logged", "traced"))
    print(f"{steps} steps, in-memory store, median of {repeat}:")
    print(f"  reverie logs above WARNING: {quiet * 1e3:.4f} ms/call")
    print(f"  default (WARNING):  {logged * 1e3:.4f} ms/call ({logged / quiet:.2f}x)")
    print(f"  tracing ({spans} spans/run): {traced * 1e3:.4f} ms/call ({traced / quiet:.2f}x)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.steps, args.repeat))
