"""Schedules: agents that run on a cron expression or an interval, one run per occurrence.

``rt.schedules`` adds, pauses, resumes, removes and lists schedules (stored, so every process
on the store sees them), and fires them: :meth:`Schedules.tick` claims the occurrences due at a
time and starts their runs; :meth:`Schedules.serve` ticks on the runtime's clock until
cancelled (``reverie serve`` and ``reverie worker`` run it).

Exactly one run per occurrence (DESIGN §20), across processes:

1. **Claim.** An occurrence is claimed by the compare-and-swap that advances the schedule's
   ``next_at`` (:meth:`ScheduleStore.claim_occurrences`): the occurrence rows are written in
   the same transaction, so of two processes ticking at once exactly one gets them.
2. **Start.** The claimer starts the run under the occurrence's idempotency key,
   ``schedule:<name>:<epoch seconds>``, then marks the occurrence started. A process that dies
   between the two leaves the occurrence ``claimed``; any process's tick starts it once it is
   older than ``recover_after_s``. Because the run is keyed, a recovery racing a slow claimer
   still finds the one run the key names: never a second.

Times: a cron expression is evaluated in the schedule's IANA zone with ``cronsim``, which
follows Debian cron across DST changes: a job whose time falls in the skipped hour runs once
(at the end of the gap), and one in the repeated hour runs once. Intervals are aligned to the
epoch (every process computes the same occurrences).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import math
import string
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from reverie.core.canonical import digest
from reverie.core.scope import Scope
from reverie.core.vocabulary import ScheduleMissed, ScheduleOverlap, ScheduleThread
from reverie.errors import NotFoundError, RunBusy, ThreadBusy, UsageError
from reverie.store.base import ACTIVE_STATUSES
from reverie.store.schedules import OccurrenceRecord, ScheduleRecord, ScheduleStore

if TYPE_CHECKING:
    from reverie.runtime.agents import AgentDirectory
    from reverie.runtime.ports import Runner

__all__ = [
    "MissedPolicy",
    "OverlapPolicy",
    "Schedule",
    "ScheduleInfo",
    "ScheduleThread",
    "Schedules",
]

MissedPolicy = ScheduleMissed
"""See :data:`reverie.core.vocabulary.ScheduleMissed`."""
OverlapPolicy = ScheduleOverlap
"""See :data:`reverie.core.vocabulary.ScheduleOverlap`."""

Clock = Callable[[], datetime]
_log = logging.getLogger("reverie.schedules")


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """What a schedule runs and when. Exactly one of ``cron`` and ``every_s`` is set.

    Example::

        Schedule(name="inbox", agent="assistant", scope=Scope(tenant="acme", user="ana"),
                 cron="0 8 * * mon-fri", timezone="Europe/Berlin",
                 input="It is ${occurrence}. Summarise my inbox. Last time: ${last_result}")
    """

    name: str
    agent: str
    """The name of a registered agent (a process without it leaves the occurrence to others)."""
    scope: Scope
    """Whom the runs act for (set by the host, never by a model)."""
    cron: str | None = None
    """A five-field cron expression, in ``timezone``."""
    every_s: float | None = None
    """An interval in seconds (occurrences at multiples of it since the epoch)."""
    timezone: str = "UTC"
    """An IANA zone name (``Europe/Berlin``)."""
    input: str = "Scheduled run of ${schedule} at ${occurrence}."
    """The run's message; ``${occurrence}`` (ISO time in the zone), ``${schedule}`` and
    ``${last_result}`` (the previous run's reply, or empty) are substituted."""
    thread: ScheduleThread = "new"
    missed: MissedPolicy = "latest"
    max_catchup: int = 10
    """With ``missed="all"``: at most this many missed occurrences run (the newest)."""
    overlap: OverlapPolicy = "skip"
    grace_s: float = 60.0
    """With ``missed="skip"``: an occurrence this late still runs (a tick is rarely exact)."""

    def __post_init__(self) -> None:
        if not self.name or not self.name.strip() or "/" in self.name:
            raise UsageError("a schedule name must be non-empty and contain no '/'")
        if not self.agent:
            raise UsageError(f"schedule {self.name!r} names no agent")
        if not isinstance(self.scope, Scope):
            raise UsageError("a schedule's scope must be a reverie.Scope set by the host")
        if (self.cron is None) == (self.every_s is None):
            raise UsageError(f"schedule {self.name!r} needs exactly one of cron and every_s")
        if self.every_s is not None and not (math.isfinite(self.every_s) and self.every_s >= 1):
            raise UsageError(f"schedule {self.name!r}: every_s must be at least 1 second")
        if self.cron is not None:
            try:
                CronSim(self.cron, datetime(2000, 1, 1, tzinfo=UTC))
            except CronSimError as e:
                raise UsageError(f"schedule {self.name!r}: bad cron expression: {e}") from e
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError) as e:
            raise UsageError(f"schedule {self.name!r}: unknown time zone {self.timezone!r}") from e
        for value, allowed, what in (
            (self.thread, ScheduleThread, "thread"),
            (self.missed, MissedPolicy, "missed"),
            (self.overlap, OverlapPolicy, "overlap"),
        ):
            if value not in get_args(allowed):
                raise UsageError(
                    f"schedule {self.name!r}: {what} must be one of {', '.join(get_args(allowed))}"
                )
        if self.overlap == "alongside" and self.thread == "shared":
            raise UsageError(
                f"schedule {self.name!r}: overlap='alongside' needs thread='new' "
                "(a thread has at most one active run)"
            )
        if self.max_catchup < 1:
            raise UsageError(f"schedule {self.name!r}: max_catchup must be at least 1")

    def spec(self) -> dict[str, Any]:
        """Everything but name and scope, as stored."""
        out = asdict(self)
        del out["name"], out["scope"]
        return out

    @classmethod
    def from_record(cls, record: ScheduleRecord) -> Schedule:
        """The schedule a stored row holds."""
        return cls(name=record.name, scope=record.scope, **dict(record.spec))

    def following(self, after: float) -> float:
        """The first occurrence strictly after ``after`` (epoch seconds)."""
        if self.every_s is not None:
            return (math.floor(after / self.every_s) + 1) * self.every_s
        assert self.cron is not None
        start = datetime.fromtimestamp(after, ZoneInfo(self.timezone))
        return next(CronSim(self.cron, start)).timestamp()

    def local(self, at: float) -> datetime:
        """An occurrence's time in the schedule's zone."""
        return datetime.fromtimestamp(at, ZoneInfo(self.timezone))


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleInfo:
    """A stored schedule and where it stands."""

    schedule: Schedule
    paused: bool
    next_at: datetime
    """The next occurrence nobody has claimed (in the schedule's zone)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (the CLI's ``--json``; the HTTP API drops the caller's own scope)."""
        s = self.schedule
        return {
            "name": s.name,
            "agent": s.agent,
            "scope": {"tenant": s.scope.tenant, "user": s.scope.user},
            "cron": s.cron,
            "every_s": s.every_s,
            "timezone": s.timezone,
            "input": s.input,
            "thread": s.thread,
            "missed": s.missed,
            "max_catchup": s.max_catchup,
            "overlap": s.overlap,
            "paused": self.paused,
            "next_at": self.next_at.isoformat(),
        }


def occurrence_key(name: str, at: float) -> str:
    """The idempotency key of an occurrence's run (derived from schedule and time only)."""
    return f"schedule:{name}:{at:.3f}"


class Schedules:
    """``rt.schedules``: stored schedules and the ticks that fire them."""

    def __init__(
        self,
        runner: Runner,
        store: Any,
        *,
        agents: AgentDirectory,
        clock: Clock | None = None,
        recover_after_s: float = 30.0,
    ) -> None:
        self._runner = runner
        self._agents = agents
        self._raw_store = store
        self.clock: Clock = clock or _utc_now
        """Now, as the scheduler sees it (tests inject one so they never sleep)."""
        self.recover_after_s = recover_after_s
        """A claimed occurrence not started after this long is started by any tick."""

    @property
    def _store(self) -> ScheduleStore:
        if not isinstance(self._raw_store, ScheduleStore):
            raise UsageError(f"{type(self._raw_store).__name__} does not store schedules")
        return self._raw_store

    def _now(self, now: datetime | None) -> float:
        moment = now or self.clock()
        if moment.tzinfo is None:
            raise UsageError("a schedule time must be timezone-aware")
        return moment.timestamp()

    # ------------------------------------------------------------------------------ managing
    async def add(self, schedule: Schedule, *, replace: bool = False) -> ScheduleInfo:
        """Store a schedule; its first occurrence is the first after now.

        With ``replace`` an existing schedule of that name takes the new settings (its course
        is kept when its timing did not change, and it stays paused if it was).

        Raises:
            UsageError: The name exists and ``replace`` is not set.
        """
        now = self._now(None)
        record = ScheduleRecord(
            name=schedule.name,
            scope=schedule.scope,
            spec=schedule.spec(),
            next_at=schedule.following(now),
            created_at=now,
        )
        if not await self._store.insert_schedule(record):
            old = await self._store.get_schedule(schedule.name)
            if not replace or old is None:
                raise UsageError(f"a schedule named {schedule.name!r} exists")
            timing = ("cron", "every_s", "timezone")
            same = all(old.spec.get(k) == record.spec.get(k) for k in timing)
            record = ScheduleRecord(
                name=record.name,
                scope=record.scope,
                spec=record.spec,
                next_at=old.next_at if same else record.next_at,
                paused=old.paused,
                created_at=old.created_at,
            )
            await self._store.update_schedule(record)
        return self._info(record)

    async def get(self, name: str) -> ScheduleInfo:
        """One schedule. Raises :class:`NotFoundError` when there is none of that name."""
        return self._info(await self._record(name))

    async def list(self, *, scope: Scope | None = None) -> builtins.list[ScheduleInfo]:
        """Every schedule (of ``scope``'s owner, tenant and user, when given), by name."""
        records = await self._store.list_schedules()
        if scope is not None:
            records = [r for r in records if _owned(r.scope, scope)]
        return [self._info(r) for r in records]

    async def pause(self, name: str) -> ScheduleInfo:
        """Stop claiming occurrences (already-claimed ones still start)."""
        record = await self._record(name)
        paused = ScheduleRecord(**{**_fields(record), "paused": True})
        await self._store.update_schedule(paused)
        return self._info(paused)

    async def resume(self, name: str) -> ScheduleInfo:
        """Claim again, from the first occurrence after now (nothing missed while paused runs)."""
        record = await self._record(name)
        schedule = Schedule.from_record(record)
        resumed = ScheduleRecord(
            **{
                **_fields(record),
                "paused": False,
                "next_at": schedule.following(self._now(None)),
            }
        )
        await self._store.update_schedule(resumed)
        return self._info(resumed)

    async def remove(self, name: str) -> None:
        """Delete a schedule and its history (its runs stay)."""
        if not await self._store.delete_schedule(name):
            raise NotFoundError(f"no schedule named {name!r}")

    async def history(self, name: str, *, limit: int = 50) -> builtins.list[OccurrenceRecord]:
        """The schedule's claimed occurrences, newest first."""
        await self._record(name)
        return await self._store.occurrences(name, limit=limit)

    async def run_now(self, name: str, *, now: datetime | None = None) -> str | None:
        """Start an extra occurrence at ``now`` (the schedule's course is unchanged).

        Returns the run id, or None when the overlap policy held it back.
        """
        at = self._now(now)
        await self._record(name)
        occurrence = OccurrenceRecord(name=name, at=at, key=occurrence_key(name, at), claimed_at=at)
        await self._store.insert_occurrence(occurrence)
        started = await self._start_pending(name, at, only={at})
        return started[0] if started else None

    # ------------------------------------------------------------------------------ firing
    async def claim(self, now: datetime | None = None) -> builtins.list[OccurrenceRecord]:
        """Claim every occurrence due at ``now`` (default: the clock) without starting it.

        :meth:`tick` claims, then starts; a process that claimed and died leaves the claims to
        the next tick anywhere (after ``recover_after_s``).
        """
        at = self._now(now)
        claimed: builtins.list[OccurrenceRecord] = []
        for record in await self._store.list_schedules():
            if record.paused or record.next_at > at:
                continue
            claimed.extend(await self._claim_one(record, at))
        return claimed

    async def tick(self, now: datetime | None = None) -> builtins.list[str]:
        """Claim what is due at ``now`` and start the runs of claimed occurrences.

        Returns the ids of the runs this call started (a run another process started for an
        occurrence is not among them).
        """
        at = self._now(now)
        mine = {(o.name, o.at) for o in await self.claim(now)}
        started: builtins.list[str] = []
        for record in await self._store.list_schedules():
            started.extend(
                await self._start_pending(
                    record.name, at, only={a for n, a in mine if n == record.name}
                )
            )
        return started

    async def serve(self, *, poll_s: float = 15.0) -> None:
        """Tick on the clock until cancelled (at least every ``poll_s``, to see other
        processes' changes). A tick that fails is retried at the next one."""
        while True:
            try:
                await self.tick()
            except Exception as e:  # a store hiccup must not end the scheduler
                _log.warning("schedule tick failed (%s); retrying at the next", type(e).__name__)
            wait = poll_s
            with contextlib.suppress(Exception):
                now = self._now(None)
                for record in await self._store.list_schedules():
                    if not record.paused:
                        wait = min(wait, max(record.next_at - now, 0.0))
            await asyncio.sleep(max(wait, 0.05))

    async def _claim_one(
        self, record: ScheduleRecord, now: float
    ) -> builtins.list[OccurrenceRecord]:
        schedule = Schedule.from_record(record)
        bound = schedule.max_catchup if schedule.missed == "all" else 1
        due: builtins.list[float] = []
        at = _skip_ahead(schedule, record.next_at, now, bound)
        while at <= now:
            due = [*due[-(bound - 1) :], at] if bound > 1 else [at]
            at = schedule.following(at)
        if schedule.missed == "skip":
            due = [d for d in due if now - d <= schedule.grace_s]
        occurrences = [
            OccurrenceRecord(
                name=record.name, at=d, key=occurrence_key(record.name, d), claimed_at=now
            )
            for d in due
        ]
        won = await self._store.claim_occurrences(
            record.name, expected_next_at=record.next_at, next_at=at, occurrences=occurrences
        )
        return occurrences if won else []

    async def _start_pending(
        self, name: str, now: float, *, only: set[float]
    ) -> builtins.list[str]:
        """Start the schedule's claimed occurrences: those in ``only`` and stale ones."""
        record = await self._store.get_schedule(name)
        if record is None:
            return []
        schedule = Schedule.from_record(record)
        agent = self._agents.named(schedule.agent)
        if agent is None:
            return []  # a process that has the agent starts it
        started: builtins.list[str] = []
        for occurrence in await self._store.pending_occurrences(name):
            if occurrence.at not in only and now - occurrence.claimed_at < self.recover_after_s:
                continue  # its claimer is (probably) starting it
            previous = await self._previous_run(name, occurrence.at)
            busy = previous is not None and previous.status in ACTIVE_STATUSES
            if busy and schedule.overlap == "skip":
                await self._store.settle_occurrence(name, occurrence.at, "skipped", run_id=None)
                continue
            if busy and schedule.overlap == "queue":
                break  # it stays claimed; a later tick starts it after the previous one
            message = string.Template(schedule.input).safe_substitute(
                schedule=name,
                occurrence=schedule.local(occurrence.at).isoformat(),
                last_result=await self._reply_of(previous),
            )
            thread_id = await self._thread(schedule) if schedule.thread == "shared" else None
            try:
                handle = await self._runner.start(
                    agent,
                    message,
                    scope=schedule.scope,
                    thread_id=thread_id,
                    has_actor=False,
                    idempotency_key=occurrence.key,
                    thread_policy="reject",
                    meta={"schedule": name, "occurrence": occurrence.at},
                )
            except ThreadBusy:
                if schedule.overlap == "skip":
                    await self._store.settle_occurrence(name, occurrence.at, "skipped", run_id=None)
                    continue
                break  # queue: the shared thread's run ends first
            except RunBusy:
                # Another process started this occurrence's run (its key names it) and holds
                # it: that process settles the occurrence.
                continue
            if await self._store.settle_occurrence(
                name, occurrence.at, "started", run_id=handle.run_id
            ):
                started.append(handle.run_id)
        return started

    async def _previous_run(self, name: str, before: float) -> Any:
        for occurrence in await self._store.occurrences(name, limit=50):
            if occurrence.at < before and occurrence.run_id is not None:
                return await self._runner.store.get_run(occurrence.run_id)
        return None

    async def _reply_of(self, run: Any) -> str:
        if run is None or run.status != "completed":
            return ""
        result = await self._runner.get_result(run.run_id)
        return result.text or ""

    async def _thread(self, schedule: Schedule) -> str:
        """The shared thread of a schedule (created for its scope on first use)."""
        scope = schedule.scope
        thread_id = f"thr_{digest(['schedule', scope.tenant, scope.user, schedule.name])[:32]}"
        try:
            await self._runner.store.get_thread(thread_id)
        except NotFoundError:
            await self._runner.store.create_thread(thread_id, scope)
        return thread_id

    async def _record(self, name: str) -> ScheduleRecord:
        record = await self._store.get_schedule(name)
        if record is None:
            raise NotFoundError(f"no schedule named {name!r}")
        return record

    def _info(self, record: ScheduleRecord) -> ScheduleInfo:
        schedule = Schedule.from_record(record)
        return ScheduleInfo(
            schedule=schedule, paused=record.paused, next_at=schedule.local(record.next_at)
        )


def _skip_ahead(schedule: Schedule, at: float, now: float, bound: int) -> float:
    """Where a catch-up walk starts: far behind, past occurrences that would be dropped anyway
    (keeps a tick after a long outage bounded)."""
    if schedule.every_s is not None:
        last = math.floor(now / schedule.every_s) * schedule.every_s
        return max(at, last - (bound - 1) * schedule.every_s)
    week = 7 * 86400.0
    if now - at > week * bound:  # a cron schedule weeks behind: walk only the last weeks
        return max(at, schedule.following(now - week * bound))
    return at


def _owned(scope: Scope, owner: Scope) -> bool:
    return (scope.tenant, scope.user) == (owner.tenant, owner.user)


def _fields(record: ScheduleRecord) -> dict[str, Any]:
    return {
        "name": record.name,
        "scope": record.scope,
        "spec": record.spec,
        "next_at": record.next_at,
        "paused": record.paused,
        "created_at": record.created_at,
    }
