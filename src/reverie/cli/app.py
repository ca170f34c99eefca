"""The ``reverie`` command (docs/cli.md): run agents, inspect runs, resolve gates, check setup.

Commands::

    reverie chat [--agent NAME] [--model SPEC] [--thread ID] [--tenant T] [--user U]
    reverie run "message" [--agent NAME] [--model SPEC] [--json] [--tenant T] [--user U]
    reverie runs list|show|resume|cancel
    reverie gates list|approve|deny
    reverie schedules list|add|pause|resume|remove|run-now|history
    reverie memory show|edit|search|history|passes|curate   (one owner's memory, docs/memory.md)
    reverie serve [--host H] [--port P]   (the HTTP API, docs/http.md)
    reverie dev [--port P]   (API + console on 127.0.0.1 with a fresh token, docs/console.md)
    reverie worker [--concurrency N]   (advance queued runs on PostgreSQL, docs/scaling.md)
    reverie doctor
    reverie mcp-memory [--http PORT --token-env NAME | --no-auth]   (memory over MCP)

Every command reads ``$REVERIE_HOME/reverie.toml`` (or ``--config PATH``) and opens the store
from ``--store URL``, else ``[store] url``, else ``sqlite:///$REVERIE_HOME/reverie.db``. Exit
codes are in :class:`reverie.cli.common.ExitCode`; ``docs/cli.md`` is the user's guide.
"""

from __future__ import annotations

from typing import Annotated

import typer

from reverie.cli import gates, memory, restore_interrupts, runs, schedules
from reverie.cli.chat import chat_command
from reverie.cli.common import ConfigOption, StoreOption
from reverie.cli.dev import dev_command
from reverie.cli.doctor import doctor_command
from reverie.cli.mcp_memory import mcp_memory_command
from reverie.cli.run import run_command
from reverie.cli.serve import serve_command
from reverie.cli.worker import worker_command

__all__ = ["app", "main"]

app = typer.Typer(
    name="reverie",
    no_args_is_help=True,
    # Plain help: flags read as ``--json`` (the rich renderer labels them ``<bool>``), and it
    # fits an 80-column terminal.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("chat")(chat_command)
app.command("run")(run_command)
app.add_typer(runs.app, name="runs")
app.add_typer(gates.app, name="gates")
app.add_typer(schedules.app, name="schedules")
app.add_typer(memory.app, name="memory")
app.command("serve")(serve_command)
app.command("dev")(dev_command)
app.command("doctor")(doctor_command)
app.command("worker")(worker_command)
app.command("mcp-memory")(mcp_memory_command)


def _version(value: bool) -> None:
    if value:
        from reverie.core.version import __version__

        typer.echo(f"reverie {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
    config: ConfigOption = None,
    store: StoreOption = None,
) -> None:
    """A durable runtime for tool-using LLM agents.

    Configuration: $REVERIE_HOME/reverie.toml (REVERIE_HOME defaults to ~/.reverie), or
    --config; --config and --store work before the command too (reverie --config x.toml runs
    list). Exit codes: 0 completed/ok, 1 failed, 2 configuration or usage problem, 3 blocked
    on a gate, 4 serve cannot listen (its port is in use), 75 the thread is busy (another run
    of it is running or blocked: try again later), 130 cancelled.
    """
    restore_interrupts()


def main() -> None:
    """The ``reverie`` command (the console script is :func:`reverie.cli.main`)."""
    from reverie.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
