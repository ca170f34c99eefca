"""The Runs page (a filtered, keyset-paginated, live list) and the Run page (transcript, journal,
checkpoint and segments, usage, subagents, exit) with its actions.

Every read is ``rt.runs`` / ``rt.gates`` with the person's scope; every action first finds the
run through that scope (another owner's run is 404, as a missing one) and then makes the call
the runs API makes.
"""

from __future__ import annotations

import time
from datetime import UTC, date, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from reverie.core.exits import HOST_STOP_REASONS
from reverie.core.vocabulary import RUN_STATUSES
from reverie.errors import UsageError
from reverie.serve.console.access import acting, reading
from reverie.serve.console.sessions import Session
from reverie.serve.console.state import Console
from reverie.serve.console.views import (
    agent_label,
    decode_cursor,
    encode_cursor,
    journal_rows,
    parent_id,
    tool_flags,
    transcript_view,
)
from reverie.serve.errors import APIError
from reverie.serve.views import settled
from reverie.store.base import TERMINAL_STATUSES, RunRecord

__all__ = ["PAGE_SIZE", "run_routes"]

PAGE_SIZE = 50
"""Runs per page of the list."""

MAX_TREE_DEPTH = 4
"""Subagent levels the Run page shows."""

MAX_TEXT = 100_000
"""The longest steering or follow-up message the page accepts."""


class _Filters:
    """The list's filters from the query string, checked."""

    def __init__(self, request: Request) -> None:
        params = request.query_params
        self.statuses = [s for s in params.getlist("status") if s]
        unknown = sorted(set(self.statuses) - set(RUN_STATUSES))
        if unknown:
            raise APIError(400, f"unknown run status {unknown[0][:40]!r}")
        self.agent = params.get("agent") or None
        self.thread = params.get("thread") or None
        try:
            self.before = decode_cursor(params.get("before"))
        except ValueError:
            raise APIError(400, "the page cursor is malformed: start from the first page") from None
        self.until = params.get("until") or None
        if self.until is not None:
            # Runs started before the end of that day (UTC): a keyset bound like a page's.
            try:
                day = date.fromisoformat(self.until)
            except ValueError:
                raise APIError(400, "until: use a date such as 2026-12-04") from None
            end = datetime.combine(day + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
            bound = (end.timestamp(), "")
            self.before = bound if self.before is None else min(self.before, bound)

    def query(self, **extra: str) -> str:
        """The filters (not the cursor) as a query string, plus ``extra``."""
        pairs = [("status", s) for s in self.statuses]
        if self.agent:
            pairs.append(("agent", self.agent))
        if self.thread:
            pairs.append(("thread", self.thread))
        if self.until:
            pairs.append(("until", self.until))
        pairs += list(extra.items())
        return urlencode(pairs)


def run_routes(console: Console) -> list[Route]:
    """The routes of the Runs and Run pages."""
    pages = _RunPages(console)
    return [
        Route("/console/", reading(console, pages.runs), methods=["GET"]),
        Route("/console/runs", reading(console, pages.runs), methods=["GET"]),
        Route("/console/runs/rows", reading(console, pages.rows), methods=["GET"]),
        Route("/console/runs/{run_id}", reading(console, pages.run), methods=["GET"]),
        Route("/console/runs/{run_id}/live", reading(console, pages.live), methods=["GET"]),
        Route("/console/runs/{run_id}/steer", acting(console, pages.steer), methods=["POST"]),
        Route(
            "/console/runs/{run_id}/follow_up", acting(console, pages.follow_up), methods=["POST"]
        ),
        Route("/console/runs/{run_id}/cancel", acting(console, pages.cancel), methods=["POST"]),
        Route("/console/runs/{run_id}/stop", acting(console, pages.stop), methods=["POST"]),
        Route("/console/runs/{run_id}/resume", acting(console, pages.resume), methods=["POST"]),
    ]


class _RunPages:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.rt = console.rt

    # ------------------------------------------------------------------------------ list
    async def _listed(self, session: Session, filters: _Filters) -> dict[str, Any]:
        runs = await self.rt.runs.list(
            scope=session.scope,
            statuses=filters.statuses or None,
            agent=filters.agent,
            thread_id=filters.thread,
            before=filters.before,
            limit=PAGE_SIZE + 1,
        )
        more = len(runs) > PAGE_SIZE
        runs = runs[:PAGE_SIZE]
        return {
            "runs": [_row(r) for r in runs],
            "filters": filters,
            "statuses": RUN_STATUSES,
            "agents": sorted(self.console.ctx.agents),
            "next_page": filters.query(before=encode_cursor(runs[-1])) if more else None,
            # Only the first page updates itself: a later one is a fixed window of the past.
            "live": filters.before is None and filters.until is None,
            "rows_query": filters.query(),
        }

    async def runs(self, request: Request, session: Session) -> Response:
        context = await self._listed(session, _Filters(request))
        return self.console.page(session, "runs.html", **context)

    async def rows(self, request: Request, session: Session) -> Response:
        context = await self._listed(session, _Filters(request))
        return self.console.fragment("_runs_rows.html", **context)

    # ------------------------------------------------------------------------------ one run
    async def _detail(self, session: Session, run_id: str) -> dict[str, Any]:
        ctx, runs = self.console.ctx, self.rt.runs
        run = await ctx.owned_run(session.scope, run_id)
        items = [i for i in await runs.thread_items(run.thread_id) if i.run_id == run.run_id]
        shown = transcript_view(items, ctx.redact)
        # Advanced here, or by a live worker elsewhere (its lease has not expired).
        advancing = self.rt.attach(run.run_id) is not None or _leased(run)
        journal = await runs.journal(run.run_id, scope=session.scope)
        flags = tool_flags(ctx.agents.get(run.agent_name))
        result = await self.rt.get_result(run.run_id) if settled(run) else None
        gates = [g for g in await self.rt.gates.list(scope=session.scope) if g.run_id == run_id]
        events = await runs.recorded_events(run.run_id, scope=session.scope)
        segments = [e for e in events if e.kind in ("run_started", "checkpoint", "run_finished")]
        return {
            "run": _row(run),
            "record": run,
            "items": shown,
            "journal": journal_rows(run, shown, journal, flags, advancing=advancing),
            "checkpoint": await runs.checkpoint(run.run_id, scope=session.scope),
            "segments": segments[-50:],
            "usage": result.usage.to_dict() if result is not None else None,
            "text": ctx.redact(result.text) if result is not None and result.text else None,
            "exit": dict(run.exit) if run.exit is not None and settled(run) else None,
            "gates": gates,
            "children": await self._tree(run, 0),
            "parent": parent_id(run),
            "active": run.status not in TERMINAL_STATUSES,
            "live": not settled(run),
            "advancing": advancing,
            "stop_reasons": HOST_STOP_REASONS,
        }

    async def _tree(self, run: RunRecord, depth: int) -> list[dict[str, Any]]:
        if depth >= MAX_TREE_DEPTH:
            return []
        return [
            {"run": _row(child), "children": await self._tree(child, depth + 1)}
            for child in await self.rt.runs.children(run)
        ]

    async def run(self, request: Request, session: Session) -> Response:
        context = await self._detail(session, request.path_params["run_id"])
        note = request.query_params.get("note")
        return self.console.page(session, "run.html", note=note, **context)

    async def live(self, request: Request, session: Session) -> Response:
        context = await self._detail(session, request.path_params["run_id"])
        return self.console.fragment("_run_live.html", session=session, **context)

    # ------------------------------------------------------------------------------ actions
    async def _open_run(self, session: Session, run_id: str) -> RunRecord:
        run = await self.console.ctx.owned_run(session.scope, run_id)
        if run.status in TERMINAL_STATUSES:
            raise APIError(409, f"run {run.run_id} has already ended ({run.status})")
        return run

    async def _input(
        self, request: Request, session: Session, form: FormData, kind: str
    ) -> Response:
        run = await self._open_run(session, request.path_params["run_id"])
        text = _text(form)
        if kind == "steering":
            await self.rt.send_input(run.run_id, "steering", text)
        else:
            await self.rt.send_input(run.run_id, "follow_up", text)
        return _back(run.run_id)

    async def steer(self, request: Request, session: Session, form: FormData) -> Response:
        return await self._input(request, session, form, "steering")

    async def follow_up(self, request: Request, session: Session, form: FormData) -> Response:
        return await self._input(request, session, form, "follow_up")

    async def cancel(self, request: Request, session: Session, form: FormData) -> Response:
        run = await self._open_run(session, request.path_params["run_id"])
        await self.rt.cancel(run.run_id, reason="cancelled from the console")
        return _back(run.run_id)

    async def stop(self, request: Request, session: Session, form: FormData) -> Response:
        run = await self._open_run(session, request.path_params["run_id"])
        reason = form.get("reason") or "host"
        if reason not in HOST_STOP_REASONS:
            raise UsageError(f"a graceful stop's reason is one of {', '.join(HOST_STOP_REASONS)}")
        await self.rt.request_graceful_stop(run.run_id, reason)
        return _back(run.run_id)

    async def resume(self, request: Request, session: Session, form: FormData) -> Response:
        run = await self._open_run(session, request.path_params["run_id"])
        if run.status == "blocked":
            raise APIError(409, f"run {run.run_id} waits on a gate: approve or deny it")
        if self.rt.attach(run.run_id) is None:
            # rt.resume waits for the run to end or block: it goes on in the background.
            self.console.ctx.tasks.spawn(self.rt.resume(run.run_id), name=f"resume {run.run_id}")
        return _back(run.run_id)


def _leased(run: RunRecord) -> bool:
    """Whether a worker holds the run's lease now (a dead worker's lease runs out)."""
    expires = run.lease_expires_at
    return run.lease_owner is not None and expires is not None and expires > time.time()


def _row(run: RunRecord) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "thread_id": run.thread_id,
        "agent": agent_label(run),
        "profile": run.profile,
        "status": run.status,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "parent": parent_id(run),
    }


def _text(form: FormData) -> str:
    text = form.get("text")
    if not isinstance(text, str) or not text.strip():
        raise APIError(400, "write a message first")
    if len(text) > MAX_TEXT:
        raise APIError(413, f"the message is over {MAX_TEXT} characters")
    return text


def _back(run_id: str) -> Response:
    return RedirectResponse(f"/console/runs/{run_id}", status_code=303)
