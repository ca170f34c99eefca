"""``reverie dev``: one command for a laptop — the HTTP API and the console on 127.0.0.1.

It serves the agents of ``reverie.toml`` (or, when none is configured, the built-in assistant
on an offline scripted model: no key, no network), on the configured store, and mints a fresh
token for this process only, printed as a console URL (``…/console/?token=…``). The console
exchanges that token for a session cookie once and drops it from the address bar. Tokens of
``[auth.tokens]`` work too. The server listens on 127.0.0.1 only: ``reverie serve`` is the
command for anything reachable from elsewhere.
"""

from __future__ import annotations

import contextlib
import secrets
from pathlib import Path
from typing import Annotated, Final

import typer

from reverie.cli.common import (
    ConfigOption,
    ExitCode,
    StoreOption,
    default_user,
    err_console,
    execute,
    load,
    open_session,
    require_credentials,
)
from reverie.cli.observability import LogFormatOption, LogLevelOption, observed
from reverie.cli.serve import served_app

__all__ = ["DEV_HOST", "DEV_TENANT", "dev_command"]

DEV_HOST: Final = "127.0.0.1"
"""``reverie dev`` never listens beyond this machine."""

DEV_TENANT: Final = "local"
"""The tenant of the minted token (its user is ``$USER``), as the other commands default."""

DEMO_SCRIPT: Final = Path(__file__).resolve().parent / "demo_script.json"
"""The offline demo assistant's scripted answers (one tool call, then a reply, every turn)."""


def dev_command(
    port: Annotated[
        int,
        typer.Option("--port", min=0, max=65535, help="Port on 127.0.0.1 (0: any free port)."),
    ] = 8400,
    config: ConfigOption = None,
    store: StoreOption = None,
    log_level: LogLevelOption = None,
    log_format: LogFormatOption = "text",
) -> None:
    """Serve the API and the console on 127.0.0.1 with a fresh local token printed as a URL
    (the agents of reverie.toml, or an offline demo assistant when none is configured)."""

    async def main() -> int:
        from reverie.cli.agents import builtin_assistant
        from reverie.config import auth_tokens, build_agents, serve_settings
        from reverie.core.scope import Scope

        cfg = load(config)
        settings = serve_settings(cfg)
        agents = build_agents(cfg)
        demo = not agents
        if demo:
            agents = [builtin_assistant(f"scripted:{DEMO_SCRIPT}")]
        require_credentials(agents)
        token = secrets.token_urlsafe(32)
        tokens = {**auth_tokens(cfg), token: Scope(tenant=DEV_TENANT, user=default_user())}
        try:
            from reverie.serve import listen, run_server
        except ImportError as exc:
            from reverie.cli.common import fail

            fail(str(exc))
        sock = listen(DEV_HOST, port)
        where = f"http://{DEV_HOST}:{sock.getsockname()[1]}"
        with contextlib.closing(sock):
            async with open_session(cfg, store, agents=agents, hooks=True, memory=True) as session:
                app = served_app(session, tokens, settings, local=True)
                names = ", ".join(sorted(a.name for a in agents))
                what = "the offline demo assistant" if demo else f"agents {names}"
                out = err_console()
                out.print(f"reverie dev: {what}; API {where}/v1", markup=False)
                out.print(f"Console: {where}/console/?token={token}", markup=False)
                out.print(
                    "The token lasts as long as this process; the URL logs you in once.",
                    markup=False,
                )
                await run_server(app, host=DEV_HOST, port=sock.getsockname()[1], sock=sock)
        return ExitCode.OK

    with observed(log_level, log_format, default="warning"):
        execute(main)
