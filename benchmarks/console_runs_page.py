"""Server time of the console's Runs page over a store holding 10,000 runs of one person.

    python benchmarks/console_runs_page.py [--runs 10000] [--repeat 50] [--store sqlite|memory]

The runs are written to a SQLite file (or the in-memory store) first; then the app of
``reverie serve`` (console on) answers ``GET /console/runs`` in process, through its whole
middleware stack (session lookup, query API, templates, security headers) but no socket. The
figure is each request's wall time: the first page, a status filter, an agent filter, and a
page 9,000 runs deep (keyset cursor). Target (issue 30): under 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import httpx

from reverie import Agent, Runtime, Scope
from reverie.serve import create_app
from reverie.store import RunRecord
from reverie.store.base import RunStatus
from reverie.testing import ScriptedModel, reply

SCOPE = Scope(tenant="bench", user="ana")
OTHER = Scope(tenant="bench", user="bob")
TOKEN = "tok-bench-console-1f2e3d"
STATUSES: tuple[RunStatus, ...] = (
    "completed",
    "completed",
    "completed",
    "failed",
    "cancelled",
    "blocked",
)


async def fill(rt: Runtime, runs: int) -> None:
    """``runs`` runs of SCOPE (and as many of another owner), statuses and agents mixed."""
    store = rt.store
    for n in range(runs):
        for scope, prefix in ((SCOPE, "a"), (OTHER, "b")):
            thread = f"thr-{prefix}{n}"
            await store.create_thread(thread, scope)
            await store.create_run(
                RunRecord(
                    run_id=f"run-{prefix}{n:06d}",
                    thread_id=thread,
                    scope=scope,
                    agent_name="mailer" if n % 3 else "echo",
                )
            )
            await store.set_run_status(f"run-{prefix}{n:06d}", STATUSES[n % 6], fence=None)


async def measure(url: str, runs: int, repeat: int) -> None:
    agents = {
        name: Agent(name=name, model=ScriptedModel(lambda r: reply("hi")))
        for name in ("mailer", "echo")
    }
    async with Runtime.open(url) as rt:
        started = time.perf_counter()
        await fill(rt, runs)
        print(f"wrote {2 * runs} runs in {time.perf_counter() - started:.1f} s")
        app = create_app(rt, agents=agents, tokens={TOKEN: SCOPE})
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            login = await client.get("/console/", params={"token": TOKEN})
            assert login.status_code == 303
            deep = await _deep_cursor(rt)
            cases = {
                "first page": "/console/runs",
                "status=blocked": "/console/runs?status=blocked",
                "agent=echo": "/console/runs?agent=echo",
                "9,000 runs deep": f"/console/runs?before={deep}",
                "live rows fragment": "/console/runs/rows",
            }
            print(f"{'page':<24} {'median ms':>10} {'p95 ms':>8}  (target < 50 ms)")
            for name, path in cases.items():
                times = []
                for _ in range(repeat + 3):
                    t0 = time.perf_counter()
                    response = await client.get(path)
                    times.append((time.perf_counter() - t0) * 1000)
                    assert response.status_code == 200, response.text[:200]
                    assert response.text.count("data-run=") == 50, name
                times = sorted(times[3:])  # the first requests warm the templates
                p95 = times[int(len(times) * 0.95) - 1]
                print(f"{name:<24} {statistics.median(times):>10.2f} {p95:>8.2f}")


async def _deep_cursor(rt: Runtime) -> str:
    """The cursor of the run 1,000 from the oldest (a page deep in the history)."""
    [run] = await rt.runs.list(scope=SCOPE, limit=1, thread_id="thr-a1000")
    return quote(f"{run.created_at!r}~{run.run_id}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}" if args.store == "sqlite" else ":memory:"
        asyncio.run(measure(url, args.runs, args.repeat))


if __name__ == "__main__":
    main()
