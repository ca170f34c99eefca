"""``reverie schedules list|add|pause|resume|remove|run-now|history`` (docs/schedules.md).

Every command first stores the ``[schedules.NAME]`` tables of ``reverie.toml`` (as ``reverie
serve`` does), so what the file declares is what the commands see. ``run-now`` starts the run in
this process, so the schedule's agent must be configured here.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from reverie.cli.common import (
    ConfigOption,
    ExitCode,
    JsonOption,
    StoreOption,
    execute,
    load,
    open_session,
)
from reverie.cli.render import print_json
from reverie.core.scope import Scope

if TYPE_CHECKING:
    from reverie.runtime.schedules import ScheduleInfo
    from reverie.store.schedules import OccurrenceRecord

__all__ = ["app"]

app = typer.Typer(
    name="schedules",
    help="Agents that run on a schedule: list, add, pause, resume, remove, run-now, history.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

NameArgument = Annotated[str, typer.Argument(help="The schedule's name.")]


def occurrence_payload(o: OccurrenceRecord, zone: Any) -> dict[str, Any]:
    """An occurrence as JSON."""
    return {
        "occurrence": datetime.fromtimestamp(o.at, zone).isoformat(),
        "status": o.status,
        "run_id": o.run_id,
    }


def _show(info: ScheduleInfo) -> None:
    s = info.schedule
    when = f"cron {s.cron!r}" if s.cron else f"every {s.every_s:g}s"
    state = "paused" if info.paused else f"next {info.next_at.isoformat()}"
    typer.echo(f"{s.name}  agent={s.agent}  {when} {s.timezone}  {state}")


def _session(config: str | None, store: str | None, *, agents: bool = False) -> Any:
    from reverie.config import build_agents

    cfg = load(config)
    return cfg, open_session(
        cfg, store, agents=build_agents(cfg) if agents else (), hooks=agents, memory=agents
    )


@app.command("list")
def list_schedules(
    as_json: JsonOption = False, config: ConfigOption = None, store: StoreOption = None
) -> None:
    """List the stored schedules, by name."""

    async def main() -> int:
        from reverie.config.schedules import apply_schedules

        cfg, opening = _session(config, store)
        async with opening as session:
            await apply_schedules(cfg, session.rt)
            infos = await session.rt.schedules.list()
        if as_json:
            print_json([i.to_dict() for i in infos])
        else:
            for info in infos:
                _show(info)
            if not infos:
                typer.echo("no schedules")
        return ExitCode.OK

    execute(main)


@app.command("add")
def add_schedule(
    name: NameArgument,
    agent: Annotated[str, typer.Option("--agent", help="The agent the runs use.")],
    tenant: Annotated[str, typer.Option("--tenant", help="The scope's tenant.")],
    user: Annotated[str, typer.Option("--user", help="The scope's user.")],
    cron: Annotated[str | None, typer.Option("--cron", help="A cron expression.")] = None,
    every_s: Annotated[
        float | None, typer.Option("--every", help="An interval in seconds.")
    ] = None,
    timezone: Annotated[str, typer.Option("--timezone", help="An IANA zone.")] = "UTC",
    message: Annotated[
        str | None, typer.Option("--input", help="The message (${occurrence}, ${last_result}).")
    ] = None,
    thread: Annotated[str, typer.Option("--thread", help="new or shared.")] = "new",
    missed: Annotated[str, typer.Option("--missed", help="skip, latest or all.")] = "latest",
    overlap: Annotated[str, typer.Option("--overlap", help="skip, queue or alongside.")] = "skip",
    replace: Annotated[bool, typer.Option("--replace", help="Replace one of that name.")] = False,
    as_json: JsonOption = False,
    config: ConfigOption = None,
    store: StoreOption = None,
) -> None:
    """Store a schedule (its first occurrence is the first after now)."""

    async def main() -> int:
        from reverie.runtime.schedules import Schedule

        # The policies' values are checked by Schedule (a typed UsageError, exit 2).
        extra: dict[str, Any] = {} if message is None else {"input": message}
        schedule = Schedule(
            name=name,
            agent=agent,
            scope=Scope(tenant=tenant, user=user),
            cron=cron,
            every_s=every_s,
            timezone=timezone,
            thread=thread,  # type: ignore[arg-type]
            missed=missed,  # type: ignore[arg-type]
            overlap=overlap,  # type: ignore[arg-type]
            **extra,
        )
        _, opening = _session(config, store)
        async with opening as session:
            info = await session.rt.schedules.add(schedule, replace=replace)
        print_json(info.to_dict()) if as_json else _show(info)
        return ExitCode.OK

    execute(main)


def _change(name: str, what: str, config: str | None, store: str | None, as_json: bool) -> None:
    async def main() -> int:
        from reverie.config.schedules import apply_schedules

        cfg, opening = _session(config, store)
        async with opening as session:
            await apply_schedules(cfg, session.rt)
            schedules = session.rt.schedules
            if what == "remove":
                await schedules.remove(name)
                typer.echo(f"removed {name}")
                return ExitCode.OK
            info = await (schedules.pause(name) if what == "pause" else schedules.resume(name))
        print_json(info.to_dict()) if as_json else _show(info)
        return ExitCode.OK

    execute(main)


@app.command("pause")
def pause_schedule(
    name: NameArgument,
    as_json: JsonOption = False,
    config: ConfigOption = None,
    store: StoreOption = None,
) -> None:
    """Stop claiming occurrences (claimed ones still start)."""
    _change(name, "pause", config, store, as_json)


@app.command("resume")
def resume_schedule(
    name: NameArgument,
    as_json: JsonOption = False,
    config: ConfigOption = None,
    store: StoreOption = None,
) -> None:
    """Claim again, from the first occurrence after now."""
    _change(name, "resume", config, store, as_json)


@app.command("remove")
def remove_schedule(
    name: NameArgument, config: ConfigOption = None, store: StoreOption = None
) -> None:
    """Delete a schedule and its history (its runs stay)."""
    _change(name, "remove", config, store, False)


@app.command("run-now")
def run_now(
    name: NameArgument,
    as_json: JsonOption = False,
    config: ConfigOption = None,
    store: StoreOption = None,
) -> None:
    """Start one extra occurrence now, here, and wait for its run."""

    async def main() -> int:
        from reverie.config.schedules import apply_schedules

        cfg, opening = _session(config, store, agents=True)
        async with opening as session:
            await apply_schedules(cfg, session.rt)
            run_id = await session.rt.schedules.run_now(name)
            if run_id is None:
                typer.echo("held back: the previous run is still active (overlap policy)")
                return ExitCode.FAILED
            handle = session.rt.attach(run_id)
            result = await handle.result() if handle is not None else None
        status = result.status if result is not None else "started"
        text = (result.text or "") if result is not None else ""
        if as_json:
            print_json({"run_id": run_id, "status": status, "text": text})
        else:
            typer.echo(f"{run_id} {status}")
            if text:
                typer.echo(text)
        return ExitCode.OK

    execute(main)


@app.command("history")
def history(
    name: NameArgument,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="How many.")] = 20,
    as_json: JsonOption = False,
    config: ConfigOption = None,
    store: StoreOption = None,
) -> None:
    """The schedule's occurrences, newest first, with their runs."""

    async def main() -> int:
        from zoneinfo import ZoneInfo

        from reverie.config.schedules import apply_schedules

        cfg, opening = _session(config, store)
        async with opening as session:
            await apply_schedules(cfg, session.rt)
            info = await session.rt.schedules.get(name)
            rows = await session.rt.schedules.history(name, limit=limit)
        zone = ZoneInfo(info.schedule.timezone)
        payload = [occurrence_payload(o, zone) for o in rows]
        if as_json:
            print_json(payload)
        else:
            for row in payload:
                typer.echo(f"{row['occurrence']}  {row['status']}  {row['run_id'] or '-'}")
        return ExitCode.OK

    execute(main)
