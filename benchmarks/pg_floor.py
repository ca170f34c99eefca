"""PostgreSQL figures of ``loop_overhead.py --postgres URL``: the server's floor and a breakdown.

The floor is what the server takes whatever the client does, measured on one connection in the
same run, before and after the timed runs: a round trip (``SELECT 1``), an empty commit (no WAL
flush) and a one-row insert commit (a WAL flush: what every durable step pays at least once).
The per-call ratios are to the mean of the two insert commits. The breakdown runs one loop with
every store call counted and timed and every round trip to the server counted
(:class:`RoundTrips`), so a model call's time reads as store calls x round trips + the server's
commits + the rest (the loop's own CPU).
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.store.postgres import PostgresStore, temporary_schema
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="bench", user="bench")
COMMITS = 100

Loop = Callable[[int, str], Awaitable[float]]
"""``reverie_loop(steps, url)`` of loop_overhead.py: seconds per model call."""


@dataclass(frozen=True)
class Floor:
    """Milliseconds per statement on one connection."""

    round_trip: float
    empty_commit: float
    insert_commit: float


async def floor(url: str) -> Floor:
    """The server's floor: 100 round trips, 100 empty commits, 100 one-row insert commits."""
    table = f"reverie_floor_{uuid.uuid4().hex[:12]}"
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(f"CREATE TABLE {table} (id BIGSERIAL PRIMARY KEY, v TEXT)")
        try:
            start = time.perf_counter()
            for _ in range(COMMITS):
                await conn.execute("SELECT 1")
            trip = time.perf_counter() - start
            start = time.perf_counter()
            for _ in range(COMMITS):
                async with conn.transaction():
                    pass
            empty = time.perf_counter() - start
            start = time.perf_counter()
            for _ in range(COMMITS):
                async with conn.transaction():
                    await conn.execute(f"INSERT INTO {table} (v) VALUES ('x')")
            insert = time.perf_counter() - start
        finally:
            await conn.execute(f"DROP TABLE {table}")
    return Floor(*(seconds * 1e3 / COMMITS for seconds in (trip, empty, insert)))


@tool(effects=set())
async def bump(n: int) -> int:
    """Return n + 1."""
    return n + 1


class Counting:
    """A store whose calls are counted and timed (the real store does the work)."""

    def __init__(self, inner: PostgresStore, trips: RoundTrips) -> None:
        self._inner = inner
        self._relay = trips
        self.calls: Counter[str] = Counter()
        self.trips: Counter[str] = Counter()
        self.seconds: Counter[str] = Counter()

    def trips_now(self) -> int:
        return self._relay.total

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if not callable(target) or name in ("open", "close", "wait_run_events"):
            return target

        async def timed(*args: Any, **kwargs: Any) -> Any:
            before = self.trips_now()
            start = time.perf_counter()
            try:
                return await target(*args, **kwargs)
            finally:
                self.calls[name] += 1
                self.seconds[name] += time.perf_counter() - start
                self.trips[name] += self.trips_now() - before

        return timed


class RoundTrips:
    """Counts the times ``psycopg`` waited for the server to answer: the round trips.

    ``psycopg`` registers a reader on the event loop only when it must wait for the server
    (a statement sent, its result not in yet); in pipeline mode a batch of statements and their
    results are one such wait, however many statements it holds.
    """

    def __init__(self) -> None:
        self.total = 0

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        original = loop.add_reader

        def add_reader(fd: Any, callback: Callable[..., object], *args: Any) -> None:
            self.total += 1
            original(fd, callback, *args)

        loop.add_reader = add_reader  # type: ignore[method-assign]


async def breakdown(url: str, steps: int) -> tuple[float, Counting]:
    """One counted run of ``steps`` model calls; seconds per call and the counts."""
    script = [call("bump", n=i) for i in range(steps - 1)] + [reply("done")]
    agent = Agent(
        name="bench",
        model=ScriptedModel(script, stream_chunk=1 << 20, strict=False),
        tools=[bump],
        limits=Limits(max_iterations=steps + 5),
    )
    async with temporary_schema(url, prefix="reverie_bench") as scoped:
        trips = RoundTrips()
        trips.install(asyncio.get_running_loop())
        store = Counting(PostgresStore(scoped), trips)
        async with Runtime(store) as rt:  # type: ignore[arg-type]
            start = time.perf_counter()
            result = await rt.run(agent, "go", scope=SCOPE)
            elapsed = time.perf_counter() - start
    assert result.status == "completed", result.exit
    return elapsed / steps, store


async def report(
    url: str, steps_list: Sequence[int], repeat: int, loop: Loop, target_ms: float
) -> None:
    """Print the floor, the per-call figures and the breakdown at the largest step count.

    The floor is measured before and after the timed runs (on a shared machine it moves by
    several times within minutes); the ratios are to the mean of the two.
    """
    before = await floor(url)
    figures: list[tuple[int, float]] = []
    for steps in steps_list:
        runs = []
        for _ in range(repeat):
            async with temporary_schema(url, prefix="reverie_bench") as scoped:
                runs.append(await loop(steps, scoped))
        figures.append((steps, statistics.median(runs) * 1e3))
    after = await floor(url)
    for label, found in (("before the runs", before), ("after them", after)):
        print(
            f"PostgreSQL floor {label} ({COMMITS} each, one connection): round trip "
            f"{found.round_trip:.3f} ms, empty commit {found.empty_commit:.3f} ms, "
            f"one-row insert commit {found.insert_commit:.3f} ms"
        )
    insert_commit = (before.insert_commit + after.insert_commit) / 2
    print(f"{'steps':>6} {'postgres ms/call':>17} {'/insert commit':>15} {'/target':>8}")
    for steps, ms in figures:
        print(f"{steps:>6} {ms:>17.3f} {ms / insert_commit:>14.2f}x {ms / target_ms:>7.2f}x")
    steps = max(steps_list)
    per_call, store = await breakdown(url, steps)
    print(f"\nbreakdown, one run of {steps} calls ({per_call * 1e3:.3f} ms/call):")
    print(f"  {'store call':<22} {'per call':>9} {'trips/call':>11} {'ms/call':>8}")
    in_store = 0.0
    for name, count in store.calls.most_common():
        ms = store.seconds[name] * 1e3 / steps
        in_store += ms
        print(f"  {name:<22} {count / steps:>9.2f} {store.trips[name] / steps:>11.2f} {ms:>8.3f}")
    print(
        f"  in the store {in_store:.3f} ms/call, the rest (loop CPU) "
        f"{per_call * 1e3 - in_store:.3f} ms/call\n"
    )
