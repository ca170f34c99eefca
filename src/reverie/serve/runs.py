"""reverie's own API: ``/v1/runs`` (start, list, get, events, steer, follow up, cancel) and
``/v1/gates`` (list, approve, deny).

Every route acts for the caller's scope only. A run, thread or gate of another scope answers
404 exactly as a missing one does, so existence never leaks across owners.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from sse_starlette import ServerSentEvent
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from reverie.core.scope import Scope
from reverie.core.transcript import InputKind
from reverie.core.vocabulary import RUN_STATUSES, GateDecision
from reverie.errors import NotFoundError
from reverie.serve.auth import owner_of
from reverie.serve.bodies import FollowUpBody, ResolveBody, StartRunBody, SteerBody, parse_body
from reverie.serve.context import ServeContext
from reverie.serve.errors import APIError
from reverie.serve.gating import resolve_gate
from reverie.serve.idempotency import idempotency_of
from reverie.serve.views import (
    approver_of,
    event_json,
    finished_event,
    gate_view,
    listing,
    run_view,
    settled,
)
from reverie.store.base import TERMINAL_STATUSES, GateStatus

__all__ = ["RunRoutes"]

EVENTS_POLL_S = 0.25
"""How often an event stream re-checks a run that is advanced by another process."""

MAX_LIST = 500
_GATE_STATUSES: dict[str, GateStatus | None] = {
    "pending": "pending",
    "approved": "approved",
    "denied": "denied",
    "all": None,
}


class RunRoutes:
    """``/v1/runs`` and ``/v1/gates``."""

    def __init__(self, ctx: ServeContext) -> None:
        self.ctx = ctx

    def routes(self) -> list[Route]:
        """The routes, for the app's router."""
        return [
            Route("/v1/runs", self.start, methods=["POST"]),
            Route("/v1/runs", self.list_runs, methods=["GET"]),
            Route("/v1/runs/{run_id}", self.get, methods=["GET"]),
            Route("/v1/runs/{run_id}/events", self.events, methods=["GET"]),
            Route("/v1/runs/{run_id}/steer", self.steer, methods=["POST"]),
            Route("/v1/runs/{run_id}/follow_up", self.follow_up, methods=["POST"]),
            Route("/v1/runs/{run_id}/cancel", self.cancel, methods=["POST"]),
            Route("/v1/gates", self.list_gates, methods=["GET"]),
            Route("/v1/gates/{ref}/approve", self.approve, methods=["POST"]),
            Route("/v1/gates/{ref}/deny", self.deny, methods=["POST"]),
        ]

    # ------------------------------------------------------------------------------ runs
    async def start(self, request: Request) -> Response:
        """``POST /v1/runs`` {agent, input, thread_id?} → 201 {run_id, thread_id, status}."""
        owner = owner_of(request)
        body = await parse_body(request, StartRunBody)
        agent = self.ctx.agent(body.agent, param="agent")
        keyed = idempotency_of(request, body, route="runs")
        try:
            handle = await self.ctx.rt.start(
                agent,
                body.input,
                scope=owner,
                thread_id=body.thread_id,
                idempotency_key=keyed.key if keyed else None,
                meta=keyed.meta if keyed else None,
                thread_policy=body.thread_policy,
            )
        except NotFoundError:
            # A missing thread and another owner's thread answer alike.
            raise APIError(
                404,
                f"thread {body.thread_id} not found",
                code="thread_not_found",
                param="thread_id",
            ) from None
        run = await self.ctx.rt.runs.get(handle.run_id)
        if keyed is not None:
            keyed.check(run)
        return JSONResponse(
            {"run_id": run.run_id, "thread_id": run.thread_id, "status": run.status},
            # A repeated key answers as the first request did, with the run it started.
            status_code=201,
            headers={"location": f"/v1/runs/{run.run_id}"},
        )

    async def list_runs(self, request: Request) -> Response:
        """``GET /v1/runs?status=…&limit=…``: the caller's runs, newest first, in full."""
        owner = owner_of(request)
        limit = _limit(request)
        statuses = [s for v in request.query_params.getlist("status") for s in v.split(",") if s]
        unknown = sorted(set(statuses) - set(RUN_STATUSES))
        if unknown:
            raise APIError(
                422,
                f"status: unknown run status {unknown[0][:40]!r}; use {', '.join(RUN_STATUSES)}",
                code="invalid_request",
                param="status",
            )
        runs = await self.ctx.rt.runs.list(scope=owner, statuses=statuses or None, limit=limit)
        # Each item is the run as GET /v1/runs/{id} shows it (text, exit, usage, gate).
        return JSONResponse(listing([await run_view(self.ctx.rt, r) for r in runs]))

    async def get(self, request: Request) -> Response:
        """``GET /v1/runs/{id}``: status, text, output, exit, usage, gate."""
        run = await self.ctx.owned_run(owner_of(request), request.path_params["run_id"])
        return JSONResponse(await run_view(self.ctx.rt, run))

    async def events(self, request: Request) -> Response:
        """``GET /v1/runs/{id}/events``: SSE of typed run events until it ends or blocks.

        With a store that keeps run events, each event has its ``id`` (its seq) and a client
        resumes after ``Last-Event-ID``; events come from the store, so a run advanced by
        another process streams live too.
        """
        run = await self.ctx.owned_run(owner_of(request), request.path_params["run_id"])
        if not self.ctx.rt.runs.keeps_events:
            return self.ctx.event_stream(self._events(run.run_id))
        after = _last_event_id(request)
        return self.ctx.event_stream(self._stored_events(run.run_id, after))

    async def _stored_events(
        self, run_id: str, after_seq: int | None
    ) -> AsyncIterator[ServerSentEvent]:
        async for seq, data in self.ctx.rt.runs.events(run_id, after_seq=after_seq):
            text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
            yield ServerSentEvent(data=text, id=None if seq is None else str(seq))

    async def _events(self, run_id: str) -> AsyncIterator[ServerSentEvent]:
        """The segment this process advances, replayed from its start then live; a settled run
        gets ``run_finished`` from its stored exit; a run advanced elsewhere is polled."""
        rt = self.ctx.rt
        while True:
            handle = rt.attach(run_id)
            if handle is not None:
                async for event in handle.events():
                    yield ServerSentEvent(data=event_json(event))
                    if event.kind == "run_finished":
                        return
                # The segment ended without announcing it (stopped): read what it left.
            run = await rt.runs.get(run_id)
            if settled(run) and rt.attach(run_id) is None:
                yield ServerSentEvent(data=event_json(finished_event(run)))
                return
            if handle is None:
                await asyncio.sleep(EVENTS_POLL_S)

    async def steer(self, request: Request) -> Response:
        """``POST /v1/runs/{id}/steer`` {text}: seen before the run's next model call."""
        body = await parse_body(request, SteerBody)
        return await self._input(request, "steering", body.text)

    async def follow_up(self, request: Request) -> Response:
        """``POST /v1/runs/{id}/follow_up`` {text}: delivered when the run would finish."""
        body = await parse_body(request, FollowUpBody)
        return await self._input(request, "follow_up", body.text)

    async def _input(self, request: Request, kind: InputKind, text: str) -> Response:
        run = await self.ctx.owned_run(owner_of(request), request.path_params["run_id"])
        if run.status in TERMINAL_STATUSES:
            raise _ended(run.run_id, run.status, run.thread_id)
        # The run may end between the check and the write: the runtime refuses the input then
        # (RunEndedError → 409), it is never accepted and lost.
        input_id = await self.ctx.rt.send_input(run.run_id, kind, text)
        return JSONResponse(
            {"run_id": run.run_id, "input_id": input_id, "kind": kind}, status_code=202
        )

    async def cancel(self, request: Request) -> Response:
        """``POST /v1/runs/{id}/cancel``: durable cancel; a running run stops at once."""
        run = await self.ctx.owned_run(owner_of(request), request.path_params["run_id"])
        if run.status in TERMINAL_STATUSES:
            raise APIError(
                409,
                f"run {run.run_id} has already ended ({run.status}); there is nothing to cancel",
                code="run_ended",
            )
        await self.ctx.rt.cancel(run.run_id, reason="cancelled over HTTP")
        run = await self.ctx.rt.runs.get(run.run_id)
        return JSONResponse(
            {"run_id": run.run_id, "status": run.status, "cancel_requested": True},
            status_code=202,
        )

    # ------------------------------------------------------------------------------ gates
    async def list_gates(self, request: Request) -> Response:
        """``GET /v1/gates?status=pending|approved|denied|all``: the caller's gates."""
        owner = owner_of(request)
        wanted = request.query_params.get("status", "pending")
        if wanted not in _GATE_STATUSES:
            raise APIError(
                422,
                "status: use pending, approved, denied or all",
                code="invalid_request",
                param="status",
            )
        gates = await self.ctx.rt.gates.list(scope=owner, status=_GATE_STATUSES[wanted])
        return JSONResponse(listing([gate_view(g) for g in gates[: _limit(request)]]))

    async def approve(self, request: Request) -> Response:
        """``POST /v1/gates/{ref}/approve`` {arguments?}: the call runs (with the edited
        arguments, if given) and the run resumes here. The approver recorded is the token's
        owner."""
        body = await parse_body(request, ResolveBody, allow_empty=True)
        owner = owner_of(request)
        return await self._resolve(
            owner, request.path_params["ref"], "approved", "", arguments=body.arguments
        )

    async def deny(self, request: Request) -> Response:
        """``POST /v1/gates/{ref}/deny`` {reason?}: the model is told; the run resumes here."""
        body = await parse_body(request, ResolveBody, allow_empty=True)
        if body.arguments is not None:
            raise APIError(
                422,
                "arguments: only an approval takes edited arguments",
                code="invalid_request",
                param="arguments",
            )
        reason = body.reason or "denied over HTTP"
        return await self._resolve(owner_of(request), request.path_params["ref"], "denied", reason)

    async def _resolve(
        self,
        owner: Scope,
        ref: str,
        decision: GateDecision,
        reason: str,
        *,
        arguments: dict[str, Any] | None = None,
    ) -> Response:
        """Resolve the gate once and resume its run in the background (:func:`resolve_gate`)."""
        gate, run = await resolve_gate(
            self.ctx, owner, ref, decision, reason, arguments=arguments, by=approver_of(owner)
        )
        return JSONResponse({"gate": gate_view(gate), "run": await run_view(self.ctx.rt, run)})


def _limit(request: Request) -> int:
    raw = request.query_params.get("limit", "50")
    # ASCII digits only: str.isdigit() also accepts "²", which int() refuses.
    digits = raw.isascii() and raw.isdigit() and len(raw) <= len(str(MAX_LIST))
    if not digits or not 1 <= int(raw) <= MAX_LIST:
        raise APIError(
            422,
            f"limit: use an integer from 1 to {MAX_LIST}",
            code="invalid_request",
            param="limit",
        )
    return int(raw)


def _last_event_id(request: Request) -> int | None:
    """The ``Last-Event-ID`` a reconnecting SSE client sends (``None``: a new stream)."""
    raw = request.headers.get("last-event-id")
    if raw is None or not raw.strip():
        return None
    raw = raw.strip()
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise APIError(
            400,
            "Last-Event-ID: send the id of the last event received (an integer)",
            code="invalid_request",
            param="Last-Event-ID",
        )
    return int(raw)


def _ended(run_id: str, status: str, thread_id: str) -> APIError:
    return APIError(
        409,
        f"run {run_id} has ended ({status}); to continue the conversation start a new run: "
        f'POST /v1/runs {{"agent": …, "input": …, "thread_id": "{thread_id}"}}',
        code="run_ended",
    )
