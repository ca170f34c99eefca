"""``reverie run "message"``: one turn of an agent, with an exit code that reflects its status."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from reverie.cli.agents import NoAgentConfigured, choose_agent
from reverie.cli.common import (
    AgentOption,
    ConfigOption,
    ExitCode,
    JsonOption,
    ModelSpecOption,
    Session,
    StoreOption,
    TenantOption,
    ThreadOption,
    UserOption,
    default_user,
    err_console,
    execute,
    load,
    open_session,
    require_credentials,
)
from reverie.cli.render import show_result
from reverie.core.scope import Scope
from reverie.runtime.handle import RunHandle
from reverie.runtime.result import RunResult

__all__ = ["run_command", "wait_for"]


async def wait_for(session: Session, handle: RunHandle) -> RunResult:
    """The run's result; Ctrl-C cancels the run (durably), not just this program."""
    try:
        return await handle.result()
    except asyncio.CancelledError:
        # asyncio.run turns the first Ctrl-C into a cancellation of the main task. Take it
        # back, cancel the run itself, and report the Cancelled result it ends with.
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        err_console().print("[magenta]cancelling the run…[/]")
        await session.rt.cancel(handle.run_id, reason="interrupted")
        return await handle.result()


def run_command(
    message: Annotated[str, typer.Argument(help="The message for the agent.", show_default=False)],
    agent: AgentOption = None,
    model: ModelSpecOption = None,
    thread: ThreadOption = None,
    as_json: JsonOption = False,
    tenant: TenantOption = "local",
    user: UserOption = None,
    config: ConfigOption = None,
    store: StoreOption = None,
) -> None:
    """Run one turn and print the reply.

    Exit code: 0 completed, 1 failed, 2 configuration or usage problem, 3 blocked on a gate
    (approve it with: reverie gates approve REF), 130 cancelled (Ctrl-C cancels the run).
    """

    async def main() -> int:
        cfg = load(config)
        try:
            chosen = choose_agent(cfg, name=agent, model_spec=model)
        except NoAgentConfigured as exc:
            err_console().print(str(exc), markup=False)
            return ExitCode.USAGE
        scope = Scope(tenant=tenant, user=default_user() if user is None else user)
        require_credentials([chosen])
        async with open_session(cfg, store, agents=[chosen], hooks=True, memory=True) as session:
            handle = await session.rt.start(chosen, message, scope=scope, thread_id=thread)
            result = await wait_for(session, handle)
            return show_result(result, as_json=as_json)

    execute(main)
