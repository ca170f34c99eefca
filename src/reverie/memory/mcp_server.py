"""``reverie mcp-memory``: reverie's native memory served over MCP (docs/memory.md).

The same tool contract :class:`~reverie.memory.MCPMemory` consumes, so other agents can use
reverie's memory and the contract has a second implementer (``docs/memory-over-mcp.md``):

- ``memory_search(tenant, user, query, agent?, project?, limit=5)`` →
  ``{"rows": [{"tenant", "user", "agent", "project", "text", "source", "score"}]}``: full-text
  matches in that scope's log and documents; every row carries its scope fields;
- ``memory_add_session(tenant, user, messages, agent?, project?)`` → ``{"status": "recorded"}``:
  appends the turn (``[{"role": "user"|"assistant", "content": "…"}]``) to the scope's log.

Run it over stdio (the default; a client such as ``MCPMemory(command=["reverie",
"mcp-memory"])`` starts it) or streamable HTTP with ``--http PORT`` (endpoint ``/mcp``). Over
HTTP, ``--token-env NAME`` requires ``Authorization: Bearer <value of $NAME>`` on every request.
The caller is trusted with the scope fields it sends: put the server behind that token (HTTP)
or spawn it yourself (stdio), never on an open port. HTTP without a credential refuses to
start unless ``--no-auth`` says so explicitly: then any process that can reach the port reads
and writes the memory of every tenant.

Also runnable as ``python -m reverie.memory.mcp_server``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import logging
import os
import sys
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn

from pydantic import BaseModel, Field

from reverie.core.messages import Message
from reverie.core.scope import Scope
from reverie.errors import ConfigError, MissingExtraError, ReverieError, UsageError
from reverie.memory.native import NativeMemory
from reverie.memory.provider import SessionRole
from reverie.store.base import Store
from reverie.store.documents import DocumentStore

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

__all__ = ["MAX_LIMIT", "build_server", "main", "serve"]

log = logging.getLogger("reverie.memory.mcp_server")

MAX_LIMIT: Final = 50
"""``memory_search`` returns at most this many rows."""

ASGIApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
    Awaitable[None],
]


class SessionMessage(BaseModel):
    """One message of a recorded session."""

    role: SessionRole
    content: str = Field(max_length=200_000)


def _scope(tenant: str, user: str, agent: str | None, project: str | None) -> Scope:
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        # "" is refused, not read as "unset": the same rule as Scope on every backend.
        return Scope(tenant=tenant, user=user, agent=agent, project=project)
    except UsageError:
        raise ToolError(
            "tenant and user must be non-empty strings; agent and project non-empty or omitted"
        ) from None


def build_server(memory: NativeMemory, *, name: str = "reverie-memory") -> MCPServer[Any]:
    """An ``MCPServer`` offering ``memory_search`` and ``memory_add_session`` over ``memory``.

    ``memory`` must be bound to an open store (``NativeMemory(store=...)``).
    """
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import ToolAnnotations

    from reverie.core.version import __version__

    # serverInfo carries reverie's version, so a client can tell which server it talks to.
    server: MCPServer[Any] = MCPServer(name, version=__version__, log_level="ERROR")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
    async def memory_search(
        tenant: str,
        user: str,
        query: str,
        agent: str | None = None,
        project: str | None = None,
        limit: int = 5,
    ) -> dict[str, Any]:
        """Search one scope's memory (its interaction log and documents) for a query.

        Every row carries the scope fields it belongs to (always the scope asked for).
        """
        scope = _scope(tenant, user, agent, project)
        try:
            hits = await memory.documents.search(scope, query, limit=max(1, min(limit, MAX_LIMIT)))
        except Exception as exc:
            log.warning("memory_search failed: %s", type(exc).__name__)
            raise ToolError("memory is unavailable") from None
        return {
            "rows": [
                {
                    **hit.scope.as_dict(),
                    "text": hit.text,
                    "source": f"{hit.kind}/{hit.ref}",
                    "score": hit.score,
                }
                for hit in hits
            ]
        }

    @server.tool()
    async def memory_add_session(
        tenant: str,
        user: str,
        messages: list[SessionMessage],
        agent: str | None = None,
        project: str | None = None,
    ) -> dict[str, Any]:
        """Record a conversation turn (user and assistant messages) in one scope's memory."""
        scope = _scope(tenant, user, agent, project)
        try:
            await memory.record_interaction(
                scope, [Message(role=m.role, content=m.content) for m in messages]
            )
        except Exception as exc:
            log.warning("memory_add_session failed: %s", type(exc).__name__)
            raise ToolError("memory is unavailable") from None
        return {"status": "recorded"}

    return server


class BearerAuth:
    """ASGI middleware: every HTTP request needs ``Authorization: Bearer <token>`` (else 401)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope.get("type") == "http":
            given = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"text/plain"),
                            (b"www-authenticate", b"Bearer"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await self._app(scope, receive, send)


async def serve(
    store: Store,
    *,
    http_port: int | None = None,
    host: str = "127.0.0.1",
    token: str | None = None,
    no_auth: bool = False,
) -> None:
    """Serve the memory of an open ``store`` until cancelled (stdio, or HTTP on ``http_port``).

    Raises:
        UsageError: HTTP without a ``token``, unless ``no_auth`` is set explicitly.
    """
    if not isinstance(store, DocumentStore):
        raise TypeError(f"{type(store).__name__} keeps no memory documents")
    if http_port is not None and token is None and not no_auth:
        raise UsageError(NO_CREDENTIAL)
    server = build_server(NativeMemory(store=store))
    if http_port is None:
        await server.run_stdio_async()
        return
    import uvicorn

    app: Any = server.streamable_http_app(host=host)
    if token is not None:
        app = BearerAuth(app, token)
    config = uvicorn.Config(app, host=host, port=http_port, log_level="warning")
    await uvicorn.Server(config).serve()


def _store_url(store: str | None, config_path: str | None) -> str:
    if store:
        return store
    from reverie.config import load_config, store_url

    return store_url(load_config(config_path))


NO_CREDENTIAL = (
    "serving memory over HTTP needs a credential: without one, any process that can reach the "
    "port reads and writes the memory of every tenant (the server trusts the scope fields a "
    "caller sends). Fix: --token-env NAME (clients send 'Authorization: Bearer $NAME'), or "
    "--no-auth to serve without one on purpose"
)
"""Why HTTP without a credential does not start, and the two ways on."""

NO_AUTH_WARNING = (
    "reverie mcp-memory: --no-auth: serving WITHOUT a credential; any process that can reach "
    "{host}:{port} reads and writes the memory of every tenant"
)


async def _run(args: argparse.Namespace) -> None:
    from reverie.store import open_store

    token: str | None = None
    if args.token_env:
        token = os.environ.get(args.token_env)
        if not token:
            raise SystemExit(
                f"reverie mcp-memory: environment variable {args.token_env} is not set"
            )
    if args.http is not None and token is None:
        if not args.no_auth:
            print(f"reverie mcp-memory: {NO_CREDENTIAL}", file=sys.stderr)
            raise SystemExit(2)
        print(NO_AUTH_WARNING.format(host=args.host, port=args.http), file=sys.stderr)
    store = open_store(_store_url(args.store, args.config))
    await store.open()
    try:
        await serve(store, http_port=args.http, host=args.host, token=token, no_auth=args.no_auth)
    finally:
        await store.close()


def main(argv: Sequence[str] | None = None) -> None:
    """``reverie mcp-memory [--http PORT (--token-env NAME | --no-auth)] [--host H]``."""
    parser = argparse.ArgumentParser(
        prog="reverie mcp-memory",
        description="Serve reverie's memory over MCP (stdio by default).",
    )
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on PORT")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP bind address (127.0.0.1)")
    parser.add_argument(
        "--token-env", metavar="NAME", help="HTTP: require 'Authorization: Bearer $NAME'"
    )
    parser.add_argument(
        "--no-auth",
        action="store_true",
        help="HTTP: serve without a credential (any local process then reads every tenant's "
        "memory); without it, --http needs --token-env",
    )
    parser.add_argument("--store", metavar="URL", help="store URL (default: the configured one)")
    parser.add_argument("--config", metavar="PATH", help="reverie.toml to read the store from")
    args = parser.parse_args(argv)
    # stdout is the MCP channel over stdio: logs go to stderr only.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_run(args))
    except ImportError as exc:
        missing = MissingExtraError.of(exc, "reverie mcp-memory")
        if missing is None:
            raise
        _exit_with(missing)
    except ReverieError as exc:
        _exit_with(exc)


def _exit_with(exc: ReverieError) -> NoReturn:
    """One line on stderr, exit 2 for a configuration or usage problem, else 1 (as ``reverie``)."""
    print(f"error: {exc}", file=sys.stderr)
    raise SystemExit(2 if isinstance(exc, ConfigError | UsageError) else 1)


if __name__ == "__main__":
    main()
