"""What every CLI command shares: options, exit codes, error reporting, opening a runtime.

Errors reach the user one way: :func:`execute` runs a command's coroutine and turns each typed
error into a message on stderr and an exit code (:class:`ExitCode`). Commands never print
tracebacks for errors reverie raises on purpose.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator
from enum import IntEnum
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from reverie.core.scope import DEFAULT_TENANT, default_user
from reverie.errors import (
    ConfigError,
    GateResolvedError,
    ListenError,
    MissingExtraError,
    ModelError,
    NotFoundError,
    ReverieError,
    RunBusy,
    RunEndedError,
    ThreadBusy,
    UnknownAgentError,
    UsageError,
)

if TYPE_CHECKING:
    # The configuration, the runtime and the store are imported where a command uses them, so
    # ``reverie --help`` loads none of them (a test keeps it so).
    from reverie.config import ReverieConfig
    from reverie.runtime.agent import Agent
    from reverie.runtime.runtime import Runtime

__all__ = [
    "CTRL_C",
    "PASS_WAIT_S",
    "ConfigOption",
    "ExitCode",
    "JsonOption",
    "Session",
    "StoreOption",
    "TenantOption",
    "UserOption",
    "default_user",
    "err_console",
    "execute",
    "fail",
    "load",
    "open_session",
    "out_console",
    "replay_flags",
    "reported_errors",
    "require_credentials",
    "unknown_agent",
]


CTRL_C = "Ctrl-C"
"""The reason a run cancelled from the keyboard records (its status is ``cancelled``)."""

PASS_WAIT_S = 120.0
"""How long a command waits, after its own work, for curation passes its turns started."""


class ExitCode(IntEnum):
    """Exit codes of every ``reverie`` command (documented in ``docs/cli.md``)."""

    OK = 0
    """Success; for commands that advance a run: the run completed."""
    FAILED = 1
    """The run failed, or the operation did (store unavailable, a ``doctor`` check failed)."""
    USAGE = 2
    """Configuration or usage problem: broken ``reverie.toml``, unknown agent, run or gate,
    no model configured, a gate already resolved, a bad option."""
    BLOCKED = 3
    """The run is blocked on a gate that waits for a person."""
    THREAD_BUSY = 75
    """The thread already has an active run (``--thread-policy`` chooses otherwise); 75 is
    sysexits' EX_TEMPFAIL: try again later."""
    CANNOT_LISTEN = 4
    """``reverie serve`` cannot listen: the port is in use, or binding the address is not
    permitted."""
    CANCELLED = 130
    """The run was cancelled (also Ctrl-C), as shells report SIGINT."""


def _or_before_the_command(
    ctx: typer.Context, param: typer.CallbackParam, value: str | None
) -> str | None:
    """A command's ``--config``/``--store``, else the one given before the command
    (``reverie --config x.toml runs list``): the root's value of the same name."""
    root = ctx.find_root()
    if value is not None or root is ctx or param.name is None:
        return value
    given = root.params.get(param.name)
    return given if isinstance(given, str) else None


ConfigOption = Annotated[
    str | None,
    typer.Option(
        "--config",
        "-c",
        help="Configuration file (default: ./reverie.toml if there is one, else "
        "$REVERIE_HOME/reverie.toml).",
        show_default=False,
        callback=_or_before_the_command,
    ),
]
StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="Store URL, e.g. sqlite:///path.db (default: store.url of the config, else "
        "sqlite:///$REVERIE_HOME/reverie.db).",
        show_default=False,
        callback=_or_before_the_command,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for machines.")]
AgentOption = Annotated[
    str | None,
    typer.Option(
        "--agent", "-a", help="An agent of reverie.toml (default: the only one, or 'assistant')."
    ),
]
ModelSpecOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        help="Model spec for the agent, e.g. openai:gpt-4.1-mini, ollama:llama3.1, "
        "scripted:script.json. Without --agent: the built-in assistant (tools add, now).",
    ),
]
ThreadOption = Annotated[
    str | None,
    typer.Option("--thread", help="Continue this conversation (a thread id of an earlier run)."),
]
ThreadPolicyOption = Annotated[
    str | None,
    typer.Option(
        "--thread-policy",
        help="When --thread already has a running or blocked run: reject (exit 75), enqueue "
        "(the message becomes its follow-up) or interrupt (cancel it first). Default: reject.",
        show_default=False,
    ),
]
TenantOption = Annotated[str, typer.Option("--tenant", help="Tenant of the scope.")]
UserOption = Annotated[
    str | None,
    typer.Option("--user", help="User of the scope (default: $USER).", show_default=False),
]


def replay_flags(
    config: str | None,
    store: str | None,
    *,
    model: str | None = None,
    agent: str | None = None,
    tenant: str | None = None,
    user: str | None = None,
) -> str:
    """The options this command was given that a command it prints needs, as
    `` --agent A --model SPEC --config PATH --store URL`` (the config path made absolute, the
    scope only when it is not the default), so a printed command works when pasted. Empty
    without any."""
    words: list[str] = []
    if agent is not None:
        words += ["--agent", agent]
    if model is not None:
        words += ["--model", model]
    if config is not None:
        words += ["--config", os.path.abspath(os.path.expanduser(config))]
    if store is not None:
        words += ["--store", store]
    if tenant is not None and tenant != DEFAULT_TENANT:
        words += ["--tenant", tenant]
    if user is not None:
        words += ["--user", user]
    return "".join(" " + shlex.quote(word) for word in words)


def out_console() -> Console:
    """Rich console on stdout: the terminal's width (or ``$COLUMNS``); wide in a pipe, so a
    line is never cut for a program reading it."""
    console = Console(highlight=False, soft_wrap=False)
    if not console.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
        console = Console(highlight=False, soft_wrap=False, width=max(console.width, 200))
    return console


def err_console() -> Console:
    """Rich console on stderr."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str, code: ExitCode = ExitCode.USAGE) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code``."""
    err_console().print(f"[bold red]error:[/] {escape(message)}")
    raise typer.Exit(int(code))


def unknown_agent(exc: UnknownAgentError, config: ReverieConfig, note: str = "") -> NoReturn:
    """Report a run whose agent this process does not have, naming the file to fix."""
    fail(
        f"{exc}. Fix: add [agents.{exc.agent_name}] to {config.source}"
        + (" (or pass --model for the built-in assistant)" if exc.agent_name == "assistant" else "")
        + note
    )


def require_credentials(agents: Iterable[Agent]) -> None:
    """Check every agent's model has its API key before a run starts (no run stored, no call).

    Raises:
        ConfigError: a key's environment variable is unset; the message names it, never a value.
    """
    from reverie.models.sdk_model import check_credentials

    for agent in agents:
        try:
            for model in agent.models:  # the fallbacks too: each is asked when one fails
                check_credentials(model)
        except ModelError as exc:
            raise ConfigError(
                f"agent {agent.name!r}: {exc}. Fix: export the variable (reverie doctor checks "
                "every agent's key)"
            ) from None


def load(path: str | None) -> ReverieConfig:
    """Load the configuration: ``path`` (``--config``), else ``./reverie.toml`` when the
    current directory has one (a project folder such as ``examples/project``), else
    ``$REVERIE_HOME/reverie.toml``. Errors become exit code 2 via :func:`execute`."""
    from reverie.config import CONFIG_FILE_NAME, load_config

    if path is None and os.path.isfile(CONFIG_FILE_NAME):
        path = os.path.abspath(CONFIG_FILE_NAME)
    return load_config(path)


def execute(command: Callable[[], Coroutine[Any, Any, int]]) -> NoReturn:
    """Run a command coroutine and exit with the code it returns.

    Typed errors become one message on stderr and an exit code: configuration and usage
    problems exit 2, other failures 1, Ctrl-C 130.
    """
    with reported_errors():
        code = asyncio.run(command())
    raise typer.Exit(code)


@contextlib.contextmanager
def reported_errors() -> Iterator[None]:
    """Turn the typed errors raised inside into one message on stderr and an exit code.

    What :func:`execute` does around its coroutine, for commands that drive their own event
    loop (``reverie chat``).
    """
    try:
        yield
    except typer.Exit:
        raise
    except UnknownAgentError as exc:
        fail(
            f"{exc}. Fix: add [agents.{exc.agent_name}] to reverie.toml (or pass --config); for "
            "the built-in assistant pass --model"
        )
    except (ConfigError, UsageError, NotFoundError, GateResolvedError, RunEndedError) as exc:
        fail(str(exc))
    except ImportError as exc:
        # An optional extra imported lazily somewhere below: one line naming the pip command.
        missing = MissingExtraError.of(exc, "this command")
        if missing is None:
            raise
        fail(str(missing))
    except RunBusy as exc:
        fail(f"{exc}; try again once that worker has stopped", ExitCode.FAILED)
    except ThreadBusy as exc:
        fail(str(exc).replace("thread_policy=", "--thread-policy "), ExitCode.THREAD_BUSY)
    except ListenError as exc:
        fail(
            f"{exc}. Fix: stop what holds the port, or pass --port (or set [serve] port)",
            ExitCode.CANNOT_LISTEN,
        )
    except ReverieError as exc:
        fail(f"{type(exc).__name__}: {exc}", ExitCode.FAILED)
    except KeyboardInterrupt:
        err_console().print("interrupted")
        raise typer.Exit(int(ExitCode.CANCELLED)) from None


class Session:
    """An open runtime plus the agents (and their models) this command registered.

    It owns the process's MCP servers (``[mcp.servers]``): each starts when the first agent
    naming it is added, and is shared by every run of the session.
    """

    def __init__(self, runtime: Runtime, config: ReverieConfig) -> None:
        self.rt = runtime
        """The open runtime."""
        self.config = config
        """The loaded configuration."""
        from reverie.config import mcp_servers

        self.mcp = mcp_servers(config)
        """The configured MCP servers of this process."""
        self._agents: list[Agent] = []
        self._by_name: dict[str, Agent] = {}
        self._models: list[Any] = []
        self._kept = contextlib.AsyncExitStack()
        """The models entered for the session (each keeps one SDK client), exited at its end."""

    def _servers_of(self, agent: Agent) -> list[str]:
        section = self.config.agents.get(agent.name)
        return list(section.mcp_servers) if section is not None else []

    async def add_agent(self, agent: Agent) -> Agent:
        """Start the MCP servers ``agent`` names (if not yet), then register it with their tools.

        Returns:
            The agent as registered (with its MCP tools): start its runs with this one.

        Raises:
            CapabilityError: a required MCP server did not start (the message names it).
            ConfigError: a ``${VAR}`` a server needs is not set, or tool names collide.
        """
        names = self._servers_of(agent)
        if names:
            await self.mcp.start(names)
            agent = self.mcp.equip(agent, names)
        self.register(agent)
        await self.keep_clients(agent.all_models)
        return agent

    async def keep_clients(self, models: Iterable[object]) -> None:
        """Keep one SDK client per model (and its connections) until the session ends
        (:func:`reverie.models.sdk_model.keep_clients`)."""
        from reverie.models.sdk_model import keep_clients

        await keep_clients(self._kept, models)

    def register(self, agent: Agent) -> None:
        """Make ``agent`` available to this process; its model is closed with the session.

        An agent that names MCP servers must come from :meth:`add_agent` (which adds their
        tools); registering it without them would change its tools between processes.

        Raises:
            UsageError: ``agent`` names MCP servers but lacks their tools.
        """
        names = self._servers_of(agent)
        if names:
            wanted = {t.descriptor.name for t in self.mcp.tools(names)}
            if not wanted <= {t.descriptor.name for t in agent.tools}:
                raise UsageError(
                    f"agent {agent.name!r} names MCP servers: add it with await "
                    "session.add_agent(agent)"
                )
        self.rt.register(agent)
        self._agents.append(agent)
        self._by_name[agent.name] = agent

    def agent(self, name: str) -> Agent:
        """The registered agent ``name`` (with its MCP tools).

        Raises:
            UsageError: no agent of that name was added.
        """
        try:
            return self._by_name[name]
        except KeyError:
            raise UsageError(f"agent {name!r} was not added to this session") from None

    @property
    def agents(self) -> dict[str, Agent]:
        """The registered agents, by name."""
        return dict(self._by_name)

    def close_with(self, model: object) -> None:
        """Close ``model`` (if it has ``aclose``) when the session ends."""
        self._models.append(model)

    async def _close_models(self) -> None:
        with contextlib.suppress(Exception):
            await self._kept.aclose()
        for model in [m for agent in self._agents for m in agent.models] + self._models:
            close = getattr(model, "aclose", None)
            if callable(close):
                with contextlib.suppress(Exception):
                    await close()


@contextlib.asynccontextmanager
async def open_session(
    config: ReverieConfig,
    store: str | None,
    *,
    agents: Iterable[Agent] = (),
    hooks: bool = False,
    memory: bool = False,
) -> AsyncIterator[Session]:
    """Open a :class:`Runtime` on the configured store with ``agents`` registered.

    Args:
        config: The loaded configuration (prices, hooks, store URL, memory).
        store: The ``--store`` override, if any.
        agents: Agents this process may run, resume and approve for; the MCP servers they
            name are started (once) and their tools added (see :meth:`Session.agent`).
        hooks: Register the file's ``[[hooks]]`` (commands that advance runs need them).
        memory: Give the runtime the ``[memory]`` provider and curation settings (commands
            that advance runs or read memory need them).

    The agents' models (and the curation model) are entered for the session, so each keeps
    one SDK client and its connections for all the session's calls, and are closed when it
    ends. When the block ends normally, the
    session first waits (up to :data:`PASS_WAIT_S`) for curation passes its turns started,
    so a one-shot command does not cut them off.
    """
    from reverie.config import curation_model, memory_settings, register_hooks, store_url
    from reverie.runtime.runtime import Runtime
    from reverie.store import open_store

    url = store_url(config, store)
    settings = memory_settings(config) if memory else None
    provider = settings.provider if settings is not None else None
    curator_model = curation_model(config) if provider is not None else None
    try:
        backend = open_store(url)
    except MissingExtraError:
        raise
    except ConfigError as exc:
        where = "--store" if store else f"{config.source}: store.url"
        raise ConfigError(
            f"{where}: {exc}. Fix: set a supported store URL, e.g. sqlite:///path/to/reverie.db"
        ) from None
    try:
        runtime = Runtime(
            backend,
            prices=config.price_table(),
            memory=provider,
            memory_budget_bytes=settings.budget_bytes if settings is not None else None,
            curation_interval_turns=settings.curation_interval_turns if settings else None,
            curation_model=curator_model,
            trace_content=config.telemetry.trace_content,
            thread_policy=config.runtime.thread_policy,
            withhold_injected_output=config.guardrails.injection_markers,
        )
    except ConfigError as exc:
        raise ConfigError(f"{config.source}: [memory]: {exc}") from None
    async with runtime as rt:
        session = Session(rt, config)
        if curator_model is not None:
            session.close_with(curator_model)
            await session.keep_clients([curator_model])
        try:
            for agent in agents:
                await session.add_agent(agent)
            if hooks:
                register_hooks(config, rt.hooks)
            yield session
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(PASS_WAIT_S):
                    await rt.memory.wait_for_passes()
        finally:
            # Models are closed after the runtime stopped its tasks (the opener's exit runs
            # after this block only for the store, so stop local work first).
            await rt.aclose()
            await session.mcp.aclose()
            await session._close_models()
