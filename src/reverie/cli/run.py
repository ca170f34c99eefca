"""``reverie run "message"``: one turn of an agent, with an exit code that reflects its status."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from reverie.cli.agents import NoAgentConfigured, choose_agent
from reverie.cli.common import (
    CTRL_C,
    AgentOption,
    ConfigOption,
    ExitCode,
    JsonOption,
    ModelSpecOption,
    Session,
    StoreOption,
    TenantOption,
    ThreadOption,
    ThreadPolicyOption,
    UserOption,
    default_user,
    err_console,
    execute,
    fail,
    load,
    open_session,
    replay_flags,
    require_credentials,
)
from reverie.cli.ids import resolve_thread_id
from reverie.cli.observability import LogFormatOption, LogLevelOption, observed
from reverie.cli.render import show_result
from reverie.core.scope import Scope

if TYPE_CHECKING:
    from reverie.core.content import UserContent
    from reverie.runtime.handle import RunHandle
    from reverie.runtime.result import RunResult

__all__ = ["message_with_images", "run_command", "wait_for"]


def message_with_images(message: str, images: list[Path] | None) -> UserContent:
    """``message``, or its text followed by the image files' bytes as ``Image`` parts.

    Raises:
        UsageError: a file cannot be read, or is not a PNG, JPEG, GIF or WebP image.
    """
    if not images:
        return message
    from reverie.core.content import ContentPart, Image, Text
    from reverie.errors import UsageError

    parts: list[ContentPart] = [Text(message)]
    for path in images:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise UsageError(f"--image {path}: cannot read it ({exc.strerror})") from None
        try:
            parts.append(Image(data=data))
        except UsageError as exc:
            raise UsageError(f"--image {path}: {exc}") from None
    return parts


async def wait_for(session: Session, handle: RunHandle, *, stream: bool = False) -> RunResult:
    """The run's result; Ctrl-C cancels the run (durably), not just this program.

    With ``stream``, the model's text is written to stdout as it arrives.
    """
    try:
        if stream:
            await _stream_text(handle)
        return await handle.result()
    except asyncio.CancelledError:
        # asyncio.run turns the first Ctrl-C into a cancellation of the main task. Take it
        # back, cancel the run itself, and report the Cancelled result it ends with.
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        err_console().print("[magenta]cancelling the run…[/]")
        await session.rt.cancel(handle.run_id, reason=CTRL_C)
        return await handle.result()


async def _stream_text(handle: RunHandle) -> None:
    """Write the run's text deltas to stdout as they come, one line per assistant message."""
    from reverie.core.events import AssistantMessage, TextDeltaEvent

    open_line = streamed = False
    async for event in handle.events():
        if isinstance(event, TextDeltaEvent) and event.text:
            sys.stdout.write(event.text)
            sys.stdout.flush()
            open_line, streamed = not event.text.endswith("\n"), True
        elif isinstance(event, AssistantMessage):
            if not streamed and event.text.strip():  # a model that does not stream
                sys.stdout.write(event.text)
                open_line = not event.text.endswith("\n")
            if open_line:
                sys.stdout.write("\n")
            sys.stdout.flush()
            open_line = streamed = False


def run_command(
    message: Annotated[str, typer.Argument(help="The message for the agent.", show_default=False)],
    agent: AgentOption = None,
    model: ModelSpecOption = None,
    thread: ThreadOption = None,
    thread_policy: ThreadPolicyOption = None,
    as_json: JsonOption = False,
    image: Annotated[
        list[Path] | None,
        typer.Option(
            "--image",
            help="An image file (PNG, JPEG, GIF or WebP) sent with the message; repeatable.",
            show_default=False,
        ),
    ] = None,
    stream: Annotated[
        bool,
        typer.Option(
            "--stream", help="Write the model's text to stdout as it arrives (not with --json)."
        ),
    ] = False,
    tenant: TenantOption = "local",
    user: UserOption = None,
    config: ConfigOption = None,
    store: StoreOption = None,
    log_level: LogLevelOption = None,
    log_format: LogFormatOption = "text",
) -> None:
    """Run one turn and print the reply.

    Exit code: 0 completed, 1 failed, 2 configuration or usage problem, 3 blocked on a gate
    (approve it with: reverie gates approve REF), 75 the thread is busy (another run of it is
    running or blocked; see --thread-policy), 130 cancelled (Ctrl-C cancels the run).
    """
    if stream and as_json:
        fail("--stream and --json do not mix: --json prints one document when the run ends")

    async def main() -> int:
        content = message_with_images(message, image)  # a bad file: a usage error, no run
        cfg = load(config)
        try:
            chosen = choose_agent(cfg, name=agent, model_spec=model)
        except NoAgentConfigured as exc:
            err_console().print(str(exc), markup=False)
            return ExitCode.USAGE
        scope = Scope(tenant=tenant, user=default_user() if user is None else user)
        require_credentials([chosen])
        from reverie.runtime.runtime import THREAD_POLICIES

        if thread_policy not in (None, *THREAD_POLICIES):
            err_console().print(
                f"--thread-policy must be one of {', '.join(THREAD_POLICIES)}", markup=False
            )
            return ExitCode.USAGE
        async with open_session(cfg, store, agents=[chosen], hooks=True, memory=True) as session:
            thread_id = None
            if thread is not None:
                thread_id = await resolve_thread_id(session.rt.runs, thread, scope=scope)
            handle = await session.rt.start(
                session.agent(chosen.name),  # with the tools of its MCP servers
                content,
                scope=scope,
                thread_id=thread_id,
                thread_policy=thread_policy,
            )
            result = await wait_for(session, handle, stream=stream)
            flags = replay_flags(config, store, model=model)
            return show_result(result, as_json=as_json, streamed=stream, flags=flags)

    with observed(log_level, log_format, default="warning", shows_failures=True):
        execute(main)
