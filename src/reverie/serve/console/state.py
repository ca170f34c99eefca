"""What every console page shares: the server's context, the sessions and the templates."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse

from reverie.serve.console.rendering import Templates
from reverie.serve.console.sessions import Session, Sessions
from reverie.serve.context import ServeContext

__all__ = ["LIVE_POLL_S", "Console"]

LIVE_POLL_S = 2
"""How often a live part of a page (the runs list, an active run) asks for its update."""


class Console:
    """The console of one app: the :class:`ServeContext` the API uses, and its sessions."""

    def __init__(self, ctx: ServeContext, sessions: Sessions) -> None:
        self.ctx = ctx
        self.rt = ctx.rt
        self.sessions = sessions
        self.templates = Templates()

    def page(
        self, session: Session, template: str, *, status_code: int = 200, **context: Any
    ) -> HTMLResponse:
        """A full page for a logged-in person (the nav, their scope, the CSRF token)."""
        return self.templates.response(
            template,
            {"session": session, "live_poll_s": LIVE_POLL_S, **context},
            status_code=status_code,
        )

    def fragment(self, template: str, **context: Any) -> HTMLResponse:
        """A part of a page (a live update htmx swaps in)."""
        return self.templates.response(template, {"live_poll_s": LIVE_POLL_S, **context})

    def error_page(self, request: Request, status: int, message: str) -> HTMLResponse:
        """The error page: the status and a safe message (secrets masked)."""
        return self.templates.response(
            "error.html",
            {"status": status, "message": self.ctx.redact(message), "session": None},
            status_code=status,
        )
