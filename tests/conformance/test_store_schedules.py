"""Schedules: a claim advances a schedule and records its occurrences once (DESIGN §20)."""

from __future__ import annotations

import asyncio
import dataclasses

from conformance.support import ANA
from reverie.store import Store
from reverie.store.schedules import OccurrenceRecord, ScheduleRecord, ScheduleStore

T0 = 1_800_000_000.0


def _schedule(name: str = "inbox", next_at: float = T0) -> ScheduleRecord:
    return ScheduleRecord(
        name=name, scope=ANA, spec={"agent": "a", "every_s": 60.0}, next_at=next_at, created_at=T0
    )


def _occ(at: float, name: str = "inbox") -> OccurrenceRecord:
    return OccurrenceRecord(name=name, at=at, key=f"schedule:{name}:{at}", claimed_at=at)


def _schedules(store: Store) -> ScheduleStore:
    assert isinstance(store, ScheduleStore)
    return store


async def test_a_schedule_name_is_inserted_once(store: Store) -> None:
    s = _schedules(store)
    assert await s.insert_schedule(_schedule())
    assert not await s.insert_schedule(_schedule(next_at=T0 + 5))
    got = await s.get_schedule("inbox")
    assert got == _schedule()
    assert [r.name for r in await s.list_schedules()] == ["inbox"]


async def test_claim_advances_the_schedule_and_records_its_occurrences(store: Store) -> None:
    s = _schedules(store)
    await s.insert_schedule(_schedule())
    assert await s.claim_occurrences(
        "inbox", expected_next_at=T0, next_at=T0 + 60, occurrences=[_occ(T0)]
    )
    got = await s.get_schedule("inbox")
    assert got is not None and got.next_at == T0 + 60
    assert await s.pending_occurrences("inbox") == [_occ(T0)]


async def test_a_stale_claim_writes_nothing(store: Store) -> None:
    s = _schedules(store)
    await s.insert_schedule(_schedule())
    await s.claim_occurrences("inbox", expected_next_at=T0, next_at=T0 + 60, occurrences=[])
    lost = await s.claim_occurrences(
        "inbox", expected_next_at=T0, next_at=T0 + 60, occurrences=[_occ(T0)]
    )
    assert not lost
    assert await s.pending_occurrences("inbox") == []


async def test_concurrent_claims_of_one_occurrence_let_exactly_one_win(store: Store) -> None:
    s = _schedules(store)
    await s.insert_schedule(_schedule())
    wins = await asyncio.gather(
        *(
            s.claim_occurrences(
                "inbox", expected_next_at=T0, next_at=T0 + 60, occurrences=[_occ(T0)]
            )
            for _ in range(8)
        )
    )
    assert sorted(wins) == [False] * 7 + [True]
    assert len(await s.occurrences("inbox")) == 1


async def test_a_paused_schedule_is_not_claimed(store: Store) -> None:
    s = _schedules(store)
    await s.insert_schedule(_schedule())
    assert await s.update_schedule(dataclasses.replace(_schedule(), paused=True))
    assert not await s.claim_occurrences(
        "inbox", expected_next_at=T0, next_at=T0 + 60, occurrences=[_occ(T0)]
    )


async def test_an_occurrence_settles_once(store: Store) -> None:
    s = _schedules(store)
    await s.insert_schedule(_schedule())
    await s.claim_occurrences("inbox", expected_next_at=T0, next_at=T0 + 60, occurrences=[_occ(T0)])
    assert await s.settle_occurrence("inbox", T0, "started", run_id="run-1")
    assert not await s.settle_occurrence("inbox", T0, "skipped", run_id=None)
    [row] = await s.occurrences("inbox")
    assert (row.status, row.run_id) == ("started", "run-1")
    assert await s.pending_occurrences("inbox") == []


async def test_an_extra_occurrence_is_recorded_once_and_only_for_a_schedule(store: Store) -> None:
    s = _schedules(store)
    assert not await s.insert_occurrence(_occ(T0 + 7))
    await s.insert_schedule(_schedule())
    assert await s.insert_occurrence(_occ(T0 + 7))
    assert not await s.insert_occurrence(_occ(T0 + 7))


async def test_deleting_a_schedule_deletes_its_occurrences(store: Store) -> None:
    s = _schedules(store)
    await s.insert_schedule(_schedule())
    await s.insert_occurrence(_occ(T0 + 7))
    assert await s.delete_schedule("inbox")
    assert not await s.delete_schedule("inbox")
    assert await s.get_schedule("inbox") is None
    assert await s.occurrences("inbox") == []
