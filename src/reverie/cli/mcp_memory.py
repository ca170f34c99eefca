"""``reverie mcp-memory``: reverie's native memory served over MCP (docs/memory.md).

Over stdio by default (a client such as ``MCPMemory(command=["reverie", "mcp-memory"])`` starts
it), or streamable HTTP with ``--http PORT`` (endpoint ``/mcp``). Over HTTP, ``--token-env
NAME`` requires ``Authorization: Bearer <value of $NAME>`` on every request, checked by the
code that checks ``reverie serve``'s tokens (:class:`reverie.serve.auth.SharedTokenAuth`: the
same 401). HTTP without a credential refuses to start unless ``--no-auth`` says so explicitly.
The server itself is :mod:`reverie.memory.mcp_server`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from reverie.cli.common import ConfigOption, ExitCode, StoreOption, execute

if TYPE_CHECKING:
    from reverie.memory.mcp_server import ASGIApp

__all__ = ["mcp_memory_command"]

_PREFIX = "reverie mcp-memory"


def _refuse(message: str, code: ExitCode) -> None:
    # Plain stderr: stdout is the MCP channel over stdio, and these lines are the operator's.
    print(f"{_PREFIX}: {message}", file=sys.stderr)
    raise typer.Exit(int(code))


def mcp_memory_command(
    http: Annotated[
        int | None,
        typer.Option(
            "--http",
            metavar="PORT",
            min=0,
            max=65535,
            help="Serve streamable HTTP on PORT (endpoint /mcp) instead of stdio.",
            show_default=False,
        ),
    ] = None,
    host: Annotated[str, typer.Option("--host", help="HTTP bind address.")] = "127.0.0.1",
    token_env: Annotated[
        str | None,
        typer.Option(
            "--token-env",
            metavar="NAME",
            help="HTTP: require 'Authorization: Bearer $NAME' on every request.",
            show_default=False,
        ),
    ] = None,
    no_auth: Annotated[
        bool,
        typer.Option(
            "--no-auth",
            help="HTTP: serve without a credential (any local process then reads every "
            "tenant's memory); without it, --http needs --token-env.",
        ),
    ] = False,
    store: StoreOption = None,
    config: ConfigOption = None,
) -> None:
    """Serve reverie's memory over MCP: stdio, or streamable HTTP with --http PORT."""
    import os

    from reverie.memory.mcp_server import NO_AUTH_WARNING, NO_CREDENTIAL

    token: str | None = None
    if token_env:
        token = os.environ.get(token_env)
        if not token:
            _refuse(f"environment variable {token_env} is not set", ExitCode.FAILED)
    if http is not None and token is None:
        if not no_auth:
            _refuse(NO_CREDENTIAL, ExitCode.USAGE)
        print(NO_AUTH_WARNING.format(host=host, port=http), file=sys.stderr)
    # stdout is the MCP channel over stdio: logs go to stderr only.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)

    async def main() -> int:
        from reverie.memory.mcp_server import serve
        from reverie.store import open_store

        auth = _bearer(token) if http is not None and token is not None else None
        opened = open_store(_store_url(store, config))
        await opened.open()
        try:
            await serve(opened, http_port=http, host=host, auth=auth, no_auth=no_auth)
        finally:
            await opened.close()
        return ExitCode.OK

    execute(main)


def _bearer(token: str) -> Callable[[ASGIApp], ASGIApp]:
    """The middleware ``reverie serve`` checks bearer tokens with, for one shared token."""
    from reverie.serve.auth import SharedTokenAuth

    def wrap(app: ASGIApp) -> ASGIApp:
        return SharedTokenAuth(app, token=token)

    return wrap


def _store_url(store: str | None, config: str | None) -> str:
    if store:
        return store
    from reverie.cli.common import load
    from reverie.config import store_url

    return store_url(load(config))
