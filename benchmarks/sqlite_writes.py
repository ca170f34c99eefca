"""Where a SQLite write should run: the writer thread (a hop each way) or the event loop.

    python benchmarks/sqlite_writes.py [--writes 2000] [--concurrent 1000] [--repeat 3]

For ``synchronous`` NORMAL and FULL, and for each write path (``loop``: the store commits on
the event loop, handing a batch to the writer thread only when the lock is taken; ``thread``:
every write goes to the writer thread), two figures, median of ``repeat``:

- **lone**: ``writes`` fenced checkpoint saves (1.3 KB) one after the other, time per write;
- **batch**: ``concurrent`` saves of as many runs issued at once (one group commit), time per
  write.

Printed as microseconds and as the ratio loop / thread (below 1.00x: the loop path is faster).
``SQLiteStore`` picks the loop for NORMAL (and OFF) and the thread for FULL (and EXTRA), where
every ``COMMIT`` syncs the disk and the loop must not wait for it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from reverie import Scope
from reverie.store import RunRecord, SQLiteStore

SCOPE = Scope(tenant="bench", user="bench")
PAYLOAD = b"x" * 1300


async def _runs(store: SQLiteStore, n: int) -> list[tuple[str, int]]:
    fenced = []
    for i in range(n):
        await store.create_thread(f"t{i}", SCOPE)
        run = RunRecord(run_id=f"r{i}", thread_id=f"t{i}", scope=SCOPE, agent_name="bench")
        await store.create_run(run)
        fence = await store.acquire_lease(run.run_id, "bench", ttl_s=600, now=time.time())
        fenced.append((run.run_id, fence))
    return fenced


async def measure(
    path: Path, synchronous: str, loop_writes: bool, writes: int, wide: int
) -> tuple[float, float]:
    """(lone µs per write, batch µs per write) on a fresh file."""
    async with SQLiteStore(path, synchronous=synchronous, loop_writes=loop_writes) as store:
        fenced = await _runs(store, wide)
        run_id, fence = fenced[0]
        start = time.perf_counter()
        for _ in range(writes):
            await store.save_checkpoint(run_id, "BeforeModel", PAYLOAD, fence=fence)
        lone = (time.perf_counter() - start) / writes * 1e6
        start = time.perf_counter()
        await asyncio.gather(
            *(store.save_checkpoint(r, "BeforeModel", PAYLOAD, fence=f) for r, f in fenced)
        )
        batch = (time.perf_counter() - start) / wide * 1e6
    return lone, batch


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--writes", type=int, default=2000)
    parser.add_argument("--concurrent", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{args.writes} lone writes, {args.concurrent} concurrent, median of {args.repeat}")
    print(f"{'synchronous':>11} {'path':>7} {'lone µs':>9} {'batch µs':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for synchronous in ("NORMAL", "FULL"):
            figures: dict[bool, tuple[float, float]] = {}
            for loop_writes in (False, True):
                lone, batch = [], []
                for n in range(args.repeat):
                    path = Path(tmp) / f"{synchronous}-{loop_writes}-{n}.db"
                    a, b = await measure(
                        path, synchronous, loop_writes, args.writes, args.concurrent
                    )
                    lone.append(a)
                    batch.append(b)
                figures[loop_writes] = (statistics.median(lone), statistics.median(batch))
                name = "loop" if loop_writes else "thread"
                lone_us, batch_us = figures[loop_writes]
                print(f"{synchronous:>11} {name:>7} {lone_us:9.1f} {batch_us:9.1f}")
            ratio_lone = figures[True][0] / figures[False][0]
            ratio_batch = figures[True][1] / figures[False][1]
            print(
                f"{synchronous:>11} loop/thread: lone {ratio_lone:.2f}x, batch {ratio_batch:.2f}x"
            )


if __name__ == "__main__":
    asyncio.run(main())
