"""Many concurrent runs in one process (DESIGN §18; issue 11's targets).

    python benchmarks/concurrency.py [--runs 1000] [--steps 5] [--latency-ms 20] [--gc MODE]
        [--postgres URL [--pg-connections 8]] [--processes K]

Each run makes ``steps`` tool calls against a model that takes ``latency`` per answer, so the
ideal wall time is (steps + 1) x latency. The runs are started concurrently (``Runtime.start``
gathered, as ``runs`` clients would) and the clock covers start to the last result. Every run
must complete having made all its model calls (``steps + 1``); one that made fewer fails the
benchmark. The scripted model answers without checking the providers' conversation rules
(``strict=False``, as in ``loop_overhead.py`` and ``peers.py``): the figure is reverie's cost,
not the test double's (its check walks the whole request on every call). Printed: wall time
and its ratio to the ideal for a bare asyncio loop doing the same waits, the in-memory store
and durable SQLite, and the ratio to each target; for reverie also
the process's CPU time (in all, and per run) and the part of it spent in the garbage collector
(steadier than wall time on a loaded machine), with the part of that in full collections (each
one scans every tracked object of the process, so their cost grows with the runs alive).
``--steps 0`` leaves a run's own cost (start, segment start and end, event log, result) and one
model call.

``--postgres URL`` (a role that may create schemas) adds PostgreSQL, in a schema of its own,
with a store of ``--pg-connections`` connections: every operation of the 1,000 runs waits its
turn for one of them (no timeout, so no pool exhaustion error), and the figure says how long.

``--processes K`` (K >= 2) spreads the runs over K worker processes instead, each with its own
runtime on the one store (one SQLite file; one PostgreSQL schema; an in-memory store each, since
a memory store is not shared), as K ``reverie worker`` processes or K servers would. The clock
runs from the moment every process has opened its runtime to the last result of any of them,
and the CPU is the sum over the processes. The store is migrated by this process first, so the
figure holds no schema set-up.

``--gc default`` keeps Python's collector settings; ``--gc server`` applies what ``reverie
serve`` and ``reverie worker`` do after start-up (``gc.freeze()`` and the server thresholds,
``reverie.runtime.gc_tuning``); ``--gc both`` measures default, then server, in one process.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.runtime.gc_tuning import tune_gc_for_server
from reverie.testing import ScriptedModel, call, reply

T = TypeVar("T")

TARGETS_S = {"reverie in-memory": 0.5, "reverie SQLite": 2.0}
"""For the default workload only: 1,000 runs x 5 steps @ 20 ms (issue 11)."""


@tool(effects=set())
async def bump(n: int) -> int:
    """Return n + 1."""
    return n + 1


class GcClock:
    """CPU time spent in the cyclic garbage collector (``gc.callbacks``), in all and in full
    (oldest-generation) collections, which scan every tracked object of the process."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = 0
        self.full_seconds = 0.0
        self.full_collections = 0
        self._started = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.process_time()
            return
        spent = time.process_time() - self._started
        self.seconds += spent
        self.collections += 1
        if info["generation"] == 2:
            self.full_seconds += spent
            self.full_collections += 1


GC_CLOCK = GcClock()


class Counted:
    """The benchmark's model: ``latency`` per answer, ``steps`` tool calls, then a reply."""

    def __init__(self, steps: int, latency: float) -> None:
        self.steps = steps
        self.latency = latency
        self.calls = 0

    async def __call__(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        await asyncio.sleep(self.latency)
        done = sum(1 for m in request.messages if m.role == "tool")
        return call("bump", n=done) if done < self.steps else reply("done")


async def bare(runs: int, steps: int, latency: float) -> float:
    async def one() -> None:
        for i in range(steps + 1):
            await asyncio.sleep(latency)
            if i < steps:
                await bump(n=i)

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(runs)))
    return time.perf_counter() - start


Figures = tuple[float, float, float, tuple[float, int]]
"""Wall seconds, CPU seconds of the process, CPU seconds in the garbage collector, and the CPU
seconds and number of its full collections."""


async def reverie_runs(
    runs: int, steps: int, latency: float, url: str, *, pg_connections: int = 8
) -> Figures:
    model = Counted(steps, latency)
    agent = Agent(
        name="bench",
        model=ScriptedModel(model, strict=False),
        tools=[bump],
        limits=Limits(max_iterations=steps + 5),
    )
    if url.startswith("postgresql://"):
        from reverie.store.postgres import PostgresStore

        store = PostgresStore(url, max_connections=pg_connections)
        opened: Any = Runtime(store, max_concurrent_runs=runs)
    else:
        opened = Runtime.open(url, max_concurrent_runs=runs)
    # Whatever garbage an earlier measurement left is collected now, not inside this one's clock.
    gc.collect()
    async with opened as rt:
        cpu, in_gc = time.process_time(), GC_CLOCK.seconds
        full, fulls = GC_CLOCK.full_seconds, GC_CLOCK.full_collections
        start = time.perf_counter()
        handles = await asyncio.gather(
            *(rt.start(agent, "go", scope=Scope(tenant="b", user=f"u{i}")) for i in range(runs))
        )
        results = await asyncio.gather(*(h.result() for h in handles))
        elapsed = time.perf_counter() - start
        cpu, in_gc = time.process_time() - cpu, GC_CLOCK.seconds - in_gc
        full, fulls = GC_CLOCK.full_seconds - full, GC_CLOCK.full_collections - fulls
    short = [r for r in results if r.status != "completed" or r.usage.model_calls != steps + 1]
    if short or model.calls != runs * (steps + 1):
        raise SystemExit(
            f"FAILED ({url}): {len(short)} of {runs} runs did not complete with {steps + 1} "
            f"model calls each; the model was called {model.calls} times, "
            f"not {runs * (steps + 1)}"
        )
    return elapsed, cpu, in_gc, (full, fulls)


def _worker(
    url: str,
    runs: int,
    first: int,
    steps: int,
    latency: float,
    gc_mode: str,
    pg_connections: int,
    barrier: Any,
    results: Any,
) -> None:
    """One of ``--processes``: its share of the runs, reported as (end, CPU, short runs)."""
    if gc_mode == "server":
        tune_gc_for_server()
    asyncio.run(_worker_runs(url, runs, first, steps, latency, pg_connections, barrier, results))


def _open(url: str, runs: int, pg_connections: int) -> Any:
    if url.startswith("postgresql://"):
        from reverie.store.postgres import PostgresStore

        return Runtime(PostgresStore(url, max_connections=pg_connections), max_concurrent_runs=runs)
    return Runtime.open(url, max_concurrent_runs=runs)


async def _worker_runs(
    url: str,
    runs: int,
    first: int,
    steps: int,
    latency: float,
    pg_connections: int,
    barrier: Any,
    results: Any,
) -> None:
    model = Counted(steps, latency)
    agent = Agent(
        name="bench",
        model=ScriptedModel(model, strict=False),
        tools=[bump],
        limits=Limits(max_iterations=steps + 5),
    )
    async with _open(url, runs, pg_connections) as rt:
        # One run before the clock, so the process's first-use costs (imports, schema
        # builds) are not in its share; the single-process figure pays them once for all.
        await rt.run(agent, "go", scope=Scope(tenant="b", user=f"warm{first}"))
        model.calls = 0
        barrier.wait()  # every process has its runtime open: the clock starts
        cpu = time.process_time()
        handles = await asyncio.gather(
            *(
                rt.start(agent, "go", scope=Scope(tenant="b", user=f"u{first + i}"))
                for i in range(runs)
            )
        )
        done = await asyncio.gather(*(h.result() for h in handles))
        end, cpu = time.monotonic(), time.process_time() - cpu
    short = sum(1 for r in done if r.status != "completed" or r.usage.model_calls != steps + 1)
    results.put((end, cpu, short + (0 if model.calls == runs * (steps + 1) else 1)))


async def spread_runs(
    runs: int,
    steps: int,
    latency: float,
    url: str,
    processes: int,
    gc_mode: str,
    *,
    pg_connections: int = 8,
) -> tuple[float, float]:
    """``runs`` spread over ``processes`` worker processes on one store: (wall, CPU summed)."""
    async with _open(url, 1, pg_connections):
        pass  # migrate once, here, outside every clock
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(processes + 1), ctx.Queue()
    sync = (barrier, results)
    shares = [runs // processes + (1 if k < runs % processes else 0) for k in range(processes)]
    workers = [
        ctx.Process(
            target=_worker,
            args=(url, share, sum(shares[:k]), steps, latency, gc_mode, pg_connections, *sync),
        )
        for k, share in enumerate(shares)
    ]
    for w in workers:
        w.start()
    await asyncio.to_thread(barrier.wait)
    start = time.monotonic()
    reports = [await asyncio.to_thread(results.get) for _ in workers]
    for w in workers:
        await asyncio.to_thread(w.join)
    if any(short for _, _, short in reports) or any(w.exitcode for w in workers):
        raise SystemExit(f"FAILED ({url}): a worker process's runs did not all complete")
    return max(end for end, _, _ in reports) - start, sum(cpu for _, cpu, _ in reports)


async def each_store(
    figures: Callable[[str], Awaitable[T]], postgres: str | None, pg_connections: int, *, per: str
) -> list[tuple[str, T]]:
    """``figures`` of the in-memory store, a fresh SQLite file and (``postgres``) a fresh
    schema, labelled; ``per`` says where PostgreSQL's pool of ``pg_connections`` is."""
    rows = [("reverie in-memory", await figures(":memory:"))]
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(("reverie SQLite", await figures(f"sqlite:///{Path(tmp) / 'c.db'}")))
    if postgres is not None:
        from reverie.store.postgres import temporary_schema

        async with temporary_schema(postgres, prefix="reverie_bench") as scoped:
            rows.append(("reverie PostgreSQL", await figures(scoped)))
        print(f"(PostgreSQL: {pg_connections} connections in {per})")
    return rows


def _wall_line(label: str, wall: float, ideal: float, workload: tuple[int, int, float]) -> str:
    """A store's wall time, its ratio to the ideal and, for the default workload (1,000 runs x
    5 steps @ 20 ms), to its target."""
    target = TARGETS_S.get(label) if workload == (1000, 5, 20) else None
    vs = f"   {wall / target:5.2f}x target {target:.1f} s" if target else ""
    return f"  {label:<18} {wall * 1e3:9.0f} ms   {wall / ideal:6.1f}x ideal{vs}"


async def measure_spread(
    runs: int,
    steps: int,
    latency_ms: float,
    gc_mode: str,
    processes: int,
    postgres: str | None = None,
    pg_connections: int = 8,
) -> None:
    latency = latency_ms / 1000
    ideal = (steps + 1) * latency

    async def figures(url: str) -> tuple[float, float]:
        return await spread_runs(
            runs, steps, latency, url, processes, gc_mode, pg_connections=pg_connections
        )

    rows = await each_store(figures, postgres, pg_connections, per="each process")
    print(
        f"{runs} runs x {steps} tool steps over {processes} processes, model latency "
        f"{latency_ms:.0f} ms (ideal wall {ideal * 1e3:.0f} ms), gc {gc_mode}"
    )
    for label, (wall, cpu) in rows:
        print(
            _wall_line(label, wall, ideal, (runs, steps, latency_ms))
            + f"\n  {'':<18} cpu {cpu * 1e3:.0f} ms in all processes "
            f"({cpu / runs * 1e6:.0f} us per run)"
        )


async def measure(
    runs: int,
    steps: int,
    latency_ms: float,
    gc_mode: str,
    postgres: str | None = None,
    pg_connections: int = 8,
) -> None:
    latency = latency_ms / 1000
    ideal = (steps + 1) * latency
    b = await bare(runs, steps, latency)

    async def figures(url: str) -> Figures:
        return await reverie_runs(runs, steps, latency, url, pg_connections=pg_connections)

    rows = await each_store(figures, postgres, pg_connections, per="one store")
    print(
        f"{runs} runs x {steps} tool steps, model latency {latency_ms:.0f} ms "
        f"(ideal wall {ideal * 1e3:.0f} ms), gc {gc_mode} {gc.get_threshold()}"
    )
    print(f"  {'bare asyncio':<18} {b * 1e3:9.0f} ms   {b / ideal:6.1f}x ideal")
    for label, (wall, cpu, in_gc, (full, fulls)) in rows:
        print(
            _wall_line(label, wall, ideal, (runs, steps, latency_ms))
            + f"\n  {'':<18} cpu {cpu * 1e3:.0f} ms ({cpu / runs * 1e6:.0f} us per run), "
            f"of which gc {in_gc * 1e3:.0f} ms ({in_gc / cpu:.0%}; {fulls} full collections "
            f"{full * 1e3:.0f} ms)"
        )


async def main(
    runs: int,
    steps: int,
    latency_ms: float,
    gc_mode: str,
    postgres: str | None = None,
    pg_connections: int = 8,
    processes: int = 1,
) -> None:
    modes = ["default", "server"] if gc_mode == "both" else [gc_mode]
    for mode in modes:
        if processes > 1:
            await measure_spread(runs, steps, latency_ms, mode, processes, postgres, pg_connections)
            continue
        if mode == "server":
            tune_gc_for_server()
        await measure(runs, steps, latency_ms, mode, postgres, pg_connections)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--gc", choices=("default", "server", "both"), default="default")
    parser.add_argument("--postgres", metavar="URL", help="also measure PostgreSQL at URL")
    parser.add_argument("--pg-connections", type=int, default=8, help="PostgreSQL pool size")
    parser.add_argument(
        "--processes", type=int, default=1, help="spread the runs over this many processes"
    )
    a = parser.parse_args()
    asyncio.run(
        main(a.runs, a.steps, a.latency_ms, a.gc, a.postgres, a.pg_connections, a.processes)
    )
