"""``reverie mcp-memory``: reverie's native memory served over MCP (docs/memory.md).

The same tool contract :class:`~reverie.memory.MCPMemory` consumes, so other agents can use
reverie's memory and the contract has a second implementer (``docs/memory-over-mcp.md``):

- ``memory_search(tenant, user, query, agent?, project?, limit=5)`` →
  ``{"rows": [{"tenant", "user", "agent", "project", "text", "source", "score"}]}``: full-text
  matches in that scope's log and documents; every row carries its scope fields;
- ``memory_add_session(tenant, user, messages, agent?, project?)`` → ``{"status": "recorded"}``:
  appends the turn (``[{"role": "user"|"assistant", "content": "…"}]``) to the scope's log.

The command that runs it is ``reverie mcp-memory`` (:mod:`reverie.cli.mcp_memory`): over stdio
(the default; a client such as ``MCPMemory(command=["reverie", "mcp-memory"])`` starts it) or
streamable HTTP (endpoint ``/mcp``). The caller is trusted with the scope fields it sends, so
:func:`serve` refuses HTTP without an ``auth`` middleware that checks a credential unless
``no_auth`` says so explicitly: then any process that can reach the port reads and writes the
memory of every tenant.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any, Final

from pydantic import BaseModel, Field

from reverie.core.messages import Message
from reverie.core.scope import Scope
from reverie.errors import UsageError
from reverie.memory.native import NativeMemory
from reverie.memory.provider import SessionRole
from reverie.store.base import Store
from reverie.store.documents import DocumentStore

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

__all__ = ["MAX_LIMIT", "NO_AUTH_WARNING", "NO_CREDENTIAL", "ASGIApp", "build_server", "serve"]

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


async def serve(
    store: Store,
    *,
    http_port: int | None = None,
    host: str = "127.0.0.1",
    auth: Callable[[ASGIApp], ASGIApp] | None = None,
    no_auth: bool = False,
) -> None:
    """Serve the memory of an open ``store`` until cancelled (stdio, or HTTP on ``http_port``).

    Args:
        store: An open store that keeps memory documents.
        http_port: Serve streamable HTTP on this port; ``None`` for stdio.
        host: The HTTP bind address.
        auth: Wraps the HTTP app in the middleware that checks each request's credential
            (``reverie mcp-memory``: :class:`reverie.serve.auth.SharedTokenAuth`).
        no_auth: Serve HTTP without ``auth`` on purpose.

    Raises:
        UsageError: HTTP without ``auth``, unless ``no_auth`` is set explicitly.
    """
    if not isinstance(store, DocumentStore):
        raise TypeError(f"{type(store).__name__} keeps no memory documents")
    if http_port is not None and auth is None and not no_auth:
        raise UsageError(NO_CREDENTIAL)
    server = build_server(NativeMemory(store=store))
    if http_port is None:
        await server.run_stdio_async()
        return
    import uvicorn

    app: Any = server.streamable_http_app(host=host)
    if auth is not None:
        app = auth(app)
    config = uvicorn.Config(app, host=host, port=http_port, log_level="warning")
    await uvicorn.Server(config).serve()


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
