"""``reverie worker``: advance runs that queue-dispatching runtimes enqueue (docs/scaling.md).

Agents, hooks and memory come from ``reverie.toml`` like every command that advances runs; the
store must be PostgreSQL, where the job queue (procrastinate) lives next to the runs.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from reverie.cli.common import (
    ConfigOption,
    ExitCode,
    StoreOption,
    err_console,
    execute,
    fail,
    load,
    open_session,
)
from reverie.cli.observability import LogFormatOption, LogLevelOption, observed
from reverie.errors import MissingExtraError

__all__ = ["worker_command"]


def worker_command(
    concurrency: Annotated[
        int,
        typer.Option("--concurrency", "-n", min=1, help="Jobs this worker runs at once."),
    ] = 4,
    config: ConfigOption = None,
    store: StoreOption = None,
    log_level: LogLevelOption = None,
    log_format: LogFormatOption = "text",
) -> None:
    """Take "advance run" jobs from the PostgreSQL job queue and run them, until SIGTERM or
    Ctrl-C. Runs whose worker died are recovered at start and every 30 s."""

    async def main() -> int:
        from reverie.config import build_agents, store_url
        from reverie.runtime.gc_tuning import gc_thresholds_from_env, tune_gc_for_server

        gc_thresholds = gc_thresholds_from_env()  # a bad value fails before start-up
        cfg = load(config)
        url = store_url(cfg, store)
        if not url.startswith(("postgresql://", "postgres://")):
            fail(
                "a worker pool needs PostgreSQL: the job queue and the runs must be in one "
                "database that every worker reaches, and this store is not PostgreSQL. Fix: pass "
                f"--store postgresql://… or set [store] url in {cfg.source}"
            )
        agents = build_agents(cfg)
        if not agents:
            fail(
                f"no agents are configured in {cfg.source}, so the worker could advance no run. "
                'Fix: add [agents.NAME] with a model, e.g. model = "openai:gpt-4.1-mini"'
            )
        try:
            import procrastinate  # noqa: F401  (the job queue: checked before the store opens)
        except ImportError as exc:
            raise MissingExtraError("postgres", "reverie worker (its job queue)") from exc
        from reverie.config.schedules import apply_schedules
        from reverie.runtime.dispatch import serve_jobs

        async with open_session(cfg, store, agents=agents, hooks=True, memory=True) as session:
            tune_gc_for_server(gc_thresholds)  # start-up is over (docs/scaling.md)
            names = ", ".join(sorted(a.name for a in agents))

            def ready() -> None:
                err_console().print(
                    f"reverie worker: agents {names}; concurrency {concurrency}; ready",
                    markup=False,
                )

            await apply_schedules(cfg, session.rt)
            async with asyncio.TaskGroup() as tasks:
                # The worker fires schedules too: a claim is exactly once however many run.
                ticking = tasks.create_task(session.rt.schedules.serve(), name="fire schedules")
                try:
                    await serve_jobs(session.rt, url, concurrency=concurrency, on_ready=ready)
                finally:
                    ticking.cancel()
        err_console().print("reverie worker: stopped", markup=False)
        return ExitCode.OK

    with observed(log_level, log_format, default="info"):
        execute(main)
