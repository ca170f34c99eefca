"""``/v1/schedules``: the caller's schedules (docs/schedules.md).

A schedule made here acts for the caller's scope (from the token, never from the body), runs one
of the served agents, and is listed, read, paused, resumed, run now and deleted only by its
owner: another owner's schedule answers 404 exactly as a missing one does. Schedule names are
one namespace per store, so a name another owner holds answers 409 ``schedule_exists``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from reverie.core.scope import Scope
from reverie.core.vocabulary import ScheduleMissed, ScheduleOverlap, ScheduleThread
from reverie.errors import UsageError
from reverie.runtime.schedules import Schedule, ScheduleInfo
from reverie.serve.auth import owner_of
from reverie.serve.bodies import _Strict, parse_body
from reverie.serve.context import ServeContext
from reverie.serve.errors import APIError

__all__ = ["ScheduleRoutes"]


class ScheduleBody(_Strict):
    """``POST /v1/schedules``."""

    name: str = Field(min_length=1, max_length=200)
    agent: str = Field(min_length=1)
    """A served agent (``GET /v1/models``)."""
    cron: str | None = None
    every_s: float | None = None
    timezone: str = "UTC"
    input: str | None = None
    thread: ScheduleThread = "new"
    missed: ScheduleMissed = "latest"
    max_catchup: int = Field(default=10, ge=1, le=1000)
    overlap: ScheduleOverlap = "skip"


def schedule_view(info: ScheduleInfo) -> dict[str, Any]:
    """A schedule as the API shows it (its scope is the caller's: not repeated)."""
    out = info.to_dict()
    del out["scope"]
    return out


class ScheduleRoutes:
    """``/v1/schedules``."""

    def __init__(self, ctx: ServeContext) -> None:
        self.ctx = ctx

    def routes(self) -> list[Route]:
        """The routes, for the app's router."""
        return [
            Route("/v1/schedules", self.list, methods=["GET"]),
            Route("/v1/schedules", self.add, methods=["POST"]),
            Route("/v1/schedules/{name}", self.get, methods=["GET"]),
            Route("/v1/schedules/{name}", self.remove, methods=["DELETE"]),
            Route("/v1/schedules/{name}/pause", self.pause, methods=["POST"]),
            Route("/v1/schedules/{name}/resume", self.resume, methods=["POST"]),
            Route("/v1/schedules/{name}/run", self.run_now, methods=["POST"]),
            Route("/v1/schedules/{name}/history", self.history, methods=["GET"]),
        ]

    async def list(self, request: Request) -> Response:
        """``GET /v1/schedules``: the caller's schedules, by name."""
        infos = await self.ctx.rt.schedules.list(scope=owner_of(request))
        return JSONResponse({"object": "list", "data": [schedule_view(i) for i in infos]})

    async def add(self, request: Request) -> Response:
        """``POST /v1/schedules`` → 201 the schedule; its runs act for the caller."""
        owner = owner_of(request)
        body = await parse_body(request, ScheduleBody)
        agent = self.ctx.agent(body.agent, param="agent")
        extra: dict[str, Any] = {} if body.input is None else {"input": body.input}
        try:
            schedule = Schedule(
                name=body.name,
                agent=agent.name,
                scope=Scope(tenant=owner.tenant, user=owner.user),
                cron=body.cron,
                every_s=body.every_s,
                timezone=body.timezone,
                thread=body.thread,
                missed=body.missed,
                max_catchup=body.max_catchup,
                overlap=body.overlap,
                **extra,
            )
        except UsageError as exc:
            raise APIError(422, str(exc), code="invalid_request") from None
        try:
            info = await self.ctx.rt.schedules.add(schedule)
        except UsageError:
            raise APIError(
                409, f"a schedule named {body.name!r} exists", code="schedule_exists"
            ) from None
        return JSONResponse(
            schedule_view(info),
            status_code=201,
            headers={"location": f"/v1/schedules/{body.name}"},
        )

    async def get(self, request: Request) -> Response:
        """``GET /v1/schedules/{name}``."""
        return JSONResponse(schedule_view(await self._owned(request)))

    async def remove(self, request: Request) -> Response:
        """``DELETE /v1/schedules/{name}``: the schedule and its history (its runs stay)."""
        info = await self._owned(request)
        await self.ctx.rt.schedules.remove(info.schedule.name)
        return JSONResponse({"name": info.schedule.name, "deleted": True})

    async def pause(self, request: Request) -> Response:
        """``POST /v1/schedules/{name}/pause``."""
        info = await self._owned(request)
        return JSONResponse(schedule_view(await self.ctx.rt.schedules.pause(info.schedule.name)))

    async def resume(self, request: Request) -> Response:
        """``POST /v1/schedules/{name}/resume``: from the first occurrence after now."""
        info = await self._owned(request)
        return JSONResponse(schedule_view(await self.ctx.rt.schedules.resume(info.schedule.name)))

    async def run_now(self, request: Request) -> Response:
        """``POST /v1/schedules/{name}/run`` → 202 {run_id} (null: the overlap policy held
        it back)."""
        info = await self._owned(request)
        run_id = await self.ctx.rt.schedules.run_now(info.schedule.name)
        return JSONResponse({"run_id": run_id}, status_code=202)

    async def history(self, request: Request) -> Response:
        """``GET /v1/schedules/{name}/history``: occurrences, newest first, with their runs."""
        info = await self._owned(request)
        zone = ZoneInfo(info.schedule.timezone)
        rows = await self.ctx.rt.schedules.history(info.schedule.name)
        data = [
            {
                "occurrence": datetime.fromtimestamp(o.at, zone).isoformat(),
                "status": o.status,
                "run_id": o.run_id,
            }
            for o in rows
        ]
        return JSONResponse({"object": "list", "data": data})

    async def _owned(self, request: Request) -> ScheduleInfo:
        owner = owner_of(request)
        name = request.path_params["name"]
        for info in await self.ctx.rt.schedules.list(scope=owner):
            if info.schedule.name == name:
                return info
        # Another owner's schedule answers as a missing one does.
        raise APIError(404, f"schedule {name[:200]!r} not found", code="schedule_not_found")
