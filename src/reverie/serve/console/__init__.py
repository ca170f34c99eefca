"""The operator console: ``/console`` of ``reverie serve`` (docs/console.md).

Server-rendered pages (Starlette + Jinja2, autoescaped) with htmx for the live parts, every
asset served from ``static/`` here; a strict CSP forbids inline script. A person logs in with
an API bearer token and sees exactly what that token's scope may see, through the same scoped
query and action API the HTTP routes use.
"""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope as ASGIScope, Send

from reverie.serve.auth import TokenTable
from reverie.serve.console.access import login_routes
from reverie.serve.console.agents import agent_routes
from reverie.serve.console.gates import gate_routes
from reverie.serve.console.memory import memory_routes
from reverie.serve.console.runs import run_routes
from reverie.serve.console.security import SecurityHeaders
from reverie.serve.console.sessions import DEFAULT_SESSION_TTL_S, Sessions
from reverie.serve.console.state import Console
from reverie.serve.console.threads import thread_routes
from reverie.serve.context import ServeContext

__all__ = ["CONSOLE_PATH", "ConsoleMount", "console_app"]

CONSOLE_PATH = "/console"

_STATIC = Path(__file__).resolve().parent / "static"


def console_app(
    ctx: ServeContext, tokens: TokenTable, *, session_ttl_s: float = DEFAULT_SESSION_TTL_S
) -> Starlette:
    """The console's ASGI app, over the API's context and tokens (mount it at ``/console``)."""
    console = Console(ctx, Sessions(tokens, ttl_s=session_ttl_s))

    async def bare(request: Request) -> Response:
        return RedirectResponse("/console/", status_code=308)

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        message = "page not found" if status == 404 else "the request was refused"
        if status == 405:
            message = f"method {request.method} is not allowed here"
        return console.error_page(request, status, message)

    return Starlette(
        routes=[
            Route(CONSOLE_PATH, bare),
            Mount(f"{CONSOLE_PATH}/static", StaticFiles(directory=_STATIC), name="static"),
            *login_routes(console),
            *run_routes(console),
            *gate_routes(console),
            *memory_routes(console),
            *thread_routes(console),
            *agent_routes(console),
        ],
        middleware=[Middleware(SecurityHeaders)],
        exception_handlers={HTTPException: not_found},
    )


class ConsoleMount:
    """ASGI middleware: ``/console`` and below go to the console app, the rest on to the API.

    Placed before the API's bearer check: the console authenticates by its session cookie.
    """

    def __init__(self, app: ASGIApp, *, console: ASGIApp) -> None:
        self.app = app
        self.console = console

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] == "http" and (
            path == CONSOLE_PATH or path.startswith(f"{CONSOLE_PATH}/")
        ):
            await self.console(scope, receive, send)
            return
        await self.app(scope, receive, send)
