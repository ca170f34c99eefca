"""The Gates page: what waits on this person, across runs; approve, or deny with a reason.

Resolution takes the runs API's own path (:func:`reverie.serve.gating.resolve_gate`): the gate
is found through the person's scope (another owner's is 404), resolved once (a second
resolution is 409) and its run resumes in the server.
"""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from reverie.serve.console.access import acting, reading
from reverie.serve.console.sessions import Session
from reverie.serve.console.state import Console
from reverie.serve.errors import APIError
from reverie.serve.gating import resolve_gate
from reverie.serve.views import approver_of

__all__ = ["gate_routes"]

MAX_REASON = 2_000
RESOLVED_SHOWN = 50
MAX_PENDING = 500


def gate_routes(console: Console) -> list[Route]:
    """``/console/gates`` and its two actions."""

    async def inbox(request: Request, session: Session) -> Response:
        gates = console.rt.gates
        pending = await gates.list(scope=session.scope, status="pending", limit=MAX_PENDING)
        resolved = [
            *await gates.list(scope=session.scope, status="approved", limit=RESOLVED_SHOWN),
            *await gates.list(scope=session.scope, status="denied", limit=RESOLVED_SHOWN),
        ]
        resolved.sort(key=lambda g: g.resolved_at or 0.0, reverse=True)
        return console.page(
            session, "gates.html", pending=pending, resolved=resolved[:RESOLVED_SHOWN]
        )

    async def approve(request: Request, session: Session, form: FormData) -> Response:
        _, run = await resolve_gate(
            console.ctx,
            session.scope,
            request.path_params["ref"],
            "approved",
            "",
            by=approver_of(session.scope),
        )
        return RedirectResponse(f"/console/runs/{run.run_id}", status_code=303)

    async def deny(request: Request, session: Session, form: FormData) -> Response:
        reason = form.get("reason")
        text = reason.strip() if isinstance(reason, str) else ""
        if len(text) > MAX_REASON:
            raise APIError(413, f"the reason is over {MAX_REASON} characters")
        _, run = await resolve_gate(
            console.ctx,
            session.scope,
            request.path_params["ref"],
            "denied",
            text or "denied from the console",
            by=approver_of(session.scope),
        )
        return RedirectResponse(f"/console/runs/{run.run_id}", status_code=303)

    return [
        Route("/console/gates", reading(console, inbox), methods=["GET"]),
        Route("/console/gates/{ref}/approve", acting(console, approve), methods=["POST"]),
        Route("/console/gates/{ref}/deny", acting(console, deny), methods=["POST"]),
    ]
