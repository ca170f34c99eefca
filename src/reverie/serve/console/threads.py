"""The Threads pages: recent conversations, one conversation's transcript, and a form that
continues it (or starts a new one) with an agent, under a thread policy whose answer — rejected
as busy, queued as a follow-up of the active run, or the active run interrupted — is shown as
it is."""

from __future__ import annotations

from urllib.parse import urlencode

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from reverie.core.vocabulary import THREAD_POLICIES
from reverie.errors import NotFoundError, ThreadBusy
from reverie.serve.console.access import acting, reading
from reverie.serve.console.sessions import Session
from reverie.serve.console.state import Console
from reverie.serve.console.views import agent_label, parent_id, transcript_view
from reverie.serve.errors import APIError
from reverie.store.base import ACTIVE_STATUSES

__all__ = ["thread_routes"]

RECENT_RUNS = 500
"""The Threads list is drawn from this many of the newest runs."""
THREAD_RUNS_SHOWN = 50
MAX_TEXT = 100_000


def thread_routes(console: Console) -> list[Route]:
    """``/console/threads``, ``/console/threads/{id}`` and the start/continue action."""
    rt = console.rt

    async def index(request: Request, session: Session) -> Response:
        seen: dict[str, dict[str, object]] = {}
        for run in await rt.runs.list(scope=session.scope, limit=RECENT_RUNS):
            if run.thread_id not in seen and parent_id(run) is None:
                seen[run.thread_id] = {
                    "thread_id": run.thread_id,
                    "agent": agent_label(run),
                    "status": run.status,
                    "updated_at": run.updated_at,
                }
        return console.page(
            session,
            "threads.html",
            threads=list(seen.values()),
            agents=sorted(console.ctx.agents),
            policies=THREAD_POLICIES,
        )

    async def thread(request: Request, session: Session) -> Response:
        thread_id = request.path_params["thread_id"]
        try:
            items = await rt.runs.thread_items(thread_id, scope=session.scope)
        except NotFoundError:
            raise APIError(404, f"thread {thread_id} not found") from None
        runs = await rt.runs.list(scope=session.scope, thread_id=thread_id, limit=THREAD_RUNS_SHOWN)
        return console.page(
            session,
            "thread.html",
            thread_id=thread_id,
            items=transcript_view(items, console.ctx.redact),
            runs=runs,
            agents=sorted(console.ctx.agents),
            default_agent=runs[0].agent_name if runs else None,
            policies=THREAD_POLICIES,
        )

    async def start(request: Request, session: Session, form: FormData) -> Response:
        thread_id = request.path_params.get("thread_id")
        agent = console.ctx.agent(str(form.get("agent") or ""), param="agent")
        text = form.get("text")
        if not isinstance(text, str) or not text.strip():
            raise APIError(400, "write a message first")
        if len(text) > MAX_TEXT:
            raise APIError(413, f"the message is over {MAX_TEXT} characters")
        policy = str(form.get("policy") or "reject")
        if policy not in THREAD_POLICIES:
            raise APIError(400, f"the thread policy is one of {', '.join(THREAD_POLICIES)}")
        active: list[str] = []
        if thread_id is not None:
            await rt.runs.thread(thread_id, scope=session.scope)  # another owner's: 404
            busy_now = await rt.runs.list(
                scope=session.scope, thread_id=thread_id, statuses=ACTIVE_STATUSES, limit=1
            )
            active = [r.run_id for r in busy_now]
        try:
            handle = await rt.start(
                agent, text, scope=session.scope, thread_id=thread_id, thread_policy=policy
            )
        except ThreadBusy as busy:
            raise APIError(
                409,
                f"the thread is busy: {busy}. Nothing was started. Choose 'enqueue' to deliver "
                "your message when the active run finishes, or 'interrupt' to cancel it and "
                "start yours.",
            ) from None
        # enqueue on a busy thread answers with the active run: the message is its follow-up.
        joined = handle.run_id in active
        note = "?" + urlencode({"note": "queued"}) if joined else ""
        return RedirectResponse(f"/console/runs/{handle.run_id}{note}", status_code=303)

    return [
        Route("/console/threads", reading(console, index), methods=["GET"]),
        Route("/console/threads", acting(console, start), methods=["POST"]),
        Route("/console/threads/{thread_id}", reading(console, thread), methods=["GET"]),
        Route("/console/threads/{thread_id}", acting(console, start), methods=["POST"]),
    ]
