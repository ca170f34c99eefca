"""``[schedules.NAME]``: schedules the file declares (docs/schedules.md).

::

    [schedules.inbox]
    agent = "assistant"
    scope = { tenant = "acme", user = "ana" }
    cron = "0 8 * * mon-fri"                    # or: every_s = 900
    timezone = "Europe/Berlin"
    input = "It is ${occurrence}. Summarise my inbox. Last time: ${last_result}"
    thread = "shared"                           # or "new" (default)
    missed = "latest"                           # skip | latest | all
    overlap = "skip"                            # skip | queue | alongside

``reverie serve``, ``reverie worker`` and ``reverie schedules`` store them when they start
(:func:`apply_schedules`): a schedule whose timing is unchanged keeps its course and its pause.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field, ValidationError

from reverie.config.problems import config_error, table_error
from reverie.config.schema import ReverieConfig, Section
from reverie.core.scope import Scope
from reverie.core.vocabulary import ScheduleMissed, ScheduleOverlap, ScheduleThread
from reverie.errors import UsageError

if TYPE_CHECKING:
    from reverie.runtime.runtime import Runtime
    from reverie.runtime.schedules import Schedule

__all__ = ["ScheduleConfig", "apply_schedules", "config_schedules"]


class ScopeConfig(Section):
    """Whom a schedule's runs act for."""

    tenant: str = Field(min_length=1)
    user: str = Field(min_length=1)
    agent: str | None = None
    project: str | None = None


class ScheduleConfig(Section):
    """One ``[schedules.NAME]`` table (the fields of :class:`reverie.Schedule`)."""

    agent: str = Field(min_length=1)
    scope: ScopeConfig
    cron: str | None = None
    every_s: float | int | None = None
    timezone: str = "UTC"
    input: str | None = None
    thread: ScheduleThread = "new"
    missed: ScheduleMissed = "latest"
    max_catchup: int = Field(default=10, ge=1)
    overlap: ScheduleOverlap = "skip"
    grace_s: float | int = Field(default=60.0, gt=0)


def config_schedules(config: ReverieConfig) -> list[Schedule]:
    """The schedules of ``[schedules]``, checked.

    Raises:
        ConfigError: A table that is not a valid schedule (the message names the key).
    """
    from reverie.runtime.schedules import Schedule

    out: list[Schedule] = []
    for name, table in sorted(config.schedules.items()):
        key = f"schedules.{name}"
        try:
            section = ScheduleConfig.model_validate(table)
        except ValidationError as exc:
            fix = "see docs/schedules.md for the keys of a schedule"
            raise table_error(config.source, key, exc, fix) from None
        extra: dict[str, Any] = {} if section.input is None else {"input": section.input}
        try:
            out.append(
                Schedule(
                    name=name,
                    agent=section.agent,
                    scope=Scope(**section.scope.model_dump()),
                    cron=section.cron,
                    every_s=None if section.every_s is None else float(section.every_s),
                    timezone=section.timezone,
                    thread=section.thread,
                    missed=section.missed,
                    max_catchup=section.max_catchup,
                    overlap=section.overlap,
                    grace_s=float(section.grace_s),
                    **extra,
                )
            )
        except UsageError as exc:
            raise config_error(config.source, key, str(exc), "see docs/schedules.md") from None
    return out


async def apply_schedules(config: ReverieConfig, runtime: Runtime) -> list[str]:
    """Store the file's schedules (replacing the settings of those already stored); their
    names."""
    schedules = config_schedules(config)
    for schedule in schedules:
        await runtime.schedules.add(schedule, replace=True)
    return [s.name for s in schedules]
