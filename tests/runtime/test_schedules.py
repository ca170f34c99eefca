"""Schedules fire exactly one run per occurrence, across runtimes and DST (DESIGN §20)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from reverie import Agent, Runtime, Schedule, Scope
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.errors import UsageError
from reverie.store.base import RunRecord
from reverie.testing import ScriptedModel, reply
from runtime.runtime_support import NEEDS_POSTGRES, postgres_database, sqlite_database

SCOPE = Scope(tenant="acme", user="ana")
Database = Callable[[Path], AbstractAsyncContextManager[str]]
T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
DATABASES = [
    pytest.param(sqlite_database, id="sqlite"),
    pytest.param(postgres_database, id="postgres", marks=NEEDS_POSTGRES),
]


def _agent(answer: Callable[[ModelRequest], Any] | None = None) -> Agent:
    return Agent(name="digest", model=ScriptedModel(answer or (lambda _: reply("done"))))


def _at(moment: datetime) -> Callable[[], datetime]:
    return lambda: moment


async def _scheduled_runs(rt: Runtime) -> list[RunRecord]:
    runs = await rt.store.list_runs(scope=SCOPE, limit=1000)
    return [r for r in runs if "schedule" in r.meta]


async def _settle(rt: Runtime, run_ids: list[str]) -> None:
    for run_id in run_ids:
        handle = rt.attach(run_id)
        if handle is not None:
            await asyncio.wait_for(handle.result(), 60)


async def _race(rts: list[Runtime], moments: list[datetime]) -> list[str]:
    started: list[str] = []
    for moment in moments:
        for batch in await asyncio.gather(*(rt.schedules.tick(moment) for rt in rts)):
            started.extend(batch)
    for rt in rts:
        await _settle(rt, started)
    return started


@pytest.mark.parametrize("database", DATABASES)
async def test_two_runtimes_racing_one_schedule_over_100_occurrences_start_exactly_100_runs(
    database: Database, tmp_path: Path
) -> None:
    async with database(tmp_path) as url, Runtime.open(url) as a, Runtime.open(url) as b:
        a.schedules.clock = b.schedules.clock = _at(T0)
        for rt in (a, b):
            rt.register(_agent())
        # alongside: a run still going never holds the next occurrence back, so every
        # occurrence must start exactly one run.
        await a.schedules.add(
            Schedule(name="ping", agent="digest", scope=SCOPE, every_s=60, overlap="alongside")
        )
        moments = [T0 + timedelta(minutes=i + 1) for i in range(100)]
        started = await _race([a, b], moments)
        runs = await _scheduled_runs(a)
        history = await a.schedules.history("ping", limit=500)
    assert len(runs) == 100 and len(set(started)) == 100
    assert sorted(r.run_id for r in runs) == sorted(started)
    assert [o.status for o in history] == ["started"] * 100
    assert sorted(o.at for o in history) == [m.timestamp() for m in moments]


@pytest.mark.parametrize(
    "start",
    [
        pytest.param(datetime(2026, 3, 27, 0, 0, tzinfo=UTC), id="spring-forward"),
        pytest.param(datetime(2026, 10, 23, 0, 0, tzinfo=UTC), id="fall-back"),
    ],
)
@pytest.mark.parametrize("database", DATABASES)
async def test_two_runtimes_racing_an_hourly_schedule_across_a_dst_change_start_one_run_per_hour(
    database: Database, start: datetime, tmp_path: Path
) -> None:
    # Europe/Berlin skips 02:00-02:59 on 2026-03-29 and repeats it on 2026-10-25: an hourly
    # schedule has an occurrence in every real hour (both passes of the repeated one), so
    # 100 hours are 100 occurrences either way.
    async with database(tmp_path) as url, Runtime.open(url) as a, Runtime.open(url) as b:
        a.schedules.clock = b.schedules.clock = _at(start)
        for rt in (a, b):
            rt.register(_agent())
        await a.schedules.add(
            Schedule(
                name="hourly",
                agent="digest",
                scope=SCOPE,
                cron="0 * * * *",
                timezone="Europe/Berlin",
                overlap="alongside",
            )
        )
        moments = [start + timedelta(hours=i + 1) for i in range(100)]
        started = await _race([a, b], moments)
        history = await a.schedules.history("hourly", limit=500)
    assert len(started) == 100 and len(set(started)) == 100
    local = sorted(o.at for o in history)
    assert local == [m.timestamp() for m in moments]


async def test_a_daily_run_in_the_skipped_hour_runs_once_at_the_end_of_the_gap() -> None:
    # 2026-03-29 Europe/Berlin: 02:00-02:59 does not exist; the 02:30 job runs at 03:00 CEST.
    start = datetime(2026, 3, 27, 0, 0, tzinfo=UTC)
    async with Runtime.open(":memory:") as rt:
        rt.schedules.clock = _at(start)
        rt.register(_agent())
        await rt.schedules.add(
            Schedule(
                name="night",
                agent="digest",
                scope=SCOPE,
                cron="30 2 * * *",
                timezone="Europe/Berlin",
            )
        )
        started = await _race([rt], [start + timedelta(minutes=15 * i) for i in range(4 * 96)])
        history = await rt.schedules.history("night")
    times = sorted(o.at for o in history)
    local = [datetime.fromtimestamp(t, UTC).isoformat() for t in times]
    assert len(started) == 4
    assert local == [
        "2026-03-27T01:30:00+00:00",
        "2026-03-28T01:30:00+00:00",
        "2026-03-29T01:00:00+00:00",  # 03:00 CEST: the end of the skipped hour
        "2026-03-30T00:30:00+00:00",
    ]


async def test_a_daily_run_in_the_repeated_hour_runs_once() -> None:
    # 2026-10-25 Europe/Berlin: 02:00-02:59 happens twice; the 02:30 job runs in the first.
    start = datetime(2026, 10, 24, 0, 0, tzinfo=UTC)
    async with Runtime.open(":memory:") as rt:
        rt.schedules.clock = _at(start)
        rt.register(_agent())
        await rt.schedules.add(
            Schedule(
                name="night",
                agent="digest",
                scope=SCOPE,
                cron="30 2 * * *",
                timezone="Europe/Berlin",
            )
        )
        started = await _race([rt], [start + timedelta(minutes=15 * i) for i in range(3 * 96)])
        history = await rt.schedules.history("night")
    local = [datetime.fromtimestamp(o.at, UTC).isoformat() for o in reversed(history)]
    assert len(started) == 3
    assert local == [
        "2026-10-24T00:30:00+00:00",
        "2026-10-25T00:30:00+00:00",
        "2026-10-26T01:30:00+00:00",
    ]


@pytest.mark.parametrize("database", DATABASES)
async def test_an_occurrence_claimed_by_a_process_that_died_before_starting_it_runs_once(
    database: Database, tmp_path: Path
) -> None:
    due = T0 + timedelta(minutes=1)
    async with database(tmp_path) as url:
        async with Runtime.open(url) as dead:
            dead.schedules.clock = _at(T0)
            await dead.schedules.add(Schedule(name="ping", agent="digest", scope=SCOPE, every_s=60))
            claimed = await dead.schedules.claim(due)  # ... and the process is gone
        assert [c.at for c in claimed] == [due.timestamp()]
        async with Runtime.open(url) as b, Runtime.open(url) as c:
            for rt in (b, c):
                rt.register(_agent())
            # The claimer may still be starting it: a tick right away leaves it alone.
            assert await b.schedules.tick(due) == []
            later = due + timedelta(seconds=b.schedules.recover_after_s)
            started = await _race([b, c], [later, later + timedelta(seconds=1)])
            runs = await _scheduled_runs(b)
            [occurrence] = await b.schedules.history("ping")
    assert len(started) == 1 and [r.run_id for r in runs] == started
    assert (occurrence.status, occurrence.run_id) == ("started", started[0])


@pytest.mark.parametrize(
    ("missed", "expected"),
    [("skip", 0), ("latest", 1), ("all", 3)],
)
async def test_missed_occurrences_follow_the_schedules_policy(missed: str, expected: int) -> None:
    async with Runtime.open(":memory:") as rt:
        rt.schedules.clock = _at(T0)
        rt.register(_agent())
        await rt.schedules.add(
            Schedule(
                name="ping",
                agent="digest",
                scope=SCOPE,
                every_s=60,
                missed=missed,  # type: ignore[arg-type]
                max_catchup=3,
                grace_s=10,
                overlap="alongside",
            )
        )
        # Nothing ticked for twelve occurrences; the last is 30 s late (the grace is 10 s).
        late = T0 + timedelta(minutes=12, seconds=30)
        started = await _race([rt], [late])
        history = await rt.schedules.history("ping")
        info = await rt.schedules.get("ping")
    assert len(started) == expected
    newest = (T0 + timedelta(minutes=12)).timestamp()
    assert [o.at for o in history] == [newest - 60 * i for i in range(expected)]
    assert info.next_at.timestamp() == newest + 60  # the missed ones are never claimed again


class _Gate:
    """A model whose first answer waits until the test lets it go."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.prompts: list[str] = []

    async def __call__(self, request: ModelRequest) -> ModelResponse:
        self.prompts.append(str(request.messages[-1].content))
        if len(self.prompts) == 1:
            await self.release.wait()
        return reply(f"result #{len(self.prompts)}")


@pytest.mark.parametrize(
    ("overlap", "runs_while_busy", "runs_after"),
    [("skip", 1, 1), ("queue", 1, 2), ("alongside", 2, 2)],
)
async def test_an_occurrence_while_the_previous_run_is_active_follows_the_overlap_policy(
    overlap: str, runs_while_busy: int, runs_after: int, tmp_path: Path
) -> None:
    gate = _Gate()
    async with Runtime.open(f"sqlite:///{tmp_path / 'o.db'}") as rt:
        rt.schedules.clock = _at(T0)
        rt.register(_agent(gate))
        await rt.schedules.add(
            Schedule(
                name="ping",
                agent="digest",
                scope=SCOPE,
                every_s=60,
                overlap=overlap,  # type: ignore[arg-type]
            )
        )
        [first] = await rt.schedules.tick(T0 + timedelta(minutes=1))
        await rt.schedules.tick(T0 + timedelta(minutes=2))
        while_busy = len(await _scheduled_runs(rt))
        gate.release.set()
        handle = rt.attach(first)
        assert handle is not None
        await asyncio.wait_for(handle.result(), 60)
        # The next tick (before the third occurrence) starts a queued one.
        later = await rt.schedules.tick(T0 + timedelta(minutes=2, seconds=30))
        await _settle(rt, later)
        after = len(await _scheduled_runs(rt))
    assert (while_busy, after) == (runs_while_busy, runs_after)


async def test_the_input_template_carries_the_occurrence_and_the_last_result() -> None:
    gate = _Gate()
    gate.release.set()
    async with Runtime.open(":memory:") as rt:
        rt.schedules.clock = _at(T0)
        rt.register(_agent(gate))
        await rt.schedules.add(
            Schedule(
                name="ping",
                agent="digest",
                scope=SCOPE,
                every_s=3600,
                timezone="Europe/Berlin",
                input="at ${occurrence}; before: ${last_result}",
            )
        )
        await _race([rt], [T0 + timedelta(hours=1), T0 + timedelta(hours=2)])
    assert "at 2026-06-01T15:00:00+02:00; before: " in gate.prompts[0]
    assert "at 2026-06-01T16:00:00+02:00; before: result #1" in gate.prompts[1]


async def test_a_shared_thread_schedule_accumulates_its_runs_on_one_thread() -> None:
    async with Runtime.open(":memory:") as rt:
        rt.schedules.clock = _at(T0)
        rt.register(_agent())
        await rt.schedules.add(
            Schedule(name="ping", agent="digest", scope=SCOPE, every_s=60, thread="shared")
        )
        await _race([rt], [T0 + timedelta(minutes=i + 1) for i in range(3)])
        runs = await _scheduled_runs(rt)
        thread = await rt.store.thread_items(runs[0].thread_id)
    assert len(runs) == 3 and len({r.thread_id for r in runs}) == 1
    assert len([i for i in thread if i.role == "user"]) == 3


async def test_a_paused_schedule_starts_nothing_and_resumes_from_now() -> None:
    async with Runtime.open(":memory:") as rt:
        rt.schedules.clock = _at(T0)
        rt.register(_agent())
        await rt.schedules.add(Schedule(name="ping", agent="digest", scope=SCOPE, every_s=60))
        await rt.schedules.pause("ping")
        assert await rt.schedules.tick(T0 + timedelta(minutes=5)) == []
        rt.schedules.clock = _at(T0 + timedelta(minutes=5, seconds=1))
        info = await rt.schedules.resume("ping")
        started = await _race([rt], [T0 + timedelta(minutes=6)])
    assert info.next_at.timestamp() == (T0 + timedelta(minutes=6)).timestamp()
    assert len(started) == 1


async def test_run_now_starts_an_extra_occurrence_without_moving_the_schedule() -> None:
    async with Runtime.open(":memory:") as rt:
        rt.schedules.clock = _at(T0)
        rt.register(_agent())
        await rt.schedules.add(Schedule(name="ping", agent="digest", scope=SCOPE, every_s=600))
        run_id = await rt.schedules.run_now("ping", now=T0 + timedelta(seconds=5))
        info = await rt.schedules.get("ping")
        assert run_id is not None
        await _settle(rt, [run_id])
    assert info.next_at.timestamp() == (T0 + timedelta(minutes=10)).timestamp()


@pytest.mark.parametrize(
    "bad",
    [
        {"cron": "61 * * * *"},
        {"cron": "0 * * * *", "every_s": 60},
        {"every_s": 60, "timezone": "Mars/Olympus"},
        {"every_s": 60, "thread": "shared", "overlap": "alongside"},
        {"every_s": 0.5},
    ],
)
def test_a_bad_schedule_is_refused_with_a_usage_error(bad: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        Schedule(name="x", agent="digest", scope=SCOPE, **bad)
