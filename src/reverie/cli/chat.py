"""``reverie chat``: a REPL on one thread — streamed tokens, tool calls, approvals inline.

How it runs: the prompt is read with ``input()`` on the main thread, between turns. Every turn
runs on one long-lived event loop (an :class:`asyncio.Runner`) that keeps the runtime and the
store open for the whole session. While a turn runs, the runner turns Ctrl-C into a
cancellation of the turn's task; :meth:`_Chat._guarded` takes it back and cancels *the run*
(durably, as ``reverie run`` does), so the run ends ``cancelled`` and the prompt returns. A
second Ctrl-C while that happens stops the program (exit 130; the run stays resumable).
``/exit``, Ctrl-D or Ctrl-C at the prompt quit with exit code 0.

When a turn blocks on a gate, the REPL asks ``approve TOOL(ARGS)? [y/N/reason]`` and approves or
denies it; the approved segment runs in this process, and :meth:`Runtime.attach` lets the REPL
show its events (tool results, streamed reply) like those of the turn itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import sys
from collections.abc import Awaitable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import typer
from rich.console import Console
from rich.markup import escape

from reverie.cli.agents import NoAgentConfigured, choose_agent
from reverie.cli.common import (
    CTRL_C,
    AgentOption,
    ConfigOption,
    ExitCode,
    ModelSpecOption,
    Session,
    StoreOption,
    TenantOption,
    ThreadOption,
    UserOption,
    default_user,
    err_console,
    load,
    open_session,
    replay_flags,
    reported_errors,
    require_credentials,
)
from reverie.cli.ids import resolve_thread_id
from reverie.cli.observability import LogFormatOption, LogLevelOption, observed
from reverie.core.events import (
    AssistantMessage,
    LimitReached,
    RunEvent,
    TextDeltaEvent,
    ToolFinished,
    ToolStarted,
)
from reverie.core.exits import exit_to_dict
from reverie.core.scope import Scope
from reverie.errors import GateResolvedError, ReverieError

if TYPE_CHECKING:
    from reverie.runtime.agent import Agent
    from reverie.runtime.handle import RunHandle
    from reverie.runtime.result import Gate, RunResult
    from reverie.runtime.runtime import Runtime

__all__ = ["PROMPT", "chat_command", "format_call", "parse_answer"]

PROMPT: Final = "you> "
"""What the REPL prints when it waits for a message."""

_EXIT_COMMANDS: Final = frozenset({"/exit", "/quit"})
_NEW_COMMAND: Final = "/new"
_HELP_COMMANDS: Final = frozenset({"/help", "/?"})
_HELP: Final = "/help lists the commands, /exit quits"
_COMMANDS_HELP: Final = (
    "commands:\n"
    "  /new            start a new thread (conversation)\n"
    "  /thread         show this thread's id (continue it later: reverie chat --thread ID)\n"
    "  /image PATH     send an image file (PNG, JPEG, GIF, WebP) with the next message\n"
    "  /help           this list\n"
    "  /exit, /quit    quit (also Ctrl-D, or Ctrl-C at the prompt)\n"
    "Ctrl-C while a turn runs cancels that turn; an approval question takes y, n or a reason."
)
_THREAD_COMMAND: Final = "/thread"
_IMAGE_COMMAND: Final = "/image"
_DENIED_BY_USER: Final = "denied by the user"
_MAX_VALUE_CHARS: Final = 60


def format_call(tool: str, arguments: Mapping[str, Any] | None) -> str:
    """``tool(a=1, to="ana@example.com")``: a call as the REPL shows it (long values cut)."""
    if arguments is None:
        return f"{tool}(…)"
    parts = []
    for key, value in arguments.items():
        shown = json.dumps(value, ensure_ascii=False, default=str)
        if len(shown) > _MAX_VALUE_CHARS:
            shown = shown[: _MAX_VALUE_CHARS - 1] + "…"
        parts.append(f"{key}={shown}")
    return f"{tool}({', '.join(parts)})"


Verdict = Literal["approve", "deny"]
"""A person's answer to a gate, as typed in the chat."""
Decision = tuple[Verdict, str]


def parse_answer(answer: str) -> Decision:
    """The answer to ``[y/N/reason]``: ``y``/``yes`` approves; empty, ``n``/``no`` or any other
    text denies (other text is the reason the model is told)."""
    text = answer.strip()
    if text.lower() in ("y", "yes"):
        return ("approve", "")
    if text.lower() in ("", "n", "no"):
        return ("deny", _DENIED_BY_USER)
    return ("deny", text)


@dataclass(slots=True)
class _Printer:
    """Where the REPL writes: Rich on a terminal, plain text otherwise; tracks the line."""

    console: Console
    at_line_start: bool = True

    def text(self, chunk: str) -> None:
        """Model text, as it arrives (never markup)."""
        if chunk:
            self.console.out(chunk, end="", highlight=False)
            self.at_line_start = chunk.endswith("\n")

    def end_line(self) -> None:
        """Finish a line of streamed text, if one is open."""
        if not self.at_line_start:
            self.console.out("", highlight=False)
            self.at_line_start = True

    def line(self, markup: str) -> None:
        """One line of Rich markup on a line of its own."""
        self.end_line()
        self.console.print(markup)


class _Chat:
    """One ``reverie chat`` session: the REPL and the turns it runs."""

    def __init__(
        self,
        runner: asyncio.Runner,
        session: Session,
        agent: Agent,
        scope: Scope,
        thread_id: str | None,
        flags: str = "",
        store_flags: str = "",
        gate_flags: str = "",
    ) -> None:
        self.runner = runner
        self.flags = flags
        """The options ``reverie chat --thread`` repeats (:func:`replay_flags`), so the printed
        command works when pasted."""
        self.store_flags = store_flags
        """The ``--config``/``--store`` the printed ``reverie gates list`` repeats."""
        self.gate_flags = gate_flags
        """What the printed ``reverie gates approve|deny`` repeat (``--model`` too)."""
        self.rt: Runtime = session.rt
        self.agent = agent
        self.scope = scope
        self.thread_id = thread_id
        self.out = _Printer(Console(highlight=False, soft_wrap=True))
        self._calls: dict[str, Mapping[str, Any]] = {}
        """Arguments of the tool calls seen in the thread, by call id."""
        self._shown: set[str] = set()
        """Calls whose start was printed (a resumed segment starts an approved call again)."""
        self._running: dict[str, str] = {}
        """Tools started and not finished in the current segment, by call id."""
        self._streamed = False
        """Text streamed since the last assistant message."""
        self._replied = False
        """The current segment printed its final reply."""
        self._images: list[Path] = []
        """Image files ``/image`` attached to the next message."""

    # ------------------------------------------------------------------------------ the REPL
    async def check_thread(self) -> None:
        """``--thread`` must name a thread of this scope, whole or by a unique prefix (typed
        error, exit 2, otherwise)."""
        if self.thread_id is None:
            return
        self.thread_id = await resolve_thread_id(self.rt.runs, self.thread_id, scope=self.scope)

    def repl(self) -> int:
        """Read messages until ``/exit``, EOF or Ctrl-C at the prompt; returns the exit code."""
        model = ", ".join(str(getattr(m, "name", m)) for m in self.agent.models)
        where = f"thread {self.thread_id}" if self.thread_id else "a new thread"
        self.out.line(
            f"[dim]reverie chat · agent {escape(self.agent.name)} · model {escape(str(model))} · "
            f"{escape(where)}. {_HELP}; Ctrl-C cancels a running turn.[/]"
        )
        while True:
            try:
                line = input(PROMPT)
            except (EOFError, KeyboardInterrupt):
                self.out.at_line_start = False
                self.out.end_line()
                return ExitCode.OK
            text = line.strip()
            if not text:
                continue
            if text in _EXIT_COMMANDS:
                return ExitCode.OK
            if text == _NEW_COMMAND:
                self.thread_id = None
                self.out.line("[dim]new thread: the next message starts a new conversation[/]")
                continue
            if text in _HELP_COMMANDS:
                self.out.line(f"[dim]{escape(_COMMANDS_HELP)}[/]")
                continue
            if text == _THREAD_COMMAND:
                self._show_thread()
                continue
            if text == _IMAGE_COMMAND or text.startswith(_IMAGE_COMMAND + " "):
                self._attach(text[len(_IMAGE_COMMAND) :].strip())
                continue
            if text.startswith("/") and " " not in text:
                self.out.line(f"[dim]unknown command {escape(text)}; {_HELP}[/]")
                continue
            self._turn(text)

    def _attach(self, path: str) -> None:
        """Check an image file now (readable, an image, within the cap); send it next turn."""
        from reverie.cli.run import message_with_images
        from reverie.core.content import check_parts, user_parts
        from reverie.errors import UsageError

        if not path:
            self.out.line("[dim]usage: /image PATH (the image goes with your next message)[/]")
            return
        chosen = [*self._images, Path(path).expanduser()]
        try:
            parts = user_parts(message_with_images("", chosen))
            check_parts(parts, max_image_bytes=self.agent.limits.max_image_bytes)
        except UsageError as exc:
            self.out.line(f"[red]{escape(str(exc))}[/]")
            return
        self._images = chosen
        self.out.line(f"[dim]{len(chosen)} image(s) will go with your next message[/]")

    def _show_thread(self) -> None:
        if self.thread_id is None:
            self.out.line("[dim]no thread yet: the next message starts one[/]")
        else:
            self.out.line(
                f"[dim]thread {escape(self.thread_id)} · continue it later with: reverie chat"
                f"{escape(self.flags)} --thread {escape(self.thread_id)}[/]"
            )

    def _turn(self, text: str) -> None:
        """One message: stream the run, answer its gates, report how it ended."""
        before = self.thread_id
        try:
            self._answer(text)
        finally:
            if self.thread_id is not None and self.thread_id != before:
                self._show_thread()  # a new conversation: say which, once

    def _answer(self, text: str) -> None:
        result = self.runner.run(self._start(text))
        while result.status == "blocked" and result.gate is not None:
            gate = result.gate
            try:
                answer = input(_question(gate))
            except EOFError:
                self.out.at_line_start = False
                self.out.line(
                    f"[yellow]gate {escape(gate.ref)} left pending[/] — later: reverie gates "
                    f"approve{escape(self.gate_flags)} {escape(gate.ref)} (or deny "
                    f"{escape(gate.ref)} --reason …)"
                )
                return
            except KeyboardInterrupt:
                self.out.at_line_start = False
                result = self.runner.run(self._cancel_blocked(result.run_id))
                break
            decision, reason = parse_answer(answer)
            if decision == "deny":
                self.out.line(f"[red]denied[/] [dim]({escape(reason)})[/]")
            result = self.runner.run(self._resolve(gate, result.run_id, decision, reason))
        self._report(result)

    # ------------------------------------------------------------------------------ turns
    async def _start(self, text: str) -> RunResult:
        known: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        from reverie.cli.run import message_with_images

        message = message_with_images(text, self._images)  # checked when attached
        self._images = []

        async def work() -> RunResult:
            handle = await self.rt.start(
                self.agent, message, scope=self.scope, thread_id=self.thread_id
            )
            known.set_result(handle.run_id)
            self.thread_id = handle.thread_id
            return await self._follow(handle, handle.result())

        self._replied = False
        return await self._guarded(work(), known)

    async def _resolve(self, gate: Gate, run_id: str, decision: Verdict, reason: str) -> RunResult:
        known: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        known.set_result(run_id)

        async def work() -> RunResult:
            if decision == "approve":
                resolving = asyncio.ensure_future(self.rt.approve(gate.ref))
            else:
                resolving = asyncio.ensure_future(self.rt.deny(gate.ref, reason=reason))
            # The continued segment is launched inside approve/deny: catch it to show its
            # events. Each pass yields once, so a segment is never missed on a real store.
            while not resolving.done():
                handle = self.rt.attach(run_id)
                if handle is not None:
                    return await self._follow(handle, resolving)
                await asyncio.sleep(0)
            return await resolving

        self._replied = False
        try:
            return await self._guarded(work(), known)
        except GateResolvedError as exc:  # resolved elsewhere meanwhile: show where it is
            self.out.line(f"[yellow]{escape(str(exc))}[/]")
            return await self.rt.get_result(run_id)

    async def _cancel_blocked(self, run_id: str) -> RunResult:
        self.out.line("[magenta]cancelling the run…[/]")
        result = await self.rt.cancel(run_id, reason=CTRL_C)
        return result if result is not None else await self.rt.get_result(run_id)

    async def _guarded(
        self, work: Coroutine[Any, Any, RunResult], known: asyncio.Future[str]
    ) -> RunResult:
        """Await ``work``; Ctrl-C cancels the run it follows and waits for its end."""
        task = asyncio.ensure_future(work)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            # The runner cancels this task on Ctrl-C: take that back and cancel the run.
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            self.out.line("[magenta]cancelling the run…[/]")
            waiting: list[asyncio.Future[Any]] = [task, known]
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if known.done() and not task.done():
                await self.rt.cancel(known.result(), reason=CTRL_C)
            return await task

    async def _follow(self, handle: RunHandle, outcome: Awaitable[RunResult]) -> RunResult:
        """Print a segment's events as they come, then return its result."""
        async for event in handle.events():
            await self._show(event, handle.thread_id)
        return await outcome

    # ------------------------------------------------------------------------------ output
    async def _show(self, event: RunEvent, thread_id: str) -> None:
        if isinstance(event, TextDeltaEvent):
            self._streamed = True
            self.out.text(event.text)
        elif isinstance(event, AssistantMessage):
            if not self._streamed and event.text.strip():
                self.out.text(event.text)  # a model that does not stream
            self.out.end_line()
            self._streamed = False
            if not event.tool_calls:
                self._replied = True
        elif isinstance(event, ToolStarted):
            if event.call_id in self._shown and event.attempt == 0:
                return  # an approved call, started again by the continued segment
            self._running[event.call_id] = event.tool
            self._shown.add(event.call_id)
            arguments = await self._arguments(thread_id, event.call_id)
            retry = f" [dim](retry {event.attempt})[/]" if event.attempt else ""
            self.out.line(f"[cyan]→[/] {escape(format_call(event.tool, arguments))}{retry}")
        elif isinstance(event, ToolFinished):
            self._finished(event)
        elif isinstance(event, LimitReached):
            self.out.line(f"[yellow]! limit reached: {escape(event.reason)} ({event.action})[/]")

    def _finished(self, event: ToolFinished) -> None:
        self._running.pop(event.call_id, None)
        tool = escape(event.tool)
        if event.outcome == "completed":
            self.out.line(f"[green]✓[/] {tool}")
        elif event.outcome == "gated":
            return  # the approval question follows when the segment ends
        elif event.outcome == "failed":
            self.out.line(f"[red]✗ {tool}: {escape(event.error_kind or 'failed')}[/]")
        elif event.outcome in ("cancelled", "interrupted"):
            self.out.line(f"[magenta]✗ {tool}: cancelled[/]")
        else:
            self.out.line(f"[red]✗ {tool}: {escape(event.outcome)}[/]")

    async def _arguments(self, thread_id: str, call_id: str) -> Mapping[str, Any] | None:
        """A call's arguments (secret-looking values redacted), from the stored transcript."""
        from reverie.core.redact import mask_secrets

        if call_id not in self._calls:
            with contextlib.suppress(ReverieError):  # display only: never fail a turn over it
                for item in await self.rt.runs.thread_items(thread_id, last=50):
                    for call in item.tool_calls:
                        self._calls[call.id] = call.arguments
        arguments = self._calls.get(call_id)
        return mask_secrets(dict(arguments)) if arguments is not None else None

    def _report(self, result: RunResult) -> None:
        """How a turn ended, once its events were shown."""
        self.out.end_line()
        for tool in self._running.values():  # a cancelled run stops its tools mid-call
            self.out.line(f"[magenta]✗ {escape(tool)}: {escape(result.status)}[/]")
        self._running.clear()
        if result.status == "completed":
            if not self._replied and result.text:
                self.out.text(result.text)
                self.out.end_line()
        elif result.status == "failed":
            data = exit_to_dict(result.exit)
            self.out.line(
                f"[red]✗ run failed ({escape(str(data.get('kind')))}): "
                f"{escape(str(data.get('safe_summary', '')))}[/]"
            )
        elif result.status == "cancelled":
            self.out.line("[magenta]run cancelled[/]")
        else:  # blocked without a gate: not expected
            self.out.line(
                f"[yellow]run {escape(result.run_id)} blocked[/]: reverie gates list"
                f"{escape(self.store_flags)}"
            )


def _question(gate: Gate) -> str:
    call = format_call(gate.tool, gate.arguments)
    if gate.kind == "approval":
        return f"approve {call}? [y/N/reason] "
    return f"{call} needs {gate.kind}; approve? [y/N/reason] "


def _line_editing() -> None:
    """History and line editing for ``input()`` on a terminal, where readline exists."""
    if sys.stdin.isatty():
        with contextlib.suppress(ImportError):
            importlib.import_module("readline")


def chat_command(
    agent: AgentOption = None,
    model: ModelSpecOption = None,
    thread: ThreadOption = None,
    tenant: TenantOption = "local",
    user: UserOption = None,
    config: ConfigOption = None,
    store: StoreOption = None,
    log_level: LogLevelOption = None,
    log_format: LogFormatOption = "text",
) -> None:
    """Chat with an agent: streamed replies, tool calls as they run, approvals inline.

    Type a message at `you>`. `/new` starts a new thread, `/exit` (or Ctrl-D) quits. Ctrl-C
    cancels the running turn (the run ends cancelled) and keeps the chat; at the prompt it
    quits. Exit code: 0, or 2 for a configuration or usage problem.
    """
    with observed(log_level, log_format, shows_failures=True), reported_errors():
        code = _chat(
            agent=agent,
            model=model,
            thread=thread,
            scope_tenant=tenant,
            scope_user=user,
            config=config,
            store=store,
        )
    raise typer.Exit(code)


def _chat(
    *,
    agent: str | None,
    model: str | None,
    thread: str | None,
    scope_tenant: str,
    scope_user: str | None,
    config: str | None,
    store: str | None,
) -> int:
    cfg = load(config)
    try:
        chosen = choose_agent(cfg, name=agent, model_spec=model)
    except NoAgentConfigured as exc:
        err_console().print(str(exc), markup=False)
        return ExitCode.USAGE
    scope = Scope(tenant=scope_tenant, user=default_user() if scope_user is None else scope_user)
    require_credentials([chosen])
    with asyncio.Runner() as runner:
        stack = contextlib.AsyncExitStack()
        session = runner.run(
            stack.enter_async_context(
                open_session(cfg, store, agents=[chosen], hooks=True, memory=True)
            )
        )
        try:
            chat = _Chat(
                runner,
                session,
                session.agent(chosen.name),
                scope,
                thread,
                flags=replay_flags(
                    config, store, model=model, agent=agent, tenant=scope_tenant, user=scope_user
                ),
                store_flags=replay_flags(config, store),
                gate_flags=replay_flags(config, store, model=model),
            )
            runner.run(chat.check_thread())
            _line_editing()
            return chat.repl()
        finally:
            runner.run(stack.aclose())
