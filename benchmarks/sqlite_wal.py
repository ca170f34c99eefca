"""What a SQLite step commit writes to the WAL, and what a WAL that keeps its file saves.

    python benchmarks/sqlite_wal.py [--steps 200] [--commits 2000] [--repeat 5]

Two figures:

- **frames per step commit**: a run of ``steps`` harmless tool steps (an instant scripted
  model, one trivial tool each, as in ``loop_overhead.py``) on a store whose checkpoint
  threshold is out of reach, so its WAL holds every frame it wrote. The WAL file is read frame
  by frame: frames per commit (median and histogram) and per step, and which table or index
  each frame is a page of. Every frame is written by its ``COMMIT`` and copied again by a
  checkpoint, so fewer is cheaper twice.
- **COMMIT CPU, extending vs reusing the WAL file**: ``commits`` transactions of five
  one-page updates each in raw ``sqlite3`` (thread CPU time of the ``COMMIT`` alone, min of
  ``repeat``), once with ``journal_size_limit = 0`` (a WAL started over is truncated: every
  frame extends the file) and once with the file kept (frames overwrite the old WAL's).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sqlite3
import statistics
import struct
import tempfile
import time
from pathlib import Path

from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.store import SQLiteStore
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="bench", user="bench")


@tool(effects=set())
async def bump(n: int) -> int:
    """Return n + 1."""
    return n + 1


def _commits(wal: Path) -> list[list[int]]:
    """The page numbers of each committed transaction in a WAL file."""
    data = wal.read_bytes()
    page = struct.unpack(">I", data[8:12])[0]
    commits: list[list[int]] = []
    pages: list[int] = []
    for offset in range(32, len(data) - 24 - page + 1, 24 + page):
        number, commit_size = struct.unpack(">II", data[offset : offset + 8])
        pages.append(number)
        if commit_size:
            commits.append(pages)
            pages = []
    return commits


async def frames_per_step(steps: int) -> None:
    script = [call("bump", n=i) for i in range(steps - 1)] + [reply("done")]
    agent = Agent(
        name="bench",
        model=ScriptedModel(script, stream_chunk=1 << 20, strict=False),
        tools=[bump],
        limits=Limits(max_iterations=steps + 5),
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "wal.db"
        async with Runtime(SQLiteStore(path, checkpoint_pages=1 << 30)) as rt:
            result = await rt.run(agent, "go", scope=SCOPE)
            assert result.status == "completed", result.exit
            commits = _commits(Path(f"{path}-wal"))
            with sqlite3.connect(path) as db:  # reads through the WAL: the pages as they are now
                owner = dict(db.execute("SELECT pageno, name FROM dbstat").fetchall())
    sizes = [len(c) for c in commits]
    tables: collections.Counter[str] = collections.Counter(
        owner.get(p, "?") for c in commits for p in c
    )
    print(
        f"{steps} steps: {len(commits)} commits, {sum(sizes)} frames = "
        f"{sum(sizes) / steps:.2f} per step; frames per commit: median "
        f"{statistics.median(sizes)}, histogram {sorted(collections.Counter(sizes).items())}"
    )
    print("frames per step by table/index:")
    for name, n in tables.most_common(8):
        print(f"  {name:<28} {n / steps:.2f}")


def commit_cpu(commits: int, repeat: int) -> None:
    found = {}
    for label, limit in (("extending (journal_size_limit=0)", 0), ("reusing the file", -1)):
        with tempfile.TemporaryDirectory() as tmp:
            db = sqlite3.connect(Path(tmp) / "c.db", isolation_level=None)
            for pragma in ("journal_mode = WAL", "synchronous = NORMAL", "wal_autocheckpoint = 0"):
                db.execute(f"PRAGMA {pragma}")
            db.execute(f"PRAGMA journal_size_limit = {limit}")
            for t in range(5):
                db.execute(f"CREATE TABLE t{t} (k INTEGER PRIMARY KEY, v BLOB)")
            best = []
            for _ in range(repeat):
                spent = 0
                for _ in range(commits):
                    db.execute("BEGIN IMMEDIATE")
                    for t in range(5):
                        db.execute(f"INSERT OR REPLACE INTO t{t} VALUES (1, x'00')")
                    start = time.thread_time_ns()
                    db.execute("COMMIT")
                    spent += time.thread_time_ns() - start
                best.append(spent / commits / 1e3)
                db.execute("PRAGMA wal_checkpoint(PASSIVE)")  # the next commit starts over
            db.close()
        found[label] = min(best)
        print(f"COMMIT of 5 pages, {label}: {found[label]:.1f} us CPU")
    reuse, extend = found["reusing the file"], found["extending (journal_size_limit=0)"]
    print(f"reusing / extending: {reuse / extend:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--commits", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    a = parser.parse_args()
    asyncio.run(frames_per_step(a.steps))
    commit_cpu(a.commits, a.repeat)
