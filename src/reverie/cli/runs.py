"""``reverie runs list|show|resume|cancel``: inspect and control stored runs."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from reverie.cli.agents import agents_with_model
from reverie.cli.common import (
    ConfigOption,
    ExitCode,
    JsonOption,
    StoreOption,
    err_console,
    execute,
    load,
    open_session,
    out_console,
    replay_flags,
    unknown_agent,
)
from reverie.cli.ids import resolve_run_id
from reverie.cli.render import print_json, run_payload, show_result, show_run, show_runs
from reverie.core.scope import Scope
from reverie.errors import RunBusy, UnknownAgentError, UsageError

__all__ = ["app"]

app = typer.Typer(
    name="runs",
    help="Inspect and control runs: list, show, resume, cancel.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


class RunStatusChoice(StrEnum):
    """Run statuses ``--status`` accepts."""

    queued = "queued"
    running = "running"
    completed = "completed"
    blocked = "blocked"
    failed = "failed"
    cancelled = "cancelled"


RunIdArgument = Annotated[
    str,
    typer.Argument(help="The run id (run_…), or any unique prefix of it.", show_default=False),
]
ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        help="Model spec for the run's agent (e.g. a scripted file); a run of the built-in "
        "assistant needs it.",
    ),
]


def _scope(tenant: str | None, user: str | None) -> Scope | None:
    """The owner ``--user`` narrows to (in ``--tenant``, else ``local``); ``None`` without it."""
    if tenant == "":
        raise UsageError("--tenant needs a non-empty tenant name")
    if user is None:
        return None
    return Scope(tenant="local" if tenant is None else tenant, user=user)


@app.command("list")
def list_runs(
    status: Annotated[
        list[RunStatusChoice] | None,
        typer.Option("--status", "-s", help="Only runs with this status (repeatable)."),
    ] = None,
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Only this tenant's runs (default: all).")
    ] = None,
    user: Annotated[
        str | None, typer.Option("--user", help="Only this user's runs (default: all).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="At most this many.")] = 50,
    as_json: JsonOption = False,
    config: ConfigOption = None,
    store: StoreOption = None,
) -> None:
    """List runs, newest first."""

    async def main() -> int:
        cfg = load(config)
        async with open_session(cfg, store) as session:
            owner = _scope(tenant, user)
            runs = await session.rt.runs.list(
                scope=owner,
                # --tenant alone lists the whole tenant (every user), as docs/cli.md says.
                tenant=tenant if user is None else None,
                statuses=[s.value for s in status] if status else None,
                limit=limit,
            )
        if as_json:
            print_json([run_payload(r) for r in runs])
        else:
            show_runs(runs)
        return ExitCode.OK

    execute(main)


@app.command("show")
def show(
    run_id: RunIdArgument,
    as_json: JsonOption = False,
    config: ConfigOption = None,
    store: StoreOption = None,
) -> None:
    """Show a run: status, exit, usage, pending gate, subagent runs and transcript."""

    async def main() -> int:
        cfg = load(config)
        async with open_session(cfg, store) as session:
            runs = session.rt.runs
            run = await runs.get(await resolve_run_id(runs, run_id))
            items = [i for i in await runs.thread_items(run.thread_id) if i.run_id == run.run_id]
            gate = None
            if run.exit is not None and dict(run.exit).get("status") == "blocked":
                gate = await session.rt.gates.get(str(dict(run.exit)["gate_ref"]))
            from reverie.cli.run_tree import load_tree

            tree = await load_tree(runs, run)
        show_run(run, items, gate, as_json=as_json, tree=tree, flags=replay_flags(config, store))
        return ExitCode.OK

    execute(main)


@app.command("resume")
def resume(
    run_id: RunIdArgument,
    model: ModelOption = None,
    as_json: JsonOption = False,
    config: ConfigOption = None,
    store: StoreOption = None,
) -> None:
    """Continue an interrupted run from its last checkpoint (a finished run shows its result).

    Exit code as for `reverie run`.
    """

    async def main() -> int:
        from reverie.store.base import TERMINAL_STATUSES

        cfg = load(config)

        async with open_session(cfg, store, hooks=True, memory=True) as session:
            run = await session.rt.runs.get(await resolve_run_id(session.rt.runs, run_id))
            if run.status in TERMINAL_STATUSES:
                # Nothing to continue, so no agent is needed: show the stored result.
                if not as_json:
                    err_console().print(
                        f"run {run.run_id} has already ended ({run.status})", markup=False
                    )
                return show_result(
                    await session.rt.get_result(run.run_id),
                    as_json=as_json,
                    flags=replay_flags(config, store, model=model),
                )
            for agent in agents_with_model(cfg, run.agent_name, model):
                await session.add_agent(agent)
            try:
                result = await session.rt.resume(run.run_id)
            except UnknownAgentError as exc:
                unknown_agent(exc, cfg)
            flags = replay_flags(config, store, model=model)
            return show_result(result, as_json=as_json, flags=flags)

    execute(main)


@app.command("cancel")
def cancel(
    run_id: RunIdArgument,
    as_json: JsonOption = False,
    config: ConfigOption = None,
    store: StoreOption = None,
) -> None:
    """Cancel a run. Exit 0 when it is now cancelled, 1 when it had already ended otherwise."""

    resolved = run_id

    def report(status: str, message: str, code: ExitCode) -> int:
        if as_json:
            print_json({"run_id": resolved, "status": status, "message": message})
        elif code == ExitCode.OK:
            out_console().print(message, markup=False)
        else:
            err_console().print(message, markup=False)
        return code

    async def main() -> int:
        from reverie.store.base import TERMINAL_STATUSES

        cfg = load(config)

        nonlocal resolved
        async with open_session(cfg, store, hooks=True) as session:
            resolved = await resolve_run_id(session.rt.runs, run_id)
            before = await session.rt.runs.get(resolved)
            if before.status in TERMINAL_STATUSES - {"cancelled"}:
                return report(
                    before.status,
                    f"run {resolved} has already ended ({before.status}); nothing to cancel",
                    ExitCode.FAILED,
                )
            try:
                await session.rt.cancel(resolved, reason="cancelled from the CLI")
            except RunBusy:
                # A live worker holds the run: the durable request reaches it at its next step.
                return report(
                    before.status,
                    f"cancel requested: the worker running {resolved} will stop it",
                    ExitCode.OK,
                )
            after = await session.rt.runs.get(resolved)
        code = ExitCode.OK if after.status == "cancelled" else ExitCode.FAILED
        return report(after.status, f"run {resolved} is {after.status}", code)

    execute(main)
