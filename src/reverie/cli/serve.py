"""``reverie serve``: the HTTP API (docs/http.md) over the configured agents and store.

Agents come from ``[agents.*]``, bearer tokens from ``[auth.tokens]``, the address from
``--host``/``--port``, else ``[serve]``, else ``127.0.0.1:8400``. The server needs the ``serve``
extra; it is imported only when the command runs, so the rest of the CLI works without it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

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
    require_credentials,
)
from reverie.cli.observability import LogFormatOption, LogLevelOption, observed

if TYPE_CHECKING:
    from reverie.cli.common import Session
    from reverie.config import ServeConfig
    from reverie.core.scope import Scope

__all__ = ["serve_command", "served_app"]


def served_app(
    session: Session,
    tokens: Mapping[str, Scope],
    settings: ServeConfig,
    *,
    local: bool = False,
    triggers: Mapping[str, Any] | None = None,
) -> Any:
    """The app ``reverie serve`` serves from ``[serve]``; ``local`` (``reverie dev``): on
    127.0.0.1, so no CORS, and the console always on."""
    from reverie.serve import create_app

    return create_app(
        session.rt,
        agents=session.agents,
        tokens=tokens,
        max_body_bytes=settings.max_body_bytes,
        cors_origins=() if local else settings.cors_origins,
        shutdown_grace_s=settings.shutdown_grace_s,
        recover=True,
        schedules=True,
        triggers=triggers,
        console=local or settings.console,
        console_session_ttl_s=settings.console_session_ttl_s,
    )


def serve_command(
    host: Annotated[
        str | None,
        typer.Option(
            "--host",
            help="Interface to listen on (default: serve.host of the config, else 127.0.0.1).",
            show_default=False,
        ),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            "--port",
            min=0,
            max=65535,
            help="Port to listen on (default: serve.port of the config, else 8400).",
            show_default=False,
        ),
    ] = None,
    config: ConfigOption = None,
    store: StoreOption = None,
    log_level: LogLevelOption = None,
    log_format: LogFormatOption = "text",
) -> None:
    """Serve the configured agents over HTTP: OpenAI-compatible chat completions and the
    runs API. Every request needs a bearer token from [auth.tokens] (docs/http.md)."""

    async def main() -> int:
        from reverie.config import auth_tokens, build_agents, serve_settings
        from reverie.config.schedules import apply_schedules, config_schedules
        from reverie.config.triggers import config_triggers
        from reverie.runtime.gc_tuning import gc_thresholds_from_env, tune_gc_for_server

        gc_thresholds = gc_thresholds_from_env()  # a bad value fails before start-up
        cfg = load(config)
        settings = serve_settings(cfg)
        tokens = auth_tokens(cfg)
        if not tokens:
            fail(
                f"no bearer tokens are configured, so every request would be refused. Fix: add "
                f'[auth.tokens] to {cfg.source}, e.g. ana = {{ token_env = "API_TOKEN_ANA", '
                'tenant = "acme", user = "ana" }'
            )
        agents = build_agents(cfg)
        if not agents:
            fail(
                f"no agents are configured in {cfg.source}, so there is nothing to serve. Fix: "
                'add [agents.NAME] with a model, e.g. model = "openai:gpt-4.1-mini"'
            )
        require_credentials(agents)
        config_schedules(cfg)  # a bad [schedules] table fails before the port is bound
        triggers = config_triggers(cfg)
        try:
            from reverie.serve import listen, run_server
        except ImportError as exc:
            fail(str(exc))
        where_host = host or settings.host
        # Bound before the store opens, so a port in use is reported at once (exit 4).
        sock = listen(where_host, settings.port if port is None else port)
        where_port = sock.getsockname()[1]
        with contextlib.closing(sock):
            async with open_session(cfg, store, agents=agents, hooks=True, memory=True) as session:
                await apply_schedules(cfg, session.rt)
                app = served_app(session, tokens, settings, triggers=triggers)
                tune_gc_for_server(gc_thresholds)  # start-up is over (docs/scaling.md)
                names = ", ".join(sorted(a.name for a in agents))
                err_console().print(
                    f"reverie serve: agents {names}; {len(tokens)} token(s); "
                    f"http://{where_host}:{where_port}/v1"
                    + (
                        f"; console http://{where_host}:{where_port}/console/"
                        if settings.console
                        else ""
                    ),
                    markup=False,
                )
                await run_server(app, host=where_host, port=where_port, sock=sock)
        return ExitCode.OK

    with observed(log_level, log_format, default="info"):
        execute(main)
